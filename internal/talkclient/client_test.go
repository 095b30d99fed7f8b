package talkclient

import (
	"bytes"
	"context"
	"encoding/base64"
	"encoding/json"
	"errors"
	"net"
	"net/http"
	"net/http/httptest"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/coder/websocket"
	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
)

func TestWAVRoundTrip(t *testing.T) {
	t.Parallel()
	in := []int16{0, 1, -1, 32767, -32768, 1234}
	var buf bytes.Buffer
	require.NoError(t, WriteWAV(&buf, in, 16000))
	got, rate, err := ReadWAV(&buf)
	require.NoError(t, err)
	require.Equal(t, 16000, rate)
	require.Equal(t, in, got)
}

func TestReadWAVRejects(t *testing.T) {
	t.Parallel()
	tests := []struct {
		name string
		data []byte
	}{
		{"empty", nil},
		{"raw pcm", make([]byte, 400)},
		{"8-bit", func() []byte {
			var b bytes.Buffer
			require.NoError(t, WriteWAV(&b, []int16{1, 2}, 8000))
			d := b.Bytes()
			d[34] = 8 // bits per sample
			return d
		}()},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			t.Parallel()
			_, _, err := ReadWAV(bytes.NewReader(tt.data))
			require.ErrorIs(t, err, ErrNotWAV)
		})
	}
}

func TestResampleAndMono(t *testing.T) {
	t.Parallel()
	require.Len(t, Resample(make([]int16, 16000), 16000, 24000), 24000)
	require.Len(t, Resample(make([]int16, 48000), 48000, 24000), 24000)
	up := Resample([]int16{0, 300}, 16000, 24000)
	require.Equal(t, []int16{0, 200, 300}, up, "linear interpolation")
	require.Equal(t, []int16{150, -5}, Mono([]int16{100, 200, -10, 0}, 2))
}

// fakeServer is a hand-written Realtime server: it records what the client sent and answers
// a commit + response.create (or, in VAD mode, the end of the appends) with one response.
type fakeServer struct {
	t      *testing.T
	mu     sync.Mutex
	events []map[string]any
	status int // non-zero: refuse the upgrade with this HTTP status
	// strictGA refuses the duplex extension as OpenAI does unknown parameters.
	strictGA bool
}

func (f *fakeServer) received(typ string) []map[string]any {
	f.mu.Lock()
	defer f.mu.Unlock()
	var out []map[string]any
	for _, e := range f.events {
		if e["type"] == typ {
			out = append(out, e)
		}
	}
	return out
}

func (f *fakeServer) ServeHTTP(w http.ResponseWriter, r *http.Request) {
	if f.status != 0 {
		w.Header().Set("Content-Type", "application/json")
		w.WriteHeader(f.status)
		_, _ = w.Write([]byte(`{"error":{"message":"Incorrect API key provided.","type":"invalid_request_error","code":"invalid_api_key"}}`))
		return
	}
	ws, err := websocket.Accept(w, r, nil)
	if err != nil {
		return
	}
	defer ws.CloseNow()
	ctx := r.Context()
	write := func(ev map[string]any) {
		b, _ := json.Marshal(ev)
		_ = ws.Write(ctx, websocket.MessageText, b)
	}
	// GA: session.created at once, before any client event.
	write(map[string]any{"type": "session.created", "session": map[string]any{"id": "sess_1"}})
	respond := func(id string) {
		write(map[string]any{"type": "conversation.item.input_audio_transcription.completed", "item_id": "item_u", "transcript": "go forward ten meters"})
		write(map[string]any{"type": "response.created", "response": map[string]any{"id": id, "status": "in_progress"}})
		audio := base64.StdEncoding.EncodeToString(Bytes(make([]int16, 2400)))
		for _, w := range []string{"hello", " there"} {
			write(map[string]any{"type": "response.output_audio_transcript.delta", "response_id": id, "item_id": "item_a", "delta": w})
			write(map[string]any{"type": "response.output_audio.delta", "response_id": id, "item_id": "item_a", "delta": audio})
		}
		write(map[string]any{"type": "response.done", "response": map[string]any{"id": id, "status": "completed", "status_details": nil}})
	}
	vad := r.URL.Query().Get("duplex") == "1"
	appends := 0
	for {
		_, b, err := ws.Read(ctx)
		if err != nil {
			return
		}
		var ev map[string]any
		if !assert.NoError(f.t, json.Unmarshal(b, &ev)) { // the server's goroutine: no FailNow here
			return
		}
		f.mu.Lock()
		f.events = append(f.events, ev)
		f.mu.Unlock()
		switch ev["type"] {
		case "session.update":
			if _, ext := ev["session"].(map[string]any)["extra_body"]; ext && f.strictGA {
				write(map[string]any{"type": "error", "error": map[string]any{"type": "invalid_request_error", "code": "unknown_parameter",
					"message": "Unknown parameter: 'session.extra_body'.", "param": "session.extra_body", "event_id": ev["event_id"]}})
				continue
			}
			write(map[string]any{"type": "session.updated", "session": ev["session"]})
		case "input_audio_buffer.append":
			appends++
			if vad && appends == 10 {
				write(map[string]any{"type": "input_audio_buffer.speech_stopped", "audio_end_ms": 400, "item_id": "item_u"})
				respond("resp_vad")
			}
		case "response.create":
			respond("resp_1")
		case "input_audio_buffer.commit":
		default:
			write(map[string]any{"type": "error", "error": map[string]any{"type": "invalid_request_error", "code": "unknown_event", "message": "nope", "event_id": ev["event_id"]}})
		}
	}
}

func wsURL(s *httptest.Server) string {
	return "ws" + strings.TrimPrefix(s.URL, "http") + "/v1/realtime"
}

func TestRunManual(t *testing.T) {
	t.Parallel()
	f := &fakeServer{t: t}
	s := httptest.NewServer(f)
	t.Cleanup(s.Close)
	var out bytes.Buffer
	input := make([]int16, Rate/2) // 0.5 s
	res, err := Run(context.Background(), Options{URL: wsURL(s), Fast: true, Out: &out, MaxOutputTokens: 9}, input)
	require.NoError(t, err, out.String())

	upd := f.received("session.update")
	require.Len(t, upd, 1)
	sess := upd[0]["session"].(map[string]any)
	audio := sess["audio"].(map[string]any)
	in := audio["input"].(map[string]any)
	require.Equal(t, map[string]any{"type": "audio/pcm", "rate": float64(24000)}, in["format"], "the rate is explicit")
	require.Nil(t, in["turn_detection"], "manual turns")
	require.InDelta(t, 9, sess["max_output_tokens"], 0)

	var sent int
	for _, a := range f.received("input_audio_buffer.append") {
		b, err := base64.StdEncoding.DecodeString(a["audio"].(string))
		require.NoError(t, err)
		sent += len(b) / 2
	}
	require.Equal(t, len(input), sent, "every sample was appended")
	require.Len(t, f.received("input_audio_buffer.commit"), 1)
	require.Len(t, f.received("response.create"), 1)

	require.Len(t, res.Turns, 1)
	turn := res.Turns[0]
	require.Equal(t, "completed", turn.Status)
	require.Equal(t, "hello there", turn.Assistant)
	require.Equal(t, "go forward ten meters", turn.User)
	require.InDelta(t, 200, turn.AudioMs, 0.01)
	require.Len(t, res.Reply, 4800)
	require.Contains(t, out.String(), "you: go forward ten meters\n")
	require.Contains(t, out.String(), "assistant: hello there\n")
	require.Contains(t, out.String(), "turn 1: completed (reason -) input end → first audio ")
}

func TestRunVAD(t *testing.T) {
	t.Parallel()
	f := &fakeServer{t: t}
	s := httptest.NewServer(f)
	t.Cleanup(s.Close)
	res, err := Run(context.Background(), Options{URL: wsURL(s), Mode: ModeVAD, Fast: true, Linger: 200 * time.Millisecond}, make([]int16, Rate/2))
	require.NoError(t, err)
	td := f.received("session.update")[0]["session"].(map[string]any)["audio"].(map[string]any)["input"].(map[string]any)["turn_detection"].(map[string]any)
	require.Equal(t, "server_vad", td["type"])
	require.Equal(t, true, td["create_response"])
	require.Equal(t, true, td["interrupt_response"])
	require.Empty(t, f.received("input_audio_buffer.commit"), "the server's VAD ends the turn")
	require.Len(t, res.Turns, 1)
	require.Equal(t, "resp_vad", res.Turns[0].ResponseID)
	require.Positive(t, res.Turns[0].FirstAudioLatency()+1, "input end is the speech_stopped")
}

func TestRunVADStrictGA(t *testing.T) {
	t.Parallel()
	f := &fakeServer{t: t, strictGA: true}
	s := httptest.NewServer(f)
	t.Cleanup(s.Close)
	res, err := Run(context.Background(), Options{URL: wsURL(s), Mode: ModeVAD, Fast: true, Linger: 200 * time.Millisecond}, make([]int16, Rate/2))
	require.NoError(t, err)
	upd := f.received("session.update")
	require.Len(t, upd, 2, "the update is retried without the extension")
	require.NotContains(t, upd[1]["session"], "extra_body")
	require.Len(t, res.Turns, 1)
}

func TestRunRefused(t *testing.T) {
	t.Parallel()
	f := &fakeServer{t: t, status: http.StatusUnauthorized}
	s := httptest.NewServer(f)
	t.Cleanup(s.Close)
	_, err := Run(context.Background(), Options{URL: wsURL(s), Fast: true}, make([]int16, 100))
	var de *DialError
	require.ErrorAs(t, err, &de)
	require.Equal(t, http.StatusUnauthorized, de.Status)
	require.Contains(t, err.Error(), "401 Unauthorized: Incorrect API key provided.")

	ln, err := net.Listen("tcp", "127.0.0.1:0")
	require.NoError(t, err)
	addr := ln.Addr().String()
	require.NoError(t, ln.Close())
	_, err = Run(context.Background(), Options{URL: "ws://" + addr + "/v1/realtime", Fast: true}, make([]int16, 100))
	require.ErrorAs(t, err, &de)
	require.Zero(t, de.Status)
	require.Contains(t, err.Error(), "connection refused")
}

func TestRunServerError(t *testing.T) {
	t.Parallel()
	s := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		ws, err := websocket.Accept(w, r, nil)
		if err != nil {
			return
		}
		defer ws.CloseNow()
		_, _, _ = ws.Read(r.Context())
		_ = ws.Write(r.Context(), websocket.MessageText, []byte(`{"type":"error","error":{"type":"invalid_request_error","code":"invalid_value","message":"bad rate","param":"session.audio.input.format"}}`))
		_, _, _ = ws.Read(r.Context())
	}))
	t.Cleanup(s.Close)
	_, err := Run(context.Background(), Options{URL: wsURL(s)}, make([]int16, 100))
	var se *ServerError
	require.ErrorAs(t, err, &se)
	require.Equal(t, "invalid_value", se.Code)
	require.False(t, errors.Is(err, ErrTimeout))
}

func TestValidateOptions(t *testing.T) {
	t.Parallel()
	require.Error(t, ValidateOptions(Options{URL: "ws://x", Mode: "auto"}))
	require.Error(t, ValidateOptions(Options{URL: "ftp://x"}))
	require.Error(t, ValidateOptions(Options{}))
	require.NoError(t, ValidateOptions(Options{URL: "http://localhost:8000/v1/realtime", Mode: ModeVAD}))
	u, err := endpoint(Options{URL: "http://h/v1/realtime", Mode: ModeVAD})
	require.NoError(t, err)
	require.Equal(t, "ws://h/v1/realtime?duplex=1", u)
}
