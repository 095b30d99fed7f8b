package test

import (
	"bufio"
	"bytes"
	"context"
	"encoding/base64"
	"encoding/binary"
	"encoding/json"
	"io"
	"net/http"
	"net/http/httptest"
	"os"
	"path/filepath"
	"runtime"
	"strings"
	"testing"
	"time"

	"github.com/stretchr/testify/require"
	"go.uber.org/zap"
	"go.uber.org/zap/zapcore"
	"go.uber.org/zap/zaptest/observer"

	"github.com/omniserve/omniserve/internal/api"
	"github.com/omniserve/omniserve/internal/audio"
	"github.com/omniserve/omniserve/internal/config"
	"github.com/omniserve/omniserve/internal/gpu"
	"github.com/omniserve/omniserve/internal/requestclient"
	"github.com/omniserve/omniserve/internal/server"
	"github.com/omniserve/omniserve/internal/stage"
)

const chatModel = "dummy:tiny"

// chatFixture is two real servers built by internal/server as `omniserve serve` builds them
// (dummy:tiny in a TempDir, ASR, TTS, the pipeline of configs/omni-cpu.yaml), served over
// loopback HTTP: plain, and with --log-stats, whose log is captured.
type chatFixture struct {
	plainSrv    *server.Server
	statsSrv    *server.Server
	runner      *gpu.Runner // the plain server's engine
	statsRunner *gpu.Runner // the log-stats server's engine
	pipeline    *stage.Pipeline
	plain       *requestclient.Client
	stats       *requestclient.Client
	logs        *observer.ObservedLogs
	url         string // plain server, /v1 base
	statsURL    string // log-stats server, /v1 base
}

func repoRoot(t testing.TB) string {
	_, file, _, ok := runtime.Caller(0)
	require.True(t, ok)
	return filepath.Dir(filepath.Dir(file))
}

func newChatFixture(t *testing.T) *chatFixture {
	t.Helper()
	core, logs := observer.New(zapcore.InfoLevel)
	f := &chatFixture{logs: logs}
	var url string
	f.plainSrv, url = startTestServer(t, zap.NewNop())
	f.url = url + "/v1"
	f.statsSrv, url = startTestServer(t, zap.New(core), config.FlagValue{Name: "log-stats", Value: "true"})
	f.statsURL = url + "/v1"
	p, sp := f.plainSrv.Parts(), f.statsSrv.Parts()
	f.runner, f.statsRunner = p.Engine, sp.Engine
	f.pipeline, f.plain, f.stats = p.Pipeline, p.Client, sp.Client
	return f
}

// startTestServer builds a server from configs/omni-cpu.yaml on dummy:tiny plus flags, serves it
// on a loopback httptest server and returns it with its base URL; both stop at the test's end.
func startTestServer(t *testing.T, log *zap.Logger, flags ...config.FlagValue) (*server.Server, string) {
	t.Helper()
	cfg, err := config.Resolve(config.Sources{
		ConfigFlag: filepath.Join(repoRoot(t), "configs", "omni-cpu.yaml"), ConfigFlagSet: true,
		Flags: append([]config.FlagValue{
			{Name: "model", Value: chatModel},
			{Name: "device", Value: "cpu"},
			{Name: "cache-dir", Value: t.TempDir()},
		}, flags...),
	})
	require.NoError(t, err)
	srv := server.New(cfg, server.Options{Log: log})
	t.Cleanup(func() { // runs after the HTTP server's cleanup below (cleanups are LIFO)
		ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
		defer cancel()
		srv.Close(ctx)
	})
	ctx, cancel := context.WithTimeout(context.Background(), 2*time.Minute)
	defer cancel()
	require.NoError(t, srv.Build(ctx))
	hs := httptest.NewServer(srv.Handler())
	t.Cleanup(func() {
		http.DefaultClient.CloseIdleConnections()
		hs.Close()
	})
	return srv, hs.URL
}

// serveChat mounts a chat handler with test limits (a body cap and an in-flight bound smaller
// than the server's) over a fixture server's request client: the limits test needs bounds that
// the server configuration does not set.
func serveChat(t *testing.T, c *requestclient.Client, cfg api.ChatConfig) string {
	cfg.Models = []string{chatModel}
	h := api.NewRouter(api.RouterDeps{Models: cfg.Models, Ready: func() bool { return true },
		Chat: api.NewChatHandler(cfg, c, zap.NewNop())})
	srv := httptest.NewServer(h)
	t.Cleanup(func() {
		http.DefaultClient.CloseIdleConnections()
		srv.Close()
	})
	return srv.URL + "/v1"
}

// waitIdle waits until every request state of c is dropped: proof that no path leaks one.
func waitIdle(t *testing.T, c *requestclient.Client) {
	t.Helper()
	require.Eventually(t, func() bool { return c.Live() == 0 }, 20*time.Second, 10*time.Millisecond,
		"request states still live: %d", c.Live())
}

func postChat(t *testing.T, ctx context.Context, base string, body any) *http.Response {
	t.Helper()
	var rdr io.Reader
	switch b := body.(type) {
	case []byte:
		rdr = bytes.NewReader(b)
	case string:
		rdr = strings.NewReader(b)
	default:
		buf, err := json.Marshal(b)
		require.NoError(t, err)
		rdr = bytes.NewReader(buf)
	}
	req, err := http.NewRequestWithContext(ctx, http.MethodPost, base+"/chat/completions", rdr)
	require.NoError(t, err)
	req.Header.Set("Content-Type", "application/json")
	resp, err := http.DefaultClient.Do(req)
	require.NoError(t, err)
	return resp
}

type chatCompletion struct {
	ID      string `json:"id"`
	Object  string `json:"object"`
	Created int64  `json:"created"`
	Model   string `json:"model"`
	Choices []struct {
		Index   int `json:"index"`
		Message struct {
			Role    string  `json:"role"`
			Content *string `json:"content"`
			Audio   *struct {
				ID         string `json:"id"`
				Data       string `json:"data"`
				Transcript string `json:"transcript"`
				ExpiresAt  int64  `json:"expires_at"`
			} `json:"audio"`
		} `json:"message"`
		FinishReason string `json:"finish_reason"`
	} `json:"choices"`
	Usage struct {
		PromptTokens     int `json:"prompt_tokens"`
		CompletionTokens int `json:"completion_tokens"`
		TotalTokens      int `json:"total_tokens"`
	} `json:"usage"`
}

func completeJSON(t *testing.T, base string, body map[string]any) chatCompletion {
	t.Helper()
	resp := postChat(t, context.Background(), base, body)
	defer resp.Body.Close()
	raw, err := io.ReadAll(resp.Body)
	require.NoError(t, err)
	require.Equal(t, http.StatusOK, resp.StatusCode, string(raw))
	var c chatCompletion
	require.NoError(t, json.Unmarshal(raw, &c), string(raw))
	return c
}

type chatChunk struct {
	ID      string `json:"id"`
	Object  string `json:"object"`
	Choices []struct {
		Delta struct {
			Role    string  `json:"role"`
			Content *string `json:"content"`
			Audio   *struct {
				ID         string `json:"id"`
				Data       string `json:"data"`
				Transcript string `json:"transcript"`
			} `json:"audio"`
		} `json:"delta"`
		FinishReason *string `json:"finish_reason"`
	} `json:"choices"`
	Usage *struct {
		PromptTokens     int `json:"prompt_tokens"`
		CompletionTokens int `json:"completion_tokens"`
		TotalTokens      int `json:"total_tokens"`
	} `json:"usage"`
	Error *struct {
		Message string `json:"message"`
	} `json:"error"`
}

// readSSE returns the data payloads of an SSE body in order, [DONE] included.
func readSSE(t *testing.T, r io.Reader) []string {
	t.Helper()
	var out []string
	sc := bufio.NewScanner(r)
	sc.Buffer(make([]byte, 1<<20), 16<<20)
	for sc.Scan() {
		line := sc.Text()
		if d, ok := strings.CutPrefix(line, "data: "); ok {
			out = append(out, d)
		}
	}
	require.NoError(t, sc.Err())
	return out
}

func decodeChunks(t *testing.T, data []string) []chatChunk {
	t.Helper()
	require.NotEmpty(t, data)
	require.Equal(t, "[DONE]", data[len(data)-1], "the stream must end with [DONE]")
	var out []chatChunk
	for _, d := range data[:len(data)-1] {
		var c chatChunk
		require.NoError(t, json.Unmarshal([]byte(d), &c), d)
		require.Nil(t, c.Error, d)
		out = append(out, c)
	}
	return out
}

// goForwardWAV is real human speech ("go forward ten meters", pocketsphinx-testdata, 16 kHz
// s16le mono) wrapped as a WAV file; its samples are returned too.
func goForwardWAV(t testing.TB) ([]byte, []float32) {
	t.Helper()
	raw, err := os.ReadFile("/usr/share/pocketsphinx/test/data/goforward.raw")
	require.NoError(t, err, "install pocketsphinx-testdata")
	pcm, err := audio.PCM16BytesToFloat32(nil, raw)
	require.NoError(t, err)
	return audio.EncodeWAV(pcm, 16000), pcm
}

func b64(b []byte) string { return base64.StdEncoding.EncodeToString(b) }

func userText(s string) []map[string]any {
	return []map[string]any{{"role": "user", "content": s}}
}

// wavRate reads the sample rate field of a canonical WAV header.
func wavRate(t *testing.T, wav []byte) int {
	t.Helper()
	require.GreaterOrEqual(t, len(wav), 44)
	require.Equal(t, "RIFF", string(wav[:4]))
	return int(binary.LittleEndian.Uint32(wav[24:28]))
}
