package realtime_test

import (
	"context"
	"encoding/base64"
	"encoding/json"
	"net/http"
	"runtime"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/coder/websocket"
	"github.com/stretchr/testify/require"

	"github.com/omniserve/omniserve/internal/realtime"
	"github.com/omniserve/omniserve/internal/session"
)

// resumeServer is a server with resume on: grace as given, real pacing (the response streams
// over seconds, so a disconnect lands mid-response).
func resumeServer(t *testing.T, grace time.Duration, hcfg realtime.HandlerConfig) *testServer {
	t.Helper()
	return newServer(t, session.ManagerConfig{ResumeGrace: grace, MaxOutputLead: 200 * time.Millisecond}, hcfg, nil)
}

// raw returns the next event without the per-connection invariants of next (a resumed
// connection continues the session's numbering, and session.resumed has no number).
func (c *wsClient) raw(timeout time.Duration) (event, bool) {
	select {
	case e, ok := <-c.events:
		return e, ok
	case <-time.After(timeout):
		return nil, false
	}
}

func seqOf(e event) int64 {
	f, _ := e["server_event_seq"].(float64)
	return int64(f)
}

// drop ends the client's TCP connection without a close frame: a dropped network, as the
// server sees it.
func (c *wsClient) drop() { c.close() }

// resumeURL is the resume connection's URL for a session.
func (s *testServer) resumeURL(id string) string { return s.url + "?duplex=1&session_id=" + id }

// resume opens a resume connection and sends session.resume; it returns the client and the
// first event (session.resumed or an error).
func resume(t *testing.T, s *testServer, id, token string, last int64) (*wsClient, event) {
	t.Helper()
	c := dial(t, s.resumeURL(id), nil)
	c.send(event{"type": "session.resume", "event_id": "evt_resume", "session_id": id, "resume_token": token,
		"last_received_server_event_seq": last})
	first, ok := c.raw(30 * time.Second)
	require.True(t, ok, "no answer to session.resume")
	return c, first
}

func requireWireError(t *testing.T, e event, code, param string) {
	t.Helper()
	require.Equal(t, "error", e.str("type"), "%v", e)
	er := e.obj("error")
	require.Equal(t, code, er.str("code"), "%v", er)
	require.NotEmpty(t, er.str("message"))
	require.NotEmpty(t, er.str("type"))
	require.Contains(t, er, "event_id")
	require.Contains(t, er, "param")
	if param != "" {
		require.Equal(t, param, er.str("param"))
	}
}

// resumeTurn is what a client assembles of one response across connections.
type resumeTurn struct {
	seqs       []int64
	audioBytes int
	transcript strings.Builder
	responseID string
	done       event
	doneCount  int
}

// take records one event of the response; it returns true at response.done.
func (rt *resumeTurn) take(t *testing.T, e event) bool {
	t.Helper()
	if sq := seqOf(e); sq > 0 {
		rt.seqs = append(rt.seqs, sq)
	}
	switch e.str("type") {
	case "response.created":
		rt.responseID = e.obj("response").str("id")
	case "response.output_audio.delta":
		require.Equal(t, rt.responseID, e.str("response_id"))
		b, err := base64.StdEncoding.DecodeString(e.str("delta"))
		require.NoError(t, err)
		rt.audioBytes += len(b)
	case "response.output_audio_transcript.delta":
		rt.transcript.WriteString(e.str("delta"))
	case "response.done":
		rt.done = e
		rt.doneCount++
		return true
	}
	return false
}

// startTurn opens a manual-turn session, commits real speech and asks for a response.
func startTurn(t *testing.T, c *wsClient, maxTokens int) (created event) {
	t.Helper()
	created = c.update(event{"turn_detection": nil, "max_response_output_tokens": maxTokens})
	c.appendAudio(goForward(t), 100, false)
	c.send(event{"type": "input_audio_buffer.commit"})
	c.send(event{"type": "response.create"})
	return created
}

func TestResumeMidResponseLosesNothing(t *testing.T) {
	t.Parallel()
	srv := resumeServer(t, 30*time.Second, realtime.HandlerConfig{})
	c := dial(t, srv.url+"?duplex=1", nil)
	created := startTurn(t, c, 24)
	id := created.obj("session").str("id")
	token := created.str("resume_token")
	require.Len(t, token, 43, "32 random bytes, base64url")
	require.Equal(t, true, created.obj("session").obj("capabilities")["supports_session_resume"])
	require.EqualValues(t, 1, seqOf(created))

	// Read until the response has sent some audio, then drop the network.
	rt := &resumeTurn{}
	for sq := int64(1); sq <= int64(c.lastSq); sq++ {
		rt.seqs = append(rt.seqs, sq) // session.created and session.updated, read by startTurn
	}
	deltas := 0
	for deltas < 3 {
		e, ok := c.next(60 * time.Second)
		require.True(t, ok, "no audio before the disconnect")
		require.False(t, rt.take(t, e), "the response ended before the disconnect; the test needs a longer one")
		if e.str("type") == "response.output_audio.delta" {
			deltas++
		}
	}
	last := rt.seqs[len(rt.seqs)-1]
	c.drop()
	require.Eventually(t, func() bool { return srv.m.Detached() == 1 }, 10*time.Second, 5*time.Millisecond)
	require.Equal(t, 1, srv.m.Active(), "a detached session keeps its slot")
	time.Sleep(500 * time.Millisecond) // the response goes on generating while nobody listens

	c2, resumed := resume(t, srv, id, token, last)
	require.Equal(t, "session.resumed", resumed.str("type"), "%v", resumed)
	require.NotContains(t, resumed, "server_event_seq", "the handshake reply is not part of the numbered stream")
	require.Equal(t, false, resumed["resync_required"])
	require.Equal(t, id, resumed.str("session_id"))
	require.NotEqual(t, token, resumed.str("resume_token"), "the token rotates")
	require.EqualValues(t, last, resumed["last_received_server_event_seq"])
	require.Zero(t, srv.m.Detached())
	for {
		e, ok := c2.raw(60 * time.Second)
		require.True(t, ok, "no response.done after the resume")
		if rt.take(t, e) {
			break
		}
	}
	// Every event exactly once, in order: 1, 2, …, n across both connections.
	for i, sq := range rt.seqs {
		require.EqualValues(t, i+1, sq, "server_event_seq %d at position %d: an event was lost or repeated", sq, i)
	}
	r := rt.done.obj("response")
	require.Equal(t, rt.responseID, r.str("id"), "the same response (turn) goes on after the resume")
	require.Contains(t, []string{"completed", "incomplete"}, r.str("status"))
	sentMs, _ := r.obj("omniserve")["audio_sent_ms"].(float64)
	require.Positive(t, sentMs)
	require.Equal(t, int(sentMs*bytesPerMs+0.5), rt.audioBytes, "every audio byte the server sent arrived once")
	// The next event is rate_limits.updated, and the session keeps working.
	c2.send(event{"type": "session.heartbeat"})
	for {
		e, ok := c2.raw(10 * time.Second)
		require.True(t, ok)
		if e.str("type") == "session.heartbeat_ack" {
			break
		}
	}
	c2.send(event{"type": "session.close"})
	srv.waitSlots(t, 0)
}

func TestResumeRefusals(t *testing.T) {
	t.Parallel()
	srv := resumeServer(t, 30*time.Second, realtime.HandlerConfig{})
	c := dial(t, srv.url, nil)
	created, _ := c.until("session.created", 10*time.Second)
	id, token := created.obj("session").str("id"), created.str("resume_token")
	c.drop()
	require.Eventually(t, func() bool { return srv.m.Detached() == 1 }, 10*time.Second, 5*time.Millisecond)

	t.Run("unknown session", func(t *testing.T) {
		c, first := resume(t, srv, "duplex-nope", token, 0)
		requireWireError(t, first, "session_not_found", "session_id")
		require.Equal(t, "evt_resume", first.obj("error").str("event_id"))
		require.Equal(t, websocket.StatusPolicyViolation, c.closeStatus())
	})
	t.Run("wrong token", func(t *testing.T) {
		_, first := resume(t, srv, id, token+"x", 0)
		requireWireError(t, first, "invalid_resume_token", "resume_token")
		require.Equal(t, 1, srv.m.Detached(), "the detached session is not disturbed")
	})
	t.Run("first event is not session.resume", func(t *testing.T) {
		c := dial(t, srv.resumeURL(id), nil)
		c.send(event{"type": "session.heartbeat", "event_id": "evt_x"})
		first, ok := c.raw(10 * time.Second)
		require.True(t, ok)
		requireWireError(t, first, "session_resume_required", "type")
	})
	t.Run("missing fields", func(t *testing.T) {
		for _, tc := range []struct {
			ev    event
			param string
		}{
			{event{"type": "session.resume", "session_id": id, "last_received_server_event_seq": 0}, "resume_token"},
			{event{"type": "session.resume", "session_id": id, "resume_token": token}, "last_received_server_event_seq"},
			{event{"type": "session.resume", "session_id": id, "resume_token": token, "last_received_server_event_seq": -1}, "last_received_server_event_seq"},
			{event{"type": "session.resume", "session_id": id, "resume_token": token, "last_received_server_event_seq": "3"}, "last_received_server_event_seq"},
			{event{"type": "session.resume", "session_id": "duplex-other", "resume_token": token, "last_received_server_event_seq": 0}, "session_id"},
		} {
			c := dial(t, srv.resumeURL(id), nil)
			c.send(tc.ev)
			first, ok := c.raw(10 * time.Second)
			require.True(t, ok)
			require.Equal(t, "error", first.str("type"))
			require.Equal(t, tc.param, first.obj("error").str("param"), "%v", first)
		}
		require.Equal(t, 1, srv.m.Detached())
	})
	t.Run("session.resume on a live connection", func(t *testing.T) {
		other := dial(t, srv.url, nil)
		other.until("session.created", 10*time.Second)
		other.send(event{"type": "session.resume", "session_id": id, "resume_token": token, "last_received_server_event_seq": 0})
		e, _ := other.until("error", 10*time.Second)
		require.Equal(t, "type", e.obj("error").str("param"))
		other.send(event{"type": "session.close"})
		require.Equal(t, 1, srv.m.Detached(), "the detached session is not disturbed")
	})

	// Two resumes at once with the same (valid) token: exactly one wins.
	const n = 2
	firsts := make([]event, n)
	clients := make([]*wsClient, n)
	for i := range clients {
		clients[i] = dial(t, srv.resumeURL(id), nil)
	}
	var wg sync.WaitGroup
	for i, cl := range clients {
		wg.Add(1)
		go func() {
			defer wg.Done()
			data, _ := json.Marshal(event{"type": "session.resume", "session_id": id, "resume_token": token, "last_received_server_event_seq": 1})
			_ = cl.ws.Write(cl.ctx, websocket.MessageText, data)
			firsts[i], _ = cl.raw(30 * time.Second)
		}()
	}
	wg.Wait()
	var won int
	var newToken string
	for _, f := range firsts {
		require.NotNil(t, f)
		if f.str("type") == "session.resumed" {
			won++
			newToken = f.str("resume_token")
			continue
		}
		requireWireError(t, f, "invalid_resume_token", "resume_token")
	}
	require.Equal(t, 1, won, "exactly one of two concurrent resumes wins: %v", firsts)

	// The old token, replayed after the resume, is refused.
	_, first := resume(t, srv, id, token, 1)
	requireWireError(t, first, "invalid_resume_token", "resume_token")

	// The current token works through the headers too, and takes over the live connection.
	hdr := http.Header{realtime.ResumeTokenHeader: {newToken}, realtime.LastSeqHeader: {"1"}}
	c3 := dial(t, srv.resumeURL(id), &websocket.DialOptions{HTTPHeader: hdr})
	resumed, ok := c3.raw(10 * time.Second)
	require.True(t, ok)
	require.Equal(t, "session.resumed", resumed.str("type"), "%v", resumed)
	for _, cl := range clients {
		if cl.closeStatus() == websocket.StatusPolicyViolation {
			continue // the winner was replaced (the loser was refused: 1008 too)
		}
		t.Fatalf("a replaced connection is closed with 1008")
	}
	c3.send(event{"type": "session.close"})
	closed, _ := c3.raw(10 * time.Second)
	for closed != nil && closed.str("type") != "session.closed" {
		closed, _ = c3.raw(10 * time.Second)
	}
	require.NotNil(t, closed)
	srv.waitSlots(t, 0)
}

func TestResumeGraceExpiry(t *testing.T) {
	t.Parallel()
	srv := resumeServer(t, 700*time.Millisecond, realtime.HandlerConfig{})
	c := dial(t, srv.url+"?duplex=1", nil)
	created := startTurn(t, c, 24)
	id, token := created.obj("session").str("id"), created.str("resume_token")
	c.until("response.output_audio.delta", 60*time.Second)
	c.drop()
	require.Eventually(t, func() bool { return srv.m.Detached() == 1 }, 10*time.Second, 5*time.Millisecond)
	require.Equal(t, 1, srv.m.Active(), "the slot is held during the grace")
	// The slot returns when the window expires.
	srv.waitSlots(t, 0)
	require.Zero(t, srv.m.Detached())
	_, first := resume(t, srv, id, token, 1)
	requireWireError(t, first, "session_not_found", "session_id")
}

func TestResumeCloseFrameEndsSession(t *testing.T) {
	t.Parallel()
	srv := resumeServer(t, time.Minute, realtime.HandlerConfig{})
	c := dial(t, srv.url, nil)
	created, _ := c.until("session.created", 10*time.Second)
	require.NoError(t, c.ws.Close(websocket.StatusNormalClosure, "bye"))
	srv.waitSlots(t, 0)
	require.Zero(t, srv.m.Detached(), "a close frame ends the session at once")
	_, first := resume(t, srv, created.obj("session").str("id"), created.str("resume_token"), 1)
	requireWireError(t, first, "session_not_found", "session_id")
}

func TestResumeJournalOverflowResyncs(t *testing.T) {
	t.Parallel()
	srv := resumeServer(t, 30*time.Second, realtime.HandlerConfig{JournalEvents: 16})
	c := dial(t, srv.url+"?duplex=1", nil)
	created := startTurn(t, c, 8)
	id, token := created.obj("session").str("id"), created.str("resume_token")
	done, _ := c.until("response.done", 60*time.Second)
	c.until("rate_limits.updated", 10*time.Second)
	require.Greater(t, seqOf(done), int64(17), "more events than the journal holds")
	c.drop()
	require.Eventually(t, func() bool { return srv.m.Detached() == 1 }, 10*time.Second, 5*time.Millisecond)

	// The client lost everything after session.created: the journal no longer holds it.
	c2, resumed := resume(t, srv, id, token, 1)
	require.Equal(t, "session.resumed", resumed.str("type"), "%v", resumed)
	require.Equal(t, true, resumed["resync_required"])
	require.EqualValues(t, 0, resumed["replayed_events"])
	items, _ := resumed["items"].([]any)
	require.Len(t, items, 2, "the conversation: the user's audio and the assistant's reply")
	require.Equal(t, "user", items[0].(map[string]any)["role"])
	require.Equal(t, "assistant", items[1].(map[string]any)["role"])
	lastSeq := int64(resumed["last_server_event_seq"].(float64))
	require.Greater(t, lastSeq, int64(17))
	// Live events continue the numbering.
	c2.send(event{"type": "session.heartbeat"})
	ack, ok := c2.raw(10 * time.Second)
	require.True(t, ok)
	require.Equal(t, "session.heartbeat_ack", ack.str("type"))
	require.Equal(t, lastSeq+1, seqOf(ack))
	c2.drop()
	require.Eventually(t, func() bool { return srv.m.Detached() == 1 }, 10*time.Second, 5*time.Millisecond)

	// A client that received everything resumes without a resync or a replay.
	c3, resumed := resume(t, srv, id, resumed.str("resume_token"), lastSeq+1)
	require.Equal(t, false, resumed["resync_required"])
	require.EqualValues(t, 0, resumed["replayed_events"])
	c3.send(event{"type": "session.close"})
	srv.waitSlots(t, 0)
}

func TestResumeDisabledIsTodaysBehaviour(t *testing.T) {
	t.Parallel()
	srv := newServer(t, session.ManagerConfig{}, realtime.HandlerConfig{}, nil)
	c := dial(t, srv.url, nil)
	created, _ := c.until("session.created", 10*time.Second)
	require.NotContains(t, created, "resume_token")
	require.Equal(t, false, created.obj("session").obj("capabilities")["supports_session_resume"])
	c.drop()
	srv.waitSlots(t, 0)
	require.Zero(t, srv.m.Detached())
	// ?session_id= is not a resume: a new session.
	c2 := dial(t, srv.resumeURL(created.obj("session").str("id")), nil)
	again, _ := c2.until("session.created", 10*time.Second)
	require.NotEqual(t, created.obj("session").str("id"), again.obj("session").str("id"))
}

// TestResumeCyclesDoNotLeak: 100 disconnect/resume cycles end with the goroutines back at the
// baseline and the heap within a bound.
func TestResumeCyclesDoNotLeak(t *testing.T) {
	srv := resumeServer(t, 30*time.Second, realtime.HandlerConfig{})
	c := dial(t, srv.url, nil)
	created, _ := c.until("session.created", 10*time.Second)
	id, token := created.obj("session").str("id"), created.str("resume_token")
	last := seqOf(created)
	c.drop()
	require.Eventually(t, func() bool { return srv.m.Detached() == 1 }, 10*time.Second, 5*time.Millisecond)

	settle := func() (int, uint64) {
		var ms runtime.MemStats
		for range 3 {
			runtime.GC()
		}
		runtime.ReadMemStats(&ms)
		return runtime.NumGoroutine(), ms.HeapAlloc
	}
	g0, h0 := settle()
	const cycles = 100
	// A bare client per cycle: the test keeps nothing of it, so the heap shows the server's.
	cycle := func(i int) {
		ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
		defer cancel()
		ws, _, err := websocket.Dial(ctx, srv.resumeURL(id), nil) //nolint:bodyclose // coder/websocket closes it
		require.NoError(t, err, "cycle %d", i)
		defer ws.CloseNow() // a dropped network: no close frame
		read := func() event {
			_, data, err := ws.Read(ctx)
			require.NoError(t, err, "cycle %d", i)
			var e event
			require.NoError(t, json.Unmarshal(data, &e))
			return e
		}
		write := func(e event) {
			data, err := json.Marshal(e)
			require.NoError(t, err)
			require.NoError(t, ws.Write(ctx, websocket.MessageText, data), "cycle %d", i)
		}
		write(event{"type": "session.resume", "session_id": id, "resume_token": token, "last_received_server_event_seq": last})
		resumed := read()
		require.Equal(t, "session.resumed", resumed.str("type"), "cycle %d: %v", i, resumed)
		require.Equal(t, false, resumed["resync_required"], "cycle %d", i)
		token = resumed.str("resume_token")
		write(event{"type": "session.heartbeat"})
		ack := read()
		require.Equal(t, "session.heartbeat_ack", ack.str("type"))
		require.Equal(t, last+1, seqOf(ack), "cycle %d", i)
		last = seqOf(ack)
	}
	for i := range cycles {
		cycle(i)
		require.Eventually(t, func() bool { return srv.m.Detached() == 1 }, 10*time.Second, time.Millisecond, "cycle %d", i)
	}
	g1, h1 := settle()
	for deadline := time.Now().Add(10 * time.Second); g1 > g0 && time.Now().Before(deadline); g1, h1 = settle() {
		time.Sleep(50 * time.Millisecond)
	}
	if g1 > g0 {
		buf := make([]byte, 1<<20)
		t.Logf("%s", buf[:runtime.Stack(buf, true)])
	}
	require.LessOrEqual(t, g1, g0, "goroutines before and after the cycles")
	growth := int64(h1) - int64(h0)
	t.Logf("%d cycles: goroutines %d -> %d, heap %d -> %d bytes (%+d)", cycles, g0, g1, h0, h1, growth)
	require.Less(t, growth, int64(512<<10), "heap growth over %d cycles", cycles)
	events, bytes := realtime.JournalStats(srv.m.Lookup(id).Sink())
	require.LessOrEqual(t, events, 1024)
	require.LessOrEqual(t, bytes, 1<<20)

	c2, _ := resume(t, srv, id, token, last)
	c2.send(event{"type": "session.close"})
	srv.waitSlots(t, 0)
}

func TestResumeNeedsTheAPIKey(t *testing.T) {
	t.Parallel()
	srv := newServer(t, session.ManagerConfig{ResumeGrace: time.Minute}, realtime.HandlerConfig{APIKey: "k"}, nil)
	code, body := httpStatus(t, srv.resumeURL("duplex-x"), http.Header{realtime.ResumeTokenHeader: {"t"}, realtime.LastSeqHeader: {"0"}})
	require.Equal(t, http.StatusUnauthorized, code)
	require.Equal(t, "invalid_api_key", body.obj("error").str("code"))
}

// A close frame that arrives while the server is writing still ends the session: the close
// handshake makes the writer's next write fail at once, and that failure must not be taken for
// a slow or dropped client (whose resumable session would keep its slot for the resume grace).
func TestResumeCloseFrameWhileWritingEndsSession(t *testing.T) {
	t.Parallel()
	srv := resumeServer(t, time.Minute, realtime.HandlerConfig{})
	big := strings.Repeat("You are a helpful assistant. ", 150)
	for i := range 12 {
		c := dial(t, srv.url, nil)
		c.until("session.created", 10*time.Second)
		c.send(event{"type": "session.update", "session": event{"instructions": big}})
		for range 200 { // each echoed with the whole session: the writer is busy
			c.send(event{"type": "session.update", "session": event{}})
		}
		c.until("session.updated", 10*time.Second)
		require.NoError(t, c.ws.Close(websocket.StatusNormalClosure, "bye"), "round %d", i)
		srv.waitSlots(t, 0)
		require.Zero(t, srv.m.Detached(), "round %d: a close frame ends the session at once", i)
	}
}
