package test

import (
	"context"
	"encoding/base64"
	"encoding/json"
	"net/http"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/coder/websocket"
	"github.com/stretchr/testify/require"
)

// resumeConn is a bare client of one connection: it reads every frame into events until the
// connection ends; drop ends it like a lost network (no close frame).
type resumeConn struct {
	ws     *websocket.Conn
	events chan map[string]any
	done   chan struct{}
	ctx    context.Context
	cancel context.CancelFunc
}

func dialResume(t *testing.T, url string) *resumeConn {
	t.Helper()
	return dialResumeHeader(t, url, nil)
}

// dialResumeHeader is dialResume with headers on the upgrade request.
func dialResumeHeader(t *testing.T, url string, h http.Header) *resumeConn {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), 2*time.Minute)
	ws, _, err := websocket.Dial(ctx, url, &websocket.DialOptions{HTTPHeader: h}) //nolint:bodyclose // coder/websocket closes it
	require.NoError(t, err)
	ws.SetReadLimit(64 << 20)
	c := &resumeConn{ws: ws, events: make(chan map[string]any, 8192), done: make(chan struct{}), ctx: ctx, cancel: cancel}
	go func() {
		defer close(c.done)
		defer close(c.events)
		for {
			_, b, err := ws.Read(ctx)
			if err != nil {
				return
			}
			var m map[string]any
			if json.Unmarshal(b, &m) == nil {
				c.events <- m
			}
		}
	}()
	t.Cleanup(c.drop)
	return c
}

func (c *resumeConn) drop() {
	_ = c.ws.CloseNow()
	<-c.done
	c.cancel()
}

func (c *resumeConn) send(t *testing.T, ev map[string]any) {
	t.Helper()
	b, err := json.Marshal(ev)
	require.NoError(t, err)
	require.NoError(t, c.ws.Write(c.ctx, websocket.MessageText, b))
}

func (c *resumeConn) next(t *testing.T, timeout time.Duration) map[string]any {
	t.Helper()
	select {
	case ev, ok := <-c.events:
		require.True(t, ok, "the connection ended")
		return ev
	case <-time.After(timeout):
		t.Fatalf("no event within %v", timeout)
	}
	return nil
}

func evSeq(ev map[string]any) int64 {
	f, _ := ev["server_event_seq"].(float64)
	return int64(f)
}

// resumeTurnLog collects one response's events across connections.
type resumeTurnLog struct {
	seqs       []int64
	audioBytes int
	responseID string
	done       map[string]any
}

func (l *resumeTurnLog) take(t *testing.T, ev map[string]any) bool {
	t.Helper()
	require.NotEqual(t, "error", ev["type"], "%v", ev["error"])
	if sq := evSeq(ev); sq > 0 {
		l.seqs = append(l.seqs, sq)
	}
	switch ev["type"] {
	case "response.created":
		l.responseID = responseID(ev)
	case "response.output_audio.delta":
		b, err := base64.StdEncoding.DecodeString(ev["delta"].(string))
		require.NoError(t, err)
		l.audioBytes += len(b)
	case "response.done":
		l.done = ev
		return true
	}
	return false
}

// TestSessionResume drives the real bin/omniserve (JSON logs, --log-stats) with real speech:
// a network drop in the middle of a spoken response, then a resume within the grace window,
// loses and repeats nothing and the turn goes on as the same turn; a drop without a resume ends
// the turn once, with reason close, when the window expires, and the session is then gone.
func TestSessionResume(t *testing.T) {
	raw, err := os.ReadFile("/usr/share/pocketsphinx/test/data/goforward.raw")
	require.NoError(t, err, "install pocketsphinx-testdata")
	const grace = 3 * time.Second
	s := startBinary(t, "--config", "configs/omni-cpu.yaml", "--model", "dummy:tiny", "--log-stats",
		"--log-format", "json", "--cache-dir", filepath.Join(t.TempDir(), "cache"), "--resume-grace", grace.String())
	url := "ws://" + s.addr + "/v1/realtime?duplex=1"

	// open starts a session with a spoken manual turn and reads until the response has sent
	// audio; it returns the connection, the session id, the token and the events so far.
	open := func(t *testing.T) (*resumeConn, string, string, *resumeTurnLog) {
		c := dialResume(t, url)
		c.send(t, map[string]any{"type": "session.update", "session": map[string]any{"turn_detection": nil,
			"max_response_output_tokens": 24, "input_audio_format": map[string]any{"type": "pcm16", "rate": 16000}}})
		log := &resumeTurnLog{}
		created := c.next(t, 10*time.Second)
		require.Equal(t, "session.created", created["type"])
		log.take(t, created)
		id := created["session"].(map[string]any)["id"].(string)
		token, _ := created["resume_token"].(string)
		require.NotEmpty(t, token)
		for i := 0; i < len(raw); i += 3200 {
			c.send(t, map[string]any{"type": "input_audio_buffer.append", "audio": base64.StdEncoding.EncodeToString(raw[i:min(i+3200, len(raw))])})
		}
		c.send(t, map[string]any{"type": "input_audio_buffer.commit", "response_create": true})
		for deltas := 0; deltas < 2; {
			ev := c.next(t, 60*time.Second)
			require.False(t, log.take(t, ev), "the response ended before the disconnect")
			if ev["type"] == "response.output_audio.delta" {
				deltas++
			}
		}
		require.NotContains(t, s.logs.String(), token, "the resume token is never logged")
		return c, id, token, log
	}

	t.Run("resume within the window", func(t *testing.T) {
		c, id, token, log := open(t)
		last := log.seqs[len(log.seqs)-1]
		c.drop()
		require.Eventually(t, func() bool { return metricValue(t, s, "omniserve_duplex_detached_sessions") == 1 },
			10*time.Second, 20*time.Millisecond, "the session is counted as detached")
		time.Sleep(time.Second) // a gap in delivery; generation goes on

		c2 := dialResume(t, url+"&session_id="+id)
		c2.send(t, map[string]any{"type": "session.resume", "session_id": id, "resume_token": token, "last_received_server_event_seq": last})
		resumed := c2.next(t, 10*time.Second)
		require.Equal(t, "session.resumed", resumed["type"], "%v", resumed)
		require.Equal(t, false, resumed["resync_required"])
		require.NotContains(t, s.logs.String(), resumed["resume_token"], "the rotated token is never logged")
		for !log.take(t, c2.next(t, 60*time.Second)) {
		}
		for i, sq := range log.seqs {
			require.EqualValues(t, i+1, sq, "server_event_seq %d at position %d: an event was lost or repeated", sq, i)
		}
		r := log.done["response"].(map[string]any)
		require.Equal(t, log.responseID, r["id"])
		sentMs := r["omniserve"].(map[string]any)["audio_sent_ms"].(float64)
		require.Equal(t, int(sentMs*48+0.5), log.audioBytes, "every audio byte the server sent arrived once (24 kHz pcm16)")
		require.Zero(t, metricValue(t, s, "omniserve_duplex_detached_sessions"))

		// One turn, not two: the gap is delivery delay of the same turn.
		tt := waitTurn(t, s, log.responseID)
		require.Equal(t, 1, tt.sets, "exactly one table set")
		require.Equal(t, "1", tt.turn)
		require.Equal(t, naturalReason(log.done), tt.reason)
		detached := e2eField(t, s.logs.String(), log.responseID, "delivery_detached_ms")
		require.GreaterOrEqual(t, detached, 900.0, "the gap shows as delivery delay")
		total := e2eField(t, s.logs.String(), log.responseID, "delivery_total_ms")
		require.Greater(t, total, detached)
		t.Logf("delivery_detached_ms=%.0f delivery_total_ms=%.0f audio=%d bytes, %d events", detached, total, log.audioBytes, len(log.seqs))
		c2.send(t, map[string]any{"type": "session.close"})
		require.NotContains(t, s.logs.String(), token, "the resume token is never logged")
	})

	t.Run("no resume: the window expires", func(t *testing.T) {
		c, id, token, log := open(t)
		c.drop()
		require.Eventually(t, func() bool { return metricValue(t, s, "omniserve_duplex_detached_sessions") == 1 },
			10*time.Second, 20*time.Millisecond)
		time.Sleep(grace / 2)
		require.Zero(t, turnOf(s.logs.String(), log.responseID).sets, "the turn is not finalized while it may resume")
		tt := waitTurn(t, s, log.responseID)
		require.Equal(t, "close", tt.reason)
		require.Zero(t, metricValue(t, s, "omniserve_duplex_detached_sessions"))

		c2 := dialResume(t, url+"&session_id="+id)
		c2.send(t, map[string]any{"type": "session.resume", "event_id": "e1", "session_id": id, "resume_token": token,
			"last_received_server_event_seq": log.seqs[len(log.seqs)-1]})
		ev := c2.next(t, 10*time.Second)
		require.Equal(t, "error", ev["type"])
		er := ev["error"].(map[string]any)
		require.Equal(t, "session_not_found", er["code"])
		require.Equal(t, "session_id", er["param"])
		require.Equal(t, "e1", er["event_id"])
		time.Sleep(300 * time.Millisecond)
		require.Equal(t, 1, turnOf(s.logs.String(), log.responseID).sets, "the turn table is logged exactly once")
	})
}

// e2eField reads one row of a response's RequestE2EStats record.
func e2eField(t *testing.T, logs, responseID, field string) float64 {
	t.Helper()
	for _, line := range strings.Split(logs, "\n") {
		var r map[string]any
		if json.Unmarshal([]byte(line), &r) != nil || r["msg"] != "RequestE2EStats" || r["response_id"] != responseID {
			continue
		}
		v, ok := r[field].(float64)
		require.True(t, ok, "%s in %s", field, line)
		return v
	}
	t.Fatalf("no RequestE2EStats record for %s", responseID)
	return 0
}

// TestResumeThroughHAProxy: behind deploy/haproxy/haproxy.cfg and 3 replicas, every resume of a
// dropped session reaches the replica that holds it (the stick table learns the session id from
// the 101's Omniserve-Session-Id); sent to another replica, a resume answers session_not_found.
func TestResumeThroughHAProxy(t *testing.T) {
	reps, front, _ := startBalancedReplicas(t, "--resume-grace", "1m")
	base := "ws://" + front + "/v1/realtime"

	// dial opens a connection through the balancer: the first event, and the replica's name.
	dial := func(url string, hdr http.Header) (*websocket.Conn, map[string]any, string) {
		ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
		defer cancel()
		ws, resp, err := websocket.Dial(ctx, url, &websocket.DialOptions{HTTPHeader: hdr}) //nolint:bodyclose // coder/websocket closes it
		require.NoError(t, err)
		_, data, err := ws.Read(ctx)
		require.NoError(t, err)
		var ev map[string]any
		require.NoError(t, json.Unmarshal(data, &ev))
		return ws, ev, resp.Header.Get("X-Omniserve-Replica")
	}
	type dropped struct{ id, token, replica string }
	var sessions []dropped
	per := map[string]int{}
	for range 6 {
		ws, created, replica := dial(base, nil)
		require.Equal(t, "session.created", created["type"])
		sessions = append(sessions, dropped{created["session"].(map[string]any)["id"].(string), created["resume_token"].(string), replica})
		per[replica]++
		_ = ws.CloseNow() // the network drops
	}
	require.Len(t, per, 3, "the sessions are spread: %v", per)
	// Across replicas there is no shared state: a replica that does not hold the session says so.
	other := reps[0]
	if sessions[0].replica == "omniserve1" {
		other = reps[1]
	}
	ws, ev, _ := dial("ws://"+other.addr+"/v1/realtime?session_id="+sessions[0].id,
		http.Header{"Omniserve-Resume-Token": {sessions[0].token}, "Omniserve-Last-Event-Seq": {"0"}})
	_ = ws.CloseNow()
	require.Equal(t, "error", ev["type"])
	require.Equal(t, "session_not_found", ev["error"].(map[string]any)["code"])
	// Resumed one replica at a time, each kept open: least connections alone would send the
	// second resume of a replica elsewhere.
	slices.SortStableFunc(sessions, func(a, b dropped) int { return strings.Compare(a.replica, b.replica) })
	for _, sess := range sessions {
		hdr := http.Header{"Omniserve-Resume-Token": {sess.token}, "Omniserve-Last-Event-Seq": {"1"}}
		// The replica may not have seen the TCP close yet: a resume then takes the session over.
		ws, resumed, replica := dial(base+"?duplex=1&session_id="+sess.id, hdr)
		t.Cleanup(func() { _ = ws.Close(websocket.StatusNormalClosure, "") })
		require.Equal(t, "session.resumed", resumed["type"], "resume of a session on %s (routed to %s): %v", sess.replica, replica, resumed)
		require.Equal(t, sess.replica, replica, "the resume reached the replica that holds the session")
	}
}
