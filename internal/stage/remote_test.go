package stage

import (
	"context"
	"encoding/binary"
	"errors"
	"fmt"
	"io"
	"net/http"
	"net/http/httptest"
	"strings"
	"sync/atomic"
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/omniserve/omniserve/internal/duplex"
	"github.com/omniserve/omniserve/internal/gpu"
)

// upstream is a hand-written OpenAI-compatible fake: it records the calls it gets and answers
// with the handler of the attempt number.
type upstream struct {
	calls atomic.Int32
	gone  chan struct{} // closed when a streaming handler saw its client go away
	srv   *httptest.Server
}

func newUpstream(t *testing.T, h func(n int, w http.ResponseWriter, r *http.Request, u *upstream)) *upstream {
	t.Helper()
	u := &upstream{gone: make(chan struct{}, 8)}
	u.srv = httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		h(int(u.calls.Add(1)), w, r, u)
	}))
	t.Cleanup(u.srv.Close)
	return u
}

func (u *upstream) cfg() RemoteConfig {
	c := RemoteConfig{BaseURL: u.srv.URL + "/v1", Model: "m", RetryBackoff: time.Millisecond,
		FirstByteTimeout: 2 * time.Second, IdleTimeout: 2 * time.Second}
	c.applyDefaults()
	return c
}

func sse(w http.ResponseWriter, data string) {
	_, _ = fmt.Fprintf(w, "data: %s\n\n", data)
	w.(http.Flusher).Flush()
}

func streamReply(w http.ResponseWriter, words ...string) {
	w.Header().Set("Content-Type", "text/event-stream")
	for _, wd := range words {
		sse(w, `{"choices":[{"delta":{"content":"`+wd+`"}}]}`)
	}
	sse(w, `{"choices":[{"delta":{},"finish_reason":"stop"}]}`)
	sse(w, `{"choices":[],"usage":{"prompt_tokens":7,"completion_tokens":`+fmt.Sprint(len(words))+`}}`)
	sse(w, "[DONE]")
}

func generateText(t *testing.T, ctx context.Context, cfg RemoteConfig) (string, gpu.GenerateResult, error) {
	t.Helper()
	var b strings.Builder
	g := remoteGen{t: newRemoteThinker(cfg), msgs: []gpu.ChatMessage{{Role: "user", Content: "hi"}}}
	res, err := g.Generate(ctx, gpu.GenerateOptions{MaxTokens: 8}, func(p gpu.Piece) error {
		b.WriteString(p.Text)
		return nil
	})
	return b.String(), res, err
}

func TestRemoteThinker(t *testing.T) {
	t.Parallel()
	t.Run("streams and reports usage", func(t *testing.T) {
		t.Parallel()
		u := newUpstream(t, func(_ int, w http.ResponseWriter, r *http.Request, _ *upstream) {
			body, _ := io.ReadAll(r.Body)
			if r.URL.Path != "/v1/chat/completions" || !strings.Contains(string(body), `"stream":true`) ||
				!strings.Contains(string(body), `"content":"hi"`) {
				http.Error(w, "bad request: "+string(body), http.StatusBadRequest)
				return
			}
			streamReply(w, "hello", " there")
		})
		text, res, err := generateText(t, context.Background(), u.cfg())
		require.NoError(t, err)
		require.Equal(t, "hello there", text)
		require.Equal(t, duplex.FinishStop, res.FinishReason)
		require.Equal(t, 7, res.Stats.TokensIn)
		require.Equal(t, 2, res.Stats.TokensOut)
		require.Positive(t, res.Stats.TTFTMs)
	})
	t.Run("retries a 503 before the first token", func(t *testing.T) {
		t.Parallel()
		u := newUpstream(t, func(n int, w http.ResponseWriter, _ *http.Request, _ *upstream) {
			if n < 3 {
				w.WriteHeader(http.StatusServiceUnavailable)
				_, _ = io.WriteString(w, `{"error":{"message":"busy","type":"server_error","code":"overloaded"}}`)
				return
			}
			streamReply(w, "ok")
		})
		text, _, err := generateText(t, context.Background(), u.cfg())
		require.NoError(t, err)
		require.Equal(t, "ok", text)
		require.Equal(t, int32(3), u.calls.Load())
	})
	t.Run("4xx is not retried and keeps status and message", func(t *testing.T) {
		t.Parallel()
		u := newUpstream(t, func(_ int, w http.ResponseWriter, _ *http.Request, _ *upstream) {
			w.WriteHeader(http.StatusNotFound)
			_, _ = io.WriteString(w, `{"error":{"message":"model m does not exist","type":"invalid_request_error","code":"model_not_found"}}`)
		})
		_, _, err := generateText(t, context.Background(), u.cfg())
		var ue *UpstreamError
		require.ErrorAs(t, err, &ue)
		require.Equal(t, http.StatusNotFound, ue.Status)
		require.Equal(t, "model m does not exist", ue.Message)
		require.Equal(t, "model_not_found", ue.Code)
		require.Equal(t, int32(1), u.calls.Load())
	})
	t.Run("no retry after the first token", func(t *testing.T) {
		t.Parallel()
		u := newUpstream(t, func(_ int, w http.ResponseWriter, _ *http.Request, _ *upstream) {
			w.Header().Set("Content-Type", "text/event-stream")
			sse(w, `{"choices":[{"delta":{"content":"half"}}]}`)
			panic(http.ErrAbortHandler) // the upstream dies mid-reply
		})
		text, _, err := generateText(t, context.Background(), u.cfg())
		var ue *UpstreamError
		require.ErrorAs(t, err, &ue)
		require.Equal(t, "half", text)
		require.Equal(t, int32(1), u.calls.Load())
	})
	t.Run("a hung upstream is cut by the first-byte timeout", func(t *testing.T) {
		t.Parallel()
		u := newUpstream(t, func(_ int, w http.ResponseWriter, r *http.Request, _ *upstream) {
			w.Header().Set("Content-Type", "text/event-stream")
			w.WriteHeader(http.StatusOK)
			w.(http.Flusher).Flush()
			<-r.Context().Done() // headers, then nothing
		})
		cfg := u.cfg()
		cfg.FirstByteTimeout, cfg.Retries = 200*time.Millisecond, 0
		start := time.Now()
		_, _, err := generateText(t, context.Background(), cfg)
		var ue *UpstreamError
		require.ErrorAs(t, err, &ue)
		require.Equal(t, http.StatusGatewayTimeout, ue.Status)
		require.Less(t, time.Since(start), 2*time.Second)
	})
	t.Run("cancel closes the upstream request at once", func(t *testing.T) {
		t.Parallel()
		u := newUpstream(t, func(_ int, w http.ResponseWriter, r *http.Request, u *upstream) {
			w.Header().Set("Content-Type", "text/event-stream")
			sse(w, `{"choices":[{"delta":{"content":"first"}}]}`)
			<-r.Context().Done()
			u.gone <- struct{}{}
		})
		ctx, cancel := context.WithCancel(context.Background())
		g := remoteGen{t: newRemoteThinker(u.cfg()), msgs: []gpu.ChatMessage{{Role: "user", Content: "hi"}}}
		res, err := g.Generate(ctx, gpu.GenerateOptions{}, func(gpu.Piece) error {
			cancel()
			return nil
		})
		require.NoError(t, err)
		require.Equal(t, duplex.FinishAbort, res.FinishReason)
		select {
		case <-u.gone:
		case <-time.After(2 * time.Second):
			t.Fatal("the upstream request stayed open after the cancel")
		}
	})
}

func TestRemoteASRAndTTS(t *testing.T) {
	t.Parallel()
	u := newUpstream(t, func(_ int, w http.ResponseWriter, r *http.Request, _ *upstream) {
		switch r.URL.Path {
		case "/v1/audio/transcriptions":
			f, h, err := r.FormFile("file")
			if err != nil || r.FormValue("model") != "m" || !strings.HasSuffix(h.Filename, ".wav") {
				http.Error(w, "bad upload", http.StatusBadRequest)
				return
			}
			b, _ := io.ReadAll(f)
			_, _ = fmt.Fprintf(w, `{"text":" %d bytes "}`, len(b))
		case "/v1/audio/speech":
			w.Header().Set("Content-Type", "audio/pcm")
			pcm := make([]byte, 2*2400)
			binary.LittleEndian.PutUint16(pcm, 1000)
			_, _ = w.Write(pcm[:101]) // an odd split: a sample spans two writes
			w.(http.Flusher).Flush()
			_, _ = w.Write(pcm[101:])
		default:
			http.NotFound(w, r)
		}
	})
	a := newRemoteASR(u.cfg())
	s, err := a.NewStream(context.Background())
	require.NoError(t, err)
	require.NoError(t, s.Write(make([]float32, 1600)))
	tr, err := s.Finish()
	require.NoError(t, err)
	require.Equal(t, fmt.Sprintf("%d bytes", 44+2*1600), tr)
	s.Close()

	tts := newRemoteTTS(u.cfg(), 24000)
	pcm, err := tts.Synthesize(context.Background(), "hello")
	require.NoError(t, err)
	require.Len(t, pcm, 2400)
	require.InDelta(t, 1000.0/32768, pcm[0], 1e-6)

	bad := u.cfg()
	bad.BaseURL = u.srv.URL + "/nope"
	_, err = newRemoteTTS(bad, 24000).Synthesize(context.Background(), "hello")
	var ue *UpstreamError
	require.ErrorAs(t, err, &ue)
	require.Equal(t, http.StatusNotFound, ue.Status)
	require.False(t, errors.Is(err, context.Canceled))
}

// A response whose remote thinker dies mid-reply reports the tokens it generated before the
// failure (stage 0's snapshot, finish reason error) ahead of its Error output and turn end, as
// an aborted one does: the failed turn's table keeps them.
func TestRemoteThinkerFailureKeepsPartialWork(t *testing.T) {
	t.Parallel()
	u := newUpstream(t, func(_ int, w http.ResponseWriter, _ *http.Request, _ *upstream) {
		w.Header().Set("Content-Type", "text/event-stream")
		for _, wd := range []string{"one", " two", " three"} {
			sse(w, `{"choices":[{"delta":{"content":"`+wd+`"}}]}`)
		}
		panic(http.ErrAbortHandler) // the upstream dies mid-reply
	})
	p, _ := newTestPipeline(t, func(c *PipelineConfig) {
		rc := u.cfg()
		rc.Retries = 0
		c.Remote.Thinker = &rc
	})
	sink := newRecSink(t)
	d, err := p.OpenDuplex(context.Background(), DuplexOptions{Options: duplex.Options{MaxTokens: 8}, RequestID: "duplex-remote-fail"}, sink)
	require.NoError(t, err)
	defer d.Close()
	require.NoError(t, d.AppendText(context.Background(), 0, "user", "hi"))
	turn, err := d.Respond(context.Background(), 0, 0)
	require.NoError(t, err)
	sms := sink.waitTurnEnd(t, turn, 10*time.Second)
	var s0 *StageMetricsMessage
	for i := range sms {
		if sms[i].StageID == 0 && sms[i].Turn == turn && sms[i].Metrics.NumTokensOut > 0 {
			s0 = &sms[i]
		}
	}
	require.NotNil(t, s0, "stage 0's snapshot of the failed response: %+v", sms)
	require.Equal(t, 3, s0.Metrics.NumTokensOut, "the three tokens streamed before the upstream died")
	require.Equal(t, duplex.FinishError, s0.Metrics.FinishReason)
	outs, _, _ := sink.snapshot()
	errs := ofKind(outs, duplex.OutError)
	require.Len(t, errs, 1)
	var ue *UpstreamError
	require.ErrorAs(t, errs[0].Err, &ue)
}
