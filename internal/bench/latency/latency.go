// Package latency is `omniserve bench latency`: latency as a user hears it. It starts the
// omniserve binary (`serve`) as a child process, or uses a running server, and connects as an
// independent WebSocket client written from OpenAI's Realtime documents (GA event names; this
// package imports nothing of the server, only the figures of internal/bench and the WebRTC
// client internal/rtcclient), and as a WebRTC client making calls (webrtc.go). It streams real
// speech at real-time pace in 100 ms appends and times what it receives: the first audible
// sample of the reply (first sample above −40 dBFS, placed on a playback clock that starts at the
// first audio delta, as a client that plays on receipt hears it). Every session is also kept as
// a timeline for the report: the user's speech as sent, the server VAD's decisions placed by their
// audio_start_ms / audio_end_ms on the clock of the audio sent, the reply as played, barge-ins.
package latency

import (
	"context"
	"encoding/base64"
	"encoding/binary"
	"errors"
	"fmt"
	"io"
	"math/rand/v2"
	"net"
	"net/http"
	"os"
	"os/exec"
	"slices"
	"strconv"
	"sync"
	"time"

	"github.com/coder/websocket"

	"github.com/omniserve/omniserve/internal/bench"
	"github.com/omniserve/omniserve/internal/benchreport"
	"github.com/omniserve/omniserve/internal/protocol"
)

const (
	inRate   = 16000 // what the client sends (stated in the session's input format)
	outRate  = 24000 // what it asks for
	chunkMs  = 100
	audibleT = 0.01 // −40 dBFS
)

// Options say which server to measure and how often.
type Options struct {
	Bin       string // server binary started as a child process (unless Addr)
	Addr      string // host:port of a running server instead of starting one
	Model     string // model of the started server
	Speech    string // 16 kHz PCM16 speech: the user's turn
	Interrupt string // 16 kHz PCM16 speech used to interrupt
	Runs      int    // sessions per scenario
	SilenceMs int    // server VAD silence_duration_ms
	Tools     int    // function tools each session declares (tool_choice auto); 0 = none
	APIKey    string // bearer key of the server at Addr ("" for the started server: it has none)
	// CPUSessions is how many sessions at once measure the server's CPU per session, WebSocket
	// against WebRTC (0: not measured; only a started server, whose process is known, is).
	CPUSessions int
	// CompareTools runs each manual and server-VAD session twice, with Tools tools and with
	// none, alternating which goes first, so that both are measured under the same load in one
	// run (compare.go).
	CompareTools bool
	// Live also runs the server VAD turn and the barge-in by speech over GPT-Live
	// (/v1/live/sessions, live.go), next to the Realtime ?duplex=1 ones of the same run; a
	// server that does not serve it (404) is reported and skipped.
	Live  bool
	Meter bench.Meter // progress of the sessions; nil shows none
	// Env is added to the started server's environment (OMNISERVE_* settings).
	Env []string
}

// Run measures and returns the figures and every session's timeline; progress lines go to out.
func Run(ctx context.Context, o Options, out io.Writer) ([]bench.Figure, []benchreport.Session, error) {
	figs, tls, err := run(ctx, o, out)
	sessions := make([]benchreport.Session, 0, len(tls))
	for _, tl := range tls {
		sessions = append(sessions, tl.session())
	}
	return figs, sessions, err
}

func run(ctx context.Context, o Options, out io.Writer) ([]bench.Figure, []*timeline, error) {
	speech, err := readRaw(o.Speech)
	if err != nil {
		return nil, nil, err
	}
	interrupt, err := readRaw(o.Interrupt)
	if err != nil {
		return nil, nil, err
	}
	ctx, cancel := context.WithTimeout(ctx, 30*time.Minute)
	defer cancel()
	addr, pid := o.Addr, 0
	if addr == "" {
		stop, a, p, err := startServer(ctx, o)
		if err != nil {
			return nil, nil, err
		}
		defer stop()
		addr, pid = a, p
	}
	url := "ws://" + addr + "/v1/realtime?duplex=1"
	base := "http://" + addr
	res := map[string][]float64{}
	add := func(k string, v float64) { res[k] = append(res[k], v) }
	var tls []*timeline
	session := func(format string, i int) *timeline {
		tl := newTimeline(fmt.Sprintf(format, i+1))
		tls = append(tls, tl)
		return tl
	}
	// Per run: the manual and server-VAD sessions over the WebSocket (per tools variant) and
	// over a WebRTC call, and the four barge-in scenarios; then the CPU batches.
	vs := o.variants()
	total := (4 + 2*len(vs) + 2) * o.Runs
	if o.Live {
		total += 2 * o.Runs
	}
	if pid != 0 && o.CPUSessions > 0 {
		total += 4 * o.CPUSessions
	}
	prog := o.Meter.Start("latency", total, "sessions")
	defer prog.Done()

	// Manual turns: two per session, first and later.
	for i := range o.Runs {
		for _, v := range vs.order(i) {
			for turn, m := range manualTurns(ctx, url, v.tools, speech, 2, session("manual turns"+v.label+", run %d", i)) {
				if m.err != nil {
					return nil, tls, fmt.Errorf("manual run %d turn %d: %w", i, turn+1, m.err)
				}
				which := "first"
				if turn > 0 {
					which = "later"
				}
				add("commit_to_audible_"+which+v.suffix, m.audible)
				add("commit_to_audible"+v.suffix, m.audible)
				add("commit_to_first_delta"+v.suffix, m.firstDelta)
				add("commit_to_transcript"+v.suffix, m.transcript)
			}
			prog.Add(1)
		}
		// The same turns on a WebRTC call, right after: one run, the same machine state.
		for turn, m := range rtcManualTurns(ctx, base, o.APIKey, o.Tools, speech, 2, session("WebRTC manual turns, run %d", i)) {
			if m.err != nil {
				return nil, tls, fmt.Errorf("webrtc manual run %d turn %d: %w", i, turn+1, m.err)
			}
			add("rtc_commit_to_audible", m.audible)
			add("rtc_commit_to_first_packet", m.firstDelta)
			add("rtc_commit_to_transcript", m.transcript)
		}
		prog.Add(1)
	}
	fmt.Fprintf(out, "manual turns: %d sessions over WebSocket and %d over WebRTC done\n", o.Runs*len(vs), o.Runs)
	// Server VAD: speech then silence; the server takes the turn.
	for i := range o.Runs {
		for _, v := range vs.order(i) {
			m, err := vadTurn(ctx, url, v.tools, speech, o.SilenceMs, session("server VAD turn"+v.label+", run %d", i))
			if err != nil {
				return nil, tls, fmt.Errorf("vad run %d: %w", i, err)
			}
			add("speech_end_to_audible"+v.suffix, m)
			prog.Add(1)
		}
		r, err := rtcVADTurn(ctx, base, o.APIKey, o.Tools, speech, o.SilenceMs, session("WebRTC server VAD turn, run %d", i))
		if err != nil {
			return nil, tls, fmt.Errorf("webrtc vad run %d: %w", i, err)
		}
		add("rtc_speech_end_to_audible", r)
		prog.Add(1)
	}
	fmt.Fprintf(out, "server VAD turns: %d sessions over WebSocket and %d over WebRTC done\n", o.Runs*len(vs), o.Runs)
	// Barge-in by real speech, false positives by noise and by echo, speech over echo.
	var fpNoise, fpEcho, overEcho int
	for i := range o.Runs {
		b, err := bargeIn(ctx, url, o.Tools, speech, interrupt, o.SilenceMs, interruptSpeech, session("barge-in by speech, run %d", i))
		if err != nil {
			return nil, tls, fmt.Errorf("barge-in run %d: %w", i, err)
		}
		prog.Add(1)
		if b.interrupted {
			add("bargein_onset_to_silence", b.silence)
			add("bargein_onset_to_last_old_delta", b.lastOld)
		}
		n, err := bargeIn(ctx, url, o.Tools, speech, interrupt, o.SilenceMs, interruptNoise, session("noise bursts during a reply, run %d", i))
		if err != nil {
			return nil, tls, fmt.Errorf("noise run %d: %w", i, err)
		}
		prog.Add(1)
		if n.interrupted {
			fpNoise++
		}
		e, err := bargeIn(ctx, url, o.Tools, speech, interrupt, o.SilenceMs, interruptEcho, session("the reply's own echo, run %d", i))
		if err != nil {
			return nil, tls, fmt.Errorf("echo run %d: %w", i, err)
		}
		prog.Add(1)
		if e.interrupted {
			fpEcho++
		}
		se, err := bargeIn(ctx, url, o.Tools, speech, interrupt, o.SilenceMs, interruptSpeechOverEcho, session("barge-in by speech over the echo, run %d", i))
		if err != nil {
			return nil, tls, fmt.Errorf("speech-over-echo run %d: %w", i, err)
		}
		prog.Add(1)
		if se.interrupted {
			overEcho++
		}
	}
	fmt.Fprintf(out, "barge-in scenarios: %d replies each done\n", o.Runs)
	liveDetected, err := o.runLive(ctx, addr, speech, interrupt, add, session, prog, out)
	if err != nil {
		return nil, tls, err
	}
	defs := map[string]string{
		"commit_to_audible":               "manual turn: commit + response.create sent → first audible sample (all turns)",
		"commit_to_audible_first":         "the same, first turn of a fresh session",
		"commit_to_audible_later":         "the same, later turns",
		"speech_end_to_audible":           "server VAD: end of the last audible 10 ms window of the speech sent (RMS ≥ −40 dBFS) → first audible sample of the reply",
		"bargein_onset_to_silence":        "speech onset (first audible 10 ms window, RMS ≥ −40 dBFS) sent during a reply → the client may stop playing (output_audio_buffer.cleared or response.done cancelled; no old audio after it)",
		"commit_to_first_delta":           "manual turn: commit + response.create sent → first audio delta received (compute on the critical path)",
		"commit_to_transcript":            "manual turn: commit + response.create sent → the user transcript (ASR tail after the commit)",
		"bargein_onset_to_last_old_delta": "speech onset → the last audio delta of the interrupted reply",
	}
	defs["rtc_commit_to_audible"] = "WebRTC call, manual turn: commit + response.create sent on oai-events → first audible sample of the reply's RTP (arrival + offset in the packet; all turns)"
	defs["rtc_speech_end_to_audible"] = "WebRTC call, server VAD: end of the last audible 10 ms window of the speech sent as Opus RTP → first audible sample of the reply's RTP"
	defs["rtc_commit_to_first_packet"] = "WebRTC call, manual turn: commit + response.create sent → first RTP packet of the reply"
	defs["rtc_commit_to_transcript"] = "WebRTC call, manual turn: commit + response.create sent → the user transcript on oai-events"
	var figs []bench.Figure
	for _, k := range []string{"commit_to_audible", "rtc_commit_to_audible", "commit_to_audible_first", "commit_to_audible_later",
		"speech_end_to_audible", "rtc_speech_end_to_audible", "bargein_onset_to_silence"} {
		figs = append(figs, bench.Figure{Name: "lat_" + k + "_ms", Unit: "ms", Definition: defs[k], Samples: res[k], Keys: []bench.Stat{bench.P50, bench.P90}, Digits: 1})
	}
	for _, k := range []string{"commit_to_first_delta", "rtc_commit_to_first_packet", "commit_to_transcript", "rtc_commit_to_transcript", "bargein_onset_to_last_old_delta"} {
		figs = append(figs, bench.Figure{Name: "lat_" + k + "_ms", Unit: "ms", Definition: defs[k], Samples: res[k], Keys: []bench.Stat{bench.P50}, Digits: 1})
	}
	figs = append(figs, o.compareFigures(res, defs)...)
	figs = append(figs, o.liveFigures(res, liveDetected)...)
	runs := float64(o.Runs)
	figs = append(figs,
		bench.One("bargein_detected_speech", "share", "share of replies interrupted by real speech", float64(len(res["bargein_onset_to_silence"]))/runs, 2),
		bench.One("bargein_false_positive_noise", "replies", "replies interrupted by 100 ms white-noise bursts at −10 dBFS", float64(fpNoise), 0),
		bench.One("bargein_false_positive_echo", "replies", "replies interrupted by their own audio fed back at −6 dB, 120 ms late", float64(fpEcho), 0),
		bench.One("bargein_over_echo_detected", "share", "share of replies interrupted by real speech over that echo", float64(overEcho)/runs, 2),
		diffP50("rtc_added_commit_to_audible_p50_ms", "WebRTC's commit → first audible p50 minus WebSocket's, in this run", res["rtc_commit_to_audible"], res["commit_to_audible"]),
		diffP50("rtc_added_speech_end_to_audible_p50_ms", "WebRTC's speech end → first audible p50 minus WebSocket's, in this run", res["rtc_speech_end_to_audible"], res["speech_end_to_audible"]),
	)
	if pid != 0 && o.CPUSessions > 0 {
		cpu, err := cpuFigures(ctx, o, url, base, pid, speech, prog)
		if err != nil {
			return figs, tls, err
		}
		fmt.Fprintf(out, "CPU: %d sessions at once, twice over each transport, done\n", o.CPUSessions)
		figs = append(figs, cpu...)
	}
	return figs, tls, nil
}

// --- the server -----------------------------------------------------------------------------

func startServer(ctx context.Context, o Options) (stop func(), addr string, pid int, err error) {
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		return nil, "", 0, err
	}
	port := ln.Addr().(*net.TCPAddr).Port
	_ = ln.Close()
	addr = net.JoinHostPort("127.0.0.1", strconv.Itoa(port))
	cache, err := os.MkdirTemp("", "bench-latency-*")
	if err != nil {
		return nil, "", 0, err
	}
	cmd := exec.CommandContext(ctx, o.Bin, "serve", "--host", "127.0.0.1", "--port", strconv.Itoa(port),
		"--model", o.Model, "--cache-dir", cache, "--log-level", "warn")
	cmd.Stderr = os.Stderr
	if len(o.Env) > 0 {
		cmd.Env = append(os.Environ(), o.Env...)
	}
	if err := cmd.Start(); err != nil {
		_ = os.RemoveAll(cache)
		return nil, "", 0, fmt.Errorf("starting %s: %w", o.Bin, err)
	}
	done := make(chan struct{})
	go func() { _ = cmd.Wait(); close(done) }()
	stop = func() {
		_ = cmd.Process.Signal(os.Interrupt)
		select {
		case <-done:
		case <-time.After(30 * time.Second):
			_ = cmd.Process.Kill()
			<-done
		}
		_ = os.RemoveAll(cache)
	}
	deadline := time.Now().Add(3 * time.Minute)
	for time.Now().Before(deadline) {
		resp, err := http.Get("http://" + addr + "/ready")
		if err == nil {
			resp.Body.Close()
			if resp.StatusCode == http.StatusOK {
				return stop, addr, cmd.Process.Pid, nil
			}
		}
		select {
		case <-done:
			stop()
			return nil, "", 0, errors.New("server exited before ready")
		case <-time.After(100 * time.Millisecond):
		}
	}
	stop()
	return nil, "", 0, errors.New("server not ready in 3 minutes")
}

// --- the client ---------------------------------------------------------------------------

// event is one received server event with its arrival time.
type event struct {
	typ  string // the GA event type; "audio" for an audio delta
	at   time.Time
	ev   protocol.ServerEvent
	pcm  []float32 // decoded audio of an audio delta
	resp string    // response id of an audio delta / response.done
}

type client struct {
	*wsConn[event]

	mu    sync.Mutex
	sent  int        // input samples appended so far: the server's audio_*_ms clock
	units []sentUnit // every append: where it sits on that clock and on the wall clock
	vad   []vadMark  // the server VAD's decisions, in arrival order
}

// sentUnit is one append: its first sample's index on the session's input audio clock, and when
// that sample was due on the client's paced clock.
type sentUnit struct {
	pos int
	due time.Time
}

// vadMark is an input_audio_buffer.speech_started (at its audio_start_ms) or speech_stopped (at
// its audio_end_ms).
type vadMark struct {
	kind benchreport.Kind
	ms   float64
}

// dial opens a session; tools > 0 declares that many function tools with tool_choice auto (the
// overhead of declaring them: each reply reads them and is parsed for calls).
func dial(ctx context.Context, url string, tools int, turnDetection any) (*client, error) {
	c, _, err := websocket.Dial(ctx, url, nil)
	if err != nil {
		return nil, fmt.Errorf("dial: %w", err)
	}
	cl := &client{}
	cl.wsConn = startConn(ctx, c, cl.decode)
	format := map[string]any{"type": "audio/pcm", "rate": inRate}
	session := map[string]any{
		"type":              "realtime",
		"output_modalities": []string{"audio"},
		"audio": map[string]any{
			"input":  map[string]any{"format": format, "turn_detection": turnDetection},
			"output": map[string]any{"format": map[string]any{"type": "audio/pcm", "rate": outRate}},
		},
		"max_output_tokens": 24,
	}
	if tools > 0 {
		session["tools"] = benchTools(tools)
		session["tool_choice"] = "auto"
	}
	if turnDetection != nil {
		// omniserve's documented duplex extension for VAD-taken turns, for servers that still
		// need it; a server that honours create_response ignores nothing it does not know.
		session["extra_body"] = map[string]any{"auto_response": true}
	}
	if err := cl.send(ctx, map[string]any{"type": "session.update", "session": session}); err != nil {
		cl.close()
		return nil, err
	}
	if _, err := cl.waitFor(ctx, 20*time.Second, func(e event) bool { return e.typ == "session.updated" }); err != nil {
		cl.close()
		return nil, fmt.Errorf("session.update: %w", err)
	}
	return cl, nil
}

// decode is a frame as the client keeps it: audio decoded, the server VAD's marks noted.
func (cl *client) decode(b []byte, at time.Time) (event, bool) {
	pe, _, err := protocol.DecodeServerEvent(b)
	if err != nil {
		return event{}, false
	}
	e := event{at: at, ev: pe, typ: pe.EventType()}
	switch v := pe.(type) {
	case protocol.InputAudioBufferSpeechStarted:
		cl.mu.Lock()
		cl.vad = append(cl.vad, vadMark{kind: benchreport.SpeechStarted, ms: float64(v.AudioStartMs)})
		cl.mu.Unlock()
	case protocol.InputAudioBufferSpeechStopped:
		cl.mu.Lock()
		cl.vad = append(cl.vad, vadMark{kind: benchreport.SpeechStopped, ms: float64(v.AudioEndMs)})
		cl.mu.Unlock()
	case protocol.ResponseOutputAudioDelta:
		e.typ, e.resp = "audio", v.ResponseID
		e.pcm = pcmOf(v.Delta)
	case protocol.ResponseDone:
		e.resp = v.Response.ID
	}
	return e, true
}

// pcmOf is base64 PCM16 (little-endian) as samples in [-1, 1).
func pcmOf(b64 string) []float32 {
	b, _ := base64.StdEncoding.DecodeString(b64)
	pcm := make([]float32, len(b)/2)
	for i := range pcm {
		pcm[i] = float32(int16(binary.LittleEndian.Uint16(b[2*i:]))) / 32768
	}
	return pcm
}

// appendAudio sends pcm, whose first sample was due at due on the client's paced clock.
func (cl *client) appendAudio(ctx context.Context, pcm []float32, due time.Time) error {
	cl.mu.Lock()
	cl.units = append(cl.units, sentUnit{pos: cl.sent, due: due})
	cl.sent += len(pcm)
	cl.mu.Unlock()
	b := make([]byte, 2*len(pcm))
	for i, v := range pcm {
		binary.LittleEndian.PutUint16(b[2*i:], uint16(int16(max(-1, min(1, v))*32767)))
	}
	return cl.send(ctx, map[string]any{"type": "input_audio_buffer.append", "audio": base64.StdEncoding.EncodeToString(b)})
}

// serverError is the error of an error event.
func serverError(e event) error {
	if v, ok := e.ev.(protocol.ErrorEvent); ok {
		return fmt.Errorf("server error: %s: %s", v.Error.Code, v.Error.Message)
	}
	return fmt.Errorf("server error: %s", e.typ)
}

// waitFor returns the first event that matches, failing on an error event or the timeout.
func (cl *client) waitFor(ctx context.Context, d time.Duration, match func(event) bool) (event, error) {
	return cl.wsConn.waitFor(ctx, d, match, func(e event) error {
		if e.typ == "error" {
			return serverError(e)
		}
		return nil
	})
}

// waitEvent returns the first event of in that matches, failing on an event errOf calls an
// error (returned with it), the end of in (readErr says why) or the timeout: the one wait of
// the Realtime and the GPT-Live clients.
func waitEvent[E any](ctx context.Context, in <-chan E, d time.Duration, match func(E) bool, errOf func(E) error, readErr func() error) (E, error) {
	t := time.NewTimer(d)
	defer t.Stop()
	var zero E
	for {
		select {
		case e, ok := <-in:
			if !ok {
				return zero, fmt.Errorf("connection ended: %v", readErr())
			}
			if err := errOf(e); err != nil {
				return e, err
			}
			if match(e) {
				return e, nil
			}
		case <-t.C:
			return zero, errors.New("timed out")
		case <-ctx.Done():
			return zero, ctx.Err()
		}
	}
}

func (cl *client) close() { cl.closeConn() }

// playback places received audio on the clock of a client that starts playing at the first
// delta and plays continuously: sample k of the reply sounds at max(first + k/rate, arrival of
// its delta) — a late delta delays the rest (an underrun).
type playback struct {
	start, end time.Time // end: when the audio received so far finishes playing
	audible    time.Time // first audible sample
	n          int
	spans      [][2]time.Time // stretches of continuous playback: an underrun starts a new one
}

func (p *playback) add(e event) {
	if p.n == 0 {
		p.start, p.end = e.at, e.at
	}
	begin := p.end
	if e.at.After(begin) {
		begin = e.at
	}
	if p.audible.IsZero() {
		for i, v := range e.pcm {
			if v >= audibleT || v <= -audibleT {
				p.audible = begin.Add(time.Duration(i) * time.Second / outRate)
				break
			}
		}
	}
	p.n += len(e.pcm)
	p.end = begin.Add(time.Duration(len(e.pcm)) * time.Second / outRate)
	if len(e.pcm) == 0 {
		return
	}
	if k := len(p.spans) - 1; k >= 0 && !begin.After(p.spans[k][1]) {
		p.spans[k][1] = p.end
	} else {
		p.spans = append(p.spans, [2]time.Time{begin, p.end})
	}
}

// stop ends playback at at (the client flushed its buffer): nothing after it sounds.
func (p *playback) stop(at time.Time) {
	kept := p.spans[:0]
	for _, sp := range p.spans {
		if sp[0].Before(at) {
			if sp[1].After(at) {
				sp[1] = at
			}
			kept = append(kept, sp)
		}
	}
	p.spans = kept
}

// streamPaced appends pcm in 100 ms units at real-time pace from start and returns the send
// time of each unit.
func streamPaced(ctx context.Context, cl *client, pcm []float32, start time.Time) ([]time.Time, error) {
	per := inRate * chunkMs / 1000
	var sent []time.Time
	for i := 0; i < len(pcm); i += per {
		if d := time.Until(start.Add(time.Duration(i) * time.Second / inRate)); d > 0 {
			select {
			case <-time.After(d):
			case <-ctx.Done():
				return sent, ctx.Err()
			}
		}
		sent = append(sent, time.Now())
		if err := cl.appendAudio(ctx, pcm[i:min(i+per, len(pcm))], start.Add(time.Duration(i)*time.Second/inRate)); err != nil {
			return sent, err
		}
	}
	return sent, nil
}

func ms(d time.Duration) float64 { return float64(d) / float64(time.Millisecond) }

// --- scenarios ----------------------------------------------------------------------------

type manualResult struct {
	audible, firstDelta, transcript float64
	err                             error
}

// manualTurns runs turns manual turns on one session: speech streamed at pace, then commit and
// response.create; each reply is read to response.done.
func manualTurns(ctx context.Context, url string, tools int, speech []float32, turns int, tl *timeline) []manualResult {
	out := make([]manualResult, turns)
	cl, err := dial(ctx, url, tools, nil)
	if err != nil {
		out[0].err = err
		return out[:1]
	}
	defer cl.close()
	from, to := voiced(speech)
	for t := range turns {
		r := &out[t]
		start := time.Now()
		if _, r.err = streamPaced(ctx, cl, speech, start); r.err != nil {
			return out[:t+1]
		}
		tl.interval(benchreport.UserSpeech, dueAt(start, from), dueAt(start, to), fmt.Sprintf("turn %d", t+1))
		t0 := time.Now()
		if r.err = cl.send(ctx, map[string]any{"type": "input_audio_buffer.commit"}); r.err != nil {
			return out[:t+1]
		}
		if r.err = cl.send(ctx, map[string]any{"type": "response.create"}); r.err != nil {
			return out[:t+1]
		}
		var pb playback
		_, r.err = cl.waitFor(ctx, 60*time.Second, func(e event) bool {
			switch e.typ {
			case "conversation.item.input_audio_transcription.completed":
				if r.transcript == 0 {
					r.transcript = ms(e.at.Sub(t0))
				}
			case "audio":
				if pb.n == 0 {
					r.firstDelta = ms(e.at.Sub(t0))
				}
				pb.add(e)
			}
			return e.typ == "response.done"
		})
		tl.playback(&pb, fmt.Sprintf("reply %d", t+1))
		if r.err == nil && pb.audible.IsZero() {
			r.err = errors.New("the reply had no audible audio")
		}
		if r.err != nil {
			return out[:t+1]
		}
		r.audible = ms(pb.audible.Sub(t0))
	}
	return out
}

func serverVAD(silenceMs int) map[string]any {
	return map[string]any{"type": "server_vad", "threshold": 0.5, "prefix_padding_ms": 300,
		"silence_duration_ms": silenceMs, "create_response": true, "interrupt_response": true}
}

// voiceWindow is the window over which the user's speech is judged audible: 10 ms, its RMS
// against audibleT. A window, not a sample, so that a click or a noise spike is not taken
// for speech; the same −40 dBFS as the reply's audibility, so that both ends of a latency are
// measured alike. (A per-sample −30 dBFS rule, used before, put the end of goforward.raw at
// 2218 ms although its final "s" is heard until 2360 ms, where the server's WebRTC VAD also
// ends the speech, and the onset of numbers.raw on a click 188 ms before the first word.)
const voiceWindow = inRate / 100

// windowAudible reports whether the window of pcm starting at i is above audibleT in RMS.
func windowAudible(pcm []float32, i int) bool {
	end := min(len(pcm), i+voiceWindow)
	if end <= i {
		return false
	}
	var sum float64
	for _, v := range pcm[i:end] {
		sum += float64(v) * float64(v)
	}
	return sum/float64(end-i) >= audibleT*audibleT
}

// lastVoiced is the index one past the clip's last audible 10 ms window.
func lastVoiced(pcm []float32) int {
	for i := (len(pcm) - 1) / voiceWindow * voiceWindow; i >= 0; i -= voiceWindow {
		if windowAudible(pcm, i) {
			return min(len(pcm), i+voiceWindow)
		}
	}
	return 0
}

// firstVoiced is the start of the clip's first audible 10 ms window (-1 for silence).
func firstVoiced(pcm []float32) int {
	for i := 0; i < len(pcm); i += voiceWindow {
		if windowAudible(pcm, i) {
			return i
		}
	}
	return -1
}

// voiced is the clip's voiced part: the start of its first audible window and one past its
// last (0, 0 for silence).
func voiced(pcm []float32) (from, to int) {
	if from = firstVoiced(pcm); from < 0 {
		return 0, 0
	}
	return from, lastVoiced(pcm)
}

// dueAt is when sample i of audio streamed at pace from start is due.
func dueAt(start time.Time, i int) time.Time {
	return start.Add(time.Duration(i) * time.Second / inRate)
}

// vadTurn streams speech and 2 s of silence under server VAD and returns end of speech (the
// send time of the last voiced sample) → first audible sample of the reply.
func vadTurn(ctx context.Context, url string, tools int, speech []float32, silenceMs int, tl *timeline) (float64, error) {
	cl, err := dial(ctx, url, tools, serverVAD(silenceMs))
	if err != nil {
		return 0, err
	}
	defer cl.close()
	pcm := append(slices.Clone(speech), make([]float32, 2*inRate)...)
	start := time.Now()
	errc := make(chan error, 1)
	go func() { _, err := streamPaced(ctx, cl, pcm, start); errc <- err }()
	end := start.Add(time.Duration(lastVoiced(speech)) * time.Second / inRate)
	var pb playback
	_, err = cl.waitFor(ctx, 60*time.Second, func(e event) bool {
		if e.typ == "audio" {
			pb.add(e)
		}
		return e.typ == "response.done"
	})
	if serr := <-errc; err == nil {
		err = serr
	}
	from, to := voiced(speech)
	tl.interval(benchreport.UserSpeech, dueAt(start, from), dueAt(start, to), "the user's turn")
	tl.vad(cl)
	tl.playback(&pb, "reply")
	if err != nil {
		return 0, err
	}
	if pb.audible.IsZero() {
		return 0, errors.New("the reply had no audible audio")
	}
	return ms(pb.audible.Sub(end)), nil
}

type interruption int

const (
	interruptSpeech interruption = iota
	interruptNoise
	interruptEcho
	interruptSpeechOverEcho
)

type bargeResult struct {
	interrupted      bool
	silence, lastOld float64
	dryMs            float64 // GPT-Live: the reply's underruns before the barge-in (livePlayback.dry)
}

// bargeIn starts a manual reply under server VAD (interrupt_response on), and once its audio
// plays, feeds the microphone in real time for 3 s: real speech, 100 ms white-noise bursts, the
// reply's own audio as played back (−6 dB, 120 ms late: a loudspeaker without echo
// cancellation), or speech over that echo. The reply counts as interrupted when it ends
// cancelled. tl gets the session's timeline, also when the scenario fails part-way.
func bargeIn(ctx context.Context, url string, tools int, speech, interrupt []float32, silenceMs int, kind interruption, tl *timeline) (bargeResult, error) {
	var res bargeResult
	cl, err := dial(ctx, url, tools, serverVAD(silenceMs))
	if err != nil {
		return res, err
	}
	defer cl.close()
	var (
		pb       playback
		micStart time.Time
		sentTo   int       // mic samples sent
		micSpans [][2]int  // the user's voiced audio (or noise) within mic, in samples
		stopAt   time.Time // the client stopped playing: the server cut the reply, or the client cancelled it
		cut      bool      // the server cut the reply (a barge-in)
	)
	defer func() { // runs before cl.close
		for _, sp := range micSpans {
			if sp[0] < sentTo {
				label := "interrupting speech"
				if kind == interruptNoise {
					label = "noise burst (not speech)"
				}
				tl.interval(benchreport.UserSpeech, dueAt(micStart, sp[0]), dueAt(micStart, min(sp[1], sentTo)), label)
			}
		}
		tl.vad(cl)
		if !stopAt.IsZero() {
			pb.stop(stopAt)
		}
		tl.playback(&pb, "reply")
		if cut {
			label := "reply cut"
			if kind == interruptNoise || kind == interruptEcho {
				label = "reply cut: a false barge-in"
			}
			tl.instant(benchreport.BargeIn, stopAt, label)
		}
	}()
	// The user's question, then a long reply.
	if err := cl.send(ctx, map[string]any{"type": "conversation.item.create", "item": map[string]any{
		"type": "message", "role": "user", "content": []any{map[string]any{"type": "input_text", "text": "tell me a long story about the robot"}}}}); err != nil {
		return res, err
	}
	if err := cl.send(ctx, map[string]any{"type": "response.create", "response": map[string]any{"max_output_tokens": 60}}); err != nil {
		return res, err
	}
	var played []float32 // the reply's audio in playback order, at outRate
	first, err := cl.waitFor(ctx, 60*time.Second, func(e event) bool { return e.typ == "audio" })
	if err != nil {
		return res, err
	}
	pb.add(first)
	played = append(played, first.pcm...)
	oldResp := first.resp

	// Microphone: 3 s from now, fed at pace on the playback clock.
	const micMs = 3000
	mic := make([]float32, micMs*inRate/1000)
	onsetAt := -1 // sample index of the interruption's onset within mic
	rng := rand.New(rand.NewPCG(1, 2))
	switch kind {
	case interruptSpeech, interruptSpeechOverEcho:
		onsetAt = inRate / 2 // 0.5 s in
		voice := interrupt[:min(len(interrupt), 2*inRate)]
		for i := range voice {
			if onsetAt+i < len(mic) {
				mic[onsetAt+i] += voice[i]
			}
		}
		if from, to := voiced(voice); to > from {
			micSpans = append(micSpans, [2]int{onsetAt + from, min(len(mic), onsetAt+to)})
		}
		// the clip's own first audible window is the onset
		if from := firstVoiced(voice); from >= 0 {
			onsetAt += from
		}
	case interruptNoise:
		for b := 0; b < 4; b++ { // 100 ms bursts at −10 dBFS every 700 ms
			at := (300 + 700*b) * inRate / 1000
			for i := 0; i < inRate/10 && at+i < len(mic); i++ {
				mic[at+i] = float32(rng.NormFloat64() * 0.3)
			}
			micSpans = append(micSpans, [2]int{at, min(len(mic), at+inRate/10)})
		}
	}
	echo := kind == interruptEcho || kind == interruptSpeechOverEcho
	micStart = time.Now()
	per := inRate * chunkMs / 1000
	var onsetTime, clearedAt time.Time
	ended := false
	var doneEv event
	for i := 0; i < len(mic) && !ended; i += per {
		// Gather what arrived before this unit is due.
		due := micStart.Add(time.Duration(i) * time.Second / inRate)
		for !ended {
			wait := time.Until(due)
			if wait <= 0 {
				break
			}
			select {
			case e, ok := <-cl.events:
				if !ok {
					return res, errors.New("connection ended")
				}
				switch {
				case e.typ == "audio" && e.resp == oldResp:
					pb.add(e)
					played = append(played, e.pcm...)
					if !onsetTime.IsZero() {
						res.lastOld = ms(e.at.Sub(onsetTime))
					}
				case e.typ == "output_audio_buffer.cleared":
					if clearedAt.IsZero() {
						clearedAt = e.at
					}
					if !onsetTime.IsZero() && res.silence == 0 {
						res.silence = ms(e.at.Sub(onsetTime))
					}
				case e.typ == "response.done" && e.resp == oldResp:
					ended, doneEv = true, e
				case e.typ == "error":
					return res, serverError(e)
				}
			case <-time.After(wait):
			case <-ctx.Done():
				return res, ctx.Err()
			}
		}
		unit := slices.Clone(mic[i:min(i+per, len(mic))])
		if echo {
			// The microphone hears what the client played 120 ms earlier, at −6 dB: playback
			// sample k sounds at pb.start + k/outRate.
			for j := range unit {
				tm := due.Add(time.Duration(j)*time.Second/inRate - 120*time.Millisecond)
				k := int(tm.Sub(pb.start).Seconds() * outRate)
				if k >= 0 && k < len(played) {
					unit[j] += 0.5 * played[k]
				}
			}
		}
		if onsetAt >= i && onsetAt < i+per {
			onsetTime = time.Now().Add(time.Duration(onsetAt-i) * time.Second / inRate)
		}
		if err := cl.appendAudio(ctx, unit, due); err != nil {
			return res, err
		}
		sentTo = i + len(unit)
	}
	if !ended {
		// An interruption decided at the end of the window still lands within a second; after
		// that the reply was not interrupted, and the client cancels it to move on.
		var err error
		track := func(e event) bool {
			if e.typ == "audio" && e.resp == oldResp {
				pb.add(e)
				if !onsetTime.IsZero() {
					res.lastOld = ms(e.at.Sub(onsetTime))
				}
			}
			if e.typ == "output_audio_buffer.cleared" {
				if clearedAt.IsZero() {
					clearedAt = e.at
				}
				if !onsetTime.IsZero() && res.silence == 0 {
					res.silence = ms(e.at.Sub(onsetTime))
				}
			}
			return e.typ == "response.done" && e.resp == oldResp
		}
		doneEv, err = cl.waitFor(ctx, time.Second, track)
		if err != nil {
			// The client stops playing as it cancels.
			stopAt = time.Now()
			if err := cl.send(ctx, map[string]any{"type": "response.cancel"}); err != nil {
				return res, err
			}
			if _, err := cl.waitFor(ctx, 30*time.Second, track); err != nil {
				return res, err
			}
			return res, nil // not interrupted
		}
	}
	done, _ := doneEv.ev.(protocol.ResponseDone)
	res.interrupted = done.Response.Status == "cancelled"
	if res.interrupted {
		// The client stops playing at output_audio_buffer.cleared, or at response.done
		// {cancelled} when that comes first.
		cut, stopAt = true, doneEv.at
		if !clearedAt.IsZero() && clearedAt.Before(stopAt) {
			stopAt = clearedAt
		}
	}
	if res.interrupted && !onsetTime.IsZero() {
		// Without output_audio_buffer.cleared the client stops at response.done{cancelled}.
		if d := ms(doneEv.at.Sub(onsetTime)); res.silence == 0 || d < res.silence {
			res.silence = d
		}
		res.silence = max(res.silence, res.lastOld)
	}
	return res, nil
}

// --- input --------------------------------------------------------------------------------

func readRaw(path string) ([]float32, error) {
	b, err := os.ReadFile(path)
	if err != nil {
		return nil, fmt.Errorf("reading speech (Debian package pocketsphinx-testdata): %w", err)
	}
	out := make([]float32, len(b)/2)
	for i := range out {
		out[i] = float32(int16(binary.LittleEndian.Uint16(b[2*i:]))) / 32768
	}
	return out, nil
}

// --- timelines ----------------------------------------------------------------------------

// timeline is one session as the report draws it, in ms from just before the client dialed.
type timeline struct {
	label string
	t0    time.Time
	spans []benchreport.Span
}

func newTimeline(label string) *timeline { return &timeline{label: label, t0: time.Now()} }

func (tl *timeline) since(t time.Time) time.Duration { return max(0, t.Sub(tl.t0)) }

// interval adds a span of kind k from from to to; an empty or reversed one is left out.
func (tl *timeline) interval(k benchreport.Kind, from, to time.Time, label string) {
	if !to.After(from) {
		return
	}
	tl.spans = append(tl.spans, benchreport.Interval(k, tl.since(from), tl.since(to), label))
}

func (tl *timeline) instant(k benchreport.Kind, at time.Time, label string) {
	tl.spans = append(tl.spans, benchreport.Instant(k, tl.since(at), label))
}

// playback adds the reply's stretches of continuous playback on the client's playback clock.
func (tl *timeline) playback(pb *playback, label string) {
	for _, sp := range pb.spans {
		tl.interval(benchreport.AssistantAudio, sp[0], sp[1], label)
	}
}

// vad adds the server VAD's decisions: each event's audio_start_ms / audio_end_ms, a position
// on the session's input audio clock, is placed where the client's paced clock had that sample
// due (the append holding it, plus the offset within).
func (tl *timeline) vad(cl *client) {
	cl.mu.Lock()
	defer cl.mu.Unlock()
	for _, m := range cl.vad {
		pos := int(m.ms * inRate / 1000)
		i, found := slices.BinarySearchFunc(cl.units, pos, func(u sentUnit, p int) int { return u.pos - p })
		if !found {
			i--
		}
		if i < 0 {
			continue
		}
		u := cl.units[i]
		label := fmt.Sprintf("audio_start_ms %.0f", m.ms)
		if m.kind == benchreport.SpeechStopped {
			label = fmt.Sprintf("audio_end_ms %.0f", m.ms)
		}
		tl.instant(m.kind, dueAt(u.due, pos-u.pos), label)
	}
}

func (tl *timeline) session() benchreport.Session {
	return benchreport.Session{Label: tl.label, Spans: tl.spans}
}

// benchTools are n function tools of a typical voice agent's size (a name, a sentence, two or
// three typed arguments), as the Realtime API declares them.
func benchTools(n int) []any {
	kinds := []map[string]any{
		{"name": "lookup_order", "description": "Look up an order by its number.", "parameters": map[string]any{"type": "object",
			"properties": map[string]any{"order_number": map[string]any{"type": "string"}}, "required": []string{"order_number"}}},
		{"name": "book_slot", "description": "Book an appointment slot.", "parameters": map[string]any{"type": "object",
			"properties": map[string]any{"day": map[string]any{"type": "string"}, "hour": map[string]any{"type": "integer"}},
			"required":   []string{"day", "hour"}}},
		{"name": "get_weather", "description": "The weather in a city.", "parameters": map[string]any{"type": "object",
			"properties": map[string]any{"city": map[string]any{"type": "string"}, "unit": map[string]any{"enum": []string{"c", "f"}}},
			"required":   []string{"city"}}},
	}
	out := make([]any, 0, n)
	for i := range n {
		t := map[string]any{"type": "function"}
		for k, v := range kinds[i%len(kinds)] {
			t[k] = v
		}
		if i >= len(kinds) {
			t["name"] = fmt.Sprintf("%s_%d", t["name"], i)
		}
		out = append(out, t)
	}
	return out
}
