// Package realtime is `omniserve bench realtime`: the realtime WebSocket endpoint of servers
// built as `omniserve serve` builds them (one plain, one with --log-stats, and twins with and
// without tracing), driven by real coder/websocket clients over loopback with real speech. The plain server's session backend is
// wrapped by a Timer (internal/server's WrapBackend) that stamps each engine append and counts
// stage-0 decisions, the two things a client cannot see.
package realtime

import (
	"context"
	"fmt"
	"io"
	"sync"
	"sync/atomic"
	"time"

	"github.com/omniserve/omniserve/internal/bench"
	"github.com/omniserve/omniserve/internal/benchreport"
	"github.com/omniserve/omniserve/internal/duplex"
	"github.com/omniserve/omniserve/internal/requestclient"
	"github.com/omniserve/omniserve/internal/session"
)

// Options are the measurement's shape.
type Options struct {
	OverheadN    int           // append events timed for the event overhead
	TTFPN        int           // turns timed for TTFP, a fresh session each
	PacedTurns   int           // turns of the paced TTFP session (the first is dropped)
	BargeN       int           // barge-ins timed
	LogStatsN    int           // turns per side timed with and without --log-stats
	TracingN     int           // turns per side timed with and without tracing; 0 skips it
	MaxSessions  int           // largest concurrency tried for real time
	Ramp         time.Duration // audio streamed per concurrency step
	RSSSessions  []int         // live-session counts at which the RSS per session is measured; none skips it
	TxSessions   int           // largest concurrency of the transcription-session ramp (txSteps); 0 skips it
	TxUtterances int           // utterances each transcription session streams
	Meter        bench.Meter   // progress of the steps; nil shows none
}

// Target is one server under test.
type Target struct {
	URL      string // ws://host:port/v1/realtime
	Client   *requestclient.Client
	Sessions *session.Manager
	ASR      ASRPool // the server's ASR decoder pool; nil when the ASR is remote
	// TurnSpans counts the realtime.turn spans the server's OTLP receiver has decoded; nil
	// when the server does not trace.
	TurnSpans func() int
}

// ASRPool is what the RSS measurement reads of the server's ASR (speech.ASR).
type ASRPool interface {
	Decoders() int // decoders built, idle or in use
	InUse() int    // decoders held by open streams
}

// Timer wraps a session backend to timestamp engine appends (the end of the event path) and to
// count the stage-0 decisions each session's engine produces (one per audio unit), before the
// session filters them, to tell whether stage 0 keeps up with real time.
type Timer struct {
	appends chan time.Time

	mu        sync.Mutex
	decisions map[string]*atomic.Int64 // session id → decisions
}

// NewTimer returns an empty Timer; pass its Wrap as internal/server's Options.WrapBackend.
func NewTimer() *Timer {
	return &Timer{appends: make(chan time.Time, 1), decisions: map[string]*atomic.Int64{}}
}

// Wrap returns b with every session's engine timed.
func (t *Timer) Wrap(b session.Backend) session.Backend { return &timedBackend{Backend: b, t: t} }

func (t *Timer) counter(sessionID string) *atomic.Int64 {
	t.mu.Lock()
	defer t.mu.Unlock()
	c, ok := t.decisions[sessionID]
	if !ok {
		c = new(atomic.Int64)
		t.decisions[sessionID] = c
	}
	return c
}

type timedBackend struct {
	session.Backend
	t *Timer
}

func (b *timedBackend) Open(ctx context.Context, f requestclient.Fence, o duplex.Options, out func(duplex.Output)) (session.Engine, error) {
	cnt := b.t.counter(f.SessionID)
	e, err := b.Backend.Open(ctx, f, o, func(x duplex.Output) {
		if x.Kind == duplex.OutDecision {
			cnt.Add(1)
		}
		out(x)
	})
	if err != nil {
		return nil, err
	}
	return wrapTimed(e, b.t.appends), nil
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

func (e *timedEngine) AppendAudio(ctx context.Context, turn int, pcm []float32) error {
	err := e.Engine.AppendAudio(ctx, turn, pcm)
	select {
	case e.appends <- time.Now():
	default:
	}
	return err
}

// Targets are the servers under test.
type Targets struct {
	Plain    Target // the timer wraps its backend
	LogStats Target // --log-stats --log-format json
	// Traced exports to an OTLP receiver on loopback; Untraced is its twin without tracing
	// (the same config otherwise). Used only with Options.TracingN > 0.
	Traced, Untraced Target
}

// Run measures the targets (the timer wraps ts.Plain's backend) with pcm (16 kHz PCM16 speech)
// and returns the figures; progress lines go to out.
func Run(ctx context.Context, o Options, ts Targets, timer *Timer, pcm []byte, out io.Writer) ([]bench.Figure, error) {
	plain, logStats := ts.Plain, ts.LogStats
	// One step per measurement, turn, pair of turns or concurrency step (the steps after the
	// first that fails to keep up are skipped).
	steps := 0
	for _, n := range sessionSteps() {
		if n <= o.MaxSessions {
			steps++
		}
	}
	var rssSteps []int
	for _, n := range o.RSSSessions {
		if n > 0 { // 0 skips the step (a flag cannot be set to an empty list)
			rssSteps = append(rssSteps, n)
		}
	}
	if plain.ASR == nil {
		rssSteps = nil
	}
	tracingSteps := 0
	if o.TracingN > 0 {
		tracingSteps = 1 + o.TracingN + 1 + 1
	}
	txCount := len(txSteps(o.TxSessions))
	if txCount > 0 {
		txCount++ // the reference session
	}
	prog := o.Meter.Start("realtime", len(rssSteps)+4+o.LogStatsN+1+tracingSteps+o.TTFPN+o.PacedTurns+o.BargeN+steps+txCount, "steps")
	defer prog.Done()
	var figs []bench.Figure
	if len(rssSteps) > 0 {
		per, err := rssPerSession(ctx, plain.URL, timer, plain.Sessions, plain.ASR, pcm, rssSteps, out, prog)
		if err != nil {
			return nil, fmt.Errorf("rss per session: %w", err)
		}
		for i, n := range rssSteps {
			figs = append(figs, bench.One(fmt.Sprintf("rss_per_session_mib_%d", n), "MiB", fmt.Sprintf(
				"resident memory per live session at %d auto_response sessions, each having decoded the speech: "+
					"(RSS then − RSS before) / (%d − ASR decoders built before) (target ≤ 40)", n, n), per[i], 1))
		}
	}
	allocsOff, err := turnMetricsAllocsPerChunk(ctx, plain.Client, "off")
	if err != nil {
		return nil, fmt.Errorf("turn metrics allocs: %w", err)
	}
	prog.Add(1)
	allocsOn, err := turnMetricsAllocsPerChunk(ctx, logStats.Client, "on")
	if err != nil {
		return nil, fmt.Errorf("turn metrics allocs: %w", err)
	}
	prog.Add(1)
	heapKiB, err := statsHeapGrowthPerSessionHour(ctx, logStats.Client)
	if err != nil {
		return nil, fmt.Errorf("stats heap growth: %w", err)
	}
	prog.Add(1)
	lsOff, lsOn, err := benchPairedTurns(ctx, plain.URL, logStats.URL, pcm, o.LogStatsN, prog)
	if err != nil {
		return nil, fmt.Errorf("log-stats overhead: %w", err)
	}
	var tracingFigs []bench.Figure
	if o.TracingN > 0 {
		if tracingFigs, err = benchTracing(ctx, ts.Untraced, ts.Traced, pcm, o.TracingN, prog, out); err != nil {
			return nil, fmt.Errorf("tracing overhead: %w", err)
		}
	}
	over, err := benchOverhead(ctx, plain.URL, pcm, timer.appends, o.OverheadN)
	if err != nil {
		return nil, fmt.Errorf("overhead: %w", err)
	}
	prog.Add(1)
	ttfp, err := benchTTFP(ctx, plain.URL, pcm, o.TTFPN, prog)
	if err != nil {
		return nil, fmt.Errorf("ttfp: %w", err)
	}
	pacedStart := time.Now()
	paced, err := benchTTFPPaced(ctx, plain.URL, pcm, o.PacedTurns, prog)
	pacedFor := time.Since(pacedStart)
	if err != nil {
		return nil, fmt.Errorf("paced ttfp: %w", err)
	}
	barge, err := benchBargeIn(ctx, plain.URL, pcm, o.BargeN, prog)
	if err != nil {
		return nil, fmt.Errorf("barge-in: %w", err)
	}
	sessions, err := benchSessions(ctx, plain.URL, timer, plain.Sessions, pcm, o.MaxSessions, o.Ramp, out, prog)
	if err != nil {
		return nil, fmt.Errorf("sessions: %w", err)
	}
	var txFigs []bench.Figure
	if o.TxSessions > 0 {
		tx, best, err := benchTxSessions(ctx, plain.URL, plain.Sessions, pcm, o.TxSessions, o.TxUtterances, out, prog)
		if err != nil {
			return nil, fmt.Errorf("transcription sessions: %w", err)
		}
		txFigs = txFigures(tx, best, o.TxUtterances)
	}
	q := benchreport.Quantile
	fmt.Fprintf(out, "event overhead: n=%d p50=%.0fus p99=%.0fus\n", len(over), q(over, 50), q(over, 99))
	fmt.Fprintf(out, "ttfp: n=%d p50=%.1fms p99=%.1fms\n", len(ttfp), q(ttfp, 50), q(ttfp, 99))
	fmt.Fprintf(out, "ttfp paced (turns 2..%d, one session, %.1fs): n=%d p50=%.1fms p99=%.1fms\n",
		o.PacedTurns, pacedFor.Seconds(), len(paced), q(paced, 50), q(paced, 99))
	fmt.Fprintf(out, "barge-in: n=%d p50=%.1fms p99=%.1fms\n", len(barge), q(barge, 50), q(barge, 99))
	figs = append(figs, []bench.Figure{
		{Name: "rt_event_overhead_us", Unit: "us", Samples: over, Keys: []bench.Stat{bench.P99}, Digits: 0,
			Definition: "client write of one 100 ms input_audio_buffer.append → the session's engine append call (auto_response, silence), one at a time"},
		{Name: "rt_ttfp_ms", Unit: "ms", Samples: ttfp, Keys: []bench.Stat{bench.P50}, Digits: 1,
			Definition: "response_required turn, fresh session: input_audio_buffer.commit{response_create} after the clip sent as a burst → first response.output_audio.delta"},
		{Name: "rt_ttfp_paced_ms", Unit: "ms", Samples: paced, Keys: []bench.Stat{bench.P50}, Digits: 1,
			Definition: "the same on turns 2.. of one session with the clip appended at speaking pace"},
		{Name: "rt_bargein_ms", Unit: "ms", Samples: barge, Keys: []bench.Stat{bench.P99}, Digits: 1,
			Definition: "barge_in sent after the 3rd audio delta of a reply → response.done{cancelled}; no old audio may follow"},
		bench.One("realtime_sessions", "sessions", "largest step of concurrent auto_response sessions whose stage-0 decisions keep up with real-time audio", float64(sessions), 0),
	}...)
	figs = append(figs, txFigs...)
	figs = append(figs, turnMetricsFigures(allocsOff, allocsOn, lsOff, lsOn, out)...)
	figs = append(figs, tracingFigs...)
	figs = append(figs, bench.One("stats_heap_growth_kib_per_session_hour", "KiB",
		"heap growth of one --log-stats session's statistics fed an hour of 100 ms units (target ≤ 64)", heapKiB, 1))
	return figs, nil
}
