package stage

import (
	"context"
	"io"
	"net/http"
	"net/http/httptest"
	"strings"
	"testing"
	"time"

	"github.com/stretchr/testify/require"
	"go.uber.org/zap"
)

// TestRemoteUpstreamStatus drives each remote stage against an upstream answering one failure
// and checks what the front's client is told (UpstreamError's Client* fields): the upstream's
// status and OpenAI error fields when they pass through, 502 upstream_error for an unreachable,
// garbled or credential-refusing upstream, 504 upstream_timeout for a hang.
func TestRemoteUpstreamStatus(t *testing.T) {
	t.Parallel()
	type want struct {
		status                    int
		typ, code, param, msgPart string
		retryAfter                int
	}
	fail := func(status int, hdr map[string]string, body string) func(http.ResponseWriter, *http.Request) {
		return func(w http.ResponseWriter, _ *http.Request) {
			for k, v := range hdr {
				w.Header().Set(k, v)
			}
			w.WriteHeader(status)
			_, _ = io.WriteString(w, body)
		}
	}
	hang := func(w http.ResponseWriter, r *http.Request) {
		w.WriteHeader(http.StatusOK)
		w.(http.Flusher).Flush()
		<-r.Context().Done()
	}
	cases := []struct {
		name    string
		handler func(http.ResponseWriter, *http.Request) // nil: nothing listens
		garbled bool                                     // a 200 whose body is not the stage's answer
		want    want
	}{
		{name: "400 keeps type, code and param",
			handler: fail(400, nil, `{"error":{"message":"messages must not be empty","type":"invalid_request_error","param":"messages","code":"invalid_value"}}`),
			want:    want{400, "invalid_request_error", "invalid_value", "messages", "(upstream status 400): messages must not be empty", 0}},
		{name: "404 model_not_found",
			handler: fail(404, nil, `{"error":{"message":"The model 'x' does not exist","type":"invalid_request_error","param":"model","code":"model_not_found"}}`),
			want:    want{404, "invalid_request_error", "model_not_found", "model", "The model 'x' does not exist", 0}},
		{name: "429 with Retry-After",
			handler: fail(429, map[string]string{"Retry-After": "7"}, `{"error":{"message":"slow down","type":"rate_limit_error","code":"rate_limit_exceeded"}}`),
			want:    want{429, "rate_limit_error", "rate_limit_exceeded", "", "slow down", 7}},
		{name: "503 with a plain-text body",
			handler: fail(503, nil, "overloaded\n"),
			want:    want{503, "server_error", "upstream_error", "", "(upstream status 503): overloaded", 0}},
		{name: "401 is the front's credentials: 502",
			handler: fail(401, nil, `{"error":{"message":"bad key","type":"invalid_request_error","code":"invalid_api_key"}}`),
			want:    want{502, "server_error", "upstream_error", "", "refused the front's credentials (upstream status 401): bad key", 0}},
		{name: "garbled 200 is a 502",
			handler: fail(200, map[string]string{"Content-Type": "text/event-stream"}, "data: {not json\n\n"),
			garbled: true,
			want:    want{502, "server_error", "upstream_error", "", "", 0}},
		{name: "unreachable is a 502",
			want: want{502, "server_error", "upstream_error", "", "connection refused", 0}},
		{name: "a hang is a 504",
			handler: hang,
			want:    want{504, "server_error", "upstream_timeout", "", "upstream timed out", 0}},
	}
	stages := []struct {
		name string
		call func(ctx context.Context, cfg RemoteConfig) error
	}{
		{"thinker", func(ctx context.Context, cfg RemoteConfig) error {
			_, _, err := generateText(t, ctx, cfg)
			return err
		}},
		{"asr", func(ctx context.Context, cfg RemoteConfig) error {
			_, err := newRemoteASR(cfg).Transcribe(ctx, make([]float32, 1600))
			return err
		}},
		{"tts", func(ctx context.Context, cfg RemoteConfig) error {
			_, err := newRemoteTTS(cfg, remoteSpeechRate).Synthesize(ctx, "hello")
			return err
		}},
	}
	for _, tc := range cases {
		for _, st := range stages {
			if tc.garbled && st.name == "tts" {
				continue // any bytes are pcm to the TTS
			}
			t.Run(st.name+"/"+tc.name, func(t *testing.T) {
				t.Parallel()
				var url string
				if tc.handler != nil {
					srv := httptest.NewServer(http.HandlerFunc(tc.handler))
					t.Cleanup(srv.Close)
					url = srv.URL
				} else {
					srv := httptest.NewServer(http.NotFoundHandler())
					url = srv.URL
					srv.Close() // the port is now closed
				}
				cfg := RemoteConfig{BaseURL: url + "/v1", Model: "m", Retries: -1,
					FirstByteTimeout: 300 * time.Millisecond, IdleTimeout: 300 * time.Millisecond}
				if tc.handler == nil || tc.want.status != 504 {
					cfg.FirstByteTimeout = 5 * time.Second // only the hang case may time out
				}
				err := st.call(context.Background(), cfg)
				var ue *UpstreamError
				require.ErrorAs(t, err, &ue)
				require.Equal(t, st.name, ue.Stage)
				require.Equal(t, tc.want.status, ue.ClientStatus(), ue.Error())
				require.Equal(t, tc.want.typ, ue.ClientType())
				require.Equal(t, tc.want.code, ue.ClientCode())
				require.Equal(t, tc.want.param, ue.ClientParam())
				require.Equal(t, tc.want.retryAfter, ue.RetryAfter)
				require.Contains(t, ue.ClientMessage(), "remote "+st.name)
				require.Contains(t, ue.ClientMessage(), tc.want.msgPart)
				require.NotContains(t, ue.ClientMessage(), url, "the upstream's address stays in the front's log")
			})
		}
	}
}

// TestRemoteStatsNameTheBackend checks the `remote` statistics row: a remote thinker's stage-0
// snapshot names its host, the local talker's stays empty (its row renders None), and a
// pipeline with no remote stage leaves every snapshot empty, so its tables keep the
// reference layout.
func TestRemoteStatsNameTheBackend(t *testing.T) {
	t.Parallel()
	u := newUpstream(t, func(_ int, w http.ResponseWriter, _ *http.Request, _ *upstream) {
		streamReply(w, "Hello", " there.")
	})
	cfg := DefaultPipelineConfig()
	rc := u.cfg()
	cfg.Remote.Thinker = &rc
	p, err := New(cfg, Deps{ASR: testASR, TTS: testTTS}, zap.NewNop())
	require.NoError(t, err)
	t.Cleanup(p.Close)
	local, _ := newTestPipeline(t, nil)
	host := strings.TrimPrefix(u.srv.URL, "http://")
	for _, tc := range []struct {
		name string
		p    *Pipeline
		want [2]string
	}{
		{"remote thinker", p, [2]string{"llm=" + host, ""}},
		{"all local", local, [2]string{"", ""}},
	} {
		sink := newRecSink(t)
		r, err := tc.p.SubmitChat(context.Background(), ChatRequest{
			Messages: []ChatMessage{{Role: "user", Text: "hi"}}, MaxTokens: 4, WantAudio: true}, sink)
		require.NoError(t, err, tc.name)
		select {
		case <-r.Done():
		case <-time.After(30 * time.Second):
			t.Fatal("chat did not finish")
		}
		_, sms, _ := sink.snapshot()
		require.Len(t, sms, 2, tc.name)
		for _, sm := range sms {
			require.Equal(t, tc.want[sm.StageID], sm.Metrics.Remote, "%s: stage %d", tc.name, sm.StageID)
		}
	}
}

func TestRemoteNames(t *testing.T) {
	t.Parallel()
	got := remoteNames(RemoteStages{
		Thinker: &RemoteConfig{BaseURL: "https://user:secret@llm.example:8443/v1"},
		ASR:     &RemoteConfig{BaseURL: "http://10.0.0.6:8000/v1"},
		TTS:     &RemoteConfig{BaseURL: "http://10.0.0.7/v1"},
	})
	require.Equal(t, [2]string{"llm=llm.example:8443,asr=10.0.0.6:8000", "tts=10.0.0.7"}, got,
		"hosts only: no path, no credentials")
	require.Equal(t, [2]string{"", ""}, remoteNames(RemoteStages{}))
}
