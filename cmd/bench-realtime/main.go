// Command bench-realtime measures the realtime WebSocket endpoint on a real in-process server
// (dummy model, pocketsphinx ASR, flite TTS, the default pipeline) over loopback. The last lines
// are machine-readable:
//
//	rt_event_overhead_us_p99=<client write of an append → the session's engine append call>
//	rt_ttfp_ms_p50=<input_audio_buffer.commit (response_create) → first audio delta>
//	rt_ttfp_paced_ms_p50=<the same, turns 2.. of one session with appends paced at real time>
//	rt_bargein_ms_p99=<barge_in sent → response.done{cancelled}, after which no old audio arrives>
//	rt_sessions_realtime_2cores=<auto_response sessions whose decisions keep up with real time>
//	turn_metrics_allocs_per_chunk_off=<allocations of the per-chunk turn-metrics ingest, --log-stats off; must be 0>
//	turn_metrics_overhead_pct_on=<response_required turn throughput loss with --log-stats, same run>
//	stats_heap_growth_kib_per_session_hour=<heap growth of one --log-stats session fed an hour of units; target <= 64>
package main

import (
	"context"
	"encoding/base64"
	"encoding/json"
	"errors"
	"flag"
	"fmt"
	"io"
	"net/http/httptest"
	"os"
	"slices"
	"strings"
	"sync"
	"sync/atomic"
	"time"

	"github.com/coder/websocket"
	"go.uber.org/zap"
	"go.uber.org/zap/zapcore"

	"github.com/omniserve/omniserve/internal/gpu"
	"github.com/omniserve/omniserve/internal/realtime"
	"github.com/omniserve/omniserve/internal/requestclient"
	"github.com/omniserve/omniserve/internal/session"
	"github.com/omniserve/omniserve/internal/speech"
	"github.com/omniserve/omniserve/internal/stage"
)

type options struct {
	model, config, cacheDir, speech string
	overheadN, ttfpN, bargeN        int
	pacedTurns                      int
	logStatsN                       int
	maxSessions                     int
	rampSeconds                     float64
}

func main() {
	var o options
	flag.StringVar(&o.model, "model", "dummy:tiny", "model")
	flag.StringVar(&o.config, "config", "configs/omni-cpu.yaml", "pipeline config")
	flag.StringVar(&o.cacheDir, "cache-dir", "", "dummy model cache (default: a temporary directory)")
	flag.StringVar(&o.speech, "speech", "/usr/share/pocketsphinx/test/data/goforward.raw", "16 kHz PCM16 speech")
	flag.IntVar(&o.overheadN, "overhead-n", 300, "append events timed for the overhead")
	flag.IntVar(&o.ttfpN, "ttfp-n", 10, "turns timed for TTFP")
	flag.IntVar(&o.pacedTurns, "paced-turns", 7, "turns of the paced TTFP session (the first is dropped)")
	flag.IntVar(&o.bargeN, "barge-n", 20, "barge-ins timed")
	flag.IntVar(&o.logStatsN, "logstats-n", 40, "turns per side timed with and without --log-stats")
	flag.IntVar(&o.maxSessions, "max-sessions", 16, "largest concurrency tried for real time")
	flag.Float64Var(&o.rampSeconds, "ramp-seconds", 8, "seconds of audio streamed per concurrency step")
	flag.Parse()
	if err := run(o); err != nil {
		fmt.Fprintln(os.Stderr, "bench-realtime:", err)
		os.Exit(1)
	}
}

// timedBackend wraps the real backend to timestamp engine appends (the end of the event path).
// It also counts the stage-0 decisions each session's engine produces (one per audio unit),
// before the session filters them, to tell whether stage 0 keeps up with real time.
type timedBackend struct {
	session.Backend
	appends chan time.Time

	mu        sync.Mutex
	decisions map[string]*atomic.Int64 // session id → decisions
}

func (b *timedBackend) counter(sessionID string) *atomic.Int64 {
	b.mu.Lock()
	defer b.mu.Unlock()
	c, ok := b.decisions[sessionID]
	if !ok {
		c = new(atomic.Int64)
		b.decisions[sessionID] = c
	}
	return c
}

func (b *timedBackend) Open(ctx context.Context, f session.Fence, o session.OpenOptions, out func(session.Output)) (session.Engine, error) {
	cnt := b.counter(f.SessionID)
	e, err := b.Backend.Open(ctx, f, o, func(x session.Output) {
		if x.Kind == session.OutDecision {
			cnt.Add(1)
		}
		out(x)
	})
	if err != nil {
		return nil, err
	}
	return wrapTimed(e, b.appends), nil
}

// wrapTimed wraps e in a timedEngine that keeps e's optional interfaces: the session
// type-asserts them (AudioDiscarder turns on streaming response_required appends into the ASR
// ahead of the commit, TurnCanceller stops only the cancelled turn), so a wrapper that hid them
// would bench a different session than the server runs.
func wrapTimed(e session.Engine, appends chan time.Time) session.Engine {
	t := &timedEngine{Engine: e, appends: appends}
	d, discards := e.(session.AudioDiscarder)
	c, cancels := e.(session.TurnCanceller)
	switch {
	case discards && cancels:
		return struct {
			*timedEngine
			session.AudioDiscarder
			session.TurnCanceller
		}{t, d, c}
	case discards:
		return struct {
			*timedEngine
			session.AudioDiscarder
		}{t, d}
	case cancels:
		return struct {
			*timedEngine
			session.TurnCanceller
		}{t, c}
	}
	return t
}

type timedEngine struct {
	session.Engine
	appends chan time.Time
}

func (e *timedEngine) AppendAudio(ctx context.Context, pcm []float32) error {
	err := e.Engine.AppendAudio(ctx, pcm)
	select {
	case e.appends <- time.Now():
	default:
	}
	return err
}

func run(o options) error {
	ctx := context.Background()
	log := zap.NewNop()
	dir := o.cacheDir
	if dir == "" {
		d, err := os.MkdirTemp("", "bench-realtime")
		if err != nil {
			return err
		}
		defer os.RemoveAll(d)
		dir = d
	}
	runner, err := gpu.Load(ctx, gpu.Config{Model: o.model, CacheDir: dir, Device: "cpu"}, log)
	if err != nil {
		return err
	}
	defer runner.Close()
	asr, err := speech.NewASR(speech.ASRConfig{PoolSize: o.maxSessions + 4}, log)
	if err != nil {
		return err
	}
	defer asr.Close()
	tts, err := speech.NewTTS(speech.TTSConfig{Voice: "cmu_us_slt", OutputRate: 24000})
	if err != nil {
		return err
	}
	pcfg, err := stage.LoadPipelineConfig(o.config)
	if err != nil {
		return err
	}
	p, err := stage.New(pcfg, stage.Deps{Engine: runner, ASR: asr, TTS: tts}, log)
	if err != nil {
		return err
	}
	defer p.Close()
	pcm, err := os.ReadFile(o.speech)
	if err != nil {
		return err
	}
	rc := requestclient.New(p, requestclient.Options{ModelName: o.model}, log)
	tb := &timedBackend{Backend: session.NewPipelineBackend(rc, p), appends: make(chan time.Time, 1), decisions: map[string]*atomic.Int64{}}
	m, url, stop := serveRealtime(ctx, tb, 4*o.maxSessions, log)
	defer stop()

	// The same server with --log-stats: its own request client (turn tables rendered and encoded
	// as JSON, written to io.Discard) and session manager over the same pipeline.
	statsLog := zap.New(zapcore.NewCore(zapcore.NewJSONEncoder(zap.NewProductionEncoderConfig()), zapcore.AddSync(io.Discard), zapcore.InfoLevel))
	rcOn := requestclient.New(p, requestclient.Options{ModelName: o.model, LogStats: true}, statsLog)
	_, urlOn, stopOn := serveRealtime(ctx, session.NewPipelineBackend(rcOn, p), 4, log)
	defer stopOn()
	allocsOff, err := turnMetricsAllocsPerChunk(ctx, rc, "off")
	if err != nil {
		return fmt.Errorf("turn metrics allocs: %w", err)
	}
	allocsOn, err := turnMetricsAllocsPerChunk(ctx, rcOn, "on")
	if err != nil {
		return fmt.Errorf("turn metrics allocs: %w", err)
	}
	heapKiB, err := statsHeapGrowthPerSessionHour(ctx, rcOn)
	if err != nil {
		return fmt.Errorf("stats heap growth: %w", err)
	}
	lsOff, lsOn, err := benchLogStatsOverhead(ctx, url, urlOn, pcm, o.logStatsN)
	if err != nil {
		return fmt.Errorf("log-stats overhead: %w", err)
	}

	over, err := benchOverhead(ctx, url, pcm, tb.appends, o.overheadN)
	if err != nil {
		return fmt.Errorf("overhead: %w", err)
	}
	ttfp, err := benchTTFP(ctx, url, pcm, o.ttfpN)
	if err != nil {
		return fmt.Errorf("ttfp: %w", err)
	}
	pacedStart := time.Now()
	paced, err := benchTTFPPaced(ctx, url, pcm, o.pacedTurns)
	pacedFor := time.Since(pacedStart)
	if err != nil {
		return fmt.Errorf("paced ttfp: %w", err)
	}
	barge, err := benchBargeIn(ctx, url, pcm, o.bargeN)
	if err != nil {
		return fmt.Errorf("barge-in: %w", err)
	}
	sessions, err := benchSessions(ctx, url, tb, m, pcm, o.maxSessions, time.Duration(o.rampSeconds*float64(time.Second)))
	if err != nil {
		return fmt.Errorf("sessions: %w", err)
	}
	fmt.Printf("event overhead: n=%d p50=%.0fus p99=%.0fus\n", len(over), pct(over, 50), pct(over, 99))
	fmt.Printf("ttfp: n=%d p50=%.1fms p99=%.1fms\n", len(ttfp), pct(ttfp, 50), pct(ttfp, 99))
	fmt.Printf("ttfp paced (turns 2..%d, one session, %.1fs): n=%d p50=%.1fms p99=%.1fms\n",
		o.pacedTurns, pacedFor.Seconds(), len(paced), pct(paced, 50), pct(paced, 99))
	fmt.Printf("barge-in: n=%d p50=%.1fms p99=%.1fms\n", len(barge), pct(barge, 50), pct(barge, 99))
	fmt.Printf("rt_event_overhead_us_p99=%.0f\n", pct(over, 99))
	fmt.Printf("rt_ttfp_ms_p50=%.1f\n", pct(ttfp, 50))
	fmt.Printf("rt_ttfp_paced_ms_p50=%.1f\n", pct(paced, 50))
	fmt.Printf("rt_bargein_ms_p99=%.1f\n", pct(barge, 99))
	fmt.Printf("rt_sessions_realtime_2cores=%d\n", sessions)
	printTurnMetrics(allocsOff, allocsOn, lsOff, lsOn)
	fmt.Printf("stats_heap_growth_kib_per_session_hour=%.1f\n", heapKiB)
	return nil
}

// serveRealtime serves the realtime endpoint over b on a loopback httptest server and returns
// its manager, its ws:// URL and a stop that shuts the sessions down, then the server.
func serveRealtime(ctx context.Context, b session.Backend, maxSessions int, log *zap.Logger) (*session.Manager, string, func()) {
	m := session.NewManager(session.ManagerConfig{MaxSessions: maxSessions}, b, log)
	srv := httptest.NewServer(realtime.NewHandler(realtime.HandlerConfig{}, m, log))
	stop := func() {
		sctx, cancel := context.WithTimeout(ctx, 10*time.Second)
		defer cancel()
		_ = m.Shutdown(sctx)
		srv.Close()
	}
	return m, "ws" + strings.TrimPrefix(srv.URL, "http") + "/v1/realtime", stop
}

func pct(xs []float64, p float64) float64 {
	if len(xs) == 0 {
		return 0
	}
	s := slices.Clone(xs)
	slices.Sort(s)
	i := int(float64(len(s)-1) * p / 100)
	return s[i]
}

type client struct {
	ws  *websocket.Conn
	ctx context.Context
}

func dial(ctx context.Context, url string) (*client, error) {
	ws, _, err := websocket.Dial(ctx, url, nil)
	if err != nil {
		return nil, err
	}
	ws.SetReadLimit(64 << 20)
	return &client{ws: ws, ctx: ctx}, nil
}

func (c *client) send(ev map[string]any) error {
	b, err := json.Marshal(ev)
	if err != nil {
		return err
	}
	return c.ws.Write(c.ctx, websocket.MessageText, b)
}

func (c *client) read(timeout time.Duration) (map[string]any, error) {
	ctx, cancel := context.WithTimeout(c.ctx, timeout)
	defer cancel()
	_, b, err := c.ws.Read(ctx)
	if err != nil {
		return nil, err
	}
	var ev map[string]any
	return ev, json.Unmarshal(b, &ev)
}

func (c *client) until(typ string, timeout time.Duration) (map[string]any, error) {
	deadline := time.Now().Add(timeout)
	for {
		ev, err := c.read(time.Until(deadline))
		if err != nil {
			return nil, fmt.Errorf("waiting for %s: %w", typ, err)
		}
		if ev["type"] == typ {
			return ev, nil
		}
		if ev["type"] == "error" {
			return nil, fmt.Errorf("waiting for %s: error event %v", typ, ev["error"])
		}
	}
}

// speech16k declares the speech file's rate: pcm16 without a rate is OpenAI's 24 kHz.
func speech16k(sess map[string]any) map[string]any {
	if _, ok := sess["input_audio_format"]; !ok {
		sess["input_audio_format"] = map[string]any{"type": "pcm16", "rate": 16000}
	}
	return sess
}

func (c *client) open(sess map[string]any) error {
	if err := c.send(map[string]any{"type": "session.update", "session": speech16k(sess)}); err != nil {
		return err
	}
	_, err := c.until("session.updated", 10*time.Second)
	return err
}

func appendEv(b []byte) map[string]any {
	return map[string]any{"type": "input_audio_buffer.append", "audio": base64.StdEncoding.EncodeToString(b)}
}

// benchOverhead times single 100 ms appends in auto_response mode, one at a time, from the
// client's write to the session's engine append call; responses are off (text modality and the
// appends are silence, so the pipeline only listens).
func benchOverhead(ctx context.Context, url string, pcm []byte, appends chan time.Time, n int) ([]float64, error) {
	c, err := dial(ctx, url+"?duplex=1")
	if err != nil {
		return nil, err
	}
	defer c.ws.CloseNow()
	go func() { // drain server events
		for {
			if _, _, err := c.ws.Read(ctx); err != nil {
				return
			}
		}
	}()
	if err := c.send(map[string]any{"type": "session.update", "session": speech16k(map[string]any{"extra_body": map[string]any{"auto_response": true}})}); err != nil {
		return nil, err
	}
	time.Sleep(200 * time.Millisecond)
	chunk := make([]byte, 3200)
	var out []float64
	for i := range n + 5 {
		start := time.Now()
		if err := c.send(appendEv(chunk)); err != nil {
			return nil, err
		}
		select {
		case at := <-appends:
			if i >= 5 { // warm-up
				out = append(out, float64(at.Sub(start).Microseconds()))
			}
		case <-time.After(5 * time.Second):
			return nil, errors.New("no engine append seen")
		}
		time.Sleep(5 * time.Millisecond)
	}
	return out, nil
}

// benchTTFP: response_required turns, commit with response_create → first audio delta.
func benchTTFP(ctx context.Context, url string, pcm []byte, n int) ([]float64, error) {
	var out []float64
	for range n {
		c, err := dial(ctx, url)
		if err != nil {
			return nil, err
		}
		err = func() error {
			defer c.ws.CloseNow()
			if err := c.open(map[string]any{"turn_detection": nil, "max_response_output_tokens": 8}); err != nil {
				return err
			}
			for i := 0; i < len(pcm); i += 3200 {
				if err := c.send(appendEv(pcm[i:min(i+3200, len(pcm))])); err != nil {
					return err
				}
			}
			start := time.Now()
			if err := c.send(map[string]any{"type": "input_audio_buffer.commit", "response_create": true}); err != nil {
				return err
			}
			if _, err := c.until("response.output_audio.delta", 30*time.Second); err != nil {
				return err
			}
			out = append(out, float64(time.Since(start).Microseconds())/1000)
			return nil
		}()
		if err != nil {
			return nil, err
		}
	}
	return out, nil
}

// benchBargeIn: a response plays at real time (500 ms lead); after its third audio delta the
// client sends barge_in and times the arrival of response.done{cancelled}. It also checks that no
// audio delta of that response follows.
func benchBargeIn(ctx context.Context, url string, pcm []byte, n int) ([]float64, error) {
	c, err := dial(ctx, url+"?duplex=1")
	if err != nil {
		return nil, err
	}
	defer c.ws.CloseNow()
	if err := c.open(map[string]any{"turn_detection": nil, "max_response_output_tokens": 60}); err != nil {
		return nil, err
	}
	var out []float64
	for range n {
		for i := 0; i < len(pcm); i += 3200 {
			if err := c.send(appendEv(pcm[i:min(i+3200, len(pcm))])); err != nil {
				return nil, err
			}
		}
		if err := c.send(map[string]any{"type": "input_audio_buffer.commit", "response_create": true}); err != nil {
			return nil, err
		}
		var rid string
		for deltas := 0; deltas < 3; {
			ev, err := c.read(30 * time.Second)
			if err != nil {
				return nil, err
			}
			if ev["type"] == "response.output_audio.delta" {
				deltas++
				rid, _ = ev["response_id"].(string)
			}
		}
		start := time.Now()
		if err := c.send(map[string]any{"type": "barge_in"}); err != nil {
			return nil, err
		}
		done := false
		for !done {
			ev, err := c.read(10 * time.Second)
			if err != nil {
				return nil, err
			}
			switch ev["type"] {
			case "response.done":
				out = append(out, float64(time.Since(start).Microseconds())/1000)
				done = true
			}
		}
		// Anything of rid after its response.done is a stale-epoch bug.
		if err := c.send(map[string]any{"type": "session.heartbeat"}); err != nil {
			return nil, err
		}
		for {
			ev, err := c.read(10 * time.Second)
			if err != nil {
				return nil, err
			}
			if ev["type"] == "response.output_audio.delta" && ev["response_id"] == rid {
				return nil, fmt.Errorf("audio of %s after its response.done", rid)
			}
			if ev["type"] == "session.heartbeat_ack" {
				break
			}
		}
	}
	return out, nil
}

// benchSessions finds the largest number of concurrent auto_response sessions (1, 2, 4, 8, 12,
// 16, ...) whose stage-0 decisions keep up with real-time 100 ms audio: at the end of the stream
// every session's decisions must be within 1 s of its audio.
func benchSessions(ctx context.Context, url string, tb *timedBackend, m *session.Manager, pcm []byte, maxN int, streamFor time.Duration) (int, error) {
	unit := append(append([]byte{}, pcm...), make([]byte, 32000)...)
	best := 0
	for _, n := range []int{1, 2, 4, 6, 8, 12, 16, 24, 32} {
		if n > maxN {
			break
		}
		for deadline := time.Now().Add(10 * time.Second); m.Active() > 0 && time.Now().Before(deadline); {
			time.Sleep(20 * time.Millisecond) // the previous step's sessions are still closing
		}
		ok, err := realTimeAt(ctx, url, tb, unit, n, streamFor)
		if err != nil {
			return best, err
		}
		fmt.Printf("sessions=%d realtime=%v\n", n, ok)
		if !ok {
			break
		}
		best = n
	}
	return best, nil
}

func realTimeAt(ctx context.Context, url string, tb *timedBackend, unit []byte, n int, streamFor time.Duration) (bool, error) {
	var wg sync.WaitGroup
	lagOK := make([]bool, n)
	errs := make([]error, n)
	for i := range n {
		wg.Add(1)
		go func() {
			defer wg.Done()
			c, err := dial(ctx, url+"?duplex=1")
			if err != nil {
				errs[i] = err
				return
			}
			defer c.ws.CloseNow()
			if err := c.send(map[string]any{"type": "session.update", "session": speech16k(map[string]any{
				"extra_body": map[string]any{"auto_response": true}, "max_response_output_tokens": 4})}); err != nil {
				errs[i] = err
				return
			}
			created, err := c.until("session.created", 10*time.Second)
			if err != nil {
				errs[i] = err
				return
			}
			sid, _ := created["session"].(map[string]any)["id"].(string)
			decisions := tb.counter(sid)
			readDone := make(chan struct{})
			go func() { // the speaker: drain
				defer close(readDone)
				for {
					if _, _, err := c.ws.Read(ctx); err != nil {
						return
					}
				}
			}()
			sent := 0
			start := time.Now()
			for off := 0; time.Since(start) < streamFor; off = (off + 3200) % len(unit) {
				if err := c.send(appendEv(unit[off:min(off+3200, len(unit))])); err != nil {
					errs[i] = err
					return
				}
				sent++
				time.Sleep(time.Until(start.Add(time.Duration(sent) * 100 * time.Millisecond)))
			}
			// Real time: within 1 s after the stream ends, stage 0 has decided on all but at most
			// one unit.
			deadline := time.Now().Add(time.Second)
			for time.Now().Before(deadline) {
				if decisions.Load() >= int64(sent-1) {
					lagOK[i] = true
					break
				}
				time.Sleep(20 * time.Millisecond)
			}
			_ = c.ws.CloseNow()
			<-readDone
		}()
	}
	wg.Wait()
	for _, err := range errs {
		if err != nil {
			return false, err
		}
	}
	for _, ok := range lagOK {
		if !ok {
			return false, nil
		}
	}
	return true, nil
}
