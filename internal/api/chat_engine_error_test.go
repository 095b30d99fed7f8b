package api

import (
	"context"
	"encoding/json"
	"fmt"
	"net/http"
	"net/http/httptest"
	"strings"
	"sync"
	"testing"

	"github.com/stretchr/testify/require"

	"github.com/omniserve/omniserve/internal/requestclient"
)

// failingChat is a ChatClient whose engine fails every completion with err, after checking that
// the request reached it as sent.
type failingChat struct {
	t   *testing.T
	err error
}

func (f failingChat) Chat(_ context.Context, req requestclient.ChatRequest) (*requestclient.ChatStream, error) {
	require.Len(f.t, req.Messages, 1)
	require.Equal(f.t, "hello", req.Messages[0].Text)
	return nil, f.err
}

// A chat completion that fails in the engine is a 500 engine_error whose message names its
// cause, and it is counted under that cause (omniserve_engine_errors_total), as a realtime
// session's failures are: before, chat failures were logged but counted nowhere. A remote
// stage's failure keeps the upstream's answer and is counted as upstream.
func TestChatEngineErrorCountedByCause(t *testing.T) {
	t.Parallel()
	for _, tc := range []struct {
		name      string
		err       error
		status    int
		code      string
		cause     string
		inMessage string
	}{
		{"kv cache full", fmt.Errorf("prefill: %w", requestclient.ErrKVCacheFull), 500, "engine_error", "context_full", "(cause: context_full)"},
		{"unknown", fmt.Errorf("something else"), 500, "engine_error", "unknown", "(cause: unknown)"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			var mu sync.Mutex
			var counted []string
			h := NewChatHandler(ChatConfig{CountEngineError: func(c string) { mu.Lock(); counted = append(counted, c); mu.Unlock() }},
				failingChat{t: t, err: tc.err}, nil)
			for _, stream := range []bool{false, true} {
				body := fmt.Sprintf(`{"model":"m","stream":%v,"messages":[{"role":"user","content":"hello"}]}`, stream)
				req := httptest.NewRequest(http.MethodPost, "/v1/chat/completions", strings.NewReader(body))
				req.Header.Set("Content-Type", "application/json")
				rec := httptest.NewRecorder()
				h.ServeHTTP(rec, req)
				require.Equal(t, tc.status, rec.Code, rec.Body.String())
				var e struct {
					Error struct{ Type, Code, Message string }
				}
				require.NoError(t, json.Unmarshal(rec.Body.Bytes(), &e), rec.Body.String())
				require.Equal(t, tc.code, e.Error.Code)
				require.Contains(t, e.Error.Message, tc.inMessage)
			}
			mu.Lock()
			defer mu.Unlock()
			require.Equal(t, []string{tc.cause, tc.cause}, counted, "one count per failed completion, under its cause")
		})
	}
}
