package test

import (
	"encoding/base64"
	"os"
	"strconv"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/coder/websocket"
	"github.com/stretchr/testify/require"

	"github.com/omniserve/omniserve/internal/audio"
	"github.com/omniserve/omniserve/internal/testenv"
)

// liveStreamer streams 16 kHz PCM16 to a live session at real time in 100 ms appends, from a
// queue of audio, and digital silence whenever the queue is empty (as real clients do: the
// timeline only advances with audio).
type liveStreamer struct {
	c    *liveClient
	mu   sync.Mutex
	q    []byte
	stop chan struct{}
	done chan struct{}
}

func streamLive(t *testing.T, c *liveClient) *liveStreamer {
	t.Helper()
	st := &liveStreamer{c: c, stop: make(chan struct{}), done: make(chan struct{})}
	go st.run(t)
	t.Cleanup(st.halt)
	return st
}

func (st *liveStreamer) halt() {
	select {
	case <-st.stop:
	default:
		close(st.stop)
	}
	<-st.done
}

// say queues pcm (16 kHz PCM16) to be streamed next.
func (st *liveStreamer) say(pcm []byte) {
	st.mu.Lock()
	st.q = append(st.q, pcm...)
	st.mu.Unlock()
}

func (st *liveStreamer) run(t *testing.T) {
	defer close(st.done)
	const chunk = 3200 // 100 ms
	tick := time.NewTicker(100 * time.Millisecond)
	defer tick.Stop()
	for {
		select {
		case <-st.stop:
			return
		case <-tick.C:
		}
		st.mu.Lock()
		n := min(chunk, len(st.q))
		b := make([]byte, chunk)
		copy(b, st.q[:n])
		st.q = st.q[n:]
		st.mu.Unlock()
		if err := st.c.wsWrite(map[string]any{"type": "session.input_audio.append", "audio": base64.StdEncoding.EncodeToString(b)}); err != nil {
			return
		}
	}
}

func goForwardPCM(t *testing.T) []byte {
	t.Helper()
	speech := "/usr/share/pocketsphinx/test/data/goforward.raw"
	testenv.NeedFile(t, speech, "pocketsphinx-testdata")
	raw, err := os.ReadFile(speech)
	require.NoError(t, err)
	return raw
}

// events is every event of typ read so far, in order.
func (c *liveClient) eventsOf(typ string) []map[string]any {
	c.mu.Lock()
	defer c.mu.Unlock()
	var out []map[string]any
	for _, m := range c.all {
		if m["type"] == typ {
			out = append(out, m)
		}
	}
	return out
}

// waitFor polls until cond holds, or fails after timeout.
func waitFor(t *testing.T, timeout time.Duration, what string, cond func() bool) {
	t.Helper()
	deadline := time.Now().Add(timeout)
	for !cond() {
		require.True(t, time.Now().Before(deadline), "not within %v: %s", timeout, what)
		time.Sleep(20 * time.Millisecond)
	}
}

// inputTranscript is the input transcript deltas read so far, concatenated.
func (c *liveClient) transcript(typ string) string {
	var b strings.Builder
	for _, ev := range c.eventsOf(typ) {
		b.WriteString(ev["delta"].(string))
	}
	return b.String()
}

// audioSince is the output audio bytes read since at.
func (c *liveClient) audioSince(t *testing.T, at time.Time) (n int, last time.Time) {
	t.Helper()
	for _, ev := range c.eventsOf("session.output_audio.delta") {
		got := ev[recvKey].(time.Time)
		if got.Before(at) {
			continue
		}
		b, err := base64.StdEncoding.DecodeString(ev["delta"].(string))
		require.NoError(t, err)
		n += len(b)
		last = got
	}
	return n, last
}

// One spoken turn on the real binary, as a client streams it: real speech at real time then
// silence (16 kHz PCM both ways); the input transcript arrives as stable words on the timeline,
// the model answers by itself as one paced track with its transcript placed on it, speaking over
// it silences the track at once, a muted microphone is not heard while the timeline runs, an
// append is acknowledged when the timeline reaches it, usage comes every 15 s of timeline and
// session.closed ends the session with the final usage.
func TestLiveSpeechTurn(t *testing.T) {
	t.Parallel()
	s := startLiveBinary(t)
	c := dialLive(t, s, nil)
	c.send(t, map[string]any{"type": "session.start", "session": map[string]any{"model": "gpt-live-1",
		"audio": map[string]any{"format": map[string]any{"type": "audio/pcm", "rate": 16000}}}})
	c.until(t, "session.started", 30*time.Second)
	st := streamLive(t, c)
	speech := goForwardPCM(t)
	st.say(speech)

	// The input transcript: stable words only, in timeline order.
	waitFor(t, 20*time.Second, "the input transcript", func() bool {
		return strings.Contains(c.transcript("session.input_transcript.delta"), "forward")
	})
	var lastEnd float64
	for _, ev := range c.eventsOf("session.input_transcript.delta") {
		start, end := ev["start_ms"].(float64), ev["end_ms"].(float64)
		require.LessOrEqual(t, lastEnd, start, "%v", ev)
		require.Less(t, start, end, "%v", ev)
		lastEnd = end
	}
	t.Logf("input transcript: %q", c.transcript("session.input_transcript.delta"))

	// The model speaks by itself: one paced track of ~100 ms deltas (3,200 bytes at 16 kHz).
	waitFor(t, 30*time.Second, "the model's reply", func() bool { return c.count("session.output_audio.delta") > 0 })
	first := c.eventsOf("session.output_audio.delta")[0][recvKey].(time.Time)
	time.Sleep(2 * time.Second)
	n, last := c.audioSince(t, first)
	elapsed := last.Sub(first).Seconds()
	t.Logf("paced output: %d bytes in %.2f s (%.2f s of audio)", n, elapsed, float64(n)/32000)
	require.LessOrEqual(t, float64(n)/32000, elapsed+0.35, "never more than the lead (100 ms) and a frame ahead of real time")
	require.GreaterOrEqual(t, float64(n)/32000, elapsed-0.3, "the track keeps up with real time")
	for _, ev := range c.eventsOf("session.output_audio.delta")[:5] {
		b, _ := base64.StdEncoding.DecodeString(ev["delta"].(string))
		require.InDelta(t, 1600, len(b), 64, "50 ms frames (half the default output lead) in the session's format (the resampler's delay shortens the first)")
		require.NotContains(t, ev, "start_ms", "the primary socket's audio deltas carry no timing")
	}
	out := c.eventsOf("session.output_transcript.delta")
	require.NotEmpty(t, out, "the reply's transcript")
	require.GreaterOrEqual(t, out[0]["start_ms"].(float64), lastEnd, "placed on the track after the user's words")

	// Barge-in: speaking over the reply silences the track at once (no event says so).
	bargeAt := time.Now()
	st.say(speech)
	waitFor(t, 5*time.Second, "silence after the barge-in", func() bool {
		_, last := c.audioSince(t, bargeAt)
		return !last.IsZero() && time.Since(last) > time.Second
	})
	_, stopped := c.audioSince(t, bargeAt)
	t.Logf("barge-in: the track went silent %v after the user started speaking again", stopped.Sub(bargeAt).Round(time.Millisecond))
	require.Less(t, stopped.Sub(bargeAt), 1500*time.Millisecond)
	require.Zero(t, c.count("error"))

	// Mute: the model hears silence; the timeline runs (an append is acked meanwhile).
	time.Sleep(4 * time.Second) // the second turn's transcript is in
	c.send(t, map[string]any{"type": "session.input_audio.mute", "event_id": "m"})
	require.Equal(t, "m", c.until(t, "session.input_audio.muted", 10*time.Second)["client_event_id"])
	heard := c.count("session.input_transcript.delta")
	c.send(t, map[string]any{"type": "session.instructions.append", "event_id": "i", "content": "Keep answers short.", "delegation_id": nil})
	st.say(speech)
	ack := c.until(t, "session.instructions.appended", 10*time.Second)
	require.Equal(t, "i", ack["client_event_id"])
	time.Sleep(time.Duration(len(speech)/32)*time.Millisecond + 2*time.Second)
	require.Equal(t, heard, c.count("session.input_transcript.delta"), "muted speech is not heard")
	c.send(t, map[string]any{"type": "session.input_audio.unmute", "event_id": "u"})
	require.Equal(t, "u", c.until(t, "session.input_audio.unmuted", 10*time.Second)["client_event_id"])

	// Usage every 15 s of timeline, then the close with the final usage.
	waitFor(t, 20*time.Second, "usage", func() bool { return c.count("session.usage.updated") > 0 })
	for i, u := range c.eventsOf("session.usage.updated") {
		require.Equal(t, 15.0*float64(i+1), u["usage"].(map[string]any)["seconds"], "cumulative seconds of the timeline")
		require.Contains(t, u, "context_window", "the KV plan's context is known")
	}
	c.send(t, map[string]any{"type": "session.close", "event_id": "bye"})
	closed := c.until(t, "session.closed", 10*time.Second)
	st.halt()
	require.Equal(t, "close_requested", closed["reason"])
	require.Equal(t, "bye", closed["client_event_id"])
	require.GreaterOrEqual(t, closed["usage"].(map[string]any)["seconds"].(float64), 15.0)
	<-c.done
	require.Equal(t, websocket.StatusNormalClosure, websocket.CloseStatus(c.readErr))
	c.mu.Lock()
	require.Equal(t, "session.closed", c.all[len(c.all)-1]["type"], "session.closed is the last event")
	c.mu.Unlock()
}

// The test hook (--live-test-hooks): instructions holding the marker make the next user turn end
// in a client delegation, acknowledged aloud after acknowledgement_delay_ms; the client answers
// with commentary carrying the delegation's id, acknowledged on the timeline and spoken.
func TestLiveScriptedDelegation(t *testing.T) {
	t.Parallel()
	s := startLiveBinary(t, "--live-test-hooks")
	c := dialLive(t, s, nil)
	c.send(t, map[string]any{"type": "session.start", "session": map[string]any{"model": "gpt-live-1",
		"instructions": "Look things up. [[omniserve-test:delegate]]",
		"audio":        map[string]any{"format": map[string]any{"type": "audio/pcm", "rate": 16000}},
		"delegation":   map[string]any{"type": "client", "acknowledgement_delay_ms": 300}}})
	started := c.until(t, "session.started", 30*time.Second)
	require.Equal(t, "Look things up. [[omniserve-test:delegate]]", started["session"].(map[string]any)["instructions"], "echoed as given")
	st := streamLive(t, c)
	st.say(goForwardPCM(t))
	dc := c.until(t, "session.delegation.created", 30*time.Second)
	d := dc["delegation"].(map[string]any)
	require.Equal(t, "client", d["target"])
	require.Equal(t, "delegation", d["type"])
	id := d["id"].(string)
	require.True(t, strings.HasPrefix(id, "item_"), id)
	require.Greater(t, dc["offset_ms"].(float64), 1000.0, "at the end of the user's request, on the timeline")
	defer func() {
		if t.Failed() {
			c.dump(t)
		}
	}()
	// The engine's own reply to the turn is cancelled (the delegation answers it); the
	// acknowledgement is spoken, briefly, then the track goes silent.
	waitFor(t, 30*time.Second, "the spoken acknowledgement", func() bool {
		n, _ := c.audioSince(t, dc[recvKey].(time.Time))
		return n > 0
	})
	waitFor(t, 60*time.Second, "silence after the acknowledgement", func() bool {
		_, last := c.audioSince(t, dc[recvKey].(time.Time))
		return time.Since(last) > time.Second
	})
	// The client answers: progress (silent) and the result, spoken.
	answered := time.Now()
	c.send(t, map[string]any{"type": "session.thinking.append", "event_id": "th", "content": "Searching the catalogue.", "delegation_id": id})
	c.send(t, map[string]any{"type": "session.commentary.append", "event_id": "co", "content": "The catalogue has three matches.", "delegation_id": id})
	require.Equal(t, "co", c.until(t, "session.commentary.appended", 20*time.Second)["client_event_id"])
	waitFor(t, 30*time.Second, "the commentary spoken", func() bool {
		n, _ := c.audioSince(t, answered)
		return n > 0
	})
	require.Zero(t, c.count("error"))
	c.send(t, map[string]any{"type": "session.close"})
	c.until(t, "session.closed", 20*time.Second)
}

// G.711 μ-law at 8 kHz, one format both ways: the speech is heard (transcribed) and the reply
// comes as μ-law, 800 bytes a 100 ms frame.
func TestLiveG711(t *testing.T) {
	t.Parallel()
	s := startLiveBinary(t)
	c := dialLive(t, s, nil)
	c.send(t, map[string]any{"type": "session.start", "session": map[string]any{"model": "gpt-live-1",
		"audio": map[string]any{"format": map[string]any{"type": "audio/pcmu", "rate": 8000}}}})
	res := c.until(t, "session.started", 30*time.Second)["session"].(map[string]any)
	require.Equal(t, map[string]any{"type": "audio/pcmu", "rate": 8000.0}, res["audio"].(map[string]any)["format"])
	pcm, err := audio.PCM16BytesToFloat32(nil, goForwardPCM(t))
	require.NoError(t, err)
	narrow, err := audio.Resample(pcm, 16000, 8000)
	require.NoError(t, err)
	ulaw := audio.Float32ToULaw(nil, append(narrow, make([]float32, 8000*3)...)) // then 3 s of silence
	for off := 0; off < len(ulaw); off += 800 {
		c.send(t, map[string]any{"type": "session.input_audio.append", "audio": base64.StdEncoding.EncodeToString(ulaw[off:min(off+800, len(ulaw))])})
		time.Sleep(50 * time.Millisecond) // faster than real time, in order
	}
	defer func() {
		if t.Failed() {
			c.dump(t)
		}
	}()
	// Heard: pocketsphinx's 16 kHz model gets the narrowband words wrong ("a whore word that
	// neutered"), but the speech reaches it through the μ-law decoder.
	waitFor(t, 30*time.Second, "the input transcript", func() bool {
		return strings.TrimSpace(c.transcript("session.input_transcript.delta")) != ""
	})
	t.Logf("8 kHz μ-law speech heard as %q", c.transcript("session.input_transcript.delta"))
	waitFor(t, 30*time.Second, "the reply", func() bool { return c.count("session.output_audio.delta") > 0 })
	b, err := base64.StdEncoding.DecodeString(c.eventsOf("session.output_audio.delta")[0]["delta"].(string))
	require.NoError(t, err)
	require.InDelta(t, 400, len(b), 16, "50 ms of μ-law at 8 kHz, half the default output lead (the resampler's delay shortens the first frame)")
	require.Zero(t, c.count("error"))
}

// The invalid-event budget of the other dialects applies to Live: a flood of bad events gets a
// bounded number of Live errors, then the session ends (1008); the server goes on serving.
func TestLiveInvalidEventFlood(t *testing.T) {
	t.Parallel()
	s := startLiveBinary(t)
	c := dialLive(t, s, nil)
	c.send(t, map[string]any{"type": "session.start", "session": map[string]any{"model": "gpt-live-1"}})
	c.until(t, "session.started", 30*time.Second)
	for i := range 5000 {
		if c.wsWrite(map[string]any{"type": "no.such.event", "event_id": "evt_" + strconv.Itoa(i)}) != nil {
			break
		}
	}
	select {
	case <-c.done:
	case <-time.After(30 * time.Second):
		t.Fatal("the flooding connection was not closed")
	}
	require.Equal(t, websocket.StatusPolicyViolation, websocket.CloseStatus(c.readErr), "%v", c.readErr)
	errs := c.eventsOf("error")
	require.GreaterOrEqual(t, len(errs), 100)
	require.LessOrEqual(t, len(errs), 110, "the budget's errors, no more")
	liveError(t, errs[0], "invalid_value", "type", "evt_0")
	require.Equal(t, 1.0, metricLabeled(t, s, "omniserve_realtime_invalid_event_closes_total", `dialect="live"`))
	requireServes(t, s)
}
