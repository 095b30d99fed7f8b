package session

import (
	"context"
	"errors"
	"fmt"
	"sync"
	"testing"
	"time"

	"github.com/stretchr/testify/require"
	"go.uber.org/zap"

	"github.com/omniserve/omniserve/internal/duplex"
	"github.com/omniserve/omniserve/internal/gpu"
	"github.com/omniserve/omniserve/internal/metrics"
	"github.com/omniserve/omniserve/internal/requestclient"
)

// failingEngine answers every response with an engine failure, as the pipeline reports one: an
// Error output, then Finished with reason error.
type failingEngine struct {
	*fakeEngine
	err error
}

func (f *failingEngine) Respond(_ context.Context, t requestclient.Turn, _ duplex.ResponseSpec) (int, error) {
	f.recID("respond", t.ID())
	f.mu.Lock()
	f.turn++
	n := f.turn
	f.mu.Unlock()
	f.out(duplex.Output{Kind: duplex.OutError, Turn: n, Err: f.err})
	f.out(duplex.Output{Kind: duplex.OutFinished, Turn: n, FinishReason: "error", Err: f.err})
	return n, nil
}

type failingBackend struct{ eng *failingEngine }

func (b *failingBackend) SupportsDuplex() bool { return true }
func (b *failingBackend) Open(_ context.Context, _ requestclient.Fence, _ duplex.Options, out func(duplex.Output)) (Engine, error) {
	b.eng.out = out
	return b.eng, nil
}

// causeCounter records CountEngineError calls (the manager's metrics).
type causeCounter struct {
	panicCounter
	mu     sync.Mutex
	causes []string
}

func (c *causeCounter) CountEngineError(cause string) {
	c.mu.Lock()
	defer c.mu.Unlock()
	c.causes = append(c.causes, cause)
}

func (c *causeCounter) list() []string {
	c.mu.Lock()
	defer c.mu.Unlock()
	return append([]string(nil), c.causes...)
}

// A failed response tells the client, counts and logs the condition behind it (issue 27: an
// engine_error was once seen without a word of why): the error event's message ends with the
// cause it is counted under in omniserve_engine_errors_total.
func TestEngineErrorNamesItsCause(t *testing.T) {
	tests := []struct {
		name        string
		err         error
		code, cause string
	}{
		{"decode", fmt.Errorf("generating: generate: %w: %w", gpu.ErrDecode, errors.New("llama_decode failed with code -1")),
			"engine_error", metrics.CauseDecodeFailed},
		{"kv cache full", fmt.Errorf("generating: generate: %w: shared KV cache (8192 cells) is full", requestclient.ErrKVCacheFull),
			"kv_cache_full", metrics.CauseContextFull},
		{"unexplained", errors.New("something new"), "engine_error", metrics.CauseUnknown},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			eng := &failingEngine{fakeEngine: &fakeEngine{t: t}, err: tt.err}
			cc := &causeCounter{}
			m := NewManager(ManagerConfig{MaxSessions: 1, Metrics: cc}, &failingBackend{eng}, zap.NewNop())
			sk := &sink{ch: make(chan Event, 1024)}
			s, wait := runSession(t, m, Options{Duplex: true}, sk, manual16k)
			ctx := context.Background()
			require.NoError(t, s.Submit(ctx, &AppendAudio{Data: make([]byte, 3200)}))
			require.NoError(t, s.Submit(ctx, &CommitInput{ResponseCreate: ptr(true)}))
			e := sk.until(t, "error").wire()["error"].(map[string]any)
			require.Equal(t, tt.code, e["code"])
			require.Equal(t, "server_error", e["type"])
			require.Equal(t, tt.err.Error()+" (cause: "+tt.cause+")", e["message"])
			done := sk.until(t, "response.done").wire()["response"].(map[string]any)
			require.Equal(t, "failed", done["status"])
			require.Equal(t, []string{tt.cause}, cc.list())
			require.NoError(t, s.Submit(ctx, &CloseSession{}))
			wait()
		})
	}
}

// A turn the engine fails before the session has a response for it (auto_response: the turn's
// prefill, or a reply failing ahead of its speak decision) has no response to fail; it was
// dropped without a trace. It is now logged and counted with its cause, and no event invents a
// response for it.
func TestEngineErrorWithoutResponseIsCounted(t *testing.T) {
	eng := &fakeEngine{t: t}
	cc := &causeCounter{}
	m := NewManager(ManagerConfig{MaxSessions: 1, Metrics: cc}, &fakeBackend{eng}, zap.NewNop())
	sk := &sink{ch: make(chan Event, 1024)}
	patch := ConfigPatch{AutoResponse: ptr(true), InputFormat: &AudioFormat{Type: "pcm16", Rate: 16000}}
	s, wait := runSession(t, m, Options{Duplex: true}, sk, patch)
	ctx := context.Background()
	// The engine is open once it took the first audio (its calls are recorded after Open).
	require.NoError(t, s.Submit(ctx, &AppendAudio{Data: make([]byte, 3200)}))
	require.Eventually(t, func() bool { return len(eng.list()) > 0 }, 5*time.Second, 5*time.Millisecond)
	err := fmt.Errorf("prefilling conversation: append: %w: %w", gpu.ErrDecode, errors.New("llama_decode failed with code -1"))
	eng.out(duplex.Output{Kind: duplex.OutError, Turn: 1, Err: err})
	require.Eventually(t, func() bool { return len(cc.list()) == 1 }, 5*time.Second, 5*time.Millisecond)
	require.Equal(t, []string{metrics.CauseDecodeFailed}, cc.list())
	require.NoError(t, s.Submit(ctx, &CloseSession{}))
	wait()
	sk.mu.Lock()
	defer sk.mu.Unlock()
	for _, ev := range sk.events {
		require.NotEqual(t, "response.created", ev.typ(), "no response is made up for the failed turn")
		require.NotEqual(t, "error", ev.typ(), "no client event for a turn no response carried")
	}
}
