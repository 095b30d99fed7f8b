package test

import (
	"bufio"
	"flag"
	"fmt"
	"net/http"
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/coder/websocket"
	"github.com/stretchr/testify/require"

	"github.com/omniserve/omniserve/internal/testenv"
)

// The load tests below run with `make test-soak` (OMNISERVE_SOAK=1), which `make test` runs
// after the rest of the suite; a plain `go test ./...` skips them so they do not run twice.

const soakEnv = "OMNISERVE_SOAK"

// needSoak skips t unless the load tests were asked for, and checks that `go test -parallel`
// lets the n sessions of the test run at once (its default is GOMAXPROCS: on a 2-core machine
// the load would silently be 2 sessions).
func needSoak(t *testing.T, n int) {
	t.Helper()
	if os.Getenv(soakEnv) == "" {
		t.Skipf("a load test: run it with `make test-soak` (%s=1)", soakEnv)
	}
	p, err := strconv.Atoi(flag.Lookup("test.parallel").Value.String())
	require.NoError(t, err)
	require.GreaterOrEqual(t, p, n, "run with go test -parallel %d or more (make test-soak does)", n)
}

// goForwardSpeech is real speech (pocketsphinx-testdata): 16 kHz s16le mono.
func goForwardSpeech(t *testing.T) []byte {
	t.Helper()
	return testenv.ReadFile(t, goForwardRaw, "pocketsphinx-testdata")
}

// TestDisconnectStorm drops 200 sessions abruptly while their responses play (real speech in,
// a response streaming audio, then the TCP connection closed without a close frame). Afterwards
// every slot is back (max_sessions new sessions succeed and one more is refused), and the
// server's goroutines and file descriptors are back near their baseline.
func TestDisconnectStorm(t *testing.T) {
	// 8 clients drop and reconnect at once; max_sessions leaves room for the slots still being
	// released (asynchronously, after the server sees the TCP close) when a client dials again.
	const clients, maxSessions, drops = 8, 16, 200
	needSoak(t, clients) // one at a time: each is the whole load on the machine
	raw := goForwardSpeech(t)
	s := startBinary(t, "--config", "configs/omni-cpu.yaml", "--model", "dummy:tiny",
		"--cache-dir", filepath.Join(t.TempDir(), "cache"), "--max-sessions", strconv.Itoa(maxSessions),
		"--resume-grace", "0") // a dropped client's session ends at once (no resume window holding its slot)
	pid := s.cmd.Process.Pid
	session := func() map[string]any {
		return map[string]any{"turn_detection": nil, "max_response_output_tokens": 200}
	}

	// Warm-up: the storm's clients each serve one real turn and close cleanly, so whatever is
	// pooled per concurrent session (ASR decoders, engine sequences) exists before the baseline.
	t.Run("warm-up", func(t *testing.T) {
		for i := range clients {
			t.Run(strconv.Itoa(i), func(t *testing.T) {
				t.Parallel()
				c := dialRT(t, s, session())
				c.respondTo(t, raw)
				c.until(t, "response.output_audio.delta", time.Minute)
				c.send(t, map[string]any{"type": "response.cancel"})
				c.until(t, "response.done", time.Minute)
				c.close(t)
			})
		}
	})
	waitActive(t, s, 0)
	baseG, baseFD := metricValue(t, s, "go_goroutines"), procFDs(t, pid)
	t.Logf("baseline after warm-up: %.0f goroutines, %d fds, RSS %d KiB", baseG, baseFD, procRSSKiB(t, pid))

	var dropped atomic.Int64
	start := time.Now()
	t.Run("storm", func(t *testing.T) {
		for w := range clients {
			t.Run(strconv.Itoa(w), func(t *testing.T) {
				t.Parallel()
				for range drops / clients {
					c := dialRT(t, s, session())
					c.respondTo(t, raw)
					c.until(t, "response.output_audio.delta", time.Minute) // the response is playing
					require.NoError(t, c.ws.CloseNow())                    // TCP closed, no close frame
					<-c.done
					dropped.Add(1)
				}
			})
		}
	})
	require.EqualValues(t, drops, dropped.Load())
	t.Logf("%d sessions dropped mid-response in %v", drops, time.Since(start).Round(time.Millisecond))

	released := time.Now()
	waitActive(t, s, 0)
	t.Logf("every slot back %v after the last drop", time.Since(released).Round(time.Millisecond))
	var g float64
	var fds int
	require.Eventually(t, func() bool {
		g, fds = metricValue(t, s, "go_goroutines"), procFDs(t, pid)
		return g <= baseG+10 && fds <= baseFD+4
	}, time.Minute, 100*time.Millisecond, "goroutines and fds back near the baseline (%.0f, %d fds)", baseG, baseFD)
	t.Logf("after the storm: %.0f goroutines (baseline %.0f), %d fds (baseline %d), RSS %d KiB",
		g, baseG, fds, baseFD, procRSSKiB(t, pid))

	// Every slot serves again: max_sessions sessions at once, each answering, and one more is
	// refused (the bound still holds).
	t.Run("slots", func(t *testing.T) {
		open := make([]*rtClient, maxSessions)
		for i := range open {
			open[i] = dialRT(t, s, map[string]any{"turn_detection": nil, "modalities": []string{"text"}})
		}
		_, resp, err := websocket.Dial(t.Context(), "ws://"+s.addr+"/v1/realtime?duplex=1", nil)
		require.Error(t, err, "max_sessions+1 is refused")
		require.NotNil(t, resp)
		resp.Body.Close()
		require.Equal(t, 503, resp.StatusCode)
		for _, c := range open {
			c.requireStillServes(t)
			c.close(t)
		}
	})
}

// TestSoak runs 8 sessions of repeating spoken turns (real speech paced at real time, server
// VAD, an audio response each) for 6 minutes (OMNISERVE_SOAK_DURATION), and reports the turns,
// the errors and the slope of the server's RSS; it fails on any error or a slope above
// soakMaxSlopeKiBPerMin.
func TestSoak(t *testing.T) {
	const sessions = 8
	needSoak(t, sessions) // one at a time: each is the whole load on the machine
	// The bound on the RSS slope over the second half of the window. 8 MiB/min at ~40 turns/min
	// is ~200 KiB per turn: leaking one turn's input audio (3.6 s at 16 kHz, float32: 230 KB)
	// fails it. A longer SOAK_DURATION tells a small leak from noise better.
	const soakMaxSlopeKiBPerMin = 8192
	// 6 minutes: the slope is taken over the second half, and RSS settles for about the first
	// 100 s on a 2-core machine (a 6-minute run: +8 MiB from 30 s to 60 s, +3 MiB to 100 s, then
	// ~1.7 MiB/min to the end). A 2-minute window measured the end of that settling: 9 MiB/min
	// once on a CI machine that settled more slowly, with the Go heap flat. The second half of 6
	// minutes starts at 3, well past it.
	dur := 6 * time.Minute
	if v := os.Getenv("OMNISERVE_SOAK_DURATION"); v != "" {
		d, err := time.ParseDuration(v)
		require.NoError(t, err, "OMNISERVE_SOAK_DURATION")
		dur = d
	}
	raw := goForwardSpeech(t)
	utterance := append(append([]byte{}, raw...), make([]byte, 32000)...) // + 1 s of silence: the VAD ends the turn
	s := startBinary(t, "--config", "configs/omni-cpu.yaml", "--model", "dummy:tiny",
		"--cache-dir", filepath.Join(t.TempDir(), "cache"), "--resume-grace", "0")
	pid := s.cmd.Process.Pid
	startG, startFD := metricValue(t, s, "go_goroutines"), procFDs(t, pid)

	type sample struct {
		at      time.Duration
		kib     int64
		heapKiB int64 // the Go heap in use (go_memstats_heap_inuse_bytes): tells a Go leak from C's
		anonKiB int64
	}
	var samples []sample
	began := time.Now()
	stopSampling, sampled := make(chan struct{}), make(chan struct{})
	go func() {
		defer close(sampled)
		tick := time.NewTicker(2 * time.Second)
		defer tick.Stop()
		for {
			if kib, err := readRSSKiB(pid); err == nil {
				sm := sample{at: time.Since(began), kib: kib}
				sm.heapKiB, _ = scrapeKiB(s.addr, "go_memstats_heap_inuse_bytes")
				sm.anonKiB, _ = readStatusKiB(pid, "RssAnon:")
				samples = append(samples, sm)
			}
			select {
			case <-stopSampling:
				return
			case <-tick.C:
			}
		}
	}()

	var turns, errs atomic.Int64
	var errMu sync.Mutex
	var errList []string
	// Warm-up: all sessions speak at once, so that what is pooled per concurrent stream (the
	// ASR decoders, ~30 MiB each, grown on demand) is there before the measured window.
	var warmed sync.WaitGroup
	warmed.Add(sessions)
	var measured atomic.Int64 // when the window starts, ns since began
	t.Run("sessions", func(t *testing.T) {
		for i := range sessions {
			t.Run(strconv.Itoa(i), func(t *testing.T) {
				t.Parallel()
				var once sync.Once
				ready := func() { once.Do(warmed.Done) }
				defer ready() // a failed session never blocks the others
				c := dialRTFor(t, s, map[string]any{"max_response_output_tokens": 24}, dur+5*time.Minute)
				c.stream(t, utterance, 100*time.Millisecond)
				require.Contains(t, []string{"completed", "incomplete"}, status(c.until(t, "response.done", 2*time.Minute)))
				ready()
				warmed.Wait()
				measured.CompareAndSwap(0, int64(time.Since(began)))
				deadline := began.Add(time.Duration(measured.Load()) + dur)
				for time.Now().Before(deadline) {
					c.stream(t, utterance, 100*time.Millisecond) // paced: 100 ms of audio every 100 ms
					ev, err := c.turnDone(t, 2*time.Minute)
					if err != "" {
						errs.Add(1)
						errMu.Lock()
						errList = append(errList, fmt.Sprintf("session %d: %s", i, err))
						errMu.Unlock()
						continue
					}
					require.Contains(t, []string{"completed", "incomplete"}, status(ev), "%v", ev)
					turns.Add(1)
				}
				c.close(t)
			})
		}
	})
	close(stopSampling)
	<-sampled
	elapsed := time.Since(began)

	warm := time.Duration(measured.Load())
	// The slope is taken over the second half of the window: for the first ~100 s after the
	// warm-up RSS still settles (malloc arenas and the Go heap reach their working size; the
	// heap and RssAnon columns of the curve tell the two apart), which is not growth per turn.
	settled := warm + (elapsed-warm)/2
	var xs, ys []float64
	var atWarm float64
	for _, sm := range samples {
		if atWarm == 0 && sm.at >= warm {
			atWarm = float64(sm.kib)
		}
		if sm.at >= settled {
			xs, ys = append(xs, sm.at.Minutes()), append(ys, float64(sm.kib))
		}
	}
	require.GreaterOrEqual(t, len(xs), 5, "RSS samples")
	slope := linearSlope(xs, ys)
	var curve []string
	for i, sm := range samples {
		if i%5 == 0 || i == len(samples)-1 {
			curve = append(curve, fmt.Sprintf("%.0fs:%dMiB(heap %d anon %d)", sm.at.Seconds(), sm.kib>>10, sm.heapKiB>>10, sm.anonKiB>>10))
		}
	}
	t.Logf("soak: RSS curve %s", strings.Join(curve, " "))
	waitActive(t, s, 0)
	endG, endFD := metricValue(t, s, "go_goroutines"), procFDs(t, pid)
	window := elapsed - warm
	t.Logf("soak: %d sessions for %v after a %v warm-up: %d turns (%.1f/min), %d errors", sessions,
		window.Round(time.Second), warm.Round(time.Second), turns.Load(), float64(turns.Load())/window.Minutes(), errs.Load())
	t.Logf("soak: RSS %d KiB before the sessions, %.0f KiB after the warm-up, %d KiB at the end; slope over the last %v: %.0f KiB/min (bound %d)",
		samples[0].kib, atWarm, samples[len(samples)-1].kib, (elapsed - settled).Round(time.Second), slope, soakMaxSlopeKiBPerMin)
	t.Logf("soak: goroutines %.0f -> %.0f, fds %d -> %d (sessions closed)", startG, endG, startFD, endFD)
	fmt.Printf("soak_turns=%d soak_errors=%d soak_rss_slope_kib_per_min=%.0f soak_rss_end_kib=%d\n",
		turns.Load(), errs.Load(), slope, samples[len(samples)-1].kib)
	require.Zero(t, errs.Load(), "errors: %v", errList)
	require.Positive(t, turns.Load())
	require.Less(t, slope, float64(soakMaxSlopeKiBPerMin), "RSS grows")
	// Every sequence reserved its window when it opened, so under full load the shared cache
	// was never found full (the suspected cause of issue 27's unexplained engine_error).
	require.Zero(t, metricValue(t, s, "omniserve_engine_kv_cache_full_total"), "the KV cache filled under load")
}

// turnDone waits for the next response.done; an error event or the connection's end is
// returned as a description instead of failing, so that the soak counts them.
func (c *rtClient) turnDone(t *testing.T, timeout time.Duration) (map[string]any, string) {
	t.Helper()
	deadline := time.After(timeout)
	for {
		select {
		case ev, ok := <-c.events:
			if !ok {
				return nil, fmt.Sprintf("connection ended: %v", c.readErr)
			}
			switch ev.m["type"] {
			case "response.done":
				return ev.m, ""
			case "error":
				return nil, fmt.Sprintf("error event: %v", ev.m["error"])
			}
		case <-deadline:
			return nil, fmt.Sprintf("no response.done within %s", timeout)
		}
	}
}

// waitActive waits until the server counts n live realtime sessions.
func waitActive(t *testing.T, s *binServer, n float64) {
	t.Helper()
	require.Eventually(t, func() bool { return metricValue(t, s, "omniserve_duplex_active_sessions") == n },
		time.Minute, 50*time.Millisecond, "active sessions never reached %v", n)
}

// metricValue returns the sum of the samples of one metric family on /metrics.
func metricValue(t *testing.T, s *binServer, name string) float64 {
	t.Helper()
	code, body := s.get(t, "/metrics")
	require.Equal(t, 200, code)
	var sum float64
	found := false
	sc := bufio.NewScanner(strings.NewReader(string(body)))
	sc.Buffer(make([]byte, 1<<20), 1<<20)
	for sc.Scan() {
		line := sc.Text()
		rest, ok := strings.CutPrefix(line, name)
		if !ok || (rest != "" && rest[0] != ' ' && rest[0] != '{') {
			continue
		}
		f := strings.Fields(line)
		v, err := strconv.ParseFloat(f[len(f)-1], 64)
		require.NoError(t, err, line)
		sum += v
		found = true
	}
	require.True(t, found, "no %s on /metrics", name)
	return sum
}

// procFDs counts the open file descriptors of a process.
func procFDs(t *testing.T, pid int) int {
	t.Helper()
	ents, err := os.ReadDir(fmt.Sprintf("/proc/%d/fd", pid))
	require.NoError(t, err)
	return len(ents)
}

func procRSSKiB(t *testing.T, pid int) int64 {
	t.Helper()
	kib, err := readRSSKiB(pid)
	require.NoError(t, err)
	return kib
}

// readRSSKiB reads VmRSS from /proc/<pid>/status.
func readRSSKiB(pid int) (int64, error) { return readStatusKiB(pid, "VmRSS:") }

// readStatusKiB reads one "key: N kB" line of /proc/<pid>/status.
func readStatusKiB(pid int, key string) (int64, error) {
	b, err := os.ReadFile(fmt.Sprintf("/proc/%d/status", pid))
	if err != nil {
		return 0, err
	}
	for _, line := range strings.Split(string(b), "\n") {
		if v, ok := strings.CutPrefix(line, key); ok {
			return strconv.ParseInt(strings.TrimSuffix(strings.TrimSpace(v), " kB"), 10, 64)
		}
	}
	return 0, fmt.Errorf("no %s in /proc/%d/status", key, pid)
}

// scrapeKiB reads one unlabelled gauge in bytes from the server's /metrics, without a *testing.T
// (the soak's sampler runs outside the test goroutine).
func scrapeKiB(addr, name string) (int64, error) {
	resp, err := http.Get("http://" + addr + "/metrics")
	if err != nil {
		return 0, err
	}
	defer resp.Body.Close()
	sc := bufio.NewScanner(resp.Body)
	sc.Buffer(make([]byte, 1<<20), 1<<20)
	for sc.Scan() {
		if v, ok := strings.CutPrefix(sc.Text(), name+" "); ok {
			f, err := strconv.ParseFloat(strings.TrimSpace(v), 64)
			return int64(f) >> 10, err
		}
	}
	return 0, fmt.Errorf("no %s on /metrics", name)
}

// linearSlope is the least-squares slope of ys over xs.
func linearSlope(xs, ys []float64) float64 {
	n := float64(len(xs))
	var sx, sy, sxx, sxy float64
	for i := range xs {
		sx, sy = sx+xs[i], sy+ys[i]
		sxx, sxy = sxx+xs[i]*xs[i], sxy+xs[i]*ys[i]
	}
	return (n*sxy - sx*sy) / (n*sxx - sx*sx)
}
