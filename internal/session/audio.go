package session

import (
	"encoding/binary"
	"errors"
	"fmt"
	"math"

	"github.com/omniserve/omniserve/internal/speech"
)

// EngineRate is the input rate of the pipeline (stage 0: VAD + ASR) and OutputRate the talker's.
const (
	EngineRate = 16000
	OutputRate = 24000
)

// g711Rate is the only rate G.711 carries on the wire.
const g711Rate = 8000

// ErrBadAudio is returned for payloads that are not whole samples or not finite.
var ErrBadAudio = errors.New("bad audio")

// DecodeInput converts one wire audio payload to 16 kHz mono float32. The sample conversions
// and the resampler are internal/speech's; this file only picks them by format. It allocates
// per call: appends arrive at most a few dozen times per second per session.
func DecodeInput(data []byte, f AudioFormat) ([]float32, error) {
	var pcm []float32
	switch f.Type {
	case "pcm16":
		var err error
		if pcm, err = speech.PCM16BytesToFloat32(nil, data); err != nil {
			return nil, fmt.Errorf("%w: pcm16 payload has an odd length (%d bytes)", ErrBadAudio, len(data))
		}
	case "pcm_f32le":
		// speech has no float32-bytes decoder (nothing else reads this wire format).
		if len(data)%4 != 0 {
			return nil, fmt.Errorf("%w: pcm_f32le payload length %d is not a multiple of 4", ErrBadAudio, len(data))
		}
		pcm = make([]float32, len(data)/4)
		for i := range pcm {
			pcm[i] = math.Float32frombits(binary.LittleEndian.Uint32(data[4*i:]))
		}
		if err := speech.CheckFinite(pcm); err != nil {
			return nil, fmt.Errorf("%w: %w", ErrBadAudio, err)
		}
		for i, v := range pcm {
			pcm[i] = max(-1, min(1, v))
		}
	case "g711_ulaw":
		pcm = speech.ULawToFloat32(nil, data)
	case "g711_alaw":
		pcm = speech.ALawToFloat32(nil, data)
	default:
		return nil, fmt.Errorf("%w: unsupported format %q", ErrBadAudio, f.Type)
	}
	if f.Rate == EngineRate || len(pcm) == 0 {
		return pcm, nil
	}
	out, err := speech.Resample(pcm, f.Rate, EngineRate)
	if err != nil {
		return nil, fmt.Errorf("%w: %w", ErrBadAudio, err)
	}
	return out, nil
}

// EncodeOutput converts 24 kHz float32 talker audio to the session's output format.
func EncodeOutput(pcm []float32, f AudioFormat) []byte {
	switch f.Type {
	case "g711_ulaw", "g711_alaw":
		// 24 kHz → 8 kHz cannot fail: both are rates speech supports.
		s, err := speech.Resample(pcm, OutputRate, g711Rate)
		if err != nil {
			panic(fmt.Sprintf("session: resampling talker audio: %v", err))
		}
		if f.Type == "g711_ulaw" {
			return speech.Float32ToULaw(nil, s)
		}
		return speech.Float32ToALaw(nil, s)
	default:
		return speech.Float32ToPCM16Bytes(nil, pcm)
	}
}

// OutputBytesPerMs is the byte rate of an output format, used to size pacing frames.
func OutputBytesPerMs(f AudioFormat) float64 {
	if f.Type == "g711_ulaw" || f.Type == "g711_alaw" {
		return 8
	}
	return 48
}
