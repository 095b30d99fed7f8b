package stage

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"

	"github.com/omniserve/omniserve/internal/audio"
)

// remoteSpeechRate is the rate of OpenAI's response_format "pcm": 24 kHz, 16-bit LE, mono.
const remoteSpeechRate = 24000

// remoteTTS voices the talker's phrases on an OpenAI-compatible /v1/audio/speech, asking for
// raw pcm, which servers stream as they synthesize; the talker hands the audio on as it
// arrives (SynthesizeStream), not a whole phrase at a time.
type remoteTTS struct {
	c    *remoteClient
	rate int // the talker's output rate
}

func newRemoteTTS(cfg RemoteConfig, outputRate int) *remoteTTS {
	return &remoteTTS{c: newRemoteClient("tts", cfg), rate: outputRate}
}

func (t *remoteTTS) OutputRate() int { return t.rate }

// Synthesize posts one phrase and reads the streamed pcm to its end.
func (t *remoteTTS) Synthesize(ctx context.Context, text string) ([]float32, error) {
	var pcm []float32
	err := t.SynthesizeStream(ctx, text, func(p []float32) error {
		pcm = append(pcm, p...)
		return nil
	})
	if err != nil {
		return nil, err
	}
	return pcm, nil
}

// remoteChunkMs is the least audio SynthesizeStream hands on at once (the last piece of a
// phrase may be shorter): servers flush a few ms at a time, and every piece costs a trip
// through the connector, the dispatcher and the session.
const remoteChunkMs = 40

// SynthesizeStream posts one phrase and hands its pcm to emit as it arrives (ttsStreamer), at
// the talker's rate, in pieces of at least remoteChunkMs. An upstream that sent no audio is
// audio.ErrEmptyText; emit's error stops the stream and is returned.
func (t *remoteTTS) SynthesizeStream(ctx context.Context, text string, emit func(pcm []float32) error) error {
	if !speakable(text) {
		return fmt.Errorf("synthesizing %q: %w", text, audio.ErrEmptyText)
	}
	raw, err := json.Marshal(map[string]any{
		"model": t.c.cfg.Model, "input": text, "voice": t.c.cfg.Voice, "response_format": "pcm",
	})
	if err != nil {
		return fmt.Errorf("encoding speech request: %w", err)
	}
	var rs *audio.Resampler
	if t.rate != remoteSpeechRate {
		if rs, err = audio.NewResampler(remoteSpeechRate, t.rate); err != nil {
			return fmt.Errorf("resampling remote speech: %w", err)
		}
	}
	url := t.c.url("/audio/speech")
	wctx, wd := newWatchdog(ctx, t.c.cfg.FirstByteTimeout, t.c.cfg.IdleTimeout)
	defer wd.stop()
	resp, err := t.c.post(wctx, "/audio/speech", "application/json", "", raw)
	if err != nil {
		return fmt.Errorf("synthesizing: %w", timeoutError(wctx, "tts", url, err))
	}
	defer resp.Body.Close()
	sr := &speechReader{rs: rs, emit: emit, least: remoteChunkMs * t.rate / 1000}
	chunk := make([]byte, 16<<10)
	for {
		n, rerr := resp.Body.Read(chunk)
		if n > 0 {
			wd.kick()
			if err := sr.push(chunk[:n]); err != nil {
				return err
			}
		}
		if errors.Is(rerr, io.EOF) {
			break
		}
		if rerr != nil {
			if ctx.Err() != nil {
				return fmt.Errorf("synthesizing: %w", ctx.Err())
			}
			return fmt.Errorf("synthesizing: %w", timeoutError(wctx, "tts", url,
				&UpstreamError{Stage: "tts", URL: url, Message: "audio stream broken: " + rerr.Error(), Err: rerr}))
		}
	}
	if sr.in == 0 {
		return fmt.Errorf("synthesizing %q: upstream sent no audio: %w", text, audio.ErrEmptyText)
	}
	if rs != nil {
		// The filter's delayed tail, cut to the length resampling the phrase whole gives.
		sr.pend = append(sr.pend, rs.Flush(nil)...)
		sr.pend = sr.pend[:max(0, min(len(sr.pend), audio.ResampledLen(sr.in, remoteSpeechRate, t.rate)-sr.out))]
	}
	return sr.flush(true)
}

// speechReader decodes a remote speech stream's PCM16 bytes, resamples them to the talker's
// rate, and hands them on in pieces of at least least samples.
type speechReader struct {
	rs      *audio.Resampler // nil: the upstream's rate is the talker's
	emit    func(pcm []float32) error
	least   int
	in, out int       // samples received (24 kHz) and handed on (talker rate)
	pend    []float32 // decoded, not handed on yet
	dec     []float32
	odd     []byte // a sample split across two reads
}

// push takes one read of the body.
func (sr *speechReader) push(chunk []byte) error {
	b := append(sr.odd, chunk...)
	even := len(b) &^ 1
	var err error
	if sr.dec, err = audio.PCM16BytesToFloat32(sr.dec, b[:even]); err != nil {
		return fmt.Errorf("synthesizing: %w", err)
	}
	sr.odd = append([]byte(nil), b[even:]...)
	sr.in += len(sr.dec)
	if sr.rs != nil {
		sr.pend = append(sr.pend, sr.rs.Process(nil, sr.dec)...)
	} else {
		sr.pend = append(sr.pend, sr.dec...)
	}
	return sr.flush(false)
}

// flush hands the pending samples on: all of them, or once there are at least least.
func (sr *speechReader) flush(all bool) error {
	if len(sr.pend) == 0 || (!all && len(sr.pend) < sr.least) {
		return nil
	}
	p := sr.pend
	sr.pend = nil
	sr.out += len(p)
	return sr.emit(p)
}
