package latency

// The GPT-Live scenarios (/v1/live/sessions), written from OpenAI's GPT-Live documents as an
// outsider would (shared/spec/gpt-live.md): session.start, then a microphone that never stops
// (the session's timeline advances only with the input audio), and one paced output track on
// which the reply is heard. Live has no turn events: a reply is heard as audible samples on the
// track, a barge-in as the track going silent. The figures are placed next to the Realtime
// ?duplex=1 ones measured in the same run.

import (
	"context"
	"encoding/base64"
	"encoding/binary"
	"encoding/json"
	"errors"
	"fmt"
	"net/http"
	"slices"
	"time"

	"github.com/coder/websocket"

	"github.com/omniserve/omniserve/internal/bench"
	"github.com/omniserve/omniserve/internal/benchreport"
)

const (
	liveRate = 24000 // the quick-start's format: PCM16 at 24 kHz, both ways
	// liveGapMs: after a barge-in onset, the old reply has stopped sounding once the track was
	// silent this long (longer than the pauses between the words of a spoken reply).
	liveGapMs = 500
	// liveModel is the model GPT-Live's quick-start names; the server aliases it.
	liveModel = "gpt-live-1"
)

// errLiveNotServed: the server answered the upgrade with 404 (a binary from before GPT-Live).
var errLiveNotServed = errors.New("GPT-Live (/v1/live/sessions) is not served")

// liveEvent is one server event of a Live session with its arrival time; pcm is the decoded
// audio of a session.output_audio.delta.
type liveEvent struct {
	typ string
	at  time.Time
	pcm []float32
	raw map[string]any
}

type liveClient struct {
	*wsConn[liveEvent]
}

// liveDial opens a Live session with the quick-start's audio format and waits for
// session.started.
func liveDial(ctx context.Context, addr, key string) (*liveClient, error) {
	var opts *websocket.DialOptions
	if key != "" {
		opts = &websocket.DialOptions{HTTPHeader: http.Header{"Authorization": {"Bearer " + key}}}
	}
	c, resp, err := websocket.Dial(ctx, "ws://"+addr+"/v1/live/sessions", opts)
	if err != nil {
		if resp != nil && resp.StatusCode == http.StatusNotFound {
			return nil, errLiveNotServed
		}
		return nil, fmt.Errorf("dial live: %w", err)
	}
	cl := &liveClient{startConn(ctx, c, decodeLive)}
	start := map[string]any{"type": "session.start", "session": map[string]any{
		"model": liveModel,
		"audio": map[string]any{"format": map[string]any{"type": "audio/pcm", "rate": liveRate}},
	}}
	if err := cl.send(ctx, start); err != nil {
		cl.close()
		return nil, err
	}
	if _, err := cl.waitFor(ctx, 20*time.Second, func(e liveEvent) bool { return e.typ == "session.started" }); err != nil {
		cl.close()
		return nil, fmt.Errorf("session.start: %w", err)
	}
	return cl, nil
}

// decodeLive is a frame as the client keeps it: an audio delta decoded (and nothing else of
// it), every other event as its JSON.
func decodeLive(b []byte, at time.Time) (liveEvent, bool) {
	e := liveEvent{at: at}
	if json.Unmarshal(b, &e.raw) != nil {
		return e, false
	}
	e.typ, _ = e.raw["type"].(string)
	if e.typ == "session.output_audio.delta" {
		d, _ := e.raw["delta"].(string)
		e.pcm, e.raw = pcmOf(d), nil
	}
	return e, true
}

// appendAudio sends 16 kHz pcm resampled to the session's 24 kHz (linear interpolation).
func (cl *liveClient) appendAudio(ctx context.Context, pcm []float32) error {
	n := len(pcm) * liveRate / inRate
	b := make([]byte, 2*n)
	for i := range n {
		x := float64(i) * inRate / liveRate
		j := int(x)
		v := pcm[min(j, len(pcm)-1)]
		if j+1 < len(pcm) {
			f := float32(x - float64(j))
			v = v*(1-f) + pcm[j+1]*f
		}
		binary.LittleEndian.PutUint16(b[2*i:], uint16(int16(max(-1, min(1, v))*32767)))
	}
	return cl.send(ctx, map[string]any{"type": "session.input_audio.append", "audio": base64.StdEncoding.EncodeToString(b)})
}

// liveError is the error of a Live error event.
func liveError(e liveEvent) error {
	if m, ok := e.raw["error"].(map[string]any); ok {
		return fmt.Errorf("server error: %v: %v (param %v)", m["code"], m["message"], m["param"])
	}
	return errors.New("server error")
}

// waitFor returns the first event that matches, failing on an error event or the timeout.
func (cl *liveClient) waitFor(ctx context.Context, d time.Duration, match func(liveEvent) bool) (liveEvent, error) {
	return cl.wsConn.waitFor(ctx, d, match, func(e liveEvent) error {
		if e.typ == "error" {
			return liveError(e)
		}
		return nil
	})
}

func (cl *liveClient) close() {
	_ = cl.send(context.Background(), map[string]any{"type": "session.close"})
	cl.closeConn()
}

// livePlayback is a client playing the one output track on receipt, continuously (playback's
// rule: a late delta delays the rest). It remembers where the last audible sample sounds.
type livePlayback struct {
	pb           playback
	lastAudible  time.Time     // playback time of the last audible sample so far
	firstAudible time.Time     // the first audible sample at or after from (zero: none yet)
	from         time.Time     // audible samples before this do not count as the reply's first
	dry          time.Duration // the track ran dry within a reply: a delta came after the audio before it had played (an underrun)
}

func (lp *livePlayback) add(e liveEvent) {
	begin := lp.pb.end
	if lp.pb.n == 0 || e.at.After(begin) {
		begin = e.at
	}
	if gap := e.at.Sub(lp.pb.end); lp.pb.n > 0 && gap > 0 && gap < liveGapMs*time.Millisecond {
		lp.dry += gap // shorter than a pause between replies: the reply itself stalled
	}
	lp.pb.add(event{at: e.at, pcm: e.pcm})
	for i, v := range e.pcm {
		if v >= audibleT || v <= -audibleT {
			at := begin.Add(time.Duration(i) * time.Second / outRate)
			lp.lastAudible = at
			if lp.firstAudible.IsZero() && !at.Before(lp.from) {
				lp.firstAudible = at
			}
		}
	}
}

// liveMic is a microphone that never stops: every 100 ms unit is due on the session's input
// clock; next returns the unit due now and its due time (silence once the script runs out).
type liveMic struct {
	start  time.Time
	script []float32 // what the user says from start; silence after it
	sent   int       // samples sent
}

func (m *liveMic) due() time.Time { return dueAt(m.start, m.sent) }

func (m *liveMic) next() []float32 {
	per := inRate * chunkMs / 1000
	unit := make([]float32, per)
	if m.sent < len(m.script) {
		copy(unit, m.script[m.sent:])
	}
	m.sent += per
	return unit
}

// say schedules pcm to be spoken from sample at of the microphone's clock (mixed over what is
// scheduled there).
func (m *liveMic) say(at int, pcm []float32) {
	if need := at + len(pcm); need > len(m.script) {
		m.script = append(m.script, make([]float32, need-len(m.script))...)
	}
	for i, v := range pcm {
		m.script[at+i] += v
	}
}

// pump feeds the microphone at pace until stop returns true (checked after every event and
// every unit) or the timeout, handing each event to on.
func (cl *liveClient) pump(ctx context.Context, mic *liveMic, timeout time.Duration, on func(liveEvent), stop func() bool) error {
	deadline := time.Now().Add(timeout)
	for !stop() {
		if time.Now().After(deadline) {
			return errors.New("timed out")
		}
		due := mic.due()
		for wait := time.Until(due); wait > 0; wait = time.Until(due) {
			select {
			case e, ok := <-cl.events:
				if !ok {
					return errors.New("connection ended")
				}
				if e.typ == "error" {
					return liveError(e)
				}
				on(e)
				if stop() {
					return nil
				}
			case <-time.After(wait):
			case <-ctx.Done():
				return ctx.Err()
			}
		}
		if err := cl.appendAudio(ctx, mic.next()); err != nil {
			return err
		}
	}
	return nil
}

// liveVADTurn: the user speaks, then the microphone goes on with silence; the engine takes the
// turn by itself. It returns end of speech → first audible sample of the reply.
func liveVADTurn(ctx context.Context, addr, key string, speech []float32, tl *timeline) (float64, error) {
	cl, err := liveDial(ctx, addr, key)
	if err != nil {
		return 0, err
	}
	defer cl.close()
	mic := &liveMic{start: time.Now(), script: slices.Clone(speech)}
	end := dueAt(mic.start, lastVoiced(speech))
	lp := livePlayback{from: end}
	err = cl.pump(ctx, mic, 60*time.Second, func(e liveEvent) {
		if e.typ == "session.output_audio.delta" {
			lp.add(e)
		}
	}, func() bool { return !lp.firstAudible.IsZero() })
	from, to := voiced(speech)
	tl.interval(benchreport.UserSpeech, dueAt(mic.start, from), dueAt(mic.start, to), "the user's turn")
	tl.playback(&lp.pb, "the output track")
	if err != nil {
		return 0, err
	}
	return ms(lp.firstAudible.Sub(end)), nil
}

// liveBargeIn: the user asks, the engine replies by itself; 1 s into the audible reply the user
// speaks over it. It returns whether the reply stopped, and speech onset → the reply's last
// audible sample on the client's playback clock (the first liveGapMs of silence after the
// onset ends it).
func liveBargeIn(ctx context.Context, addr, key string, speech, interrupt []float32, tl *timeline) (bargeResult, error) {
	var res bargeResult
	cl, err := liveDial(ctx, addr, key)
	if err != nil {
		return res, err
	}
	defer cl.close()
	mic := &liveMic{start: time.Now(), script: slices.Clone(speech)}
	lp := livePlayback{from: dueAt(mic.start, lastVoiced(speech))}
	var onset time.Time
	var oldEnd time.Time // the old reply's last audible sample before the gap
	onEvent := func(e liveEvent) {
		if e.typ != "session.output_audio.delta" {
			return
		}
		lp.add(e)
		if onset.IsZero() && !lp.firstAudible.IsZero() && time.Since(lp.firstAudible) >= time.Second {
			res.dryMs = ms(lp.dry) // the reply's first second: what the lead bought against jitter
			// Speak over the reply from the next unit: the clip's first audible window is the
			// onset.
			voice := interrupt[:min(len(interrupt), 2*inRate)]
			at := mic.sent
			mic.say(at, voice)
			onset = dueAt(mic.start, at+max(0, firstVoiced(voice)))
			from, to := voiced(voice)
			tl.interval(benchreport.UserSpeech, dueAt(mic.start, at+from), dueAt(mic.start, at+to), "interrupting speech")
		}
	}
	gone := func() bool {
		if onset.IsZero() || lp.lastAudible.IsZero() {
			return false
		}
		// Silent for liveGapMs on the playback clock, and that clock has reached now.
		quiet := lp.lastAudible.Add(liveGapMs * time.Millisecond)
		if time.Now().After(quiet) && lp.lastAudible.After(onset.Add(-liveGapMs*time.Millisecond)) {
			oldEnd = lp.lastAudible
			return true
		}
		return false
	}
	err = cl.pump(ctx, mic, 60*time.Second, onEvent, func() bool {
		return gone() || (!onset.IsZero() && time.Since(onset) > 5*time.Second)
	})
	from, to := voiced(speech)
	tl.interval(benchreport.UserSpeech, dueAt(mic.start, from), dueAt(mic.start, to), "the user's question")
	tl.playback(&lp.pb, "the output track")
	if err != nil {
		return res, err
	}
	if oldEnd.IsZero() {
		return res, nil // the reply went on: not interrupted
	}
	res.interrupted = true
	res.silence = max(0, ms(oldEnd.Sub(onset)))
	tl.instant(benchreport.BargeIn, oldEnd, "reply silent")
	return res, nil
}

// runLive runs o.Runs server VAD turns and barge-ins by speech over GPT-Live, adding their
// samples to the run's; it returns how many barge-ins stopped the reply. A server without
// GPT-Live is reported and skipped.
func (o Options) runLive(ctx context.Context, addr string, speech, interrupt []float32, add func(string, float64),
	session func(string, int) *timeline, prog interface{ Add(int) }, out interface{ Write([]byte) (int, error) }) (int, error) {
	if !o.Live {
		return 0, nil
	}
	detected := 0
	for i := range o.Runs {
		m, err := liveVADTurn(ctx, addr, o.APIKey, speech, session("GPT-Live turn, run %d", i))
		if errors.Is(err, errLiveNotServed) {
			fmt.Fprintf(out, "GPT-Live: %v: skipped\n", err)
			prog.Add(2 * (o.Runs - i))
			return 0, nil
		}
		if err != nil {
			return 0, fmt.Errorf("live turn run %d: %w", i, err)
		}
		add("live_speech_end_to_audible", m)
		prog.Add(1)
		b, err := liveBargeIn(ctx, addr, o.APIKey, speech, interrupt, session("GPT-Live barge-in by speech, run %d", i))
		if err != nil {
			return 0, fmt.Errorf("live barge-in run %d: %w", i, err)
		}
		prog.Add(1)
		add("live_reply_underrun", b.dryMs)
		if b.interrupted {
			detected++
			add("live_bargein_onset_to_silence", b.silence)
		}
	}
	fmt.Fprintf(out, "GPT-Live: %d turns and %d barge-ins done\n", o.Runs, o.Runs)
	return detected, nil
}

// liveFigures are the GPT-Live figures and their differences from Realtime ?duplex=1 in the
// same run (none when Live did not run).
func (o Options) liveFigures(res map[string][]float64, detected int) []bench.Figure {
	if len(res["live_speech_end_to_audible"]) == 0 {
		return nil
	}
	return []bench.Figure{
		{Name: "lat_live_speech_end_to_audible_ms", Unit: "ms", Samples: res["live_speech_end_to_audible"], Keys: []bench.Stat{bench.P50, bench.P90}, Digits: 1,
			Definition: "GPT-Live: end of the last audible 10 ms window of the speech sent (the microphone goes on with silence) → first audible sample of the output track after it"},
		{Name: "lat_live_bargein_onset_to_silence_ms", Unit: "ms", Samples: res["live_bargein_onset_to_silence"], Keys: []bench.Stat{bench.P50, bench.P90}, Digits: 1,
			Definition: "GPT-Live: speech onset sent over an audible reply → the reply's last audible sample on the client's playback clock (the track then stays silent ≥ 500 ms)"},
		{Name: "lat_live_reply_underrun_ms", Unit: "ms", Samples: res["live_reply_underrun"], Keys: []bench.Stat{bench.P50, bench.P90}, Digits: 1,
			Definition: "GPT-Live: time the output track ran dry during the first second of an audible reply (a delta arrived after the audio before it had played): the jitter the output lead did not absorb (realtime.live_output_lead)"},
		bench.One("bargein_live_detected_speech", "share", "share of GPT-Live replies that went silent under real speech", float64(detected)/float64(o.Runs), 2),
		diffP50("live_added_speech_end_to_audible_p50_ms", "GPT-Live's speech end → first audible p50 minus Realtime ?duplex=1's (speech_end_to_audible), in this run",
			res["live_speech_end_to_audible"], res["speech_end_to_audible"]),
		diffP50("live_added_bargein_onset_to_silence_p50_ms", "GPT-Live's barge-in onset → silence p50 minus Realtime ?duplex=1's (bargein_onset_to_silence), in this run",
			res["live_bargein_onset_to_silence"], res["bargein_onset_to_silence"]),
	}
}
