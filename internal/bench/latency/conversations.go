package latency

// `omniserve bench conversations`: how many live conversations one server holds. Each
// conversation is a user talking to the server at real time, as a microphone would: an
// utterance of real speech, the server VAD ends the turn, the reply is played on receipt, a
// pause of 0.5–1 s after it has played, the next utterance; every fifth turn the user speaks
// over the reply instead (the barge-in is also the next turn). Steps of N conversations at once
// run for a fixed time each; a step keeps up when every rule of keepsUp holds, and the largest
// step that kept up is conversations_<dialect>.

import (
	"context"
	"errors"
	"fmt"
	"io"
	"math"
	"math/rand/v2"
	"os"
	"slices"
	"strconv"
	"strings"
	"sync"
	"time"

	"github.com/omniserve/omniserve/internal/bench"
	"github.com/omniserve/omniserve/internal/benchreport"
	"github.com/omniserve/omniserve/internal/protocol"
)

// ConversationOptions say which server to load and how.
type ConversationOptions struct {
	Bin, Addr, Model, APIKey string // as Options
	// Dialect: "realtime" (plain /v1/realtime, OpenAI's semantics), "vllm" (/v1/realtime?duplex=1,
	// vllm-omni's native duplex endpoint spoken with OpenAI's event names) or "live" (GPT-Live).
	Dialect     string
	Utterances  []string // 16 kHz PCM16 clips the user says in turn
	Interrupt   string   // 16 kHz PCM16 speech said over every fifth reply
	Steps       []int    // conversations at once per step, ascending; the run stops at the first that fails
	StepTime    time.Duration
	SilenceMs   int // server VAD silence_duration_ms (Live: the server's default)
	ReplyTokens int // max_output_tokens of each reply (a reply of 2–4 s of audio); Live: the server's
	// WebRTCShare is the share of each step's conversations made over WebRTC calls (POST
	// /v1/realtime/calls) instead of the WebSocket: rounded, at least one when > 0. Realtime only.
	WebRTCShare float64
	// Window, when set, also reports each step by windows of this length (a soak: the first
	// and the last window's p99, and the server's RSS at each window's end).
	Window time.Duration
	Seed   uint64
	Meter  bench.Meter
}

// Check refuses options the run cannot honour.
func (o ConversationOptions) Check() error {
	switch {
	case o.WebRTCShare < 0 || o.WebRTCShare > 1 || math.IsNaN(o.WebRTCShare):
		return fmt.Errorf("--webrtc-share %v: want a share from 0 to 1", o.WebRTCShare)
	case o.WebRTCShare > 0 && o.Dialect != "realtime":
		return fmt.Errorf("--webrtc-share: WebRTC calls (POST /v1/realtime/calls) speak the realtime dialect, not %q", o.Dialect)
	case o.Window < 0 || (o.Window > 0 && o.Window > o.StepTime/2):
		return fmt.Errorf("--window %v: want at most half of --step-time (%v), so that a first and a last window exist", o.Window, o.StepTime)
	}
	return nil
}

// Keep-up rules of a step (issue 41).
const (
	keepAudibleSlackMs = 300 // speech end → first audible p99 ≤ silence window + this
	keepBargeInMs      = 300 // barge-in onset → old audio stops p99 ≤ this
	keepLateMs         = 400 // no append more than this behind the microphone's clock
)

// stepResult is one step's samples and failures.
type stepResult struct {
	n, rtcN                 int       // conversations, of which calls
	audible, bargeIn, late  []float64 // ms
	rtc, ws                 transportSamples
	turns, wrongTranscripts int
	firstWrong              string // the first transcript that differed, with its reference
	errs                    []string
	cpu                     time.Duration
	rssKiB                  int
	wall                    time.Duration
	// With ConversationOptions.Window: when each audible sample was taken (parallel to
	// audible) and the server's RSS at each window's end (a started server only).
	start     time.Time
	audibleAt []time.Time
	windowRSS []int
}

// transportSamples are one transport's share of a step's samples (ms).
type transportSamples struct{ audible, bargeIn []float64 }

// keepsUp reports whether the step kept up, and if not why.
func (r *stepResult) keepsUp(silenceMs int) (bool, string) {
	switch {
	case len(r.errs) > 0:
		return false, "error: " + r.errs[0]
	case r.turns == 0:
		return false, "no turn completed"
	case r.wrongTranscripts > 0:
		return false, fmt.Sprintf("%d transcripts differ from the reference; first %s", r.wrongTranscripts, r.firstWrong)
	case len(r.audible) > 0 && benchreport.Quantile(r.audible, 99) > float64(silenceMs+keepAudibleSlackMs):
		return false, fmt.Sprintf("speech end → first audible p99 %.0f ms > %d ms", benchreport.Quantile(r.audible, 99), silenceMs+keepAudibleSlackMs)
	case len(r.bargeIn) > 0 && benchreport.Quantile(r.bargeIn, 99) > keepBargeInMs:
		return false, fmt.Sprintf("barge-in onset → silence p99 %.0f ms > %d ms", benchreport.Quantile(r.bargeIn, 99), keepBargeInMs)
	case len(r.late) > 0 && slices.Max(r.late) > keepLateMs:
		return false, fmt.Sprintf("an append went %.0f ms behind the microphone's clock", slices.Max(r.late))
	}
	return true, ""
}

// RunConversations runs the steps and returns the figures; progress lines go to out.
func RunConversations(ctx context.Context, o ConversationOptions, out io.Writer) ([]bench.Figure, error) {
	if err := o.Check(); err != nil {
		return nil, err
	}
	clips := make([][]float32, 0, len(o.Utterances))
	for _, p := range o.Utterances {
		c, err := readRaw(p)
		if err != nil {
			return nil, err
		}
		clips = append(clips, c)
	}
	interrupt, err := readRaw(o.Interrupt)
	if err != nil {
		return nil, err
	}
	interrupt = interrupt[:min(len(interrupt), 5*inRate/2)]
	addr, pid := o.Addr, 0
	if addr == "" {
		stop, a, p, err := startServer(ctx, Options{Bin: o.Bin, Model: o.Model})
		if err != nil {
			return nil, err
		}
		defer stop()
		addr, pid = a, p
	}
	run := &convRun{o: o, addr: addr, pid: pid, clips: clips, interrupt: interrupt, refs: map[refKey]string{}}
	return run.steps(ctx, out)
}

// convRun is one run of the bench: the server, the speech, and the reference transcripts.
type convRun struct {
	o         ConversationOptions
	addr      string
	pid       int
	clips     [][]float32
	interrupt []float32

	mu   sync.Mutex
	refs map[refKey]string // clip → its first transcript in the run
}

// refKey is a clip (-1: the interruption) as one transport carries it: a call's speech is Opus
// coded, so its transcript has a reference of its own.
type refKey struct {
	clip int
	rtc  bool
}

// warmUp holds one conversation for its first turns before the steps: the engine's first
// prefill and the recognizer's first decode are not a step's figures; the transcripts it hears
// are the references.
const warmUp = 12 * time.Second

func (r *convRun) steps(ctx context.Context, out io.Writer) ([]bench.Figure, error) {
	if err := r.warmUp(ctx, false, out); err != nil {
		return nil, err
	}
	if r.o.WebRTCShare > 0 {
		if err := r.warmUp(ctx, true, out); err != nil {
			return nil, err
		}
	}
	prog := r.o.Meter.Start("conversations", len(r.o.Steps), "steps")
	defer prog.Done()
	var results []*stepResult
	kept := 0
	var failed *stepResult
	var why string
	for _, n := range r.o.Steps {
		res, err := r.step(ctx, n)
		if err != nil {
			return nil, err
		}
		results = append(results, res)
		prog.Add(1)
		ok, reason := res.keepsUp(r.o.SilenceMs)
		fmt.Fprintf(out, "step %d conversations%s: %d turns, speech end → audible p50 %.0f p99 %.0f ms, barge-in p99 %.0f ms, max lateness %.0f ms%s: %s\n",
			n, overRTC(res), res.turns, q(res.audible, 50), q(res.audible, 99), q(res.bargeIn, 99), maxOr0(res.late), byTransport(res), verdict(ok, reason))
		if r.o.Window > 0 {
			printWindows(out, res.windows(r.o.Window, r.o.StepTime))
		}
		if !ok {
			failed, why = res, reason
			break
		}
		kept = n
	}
	return r.figures(results, kept, failed, why), nil
}

// warmUp holds one conversation (over a call: rtc) for its first turns.
func (r *convRun) warmUp(ctx context.Context, rtc bool, out io.Writer) error {
	wctx, cancel := context.WithTimeout(ctx, warmUp)
	w := r.conversation(wctx, 0, 0, rtc)
	cancel()
	over := "WebSocket"
	if rtc {
		over = "WebRTC"
	}
	if w.err != nil {
		return fmt.Errorf("warm-up conversation (%s): %w", over, w.err)
	}
	fmt.Fprintf(out, "warm-up (%s): %d turns\n", over, w.turns)
	return nil
}

// overRTC says how many of a step's conversations were calls ("" for none).
func overRTC(res *stepResult) string {
	if res.rtcN == 0 {
		return ""
	}
	return fmt.Sprintf(" (%d over WebRTC)", res.rtcN)
}

// byTransport is each transport's speech end → audible and barge-in when a step had calls.
func byTransport(res *stepResult) string {
	if res.rtcN == 0 {
		return ""
	}
	s := fmt.Sprintf("; WebRTC: audible p50 %.0f p99 %.0f ms, barge-in p99 %.0f ms", q(res.rtc.audible, 50), q(res.rtc.audible, 99), q(res.rtc.bargeIn, 99))
	if res.rtcN < res.n {
		s += fmt.Sprintf("; WebSocket: audible p50 %.0f p99 %.0f ms, barge-in p99 %.0f ms", q(res.ws.audible, 50), q(res.ws.audible, 99), q(res.ws.bargeIn, 99))
	}
	return s
}

func verdict(ok bool, reason string) string {
	if ok {
		return "kept up"
	}
	return "FAILED (" + reason + ")"
}

func q(v []float64, p float64) float64 {
	if len(v) == 0 {
		return 0
	}
	return benchreport.Quantile(v, p)
}

func maxOr0(v []float64) float64 {
	if len(v) == 0 {
		return 0
	}
	return slices.Max(v)
}

// step runs n conversations at once for StepTime and measures the server's CPU and RSS.
func (r *convRun) step(ctx context.Context, n int) (*stepResult, error) {
	res := &stepResult{n: n, rtcN: rtcCount(n, r.o.WebRTCShare)}
	cpu0, rss0, err := r.usage()
	if err != nil {
		return nil, err
	}
	sctx, cancel := context.WithTimeout(ctx, r.o.StepTime)
	defer cancel()
	start := time.Now()
	res.start = start
	results := make([]*convResult, n)
	var wg sync.WaitGroup
	if r.o.Window > 0 {
		wg.Add(1)
		go func() {
			defer wg.Done()
			res.windowRSS = r.sampleRSS(sctx, r.o.Window)
		}()
	}
	for i := range n {
		wg.Add(1)
		go func() {
			defer wg.Done()
			// Start the conversations spread over the first second, as callers arrive.
			results[i] = r.conversation(sctx, i, time.Duration(i)*time.Second/time.Duration(max(n, 1)), isRTC(i, n, res.rtcN))
		}()
	}
	wg.Wait()
	res.wall = time.Since(start)
	cpu1, rss1, err := r.usage()
	if err != nil {
		return nil, err
	}
	res.cpu, res.rssKiB = cpu1-cpu0, rss1-rss0
	for _, c := range results {
		res.add(c)
	}
	return res, nil
}

func (res *stepResult) add(c *convResult) {
	res.audible = append(res.audible, c.audible...)
	res.audibleAt = append(res.audibleAt, c.audibleAt...)
	res.bargeIn = append(res.bargeIn, c.bargeIn...)
	res.late = append(res.late, c.late...)
	t := &res.ws
	if c.rtc {
		t = &res.rtc
	}
	t.audible = append(t.audible, c.audible...)
	t.bargeIn = append(t.bargeIn, c.bargeIn...)
	res.turns += c.turns
	res.wrongTranscripts += c.wrong
	if res.firstWrong == "" {
		res.firstWrong = c.firstWrong
	}
	if c.err != nil {
		res.errs = append(res.errs, c.err.Error())
	}
}

// sampleRSS reads the started server's RSS at the end of every window until ctx ends (none for
// a server at --addr): the step's own goroutine, which step waits for.
func (r *convRun) sampleRSS(ctx context.Context, window time.Duration) []int {
	if r.pid == 0 {
		return nil
	}
	var out []int
	t := time.NewTicker(window)
	defer t.Stop()
	for {
		select {
		case <-ctx.Done():
			return out
		case <-t.C:
			if kib, err := procRSSKiB(r.pid); err == nil {
				out = append(out, kib)
			}
		}
	}
}

// usage is the started server's CPU time and RSS (zero for a server at --addr).
func (r *convRun) usage() (time.Duration, int, error) {
	if r.pid == 0 {
		return 0, 0, nil
	}
	cpu, err := procCPU(r.pid)
	if err != nil {
		return 0, 0, err
	}
	rss, err := procRSSKiB(r.pid)
	return cpu, rss, err
}

// procRSSKiB reads a process's resident set size.
func procRSSKiB(pid int) (int, error) {
	b, err := os.ReadFile("/proc/" + strconv.Itoa(pid) + "/status")
	if err != nil {
		return 0, fmt.Errorf("reading RSS: %w", err)
	}
	for line := range strings.Lines(string(b)) {
		if v, ok := strings.CutPrefix(line, "VmRSS:"); ok {
			return strconv.Atoi(strings.TrimSpace(strings.TrimSuffix(strings.TrimSpace(v), "kB")))
		}
	}
	return 0, errors.New("reading RSS: no VmRSS line")
}

// reference checks a transcript of clip against the first one heard for it (the reference):
// it reports whether they agree, and the reference.
func (r *convRun) reference(clip refKey, text string) (bool, string) {
	text = strings.ToLower(strings.Join(strings.Fields(text), " "))
	r.mu.Lock()
	defer r.mu.Unlock()
	ref, ok := r.refs[clip]
	if !ok {
		r.refs[clip] = text
		return true, text
	}
	return ref == text, ref
}

// window is one window of a step: its audible samples and the server's RSS at its end.
type window struct {
	from, to time.Duration
	audible  []float64
	rssKiB   int // 0: not sampled
}

// windows splits a step's audible samples by when they were taken into windows of length w
// (the samples after the last whole window join it).
func (res *stepResult) windows(w, stepTime time.Duration) []window {
	n := max(1, int(stepTime/w))
	out := make([]window, n)
	for i := range out {
		out[i].from, out[i].to = time.Duration(i)*w, time.Duration(i+1)*w
		if i < len(res.windowRSS) {
			out[i].rssKiB = res.windowRSS[i]
		}
	}
	for i, at := range res.audibleAt {
		k := min(n-1, max(0, int(at.Sub(res.start)/w)))
		out[k].audible = append(out[k].audible, res.audible[i])
	}
	return out
}

func printWindows(out io.Writer, ws []window) {
	for i, w := range ws {
		rss := ""
		if w.rssKiB > 0 {
			rss = fmt.Sprintf(", server RSS %.1f MiB", float64(w.rssKiB)/1024)
		}
		fmt.Fprintf(out, "  window %d (%v–%v): %d turns, speech end → audible p50 %.0f p99 %.0f ms%s\n", i+1, w.from, w.to, len(w.audible), q(w.audible, 50), q(w.audible, 99), rss)
	}
	if len(ws) > 1 {
		first, last := ws[0], ws[len(ws)-1]
		fmt.Fprintf(out, "  last window's p99 / first's: %.3f\n", q(last.audible, 99)/math.Max(1, q(first.audible, 99)))
	}
}

// windowFigures are a step's figures by window (ConversationOptions.Window): each window's
// speech end → audible and RSS, the last window's p99 over the first's, and the RSS growth
// from the first window's end to the last's.
func windowFigures(p string, ws []window) []bench.Figure {
	var figs []bench.Figure
	for i, w := range ws {
		k := fmt.Sprintf("w%d_", i+1)
		figs = append(figs, bench.Figure{Name: p + k + "speech_end_to_audible_ms", Unit: "ms", Samples: w.audible, Keys: []bench.Stat{bench.P50, bench.P99}, Digits: 0,
			Definition: fmt.Sprintf("the turns whose reply became audible %v–%v into the step: end of the user's speech → first audible sample of the reply", w.from, w.to)})
		if w.rssKiB > 0 {
			figs = append(figs, bench.One(p+k+"rss_mib", "MiB", fmt.Sprintf("server RSS %v into the step", w.to), float64(w.rssKiB)/1024, 1))
		}
	}
	if len(ws) < 2 {
		return figs
	}
	first, last := ws[0], ws[len(ws)-1]
	if len(first.audible) > 0 && len(last.audible) > 0 {
		figs = append(figs, bench.One(p+"p99_last_over_first_window", "ratio", "speech end → first audible p99 of the last window over the first's", q(last.audible, 99)/q(first.audible, 99), 3))
	}
	if first.rssKiB > 0 && last.rssKiB > 0 {
		figs = append(figs, bench.One(p+"rss_growth_after_first_window_mib", "MiB", "server RSS at the last window's end minus at the first's (the first window is the warm-up)", float64(last.rssKiB-first.rssKiB)/1024, 1))
	}
	return figs
}

func (r *convRun) figures(results []*stepResult, kept int, failed *stepResult, why string) []bench.Figure {
	name := "conversations_" + r.o.Dialect
	figs := []bench.Figure{bench.One(name, "conversations",
		"the largest step of conversations at once that kept up (speech end → first audible p99 ≤ silence window + 300 ms, barge-in onset → silence p99 ≤ 300 ms, no append > 400 ms late, every transcript the reference, no error)",
		float64(kept), 0)}
	for _, s := range results {
		p := fmt.Sprintf("conv_%s_n%d_", r.o.Dialect, s.n)
		figs = append(figs,
			bench.Figure{Name: p + "speech_end_to_audible_ms", Unit: "ms", Samples: s.audible, Keys: []bench.Stat{bench.P50, bench.P99}, Digits: 0,
				Definition: fmt.Sprintf("%d conversations at once: end of the user's speech → first audible sample of the reply", s.n)},
			bench.Figure{Name: p + "bargein_onset_to_silence_ms", Unit: "ms", Samples: s.bargeIn, Keys: []bench.Stat{bench.P50, bench.P99}, Digits: 0,
				Definition: fmt.Sprintf("%d conversations at once: speech onset over a reply → the client stops playing it", s.n)})
		figs = append(figs, transportFigures(p, s)...)
		if r.o.Window > 0 {
			figs = append(figs, windowFigures(p, s.windows(r.o.Window, r.o.StepTime))...)
		}
		if r.pid != 0 && s.n > 0 {
			minutes := float64(s.n) * s.wall.Minutes()
			figs = append(figs,
				bench.One(p+"cpu_s_per_conversation_minute", "s", "server CPU seconds per conversation-minute in the step", s.cpu.Seconds()/minutes, 2),
				bench.One(p+"rss_mib_per_conversation", "MiB", "server RSS growth over the step per conversation", float64(s.rssKiB)/1024/float64(s.n), 1))
		}
	}
	if failed != nil {
		figs = append(figs, bench.One(name+"_failed_step", "conversations", "the first step that did not keep up ("+why+")", float64(failed.n), 0))
	}
	return figs
}

// transportFigures are a step's figures by transport when some of its conversations were calls:
// rtc_ keys for the calls, ws_ keys for the WebSocket's.
func transportFigures(p string, s *stepResult) []bench.Figure {
	if s.rtcN == 0 {
		return nil
	}
	figs := []bench.Figure{bench.One(p+"rtc_conversations", "conversations", fmt.Sprintf("of the %d conversations at once, those over WebRTC calls", s.n), float64(s.rtcN), 0)}
	kinds := []struct {
		key, what string
		t         transportSamples
	}{{"rtc_", "over WebRTC calls (the reply's RTP decoded on the client's playback clock)", s.rtc}, {"ws_", "over the WebSocket", s.ws}}
	if s.rtcN == s.n {
		kinds = kinds[:1]
	}
	for _, k := range kinds {
		figs = append(figs,
			bench.Figure{Name: p + k.key + "speech_end_to_audible_ms", Unit: "ms", Samples: k.t.audible, Keys: []bench.Stat{bench.P50, bench.P99}, Digits: 0,
				Definition: fmt.Sprintf("%d conversations at once, the turns %s: end of the user's speech → first audible sample of the reply", s.n, k.what)},
			bench.Figure{Name: p + k.key + "bargein_onset_to_silence_ms", Unit: "ms", Samples: k.t.bargeIn, Keys: []bench.Stat{bench.P50, bench.P99}, Digits: 0,
				Definition: fmt.Sprintf("%d conversations at once, the turns %s: speech onset over a reply → the client stops playing it", s.n, k.what)})
	}
	return figs
}

// convEvent is what a conversation needs of a server event, whatever the dialect.
type convEvent struct {
	kind      string // audio | transcript | transcript_delta | cleared | done | error
	at        time.Time
	pcm       []float32 // audio at outRate
	resp      string    // the response of audio / done ("" in Live)
	text      string    // transcript, or the error
	cancelled bool      // done: the response was cut
}

// convTransport is one conversation's connection.
type convTransport interface {
	appendAudio(ctx context.Context, pcm []float32, due time.Time) error // 16 kHz; due: its first sample's time on the microphone's clock
	events() <-chan convEvent
	close()
}

// convResult is one conversation's samples.
type convResult struct {
	rtc                    bool // over a WebRTC call
	audible, bargeIn, late []float64
	audibleAt              []time.Time // when each audible sample was taken
	turns, wrong           int
	firstWrong             string
	err                    error
}

// conversation runs one conversation until ctx ends.
func (r *convRun) conversation(ctx context.Context, idx int, delay time.Duration, rtc bool) *convResult {
	res := &convResult{rtc: rtc}
	select {
	case <-time.After(delay):
	case <-ctx.Done():
		return res
	}
	tr, err := r.dial(ctx, rtc)
	if err != nil {
		res.err = err
		return res
	}
	c := newConv(r, res, uint64(idx))
	if err := c.run(ctx, tr); err != nil && ctx.Err() == nil {
		res.err = err
	}
	tr.close()
	if f, ok := tr.(interface{ frameLate() []float64 }); ok {
		res.late = append(res.late, f.frameLate()...)
	}
	return res
}

func (r *convRun) dial(ctx context.Context, rtc bool) (convTransport, error) {
	if rtc {
		return dialRTCConv(ctx, "http://"+r.addr, r.o.APIKey, r.o.SilenceMs, r.o.ReplyTokens)
	}
	switch r.o.Dialect {
	case "live":
		cl, err := liveDial(ctx, r.addr, r.o.APIKey)
		if err != nil {
			return nil, err
		}
		return newLiveConv(cl), nil
	case "vllm", "realtime":
		url := "ws://" + r.addr + "/v1/realtime"
		if r.o.Dialect == "vllm" {
			url += "?duplex=1"
		}
		cl, err := dialConversation(ctx, url, serverVAD(r.o.SilenceMs), r.o.ReplyTokens)
		if err != nil {
			return nil, err
		}
		return newRealtimeConv(cl), nil
	}
	return nil, fmt.Errorf("unknown dialect %q (realtime, vllm or live)", r.o.Dialect)
}

// --- one conversation -----------------------------------------------------------------------

// conv is the user's side of one conversation: what the microphone says and when, and what
// the loudspeaker plays.
type conv struct {
	r   *convRun
	res *convResult
	rng *rand.Rand
	mic *liveMic
	rtc bool // over a call: the old audio's stop is heard on the playback clock

	turn        int       // turns begun
	clip        int       // the clip of the current turn (-1: the interruption)
	speechEnd   time.Time // the current utterance's last voiced sample is due then
	saidUntil   int       // mic sample where the current utterance ends
	waiting     bool      // the current turn's reply has not been heard yet
	lp          livePlayback
	replyResp   string    // the reply being heard (Realtime)
	oldResp     string    // the reply barged in on (Realtime): its late audio is not played
	onset       time.Time // a barge-in's onset, until the old reply stops
	lastAudible time.Time // Live: the track's last audible sample on the playback clock
	doneAt      time.Time // the reply being heard ended (its done, or silence in Live)
	nextAt      int       // mic sample where the next utterance starts (0: not scheduled)
	transcript  strings.Builder
}

func newConv(r *convRun, res *convResult, seed uint64) *conv {
	return &conv{r: r, res: res, rng: rand.New(rand.NewPCG(r.o.Seed, seed)), mic: &liveMic{start: time.Now()}, rtc: res.rtc}
}

// run feeds the microphone at pace and answers the server's events until ctx ends.
func (c *conv) run(ctx context.Context, tr convTransport) error {
	c.mic.start = time.Now()
	c.say(c.turn % len(c.r.clips))
	for {
		due := c.mic.due()
		for wait := time.Until(due); wait > 0; wait = time.Until(due) {
			select {
			case e, ok := <-tr.events():
				if !ok {
					return errors.New("connection ended")
				}
				if err := c.on(e); err != nil {
					return err
				}
			case <-time.After(wait):
			case <-ctx.Done():
				return nil
			}
		}
		c.tick()
		c.res.late = append(c.res.late, ms(time.Since(due)))
		if err := tr.appendAudio(ctx, c.mic.next(), due); err != nil {
			return err
		}
	}
}

// say begins turn c.turn with clip (-1: the interruption) at the microphone's next unit.
func (c *conv) say(clip int) {
	c.finishTranscript()
	pcm := c.r.interrupt
	if clip >= 0 {
		pcm = c.r.clips[clip]
	}
	at := c.mic.sent
	c.mic.say(at, pcm)
	c.clip, c.saidUntil = clip, at+len(pcm)
	c.speechEnd = dueAt(c.mic.start, at+lastVoiced(pcm))
	c.waiting = true
	c.lp = livePlayback{from: c.speechEnd}
	c.doneAt, c.nextAt = time.Time{}, 0
	c.turn++
	if clip < 0 {
		c.onset = dueAt(c.mic.start, at+max(0, firstVoiced(pcm)))
		c.oldResp, c.replyResp = c.replyResp, ""
	}
}

// bargeTurn reports whether the current turn's reply is to be interrupted.
func (c *conv) bargeTurn() bool { return c.turn%5 == 0 }

// Live's silences: the old reply has stopped liveGapMs after its last audible sample; a reply
// has ended after liveEndMs of silence (longer than its pauses between sentences).
const liveEndMs = 1000

// bargeInLost: a barge-in the server has not acted on this long after its onset counts as
// this long (it fails the step's rule) and the conversation goes on.
const bargeInLost = 3 * time.Second

// tick runs before each microphone unit: it ends what silence ends and schedules the next
// utterance.
func (c *conv) tick() {
	if c.rtc || c.r.o.Dialect == "live" {
		c.oldAudioStopped()
	}
	if c.r.o.Dialect == "live" {
		c.liveReplyEnded()
	}
	if !c.onset.IsZero() && time.Since(c.onset) > bargeInLost {
		c.res.bargeIn = append(c.res.bargeIn, ms(time.Since(c.onset)))
		c.onset = time.Time{}
	}
	switch {
	case c.nextAt > 0 && c.mic.sent >= c.nextAt:
		c.say(c.turn % len(c.r.clips))
	case c.nextAt == 0 && !c.doneAt.IsZero() && !c.lp.pb.end.After(time.Now()):
		// The reply has played out: a pause of 0.5–1 s, then the next utterance.
		pause := (500 + c.rng.IntN(500)) * inRate / 1000
		c.nextAt = c.mic.sent + pause
	case c.bargeTurn() && c.onset.IsZero() && !c.lp.firstAudible.IsZero() && time.Since(c.lp.firstAudible) >= time.Second && c.doneAt.IsZero():
		c.say(-1)
	}
}

// oldAudioStopped reads a barge-in on the playback clock (Live, and calls): the old reply stopped
// at its last audible sample once liveGapMs passed without another.
func (c *conv) oldAudioStopped() {
	if c.lastAudible.IsZero() || c.onset.IsZero() {
		return
	}
	if time.Since(c.lastAudible) >= liveGapMs*time.Millisecond {
		c.res.bargeIn = append(c.res.bargeIn, max(0, ms(c.lastAudible.Sub(c.onset))))
		c.onset = time.Time{}
	}
}

// liveReplyEnded: Live has no turn events; the reply being heard ended after liveEndMs of
// silence on the playback clock.
func (c *conv) liveReplyEnded() {
	if c.lastAudible.IsZero() {
		return
	}
	if c.onset.IsZero() && !c.waiting && c.doneAt.IsZero() && time.Since(c.lastAudible) >= liveEndMs*time.Millisecond {
		c.doneAt = c.lastAudible
	}
}

// on handles one server event.
func (c *conv) on(e convEvent) error {
	switch e.kind {
	case "error":
		return errors.New("server error: " + e.text)
	case "audio":
		c.onAudio(e)
	case "transcript":
		c.check(e.text)
	case "transcript_delta":
		c.transcript.WriteString(e.text)
	case "cleared", "done":
		return c.onEnd(e)
	}
	return nil
}

func (c *conv) onAudio(e convEvent) {
	if e.resp != "" && e.resp == c.oldResp {
		return // the old reply's audio after a barge-in is not played
	}
	c.lp.add(liveEvent{at: e.at, pcm: e.pcm})
	if c.lp.lastAudible.After(c.lastAudible) {
		c.lastAudible = c.lp.lastAudible
	}
	if c.waiting && !c.lp.firstAudible.IsZero() {
		c.waiting = false
		c.replyResp = e.resp
		c.res.audible = append(c.res.audible, ms(c.lp.firstAudible.Sub(c.speechEnd)))
		c.res.audibleAt = append(c.res.audibleAt, c.lp.firstAudible)
		c.res.turns++
	}
}

// onEnd: a Realtime reply ended (done) or was cleared.
func (c *conv) onEnd(e convEvent) error {
	if c.rtc {
		return c.onCallEnd(e)
	}
	if !c.onset.IsZero() && (e.kind == "cleared" || e.cancelled) {
		c.res.bargeIn = append(c.res.bargeIn, ms(e.at.Sub(c.onset)))
		c.onset = time.Time{}
		return nil
	}
	if e.kind == "done" && e.resp != "" && e.resp == c.replyResp {
		c.doneAt = e.at
	}
	if e.kind == "done" && c.waiting && !e.cancelled && e.resp != "" && e.resp != c.oldResp {
		return fmt.Errorf("turn %d: response %s ended with no audible audio", c.turn, e.resp)
	}
	return nil
}

// onCallEnd: on a call, the reply being heard has played out at output_audio_buffer.stopped; a
// barge-in's cleared is not its stop, which is heard on the playback clock (oldAudioStopped).
func (c *conv) onCallEnd(e convEvent) error {
	if e.kind != "done" || !c.onset.IsZero() {
		return nil
	}
	if c.waiting {
		return fmt.Errorf("turn %d: the reply's audio ended (output_audio_buffer.stopped) with nothing audible", c.turn)
	}
	c.doneAt = e.at
	return nil
}

// check compares a turn's transcript with its clip's reference.
func (c *conv) check(text string) {
	if ok, ref := c.r.reference(refKey{clip: c.clip, rtc: c.rtc}, text); !ok {
		c.res.wrong++
		if c.res.firstWrong == "" {
			over := "WebSocket"
			if c.rtc {
				over = "WebRTC"
			}
			c.res.firstWrong = fmt.Sprintf("%q against %q (%s, turn %d)", text, ref, over, c.turn)
		}
	}
}

func (c *conv) finishTranscript() {
	if c.transcript.Len() > 0 {
		c.check(c.transcript.String())
		c.transcript.Reset()
	}
}

// --- transports -----------------------------------------------------------------------------

// dialConversation opens a Realtime session for a conversation: server VAD with
// create_response and interrupt_response, input transcription, replies of replyTokens.
func dialConversation(ctx context.Context, url string, turnDetection any, replyTokens int) (*client, error) {
	cl, err := dial(ctx, url, 0, turnDetection)
	if err != nil {
		return nil, err
	}
	update := map[string]any{"type": "session.update", "session": map[string]any{
		"type": "realtime", "max_output_tokens": replyTokens,
		"audio": map[string]any{"input": map[string]any{"transcription": map[string]any{"model": "gpt-4o-transcribe", "language": "en"}}},
	}}
	if err := cl.send(ctx, update); err != nil {
		cl.close()
		return nil, err
	}
	if _, err := cl.waitFor(ctx, 20*time.Second, func(e event) bool { return e.typ == "session.updated" }); err != nil {
		cl.close()
		return nil, fmt.Errorf("session.update: %w", err)
	}
	return cl, nil
}

// convPipe turns a client's events into a conversation's until they end or halt: the one
// goroutine of a conversation's transport, owned by its close.
type convPipe struct {
	out  chan convEvent
	stop chan struct{}
	wg   sync.WaitGroup
}

func startPipe[E any](in <-chan E, conv func(E) (convEvent, bool)) *convPipe {
	p := &convPipe{out: make(chan convEvent, 256), stop: make(chan struct{})}
	p.wg.Add(1)
	go func() {
		defer p.wg.Done()
		defer close(p.out)
		for e := range in {
			ce, ok := conv(e)
			if !ok {
				continue
			}
			select {
			case p.out <- ce:
			case <-p.stop:
				return
			}
		}
	}()
	return p
}

func (p *convPipe) events() <-chan convEvent { return p.out }

// halt stops the pipe once closeClient has ended its input, and waits for its goroutine.
func (p *convPipe) halt(closeClient func()) {
	close(p.stop)
	closeClient()
	p.wg.Wait()
}

type realtimeConv struct {
	*convPipe
	cl *client
}

func newRealtimeConv(cl *client) *realtimeConv {
	return &realtimeConv{convPipe: startPipe(cl.events, realtimeEvent), cl: cl}
}

func realtimeEvent(e event) (convEvent, bool) {
	ce := convEvent{at: e.at, resp: e.resp}
	switch v := e.ev.(type) {
	case protocol.ErrorEvent:
		ce.kind, ce.text = "error", v.Error.Code+": "+v.Error.Message
	case protocol.TranscriptionCompleted:
		ce.kind, ce.text = "transcript", v.Transcript
	case protocol.OutputAudioBufferCleared:
		ce.kind = "cleared"
	case protocol.ResponseDone:
		ce.kind, ce.cancelled = "done", v.Response.Status == "cancelled"
	default:
		if e.typ != "audio" {
			return ce, false
		}
		ce.kind, ce.pcm = "audio", e.pcm
	}
	return ce, true
}

func (t *realtimeConv) appendAudio(ctx context.Context, pcm []float32, _ time.Time) error {
	return t.cl.appendAudio(ctx, pcm, time.Now())
}
func (t *realtimeConv) close() { t.halt(t.cl.close) }

// liveConv is a GPT-Live conversation. Live has no turn events: a reply has ended when the
// track was silent liveEndMs after its audible samples, and a barge-in stopped the old reply at
// its last audible sample once liveGapMs passed without another (conv.liveTick).
type liveConv struct {
	*convPipe
	cl *liveClient
}

func newLiveConv(cl *liveClient) *liveConv {
	return &liveConv{convPipe: startPipe(cl.events, liveConvEvent), cl: cl}
}

func liveConvEvent(e liveEvent) (convEvent, bool) {
	ce := convEvent{at: e.at}
	switch e.typ {
	case "session.output_audio.delta":
		ce.kind, ce.pcm = "audio", e.pcm
	case "session.input_transcript.delta":
		ce.kind, ce.text = "transcript_delta", fmt.Sprint(e.raw["delta"])
	case "error":
		ce.kind, ce.text = "error", liveError(e).Error()
	default:
		return ce, false
	}
	return ce, true
}

func (t *liveConv) appendAudio(ctx context.Context, pcm []float32, _ time.Time) error {
	return t.cl.appendAudio(ctx, pcm)
}
func (t *liveConv) close() { t.halt(t.cl.close) }
