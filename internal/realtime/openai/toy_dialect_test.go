package openai_test

import (
	"context"
	"encoding/base64"
	"encoding/json"
	"fmt"
	"github.com/omniserve/omniserve/internal/duplex"
	"sync"
	"testing"
	"time"

	"github.com/stretchr/testify/require"
	"go.uber.org/zap"

	"github.com/omniserve/omniserve/internal/requestclient"
	"github.com/omniserve/omniserve/internal/session"
)

// A new dialect is one translator. "toy" is a dialect of four client ops and six server
// events, with names of its own; this file is all it takes: its translator (toyDecode,
// toyEncode) drives a real session (session.Manager, the actor, its queues and jobs) over a
// scripted engine, frames in → Commands → session → Effects → its frames out. No session file
// knows of it.
//
//	client:  {"op":"hello"}                 → session.Heartbeat
//	         {"op":"say","pcm":"<base64>"}  → session.AppendAudio (pcm16, 24 kHz)
//	         {"op":"over"}                  → session.CommitInput, answer it
//	         {"op":"bye"}                   → session.CloseSession
//	server:  {"ev":"hi"}                    ← session.HeartbeatAck
//	         {"ev":"heard","item":…}        ← session.InputCommitted
//	         {"ev":"reply","id":…}          ← session.ResponseStarted
//	         {"ev":"voice","bytes":…,"words":…} ← session.OutputDelta (audio; its transcript
//	                                              is merged into the next voice frame's words)
//	         {"ev":"end","status":…,"said":…} ← session.ResponseDone
//	         {"ev":"oops","code":…,"why":…}  ← session.Error
//
// Every other effect has no frame in this dialect: the translator drops it.

type toyFrame struct {
	Op  string `json:"op"`
	PCM string `json:"pcm,omitempty"`
}

// toyDecode is the toy dialect's frames → the session's commands.
func toyDecode(data []byte) (session.Command, error) {
	var f toyFrame
	if err := json.Unmarshal(data, &f); err != nil {
		return nil, fmt.Errorf("toy: %w", err)
	}
	base := session.Base{Kind: "toy." + f.Op}
	switch f.Op {
	case "hello":
		return &session.Heartbeat{Base: base}, nil
	case "say":
		pcm, err := base64.StdEncoding.DecodeString(f.PCM)
		if err != nil {
			return nil, fmt.Errorf("toy: say: %w", err)
		}
		return &session.AppendAudio{Base: base, Data: pcm}, nil
	case "over":
		respond := true
		return &session.CommitInput{Base: base, ResponseCreate: &respond}, nil
	case "bye":
		return &session.CloseSession{Base: base}, nil
	}
	return nil, fmt.Errorf("toy: unknown op %q", f.Op)
}

// toyEncode is the session's effects → the toy dialect's frames; ok is false for an effect the
// dialect does not tell.
func toyEncode(e session.Effect) (frame map[string]any, ok bool) {
	switch e := e.(type) {
	case session.HeartbeatAck:
		return map[string]any{"ev": "hi"}, true
	case session.Error:
		return map[string]any{"ev": "oops", "code": e.Code, "why": e.Message}, true
	case session.InputCommitted:
		return map[string]any{"ev": "heard", "item": e.ItemID}, true
	case session.ResponseStarted:
		return map[string]any{"ev": "reply", "id": e.Response.ID}, true
	case session.OutputDelta:
		if e.Kind == session.PartAudio {
			return map[string]any{"ev": "voice", "bytes": len(e.Audio)}, true
		}
		if e.Kind == session.PartTranscript {
			return map[string]any{"ev": "words", "text": e.Text}, true
		}
	case session.ResponseDone:
		said := ""
		for _, it := range e.Response.Output {
			said += it.Text
		}
		return map[string]any{"ev": "end", "status": e.Response.Status, "said": said}, true
	}
	return nil, false
}

// toyConn is the toy dialect's connection: the session's Sink, writing frames in order.
type toyConn struct {
	mu     sync.Mutex
	frames []string
	min    int
	ch     chan string
}

func (c *toyConn) Send(ev session.Event) error {
	frame, ok := toyEncode(ev.Effect)
	if !ok {
		return nil
	}
	data, err := json.Marshal(frame)
	if err != nil {
		return err
	}
	c.mu.Lock()
	defer c.mu.Unlock()
	if ev.Model && ev.Epoch < c.min {
		return nil
	}
	c.frames = append(c.frames, string(data))
	c.ch <- string(data)
	return nil
}

func (c *toyConn) DropStale(epoch int) {
	c.mu.Lock()
	c.min = max(c.min, epoch)
	c.mu.Unlock()
}

// until waits for the frame of event ev.
func (c *toyConn) until(t *testing.T, ev string) map[string]any {
	t.Helper()
	for {
		select {
		case data := <-c.ch:
			var m map[string]any
			require.NoError(t, json.Unmarshal([]byte(data), &m))
			require.NotEqual(t, "oops", m["ev"], "%s", data)
			if m["ev"] == ev {
				return m
			}
		case <-time.After(5 * time.Second):
			t.Fatalf("no %s frame", ev)
		}
	}
}

// toyEngine answers every response with two 100 ms chunks of speech, then finishes.
type toyEngine struct {
	out      func(duplex.Output)
	mu       sync.Mutex
	appended int
	turn     int
}

func (e *toyEngine) SupportsDuplex() bool { return true }
func (e *toyEngine) Open(_ context.Context, _ requestclient.Fence, _ duplex.Options, out func(duplex.Output)) (session.Engine, error) {
	e.out = out
	return e, nil
}
func (e *toyEngine) AppendAudio(_ context.Context, _ int, pcm []float32) error {
	e.mu.Lock()
	e.appended += len(pcm)
	e.mu.Unlock()
	return nil
}
func (e *toyEngine) Commit(context.Context, int, bool) (duplex.Transcription, error) {
	return duplex.Transcription{Text: "hello"}, nil
}
func (e *toyEngine) AppendText(context.Context, int, string, string) error { return nil }
func (e *toyEngine) Respond(context.Context, requestclient.Turn, duplex.ResponseSpec) (int, error) {
	e.mu.Lock()
	e.turn++
	n := e.turn
	e.mu.Unlock()
	e.out(duplex.Output{Kind: duplex.OutAudio, Turn: n, Audio: make([]float32, 2400), Text: "good "})
	e.out(duplex.Output{Kind: duplex.OutAudio, Turn: n, Audio: make([]float32, 2400), Text: "day"})
	e.out(duplex.Output{Kind: duplex.OutFinished, Turn: n, FinishReason: "stop"})
	return n, nil
}
func (e *toyEngine) Signal(context.Context, string, requestclient.Fence) error { return nil }
func (e *toyEngine) Close(context.Context, string) error                       { return nil }
func (e *toyEngine) Abort()                                                    {}
func (e *toyEngine) MarkTurnArrival(_ int, ts float64) float64                 { return ts }
func (e *toyEngine) BeginTurn(turn int, _ string, _ int, _ float64) requestclient.Turn {
	return requestclient.NewTurn(turn)
}
func (e *toyEngine) EndTurn(requestclient.Turn, requestclient.TurnOutcome) (bool, func(context.Context) error) {
	return true, nil
}

func TestToyDialectDrivesARealSession(t *testing.T) {
	eng := &toyEngine{}
	m := session.NewManager(session.ManagerConfig{MaxSessions: 1, MaxOutputLead: time.Second}, eng, zap.NewNop())
	slot, err := m.Acquire(context.Background())
	require.NoError(t, err)
	conn := &toyConn{ch: make(chan string, 1024)}
	s := m.NewSession(slot, session.Options{}, conn)
	done := make(chan string, 1)
	go func() {
		reason := s.Run(context.Background(), nil)
		slot.Release()
		done <- reason
	}()

	in := func(frame string) {
		t.Helper()
		cmd, err := toyDecode([]byte(frame))
		require.NoError(t, err)
		require.NoError(t, s.Submit(context.Background(), cmd))
	}
	in(`{"op":"hello"}`)
	conn.until(t, "hi")
	pcm := base64.StdEncoding.EncodeToString(make([]byte, 9600)) // 200 ms at 24 kHz
	in(`{"op":"say","pcm":"` + pcm + `"}`)
	in(`{"op":"over"}`)
	heard := conn.until(t, "heard")
	require.NotEmpty(t, heard["item"])
	reply := conn.until(t, "reply")
	require.Contains(t, reply["id"], "resp-")
	voice := conn.until(t, "voice")
	require.Positive(t, voice["bytes"])
	end := conn.until(t, "end")
	require.Equal(t, "completed", end["status"])
	require.Equal(t, "good day", end["said"])
	in(`{"op":"bye"}`)
	select {
	case reason := <-done:
		require.Equal(t, session.ReasonClientClose, reason)
	case <-time.After(5 * time.Second):
		t.Fatal("the session did not end")
	}
	eng.mu.Lock()
	defer eng.mu.Unlock()
	require.Positive(t, eng.appended, "the audio reached the engine")
	for _, f := range conn.frames {
		require.NotContains(t, f, "response.", "no OpenAI name leaks into the toy dialect: %s", f)
	}
}
