package test

import (
	"encoding/base64"
	"fmt"
	"os"
	"path/filepath"
	"sort"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/stretchr/testify/require"
)

// TestAutoResponseLoad is issue 27's hunt for the engine_error seen once among 16 concurrent
// auto-response sessions: OMNISERVE_LOAD_SESSIONS sessions (default 24) each stream real speech
// and a second of silence, over and over, in real time, for OMNISERVE_LOAD_DURATION (default
// 1m from its first transcript), with server VAD, auto_response and barge-in on every new
// utterance, against bin/omniserve
// with --log-stats. Every error event is kept with its code and message and the test fails on
// any; OMNISERVE_LOAD_LOG names a file that gets the server's log. A load test: run it with
// `make test-soak`'s switch (OMNISERVE_SOAK=1) and -parallel at least the session count.
func TestAutoResponseLoad(t *testing.T) {
	sessions := 24
	if v := os.Getenv("OMNISERVE_LOAD_SESSIONS"); v != "" {
		n, err := strconv.Atoi(v)
		require.NoError(t, err, "OMNISERVE_LOAD_SESSIONS")
		sessions = n
	}
	needSoak(t, sessions)
	dur := time.Minute
	if v := os.Getenv("OMNISERVE_LOAD_DURATION"); v != "" {
		d, err := time.ParseDuration(v)
		require.NoError(t, err, "OMNISERVE_LOAD_DURATION")
		dur = d
	}
	unit := append(append([]byte{}, goForwardSpeech(t)...), make([]byte, 32000)...) // + 1 s of silence
	s := startBinary(t, "--config", "configs/omni-cpu.yaml", "--model", "dummy:tiny", "--log-stats",
		"--cache-dir", filepath.Join(t.TempDir(), "cache"), "--max-sessions", strconv.Itoa(sessions), "--resume-grace", "0")
	if p := os.Getenv("OMNISERVE_LOAD_LOG"); p != "" {
		t.Cleanup(func() { _ = os.WriteFile(p, []byte(s.logs.String()), 0o644) })
	}

	type tally struct {
		listens, transcripts, created int
		done                          map[string]int // response.done status (+ reason)
		errs                          []string
	}
	tallies := make([]tally, sessions)
	began := time.Now()
	t.Run("sessions", func(t *testing.T) {
		for i := range sessions {
			t.Run(strconv.Itoa(i), func(t *testing.T) {
				t.Parallel()
				tl := &tallies[i]
				tl.done = map[string]int{}
				c := dialRTFor(t, s, map[string]any{"extra_body": map[string]any{"auto_response": true},
					"max_response_output_tokens": 4, "turn_detection": map[string]any{"type": "server_vad"}}, dur+3*time.Minute)
				stop := make(chan struct{})
				// The session's window starts at its first transcript: the ASR pool builds its
				// decoders one at a time, and a cold one would leave the last sessions deaf for
				// the first half minute, not loaded.
				var window atomic.Int64 // when the window ends, ns since began; 0 = not started
				var wg sync.WaitGroup
				wg.Add(1)
				go func() { // the microphone: real-time 100 ms appends until the window ends
					defer wg.Done()
					defer close(stop)
					ended := func() bool {
						w := window.Load()
						return (w > 0 && time.Since(began) > time.Duration(w)) || time.Since(began) > dur+2*time.Minute
					}
					for off := 0; !ended(); off = (off + 3200) % len(unit) {
						b := base64.StdEncoding.EncodeToString(unit[off:min(off+3200, len(unit))])
						c.send(t, map[string]any{"type": "input_audio_buffer.append", "audio": b})
						time.Sleep(100 * time.Millisecond)
					}
				}()
				var grace <-chan time.Time
			read:
				for {
					select {
					case ev, ok := <-c.events:
						if !ok {
							break read
						}
						switch ev.m["type"] {
						case "response.listen":
							tl.listens++
						case "conversation.item.input_audio_transcription.completed":
							tl.transcripts++
							window.CompareAndSwap(0, int64(time.Since(began)+dur))
						case "response.created":
							tl.created++
						case "response.done":
							r, _ := ev.m["response"].(map[string]any)
							key := fmt.Sprint(r["status"])
							if d, ok := r["status_details"].(map[string]any); ok && d["reason"] != nil {
								key += "/" + fmt.Sprint(d["reason"])
							}
							tl.done[key]++
						case "error":
							e, _ := ev.m["error"].(map[string]any)
							tl.errs = append(tl.errs, fmt.Sprintf("%s +%v: %v: %v", time.Now().UTC().Format("15:04:05.000"),
								time.Since(began).Round(time.Millisecond), e["code"], e["message"]))
						}
					case <-stop:
						stop = nil
						grace = time.After(15 * time.Second) // the last answers
					case <-grace:
						break read
					}
				}
				wg.Wait()
				c.close(t)
			})
		}
	})
	var errs []string
	turns, created := 0, 0
	statuses := map[string]int{}
	for i, tl := range tallies {
		turns += tl.transcripts
		created += tl.created
		for k, n := range tl.done {
			statuses[k] += n
		}
		for _, e := range tl.errs {
			errs = append(errs, fmt.Sprintf("session %d: %s", i, e))
		}
		t.Logf("session %d: listens %d transcripts %d responses %d done %v errors %d", i, tl.listens, tl.transcripts, tl.created, tl.done, len(tl.errs))
	}
	keys := make([]string, 0, len(statuses))
	for k := range statuses {
		keys = append(keys, k)
	}
	sort.Strings(keys)
	var st []string
	for _, k := range keys {
		st = append(st, fmt.Sprintf("%s=%d", k, statuses[k]))
	}
	_, metrics := s.get(t, "/metrics")
	for _, line := range strings.Split(string(metrics), "\n") {
		if strings.HasPrefix(line, "omniserve_engine_kv_cache_full_total") || strings.Contains(line, "engine_error") ||
			strings.HasPrefix(line, "omniserve_panics_total") {
			t.Logf("metric %s", line)
		}
	}
	t.Logf("load: %d sessions for %v: %d user turns transcribed, %d responses (%s), %d error events",
		sessions, dur, turns, created, strings.Join(st, " "), len(errs))
	fmt.Printf("load_sessions=%d load_turns=%d load_responses=%d load_errors=%d\n", sessions, turns, created, len(errs))
	require.Empty(t, errs, "error events")
	require.Positive(t, turns)
}
