package server

import (
	"context"
	"encoding/json"
	"errors"
	"io"
	"net/http"
	"net/http/httptest"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/stretchr/testify/require"
	"go.uber.org/goleak"
	"go.uber.org/zap"
	"go.uber.org/zap/zapcore"
	"go.uber.org/zap/zaptest/observer"

	"github.com/omniserve/omniserve/internal/config"
)

// TestMain fails the package if a test leaves a goroutine behind: the warm-up, the pipeline and
// the sessions are all the server's to stop.
func TestMain(m *testing.M) {
	goleak.VerifyTestMain(m)
}

func get(t *testing.T, h http.Handler, path string) (int, string) {
	t.Helper()
	rec := httptest.NewRecorder()
	h.ServeHTTP(rec, httptest.NewRequestWithContext(t.Context(), http.MethodGet, path, nil))
	b, err := io.ReadAll(rec.Result().Body)
	require.NoError(t, err)
	return rec.Code, string(b)
}

// testConfig is the configuration `serve` resolves with the embedded default file (this
// package's directory has no configs/), on dummy:tiny in a temporary cache.
func testConfig(t *testing.T) config.Config {
	t.Helper()
	cfg, err := config.Resolve(config.Sources{Flags: []config.FlagValue{
		{Name: "model", Value: "dummy:tiny"},
		{Name: "device", Value: "cpu"},
		{Name: "cache-dir", Value: t.TempDir()},
	}})
	require.NoError(t, err)
	require.Equal(t, config.EmbeddedPath, cfg.Path)
	return cfg
}

func TestProbesBeforeBuild(t *testing.T) {
	t.Parallel()
	s := New(config.Defaults(), Options{})
	h := s.Handler()
	code, _ := get(t, h, "/health")
	require.Equal(t, http.StatusOK, code, "/health answers while the model loads")
	code, _ = get(t, h, "/ready")
	require.Equal(t, http.StatusServiceUnavailable, code, "/ready is 503 until built")
	code, body := get(t, h, "/v1/models")
	require.Equal(t, http.StatusOK, code)
	require.Contains(t, body, `"data":[]`)
	require.False(t, s.Ready())
	require.Nil(t, s.Sessions())
	s.Close(t.Context()) // nothing acquired: a no-op
}

// TestCloseOrderAndDeadline checks that closers run in reverse order of registration and that a
// closer ignoring ctx is left behind at the deadline, with the ones after it skipped.
func TestCloseOrderAndDeadline(t *testing.T) {
	t.Parallel()
	for _, tt := range []struct {
		name    string
		wedged  string // the closer that never returns; "" = none
		want    []string
		skipped bool
	}{
		{name: "all close, last registered first", want: []string{"c", "b", "a"}},
		{name: "a wedged closer stops the run", wedged: "b", want: []string{"c", "b"}, skipped: true},
	} {
		t.Run(tt.name, func(t *testing.T) {
			t.Parallel()
			core, logs := observer.New(zapcore.InfoLevel)
			s := New(config.Defaults(), Options{Log: zap.New(core)})
			var mu sync.Mutex
			var ran []string
			release := make(chan struct{})
			defer close(release)
			for _, name := range []string{"a", "b", "c"} {
				s.onClose(name, func(ctx context.Context) error {
					mu.Lock()
					ran = append(ran, name)
					mu.Unlock()
					if name == tt.wedged {
						<-release // ignores ctx, as a wedged stage would
					}
					if name == "a" {
						return errors.New("a failed")
					}
					return nil
				})
			}
			ctx, cancel := context.WithTimeout(t.Context(), 200*time.Millisecond)
			defer cancel()
			start := time.Now()
			s.Close(ctx)
			require.Less(t, time.Since(start), 5*time.Second)
			mu.Lock()
			require.Equal(t, tt.want, ran)
			mu.Unlock()
			if tt.skipped {
				e := logs.FilterMessage("shutdown: deadline reached; exiting without waiting for b").All()
				require.Len(t, e, 1)
				require.Equal(t, []any{"a"}, e[0].ContextMap()["skipped"])
				return
			}
			require.Equal(t, 1, logs.FilterMessage("shutdown: closing a failed").Len())
			require.Equal(t, 1, logs.FilterMessage("shutdown: closed c").Len())
		})
	}
}

// TestBuildServeDrainClose builds the real server on dummy:tiny and walks its life: ready with
// the model listed and the ASR pool warmed in the background, draining, then closed in reverse
// order of acquisition.
func TestBuildServeDrainClose(t *testing.T) {
	t.Parallel()
	core, logs := observer.New(zapcore.InfoLevel)
	s := New(testConfig(t), Options{Log: zap.New(core)})
	ctx, cancel := context.WithTimeout(t.Context(), 2*time.Minute)
	defer cancel()
	require.NoError(t, s.Build(ctx))
	h := s.Handler()

	code, _ := get(t, h, "/ready")
	require.Equal(t, http.StatusOK, code)
	code, body := get(t, h, "/v1/models")
	require.Equal(t, http.StatusOK, code)
	var list struct {
		Data []struct {
			ID string `json:"id"`
		} `json:"data"`
	}
	require.NoError(t, json.Unmarshal([]byte(body), &list))
	require.Len(t, list.Data, 1)
	require.Equal(t, "dummy:tiny", list.Data[0].ID)
	code, body = get(t, h, "/metrics")
	require.Equal(t, http.StatusOK, code)
	require.Contains(t, body, "go_goroutines")

	p := s.Parts()
	require.NotNil(t, p.Engine)
	require.NotNil(t, p.Pipeline)
	require.NotNil(t, p.Client)
	require.NotNil(t, p.Sessions)
	require.Same(t, p.Sessions, s.Sessions())
	select {
	case <-s.Warmed():
	case <-ctx.Done():
		t.Fatal("the ASR warm-up did not end")
	}
	require.Equal(t, 1, logs.FilterMessage("asr warm-up done").Len(), "the ASR pool is warmed in the background")
	require.GreaterOrEqual(t, p.ASR.Decoders(), WarmDecoders)

	s.Drain()
	require.False(t, s.Ready())
	code, _ = get(t, h, "/ready")
	require.Equal(t, http.StatusServiceUnavailable, code, "/ready is 503 while draining")
	code, _ = get(t, h, "/health")
	require.Equal(t, http.StatusOK, code)

	closeCtx, cancelClose := context.WithTimeout(t.Context(), 30*time.Second)
	defer cancelClose()
	s.Close(closeCtx)
	var closed []string
	for _, e := range logs.All() {
		if name, ok := strings.CutPrefix(e.Message, "shutdown: closed "); ok {
			closed = append(closed, name)
		}
	}
	require.Equal(t, []string{"asr warm-up", "webrtc calls", "client secrets pruner", "realtime sessions", "pipeline", "tts", "asr", "engine", "llama logs"}, closed)
}

// TestCloseStopsWarmUp closes right after Build: the warm-up still running is cancelled and
// waited for before the ASR closes (goleak and -race check the rest).
func TestCloseStopsWarmUp(t *testing.T) {
	t.Parallel()
	s := New(testConfig(t), Options{})
	ctx, cancel := context.WithTimeout(t.Context(), 2*time.Minute)
	defer cancel()
	require.NoError(t, s.Build(ctx))
	s.Close(ctx)
}
