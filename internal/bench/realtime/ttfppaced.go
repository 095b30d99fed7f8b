package realtime

import (
	"context"
	"fmt"
	"time"
)

// benchTTFPPaced runs turns response_required turns in ONE session, each with the clip appended
// in 100 ms events paced at real time, then commit{response_create} → first audio delta, then
// waits for response.done before the next turn. Paced appends reach the engine while the user
// is still speaking, and the session streams them into the ASR (once the engine is open and no
// response is active), so the commit pays only the final hypothesis. The first turn is dropped:
// the engine opens at the first commit, so that turn cannot decode ahead.
func benchTTFPPaced(ctx context.Context, url string, pcm []byte, turns int) ([]float64, error) {
	c, err := dial(ctx, url)
	if err != nil {
		return nil, err
	}
	defer c.ws.CloseNow()
	if err := c.open(map[string]any{"turn_detection": nil, "max_response_output_tokens": 2}); err != nil {
		return nil, err
	}
	var out []float64
	for turn := range turns {
		start := time.Now()
		sent := 0
		for i := 0; i < len(pcm); i += 3200 {
			if err := c.send(appendEv(pcm[i:min(i+3200, len(pcm))])); err != nil {
				return nil, err
			}
			sent++
			// Speaking pace: the next 100 ms of audio is not available before it is spoken.
			time.Sleep(time.Until(start.Add(time.Duration(sent) * 100 * time.Millisecond)))
		}
		commit := time.Now()
		if err := c.send(map[string]any{"type": "input_audio_buffer.commit", "response_create": true}); err != nil {
			return nil, err
		}
		if _, err := c.until("response.output_audio.delta", 30*time.Second); err != nil {
			return nil, fmt.Errorf("turn %d: %w", turn+1, err)
		}
		ms := float64(time.Since(commit).Microseconds()) / 1000
		if _, err := c.until("response.done", 30*time.Second); err != nil {
			return nil, fmt.Errorf("turn %d: %w", turn+1, err)
		}
		if turn > 0 {
			out = append(out, ms)
		}
	}
	return out, nil
}
