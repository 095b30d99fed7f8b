package stage

import (
	"context"
	"errors"
	"fmt"
	"github.com/omniserve/omniserve/internal/duplex"
	"strings"
	"time"
	"unicode"

	"github.com/omniserve/omniserve/internal/audio"
	"github.com/omniserve/omniserve/internal/metrics"
)

// Silence trimming of synthesized phrases: below silenceDBFS is silence; the first phrase of a
// reply keeps firstLeadMs of its leading pause (flite's is 200–300 ms: dead air before the
// first word), later phrases phraseLeadMs, and every phrase phraseTailMs of its trailing one.
const (
	silenceDBFS  = -40
	firstLeadMs  = 10
	phraseLeadMs = 60
	phraseTailMs = 120
)

// runTalker is stage 1 for one response: it reads text deltas from the connector, cuts them
// into phrases and synthesizes each phrase as soon as it is complete, so the first audio leaves
// while stage 0 is still generating. It sends the stage-1 metrics and the Finished output.
// On ctx end (abort) it drops what is queued and returns at once without output; when it had
// received work by then, it returns its snapshot (reason abort) for generate to deliver after
// stage 0's.
func (p *Pipeline) runTalker(ctx context.Context, r *response, conn *connector) (aborted *StageMetricsMessage) {
	defer conn.Drop()
	if err := p.talker.acquire(ctx); err != nil {
		return nil // never started: no work to report
	}
	defer p.talker.release()
	t := &talk{p: p, ctx: ctx, r: r, conn: conn, start: time.Now(), submitTS: metrics.Now(), rate: p.tts.OutputRate()}
	sp := newPhraseSplitter(p.cfg.Talker.Phrase)
	for {
		text, end, reason, err := conn.Recv(ctx)
		if err != nil {
			return t.abort()
		}
		if end {
			return t.end(sp.Flush(), reason)
		}
		if !t.speakAll(sp.Push(text)) {
			return t.abort()
		}
	}
}

// talk is stage 1's work on one response (runTalker): what it voiced so far, and its timings.
type talk struct {
	p        *Pipeline
	ctx      context.Context //nolint:containedctx // the turn's talker ctx, for this run only
	r        *response
	conn     *connector
	start    time.Time
	submitTS float64
	rate     int

	frames, units int
	synthMs       float64
	firstMs       float64
	lastOut       time.Time
	iols          []float64
	phraseOut     bool  // the current phrase has sent audio
	failed        error // the first synthesis failure, reported at the end
}

func (t *talk) snapshot(reason string) StageMetricsMessage {
	rx := t.conn.RxStats()
	return StageMetricsMessage{
		RequestID: t.r.rid, StageID: 1, Turn: t.r.ts.n, StageSubmitTS: t.submitTS, FinalOutputType: "audio",
		Metrics: metrics.StageRequestStats{
			NumTokensIn:                rx.Items,
			StageGenTimeMs:             t.synthMs,
			RxTransferBytes:            int(rx.Bytes),
			RxDecodeTimeMs:             rx.DecodeMs,
			RxInFlightTimeMs:           rx.InFlightMs,
			FinishReason:               reason,
			AudioGeneratedFrames:       t.frames,
			AudioSampleRate:            t.rate,
			AudioDurationS:             float64(t.frames) / float64(t.rate),
			OutputUnitType:             "audio",
			OutputUnitCount:            t.units,
			ServingTimeToFirstOutputMs: t.firstMs,
			InterOutputLatencyMs:       mean(t.iols),
			InterOutputLatenciesMs:     t.iols,
			// The final stage carries the request's pipeline timings, as in vllm-omni
			// ([OmniTiming] reads preprocess= from the last stage).
			PipelineTimings: t.r.pipelineTimings(),
		},
	}
}

// abort is the snapshot of an aborted turn, when stage 1 had work for it.
func (t *talk) abort() *StageMetricsMessage {
	if t.conn.RxStats().Items == 0 && t.frames == 0 {
		return nil
	}
	m := t.snapshot(duplex.FinishAbort)
	return &m
}

// speakAll voices complete phrases; false means the turn was aborted. A failure is kept for
// the end, and the connector is drained meanwhile so that stage 0 is not blocked.
func (t *talk) speakAll(phrases []string) bool {
	for _, ph := range phrases {
		if err := t.speak(ph); err != nil && t.failed == nil {
			if t.ctx.Err() != nil {
				return false
			}
			t.failed = err
		}
	}
	return true
}

// end voices the last phrase and reports the stage: its snapshot, and the Finished output or
// the failure.
func (t *talk) end(last, reason string) *StageMetricsMessage {
	r, ts := t.r, t.r.ts
	if err := t.speak(last); err != nil && t.failed == nil {
		t.failed = err
	}
	if t.ctx.Err() != nil {
		return t.abort()
	}
	if t.failed != nil {
		reason = duplex.FinishError
		t.p.fail(&response{rid: r.rid, ts: ts, disp: r.disp, submitTS: t.submitTS}, 1, t.failed)
	}
	r.disp.turnMetrics(ts, t.snapshot(reason))
	if t.failed == nil {
		_ = r.disp.output(t.ctx, ts, OutputMessage{Output: duplex.Output{Kind: duplex.OutFinished, Turn: ts.n, FinishReason: reason}, RequestID: r.rid, StageID: 1, Finished: true, StageSubmitTS: t.submitTS})
	}
	return nil
}

// send hands one piece of a phrase's audio on; text is the phrase's transcript, carried by its
// first piece only.
func (t *talk) send(pcm []float32, text string) error {
	if len(pcm) == 0 {
		return nil
	}
	now := time.Now()
	if !t.phraseOut {
		t.phraseOut = true
		if t.units == 0 {
			t.firstMs = float64(now.Sub(t.start)) / float64(time.Millisecond)
		} else {
			t.iols = append(t.iols, float64(now.Sub(t.lastOut))/float64(time.Millisecond))
		}
		t.lastOut = now
		t.units++
	} else {
		text = ""
	}
	t.frames += len(pcm)
	return t.r.disp.output(t.ctx, t.r.ts, OutputMessage{Output: duplex.Output{Kind: duplex.OutAudio, Turn: t.r.ts.n, Text: text, Audio: pcm, SampleRate: t.rate}, RequestID: t.r.rid, StageID: 1, StageSubmitTS: t.submitTS})
}

// leadMs is the leading pause a phrase keeps: the reply's first audio carries speech at once;
// later phrases keep a short pause on each side, the prosody between phrases.
func (t *talk) leadMs() int {
	if t.units == 0 {
		return firstLeadMs
	}
	return phraseLeadMs
}

// speak voices one phrase (nothing after a failure, or for a phrase without a letter or digit).
func (t *talk) speak(phrase string) error {
	if t.failed != nil || !speakable(phrase) {
		return nil
	}
	if st, ok := t.p.tts.(ttsStreamer); ok {
		return synthesisErr(t.speakStream(st, phrase))
	}
	t0 := time.Now()
	pcm, err := t.p.tts.Synthesize(t.ctx, phrase)
	t.synthMs += msSince(t0)
	if err != nil {
		return synthesisErr(err) // nil for a phrase of symbols flite cannot voice
	}
	if pcm = audio.TrimSilence(pcm, t.rate, silenceDBFS, t.leadMs(), phraseTailMs); len(pcm) == 0 {
		return nil // flite produced only silence: nothing audible to send
	}
	t.phraseOut = false
	return t.send(pcm, phrase)
}

// speakStream voices a phrase on a streaming TTS: each piece goes out as it arrives, trimmed
// as TrimSilence trims a whole phrase.
func (t *talk) speakStream(st ttsStreamer, phrase string) error {
	tr := newPhraseTrimmer(t.rate, silenceDBFS, t.leadMs(), phraseTailMs)
	t.phraseOut = false
	t0 := time.Now()
	err := st.SynthesizeStream(t.ctx, phrase, func(pcm []float32) error { return t.send(tr.push(pcm), phrase) })
	if err == nil {
		err = t.send(tr.end(), phrase)
	}
	t.synthMs += msSince(t0) // the hand-offs of its pieces included
	return err
}

// synthesisErr is a synthesis failure as the turn reports it; nothing to say is none.
func synthesisErr(err error) error {
	if err == nil || errors.Is(err, audio.ErrEmptyText) {
		return nil
	}
	return fmt.Errorf("synthesizing phrase: %w: %w", ErrSynthesis, err)
}

// speakable reports whether flite has something to voice: a letter or a digit.
func speakable(s string) bool {
	return strings.ContainsFunc(s, func(r rune) bool { return unicode.IsLetter(r) || unicode.IsDigit(r) })
}
