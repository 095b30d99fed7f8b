package realtime

import (
	"context"
	"encoding/base64"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"sync"
	"time"

	"github.com/coder/websocket"

	"github.com/omniserve/omniserve/internal/bench"
	"github.com/omniserve/omniserve/internal/protocol"
	"github.com/omniserve/omniserve/internal/session"
)

type client struct {
	ws  *websocket.Conn
	ctx context.Context
}

func dial(ctx context.Context, url string) (*client, error) {
	ws, _, err := websocket.Dial(ctx, url, nil)
	if err != nil {
		return nil, err
	}
	ws.SetReadLimit(64 << 20)
	return &client{ws: ws, ctx: ctx}, nil
}

func (c *client) send(ev map[string]any) error {
	b, err := json.Marshal(ev)
	if err != nil {
		return err
	}
	return c.ws.Write(c.ctx, websocket.MessageText, b)
}

// read returns the next server event as its protocol type.
func (c *client) read(timeout time.Duration) (protocol.ServerEvent, error) {
	ctx, cancel := context.WithTimeout(c.ctx, timeout)
	defer cancel()
	_, b, err := c.ws.Read(ctx)
	if err != nil {
		return nil, err
	}
	ev, _, err := protocol.DecodeServerEvent(b)
	return ev, err
}

// until reads up to the first event of GA type typ, failing on an error event.
func (c *client) until(typ string, timeout time.Duration) (protocol.ServerEvent, error) {
	deadline := time.Now().Add(timeout)
	for {
		ev, err := c.read(time.Until(deadline))
		if err != nil {
			return nil, fmt.Errorf("waiting for %s: %w", typ, err)
		}
		if ev.EventType() == typ {
			return ev, nil
		}
		if e, ok := ev.(protocol.ErrorEvent); ok {
			return nil, fmt.Errorf("waiting for %s: error event %s: %s", typ, e.Error.Code, e.Error.Message)
		}
	}
}

// sessionID is the id of the session a session.created announces.
func sessionID(ev protocol.ServerEvent) string {
	if c, ok := ev.(protocol.SessionCreated); ok {
		if s, ok := c.Session.(*protocol.Session); ok {
			return s.ID
		}
	}
	return ""
}

// speech16k declares the speech file's rate: pcm16 without a rate is OpenAI's 24 kHz.
func speech16k(sess map[string]any) map[string]any {
	if _, ok := sess["input_audio_format"]; !ok {
		sess["input_audio_format"] = map[string]any{"type": "pcm16", "rate": 16000}
	}
	return sess
}

func (c *client) open(sess map[string]any) error {
	if err := c.send(map[string]any{"type": "session.update", "session": speech16k(sess)}); err != nil {
		return err
	}
	_, err := c.until("session.updated", 10*time.Second)
	return err
}

func appendEv(b []byte) map[string]any {
	return map[string]any{"type": "input_audio_buffer.append", "audio": base64.StdEncoding.EncodeToString(b)}
}

// benchOverhead times single 100 ms appends in auto_response mode, one at a time, from the
// client's write to the session's engine append call; responses are off (text modality and the
// appends are silence, so the pipeline only listens).
func benchOverhead(ctx context.Context, url string, pcm []byte, appends chan time.Time, n int) ([]float64, error) {
	c, err := dial(ctx, url+"?duplex=1")
	if err != nil {
		return nil, err
	}
	defer c.ws.CloseNow()
	go func() { // drain server events
		for {
			if _, _, err := c.ws.Read(ctx); err != nil {
				return
			}
		}
	}()
	if err := c.send(map[string]any{"type": "session.update", "session": speech16k(map[string]any{"extra_body": map[string]any{"auto_response": true}})}); err != nil {
		return nil, err
	}
	time.Sleep(200 * time.Millisecond)
	chunk := make([]byte, 3200)
	var out []float64
	for i := range n + 5 {
		start := time.Now()
		if err := c.send(appendEv(chunk)); err != nil {
			return nil, err
		}
		select {
		case at := <-appends:
			if i >= 5 { // warm-up
				out = append(out, float64(at.Sub(start).Microseconds()))
			}
		case <-time.After(5 * time.Second):
			return nil, errors.New("no engine append seen")
		}
		time.Sleep(5 * time.Millisecond)
	}
	return out, nil
}

// benchTTFP: response_required turns, commit with response_create → first audio delta.
func benchTTFP(ctx context.Context, url string, pcm []byte, n int, prog bench.Progress) ([]float64, error) {
	var out []float64
	for range n {
		c, err := dial(ctx, url)
		if err != nil {
			return nil, err
		}
		err = func() error {
			defer c.ws.CloseNow()
			if err := c.open(map[string]any{"turn_detection": nil, "max_response_output_tokens": 8}); err != nil {
				return err
			}
			for i := 0; i < len(pcm); i += 3200 {
				if err := c.send(appendEv(pcm[i:min(i+3200, len(pcm))])); err != nil {
					return err
				}
			}
			start := time.Now()
			if err := c.send(map[string]any{"type": "input_audio_buffer.commit", "response_create": true}); err != nil {
				return err
			}
			if _, err := c.until("response.output_audio.delta", 30*time.Second); err != nil {
				return err
			}
			out = append(out, float64(time.Since(start).Microseconds())/1000)
			return nil
		}()
		if err != nil {
			return nil, err
		}
		prog.Add(1)
	}
	return out, nil
}

// benchBargeIn: a response plays at real time (500 ms lead); after its third audio delta the
// client sends barge_in and times the arrival of response.done{cancelled}. It also checks that no
// audio delta of that response follows.
func benchBargeIn(ctx context.Context, url string, pcm []byte, n int, prog bench.Progress) ([]float64, error) {
	c, err := dial(ctx, url+"?duplex=1")
	if err != nil {
		return nil, err
	}
	defer c.ws.CloseNow()
	if err := c.open(map[string]any{"turn_detection": nil, "max_response_output_tokens": 60}); err != nil {
		return nil, err
	}
	var out []float64
	for range n {
		for i := 0; i < len(pcm); i += 3200 {
			if err := c.send(appendEv(pcm[i:min(i+3200, len(pcm))])); err != nil {
				return nil, err
			}
		}
		if err := c.send(map[string]any{"type": "input_audio_buffer.commit", "response_create": true}); err != nil {
			return nil, err
		}
		var rid string
		for deltas := 0; deltas < 3; {
			ev, err := c.read(30 * time.Second)
			if err != nil {
				return nil, err
			}
			if d, ok := ev.(protocol.ResponseOutputAudioDelta); ok {
				deltas++
				rid = d.ResponseID
			}
		}
		start := time.Now()
		if err := c.send(map[string]any{"type": "barge_in"}); err != nil {
			return nil, err
		}
		done := false
		for !done {
			ev, err := c.read(10 * time.Second)
			if err != nil {
				return nil, err
			}
			switch ev.(type) {
			case protocol.ResponseDone:
				out = append(out, float64(time.Since(start).Microseconds())/1000)
				done = true
			}
		}
		// Anything of rid after its response.done is a stale-epoch bug.
		if err := c.send(map[string]any{"type": "session.heartbeat"}); err != nil {
			return nil, err
		}
		for {
			ev, err := c.read(10 * time.Second)
			if err != nil {
				return nil, err
			}
			if d, ok := ev.(protocol.ResponseOutputAudioDelta); ok && d.ResponseID == rid {
				return nil, fmt.Errorf("audio of %s after its response.done", rid)
			}
			if _, ok := ev.(protocol.SessionHeartbeatAck); ok {
				break
			}
		}
		prog.Add(1)
	}
	return out, nil
}

// sessionSteps are the concurrencies benchSessions tries, in order.
func sessionSteps() []int { return []int{1, 2, 4, 6, 8, 12, 16, 24, 32} }

// benchSessions finds the largest number of concurrent auto_response sessions (1, 2, 4, 8, 12,
// 16, ...) whose stage-0 decisions keep up with real-time 100 ms audio: at the end of the stream
// every session's decisions must be within 1 s of its audio.
func benchSessions(ctx context.Context, url string, tb *Timer, m *session.Manager, pcm []byte, maxN int, streamFor time.Duration, out io.Writer, prog bench.Progress) (int, error) {
	unit := append(append([]byte{}, pcm...), make([]byte, 32000)...)
	best := 0
	for _, n := range sessionSteps() {
		if n > maxN {
			break
		}
		for deadline := time.Now().Add(10 * time.Second); m.Active() > 0 && time.Now().Before(deadline); {
			time.Sleep(20 * time.Millisecond) // the previous step's sessions are still closing
		}
		ok, err := realTimeAt(ctx, url, tb, unit, n, streamFor)
		if err != nil {
			return best, err
		}
		fmt.Fprintf(out, "sessions=%d realtime=%v\n", n, ok)
		prog.Add(1)
		if !ok {
			break
		}
		best = n
	}
	return best, nil
}

func realTimeAt(ctx context.Context, url string, tb *Timer, unit []byte, n int, streamFor time.Duration) (bool, error) {
	var wg sync.WaitGroup
	lagOK := make([]bool, n)
	errs := make([]error, n)
	for i := range n {
		wg.Add(1)
		go func() {
			defer wg.Done()
			c, err := dial(ctx, url+"?duplex=1")
			if err != nil {
				errs[i] = err
				return
			}
			defer c.ws.CloseNow()
			if err := c.send(map[string]any{"type": "session.update", "session": speech16k(map[string]any{
				"extra_body": map[string]any{"auto_response": true}, "max_response_output_tokens": 4})}); err != nil {
				errs[i] = err
				return
			}
			created, err := c.until("session.created", 10*time.Second)
			if err != nil {
				errs[i] = err
				return
			}
			sid := sessionID(created)
			decisions := tb.counter(sid)
			readDone := make(chan struct{})
			go func() { // the speaker: drain
				defer close(readDone)
				for {
					if _, _, err := c.ws.Read(ctx); err != nil {
						return
					}
				}
			}()
			sent := 0
			start := time.Now()
			for off := 0; time.Since(start) < streamFor; off = (off + 3200) % len(unit) {
				if err := c.send(appendEv(unit[off:min(off+3200, len(unit))])); err != nil {
					errs[i] = err
					return
				}
				sent++
				time.Sleep(time.Until(start.Add(time.Duration(sent) * 100 * time.Millisecond)))
			}
			// Real time: within 1 s after the stream ends, stage 0 has decided on all but at most
			// one unit.
			deadline := time.Now().Add(time.Second)
			for time.Now().Before(deadline) {
				if decisions.Load() >= int64(sent-1) {
					lagOK[i] = true
					break
				}
				time.Sleep(20 * time.Millisecond)
			}
			_ = c.ws.CloseNow()
			<-readDone
		}()
	}
	wg.Wait()
	for _, err := range errs {
		if err != nil {
			return false, err
		}
	}
	for _, ok := range lagOK {
		if !ok {
			return false, nil
		}
	}
	return true, nil
}
