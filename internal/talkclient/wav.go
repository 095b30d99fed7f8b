package talkclient

import (
	"encoding/binary"
	"errors"
	"fmt"
	"io"
	"math"
)

// Rate is the sample rate of OpenAI Realtime's audio/pcm format, both ways.
const Rate = 24000

// ErrNotWAV reports input that is not a RIFF/WAVE file of 16-bit PCM.
var ErrNotWAV = errors.New("not a 16-bit PCM WAV file")

// ReadWAV reads a RIFF/WAVE file of 16-bit integer PCM (any rate, mono or multi-channel) and
// returns mono samples at its own rate. Channels are averaged.
func ReadWAV(r io.Reader) (samples []int16, rate int, err error) {
	var hdr [12]byte
	if _, err := io.ReadFull(r, hdr[:]); err != nil {
		return nil, 0, fmt.Errorf("%w: %w", ErrNotWAV, err)
	}
	if string(hdr[0:4]) != "RIFF" || string(hdr[8:12]) != "WAVE" {
		return nil, 0, fmt.Errorf("%w: no RIFF/WAVE header", ErrNotWAV)
	}
	var channels, bits int
	for {
		var ch [8]byte
		if _, err := io.ReadFull(r, ch[:]); err != nil {
			return nil, 0, fmt.Errorf("%w: no data chunk", ErrNotWAV)
		}
		id, size := string(ch[0:4]), int64(binary.LittleEndian.Uint32(ch[4:8]))
		switch id {
		case "fmt ":
			if size < 16 {
				return nil, 0, fmt.Errorf("%w: short fmt chunk", ErrNotWAV)
			}
			b := make([]byte, size+size%2)
			if _, err := io.ReadFull(r, b); err != nil {
				return nil, 0, fmt.Errorf("%w: %w", ErrNotWAV, err)
			}
			format := binary.LittleEndian.Uint16(b[0:2])
			channels = int(binary.LittleEndian.Uint16(b[2:4]))
			rate = int(binary.LittleEndian.Uint32(b[4:8]))
			bits = int(binary.LittleEndian.Uint16(b[14:16]))
			if format == 0xFFFE && size >= 26 { // WAVE_FORMAT_EXTENSIBLE: the subformat's first two bytes
				format = binary.LittleEndian.Uint16(b[24:26])
			}
			if format != 1 || bits != 16 || channels < 1 || rate <= 0 {
				return nil, 0, fmt.Errorf("%w: format %d, %d bits, %d channels, %d Hz", ErrNotWAV, format, bits, channels, rate)
			}
		case "data":
			if channels == 0 {
				return nil, 0, fmt.Errorf("%w: data before fmt", ErrNotWAV)
			}
			// Streams written on the fly carry a size of 0 or 0xFFFFFFFF: read to the end then.
			var data []byte
			if size == 0 || size == math.MaxUint32 {
				data, err = io.ReadAll(r)
			} else {
				data = make([]byte, size)
				var n int
				n, err = io.ReadFull(r, data)
				data = data[:n]
				if errors.Is(err, io.ErrUnexpectedEOF) {
					err = nil // a truncated file: keep what is there
				}
			}
			if err != nil {
				return nil, 0, fmt.Errorf("reading WAV data: %w", err)
			}
			return Mono(PCM16(data), channels), rate, nil
		default:
			if _, err := io.CopyN(io.Discard, r, size+size%2); err != nil {
				return nil, 0, fmt.Errorf("%w: %w", ErrNotWAV, err)
			}
		}
	}
}

// PCM16 decodes little-endian 16-bit samples; a trailing odd byte is dropped.
func PCM16(b []byte) []int16 {
	out := make([]int16, len(b)/2)
	for i := range out {
		out[i] = int16(binary.LittleEndian.Uint16(b[2*i:]))
	}
	return out
}

// Bytes encodes samples as little-endian 16-bit PCM.
func Bytes(s []int16) []byte {
	out := make([]byte, 2*len(s))
	for i, v := range s {
		binary.LittleEndian.PutUint16(out[2*i:], uint16(v))
	}
	return out
}

// Mono averages interleaved channels.
func Mono(s []int16, channels int) []int16 {
	if channels <= 1 {
		return s
	}
	out := make([]int16, len(s)/channels)
	for i := range out {
		var sum int
		for c := range channels {
			sum += int(s[i*channels+c])
		}
		out[i] = int16(sum / channels)
	}
	return out
}

// Resample converts mono samples from one rate to another by linear interpolation. Speech at
// 8–48 kHz into 24 kHz is what it is for; it is not a mastering resampler.
func Resample(s []int16, from, to int) []int16 {
	if from == to || len(s) == 0 {
		return s
	}
	n := int(int64(len(s)) * int64(to) / int64(from))
	out := make([]int16, n)
	step := float64(from) / float64(to)
	for i := range out {
		pos := float64(i) * step
		j := int(pos)
		frac := pos - float64(j)
		a := float64(s[min(j, len(s)-1)])
		b := float64(s[min(j+1, len(s)-1)])
		out[i] = int16(math.Round(a + (b-a)*frac))
	}
	return out
}

// WriteWAV writes mono 16-bit PCM samples as a RIFF/WAVE file.
func WriteWAV(w io.Writer, samples []int16, rate int) error {
	data := Bytes(samples)
	var h [44]byte
	copy(h[0:], "RIFF")
	binary.LittleEndian.PutUint32(h[4:], uint32(36+len(data)))
	copy(h[8:], "WAVEfmt ")
	binary.LittleEndian.PutUint32(h[16:], 16)
	binary.LittleEndian.PutUint16(h[20:], 1) // PCM
	binary.LittleEndian.PutUint16(h[22:], 1) // mono
	binary.LittleEndian.PutUint32(h[24:], uint32(rate))
	binary.LittleEndian.PutUint32(h[28:], uint32(2*rate))
	binary.LittleEndian.PutUint16(h[32:], 2)
	binary.LittleEndian.PutUint16(h[34:], 16)
	copy(h[36:], "data")
	binary.LittleEndian.PutUint32(h[40:], uint32(len(data)))
	if _, err := w.Write(h[:]); err != nil {
		return fmt.Errorf("writing WAV header: %w", err)
	}
	if _, err := w.Write(data); err != nil {
		return fmt.Errorf("writing WAV data: %w", err)
	}
	return nil
}
