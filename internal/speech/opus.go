package speech

// Opus through libopus (cgo, Debian's libopus-dev): the codec of WebRTC audio. Mono only: WebRTC
// signals opus/48000/2 but a mono stream is what a voice needs, and decoders upmix it.

/*
#cgo pkg-config: opus
#include <opus.h>

static int os_set_bitrate(OpusEncoder *e, opus_int32 b) { return opus_encoder_ctl(e, OPUS_SET_BITRATE(b)); }
static int os_set_complexity(OpusEncoder *e, opus_int32 c) { return opus_encoder_ctl(e, OPUS_SET_COMPLEXITY(c)); }
static int os_get_lookahead(OpusEncoder *e, opus_int32 *l) { return opus_encoder_ctl(e, OPUS_GET_LOOKAHEAD(l)); }
*/
import "C"

import (
	"errors"
	"fmt"
	"unsafe"
)

// OpusFrameMs is the frame length WebRTC uses and the encoder takes.
const OpusFrameMs = 20

func opusErr(op string, code C.int) error {
	return fmt.Errorf("opus: %s: %s", op, C.GoString(C.opus_strerror(code)))
}

// OpusApplication is the encoder's mode (libopus's OPUS_APPLICATION_*).
type OpusApplication int

const (
	// OpusVoIP is libopus's voice mode (SILK or hybrid for speech): 6.5 ms of lookahead.
	OpusVoIP OpusApplication = iota
	// OpusLowDelay is CELT only (OPUS_APPLICATION_RESTRICTED_LOWDELAY): 2.5 ms of lookahead,
	// 4 ms less delay on every packet. At 32 kbit/s speech stays as intelligible as in VoIP mode
	// (TestOpusLowDelaySpeech); WebRTC's outbound audio uses it.
	OpusLowDelay
)

// OpusEncoder encodes mono PCM16 at its rate into Opus packets. Not safe for concurrent use.
type OpusEncoder struct {
	e    *C.OpusEncoder
	rate int
}

// NewOpusEncoder returns a voice encoder at rate (8000, 12000, 16000, 24000 or 48000) and bitrate
// bits per second, in VoIP mode.
func NewOpusEncoder(rate, bitrate int) (*OpusEncoder, error) {
	return NewOpusEncoderMode(rate, bitrate, OpusVoIP)
}

// NewOpusEncoderMode is NewOpusEncoder in the given mode.
func NewOpusEncoderMode(rate, bitrate int, app OpusApplication) (*OpusEncoder, error) {
	capp := C.int(C.OPUS_APPLICATION_VOIP)
	if app == OpusLowDelay {
		capp = C.OPUS_APPLICATION_RESTRICTED_LOWDELAY
	}
	var code C.int
	e := C.opus_encoder_create(C.opus_int32(rate), 1, capp, &code)
	if code != C.OPUS_OK {
		return nil, opusErr("creating the encoder", code)
	}
	if r := C.os_set_bitrate(e, C.opus_int32(bitrate)); r != C.OPUS_OK {
		C.opus_encoder_destroy(e)
		return nil, opusErr("setting the bitrate", r)
	}
	if r := C.os_set_complexity(e, 5); r != C.OPUS_OK { // half the cost of 10, inaudible for speech
		C.opus_encoder_destroy(e)
		return nil, opusErr("setting the complexity", r)
	}
	return &OpusEncoder{e: e, rate: rate}, nil
}

// Lookahead is the encoder's algorithmic delay in samples at its rate: how much later than its
// input a decoder's output is.
func (e *OpusEncoder) Lookahead() (int, error) {
	var l C.opus_int32
	if r := C.os_get_lookahead(e.e, &l); r != C.OPUS_OK {
		return 0, opusErr("getting the lookahead", r)
	}
	return int(l), nil
}

// FrameSamples is the number of samples of one 20 ms frame.
func (e *OpusEncoder) FrameSamples() int { return e.rate * OpusFrameMs / 1000 }

// Encode encodes one frame of pcm (FrameSamples samples) into out and returns the packet length.
func (e *OpusEncoder) Encode(pcm []int16, out []byte) (int, error) {
	if len(pcm) != e.FrameSamples() {
		return 0, fmt.Errorf("opus: encode: %d samples, want %d", len(pcm), e.FrameSamples())
	}
	if len(out) == 0 {
		return 0, errors.New("opus: encode: empty output buffer")
	}
	n := C.opus_encode(e.e, (*C.opus_int16)(unsafe.Pointer(&pcm[0])), C.int(len(pcm)),
		(*C.uchar)(unsafe.Pointer(&out[0])), C.opus_int32(len(out)))
	if n < 0 {
		return 0, opusErr("encode", n)
	}
	return int(n), nil
}

// Close frees the encoder.
func (e *OpusEncoder) Close() {
	if e.e != nil {
		C.opus_encoder_destroy(e.e)
		e.e = nil
	}
}

// OpusDecoder decodes Opus packets (any rate or channel count they were made with) to mono PCM16 at
// its rate. Not safe for concurrent use.
type OpusDecoder struct {
	d    *C.OpusDecoder
	rate int
}

// NewOpusDecoder returns a mono decoder producing rate (8000, 12000, 16000, 24000 or 48000).
func NewOpusDecoder(rate int) (*OpusDecoder, error) {
	var code C.int
	d := C.opus_decoder_create(C.opus_int32(rate), 1, &code)
	if code != C.OPUS_OK {
		return nil, opusErr("creating the decoder", code)
	}
	return &OpusDecoder{d: d, rate: rate}, nil
}

// MaxFrameSamples is the longest packet's samples (120 ms) at the decoder's rate: the size
// of a buffer Decode can always fill.
func (d *OpusDecoder) MaxFrameSamples() int { return d.rate * 120 / 1000 }

// Decode decodes one packet into pcm and returns the samples written; an empty packet conceals
// one lost 20 ms frame (packet loss concealment).
func (d *OpusDecoder) Decode(packet []byte, pcm []int16) (int, error) {
	if len(pcm) == 0 {
		return 0, errors.New("opus: decode: empty output buffer")
	}
	var data *C.uchar
	frame := len(pcm)
	if len(packet) > 0 {
		data = (*C.uchar)(unsafe.Pointer(&packet[0]))
	} else {
		frame = min(frame, d.rate*OpusFrameMs/1000)
	}
	n := C.opus_decode(d.d, data, C.opus_int32(len(packet)), (*C.opus_int16)(unsafe.Pointer(&pcm[0])), C.int(frame), 0)
	if n < 0 {
		return 0, opusErr("decode", n)
	}
	return int(n), nil
}

// Close frees the decoder.
func (d *OpusDecoder) Close() {
	if d.d != nil {
		C.opus_decoder_destroy(d.d)
		d.d = nil
	}
}
