package latency

import (
	"context"
	"errors"
	"fmt"
	"os"
	"strconv"
	"strings"
	"sync"
	"time"

	"github.com/omniserve/omniserve/internal/bench"
)

// userHZ is the unit of /proc/<pid>/stat's CPU times: USER_HZ, 100 on every Linux ABI.
const userHZ = 100

// procCPU is the CPU time (user + system) process pid has used, from /proc/<pid>/stat.
func procCPU(pid int) (time.Duration, error) {
	b, err := os.ReadFile("/proc/" + strconv.Itoa(pid) + "/stat")
	if err != nil {
		return 0, fmt.Errorf("server CPU time: %w", err)
	}
	return parseStatCPU(string(b))
}

// parseStatCPU reads utime and stime (fields 14 and 15) of a /proc/<pid>/stat line; the
// command name (field 2, in parentheses) may hold spaces, so fields count from its ')'.
func parseStatCPU(stat string) (time.Duration, error) {
	i := strings.LastIndexByte(stat, ')')
	if i < 0 {
		return 0, errors.New("server CPU time: no ')' in /proc/<pid>/stat")
	}
	f := strings.Fields(stat[i+1:]) // f[0] is field 3 (state)
	if len(f) < 13 {
		return 0, fmt.Errorf("server CPU time: %d fields after the command name", len(f))
	}
	var ticks int64
	for _, s := range f[11:13] {
		v, err := strconv.ParseInt(s, 10, 64)
		if err != nil {
			return 0, fmt.Errorf("server CPU time: %w", err)
		}
		ticks += v
	}
	return time.Duration(ticks) * time.Second / userHZ, nil
}

// cpuBatch is one batch of concurrent sessions: the server's CPU time over it and its wall time.
type cpuBatch struct {
	cpu, wall time.Duration
	n         int
}

// perSession is the server's CPU time per session of the batch, in ms.
func (b cpuBatch) perSession() float64 { return ms(b.cpu) / float64(b.n) }

// coreShare is the share of one core a session of the batch kept busy while it ran.
func (b cpuBatch) coreShare() float64 { return b.cpu.Seconds() / (float64(b.n) * b.wall.Seconds()) }

// measureCPU runs n sessions at once (each one manual turn: the speech, then the reply to its
// end) and returns the server process's CPU time over them. run is one session.
func measureCPU(ctx context.Context, pid, n int, run func(context.Context) error) (cpuBatch, error) {
	before, err := procCPU(pid)
	if err != nil {
		return cpuBatch{}, err
	}
	start := time.Now()
	errs := make([]error, n)
	var wg sync.WaitGroup
	for i := range n {
		wg.Add(1)
		go func() {
			defer wg.Done()
			errs[i] = run(ctx)
		}()
	}
	wg.Wait()
	wall := time.Since(start)
	after, err := procCPU(pid)
	if err != nil {
		return cpuBatch{}, err
	}
	if err := errors.Join(errs...); err != nil {
		return cpuBatch{}, err
	}
	return cpuBatch{cpu: after - before, wall: wall, n: n}, nil
}

// cpuFigures measures the server's CPU per session over WebSocket and over WebRTC: batches of
// o.CPUSessions sessions at once, each one manual turn (the speech at pace, then the reply to its
// end), alternated WebSocket, WebRTC, WebSocket, WebRTC so that both see the same machine.
func cpuFigures(ctx context.Context, o Options, url, base string, pid int, speech []float32, prog interface{ Add(int) }) ([]bench.Figure, error) {
	n := o.CPUSessions
	ws := func(ctx context.Context) error {
		return manualTurns(ctx, url, o.Tools, speech, 1, newTimeline("cpu"))[0].err
	}
	rtc := func(ctx context.Context) error {
		return rtcManualTurns(ctx, base, o.APIKey, o.Tools, speech, 1, newTimeline("cpu"))[0].err
	}
	var sum [2]cpuBatch // 0 WebSocket, 1 WebRTC
	for range 2 {
		for k, run := range []func(context.Context) error{ws, rtc} {
			b, err := measureCPU(ctx, pid, n, run)
			if err != nil {
				return nil, fmt.Errorf("CPU batch: %w", err)
			}
			sum[k].cpu += b.cpu
			sum[k].wall += b.wall
			sum[k].n += b.n
			prog.Add(n)
		}
	}
	for k := range sum {
		sum[k].wall /= 2 // the batches' sessions ran n at a time
		sum[k].n /= 2
		sum[k].cpu /= 2
	}
	wsB, rtcB := sum[0], sum[1]
	what := fmt.Sprintf("%d sessions at once, each one manual turn (goforward.raw at pace, commit, the reply played out), two batches", n)
	return []bench.Figure{
		bench.One("cpu_per_session_websocket_ms", "ms", "server CPU time (utime+stime of /proc/<pid>/stat) per WebSocket session: "+what, wsB.perSession(), 0),
		bench.One("cpu_per_session_webrtc_ms", "ms", "the same per WebRTC call (Opus decode of the microphone, Opus encode and RTP of the reply)", rtcB.perSession(), 0),
		bench.One("cpu_webrtc_added_per_session_ms", "ms", "WebRTC's CPU per session minus WebSocket's, in this run", rtcB.perSession()-wsB.perSession(), 0),
		bench.One("cpu_core_share_websocket", "cores", "share of a core one WebSocket session kept busy over the batch's wall time", wsB.coreShare(), 3),
		bench.One("cpu_core_share_webrtc", "cores", "share of a core one WebRTC session kept busy over the batch's wall time", rtcB.coreShare(), 3),
		bench.One("sessions_on_2_cores_webrtc", "sessions", "2 cores / a WebRTC session's core share: WebRTC calls all in a turn at once that 2 cores carry", 2/rtcB.coreShare(), 1),
		bench.One("sessions_on_2_cores_websocket", "sessions", "the same for WebSocket sessions", 2/wsB.coreShare(), 1),
	}, nil
}
