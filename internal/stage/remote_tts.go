package stage

import (
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"net/http"

	"github.com/omniserve/omniserve/internal/speech"
)

// remoteSpeechRate is the rate of OpenAI's response_format "pcm": 24 kHz, 16-bit LE, mono.
const remoteSpeechRate = 24000

// remoteTTS voices the talker's phrases on an OpenAI-compatible /v1/audio/speech, asking for
// raw pcm, which servers stream as they synthesize.
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
	if !speakable(text) {
		return nil, fmt.Errorf("synthesizing %q: %w", text, speech.ErrEmptyText)
	}
	raw, err := json.Marshal(map[string]any{
		"model": t.c.cfg.Model, "input": text, "voice": t.c.cfg.Voice, "response_format": "pcm",
	})
	if err != nil {
		return nil, fmt.Errorf("encoding speech request: %w", err)
	}
	url := t.c.url("/audio/speech")
	wctx, wd := newWatchdog(ctx, t.c.cfg.FirstByteTimeout, t.c.cfg.IdleTimeout)
	defer wd.stop()
	resp, err := t.c.do(wctx, "/audio/speech", func(ctx context.Context, url string) (*http.Request, error) {
		req, err := http.NewRequestWithContext(ctx, http.MethodPost, url, bytes.NewReader(raw))
		if err != nil {
			return nil, err
		}
		req.Header.Set("Content-Type", "application/json")
		return req, nil
	})
	if err != nil {
		return nil, fmt.Errorf("synthesizing: %w", timeoutError(wctx, "tts", url, err))
	}
	defer resp.Body.Close()
	var (
		pcm   []float32
		dec   []float32
		chunk = make([]byte, 16<<10)
		odd   []byte // a sample split across two reads
	)
	for {
		n, rerr := resp.Body.Read(chunk)
		if n > 0 {
			wd.kick()
			b := append(odd, chunk[:n]...)
			even := len(b) &^ 1
			if dec, err = speech.PCM16BytesToFloat32(dec, b[:even]); err != nil {
				return nil, fmt.Errorf("synthesizing: %w", err)
			}
			pcm = append(pcm, dec...)
			odd = append([]byte(nil), b[even:]...)
		}
		if errors.Is(rerr, io.EOF) {
			break
		}
		if rerr != nil {
			if ctx.Err() != nil {
				return nil, fmt.Errorf("synthesizing: %w", ctx.Err())
			}
			return nil, fmt.Errorf("synthesizing: %w", timeoutError(wctx, "tts", url,
				&UpstreamError{Stage: "tts", URL: url, Message: "audio stream broken: " + rerr.Error(), Err: rerr}))
		}
	}
	if len(pcm) == 0 {
		return nil, fmt.Errorf("synthesizing %q: upstream sent no audio: %w", text, speech.ErrEmptyText)
	}
	if t.rate == remoteSpeechRate {
		return pcm, nil
	}
	out, err := speech.Resample(pcm, remoteSpeechRate, t.rate)
	if err != nil {
		return nil, fmt.Errorf("resampling remote speech: %w", err)
	}
	return out, nil
}
