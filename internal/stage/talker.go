package stage

import (
	"context"
	"errors"
	"fmt"
	"strings"
	"time"
	"unicode"

	"github.com/omniserve/omniserve/internal/audio"
	"github.com/omniserve/omniserve/internal/duplex"
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
	ts := r.ts
	if err := p.talker.acquire(ctx); err != nil {
		return nil // never started: no work to report
	}
	defer p.talker.release()

	start := time.Now()
	submitTS := metrics.Now()
	rate := p.tts.OutputRate()
	sp := newPhraseSplitter(p.cfg.Talker.Phrase)
	var (
		frames, units int
		synthMs       float64
		firstMs       float64
		lastOut       time.Time
		iols          []float64
		failed        error
	)
	snapshot := func(reason string) StageMetricsMessage {
		rx := conn.RxStats()
		return StageMetricsMessage{
			RequestID: r.rid, StageID: 1, Turn: ts.n, StageSubmitTS: submitTS, FinalOutputType: "audio",
			Metrics: metrics.StageRequestStats{
				NumTokensIn:                rx.Items,
				StageGenTimeMs:             synthMs,
				RxTransferBytes:            int(rx.Bytes),
				RxDecodeTimeMs:             rx.DecodeMs,
				RxInFlightTimeMs:           rx.InFlightMs,
				FinishReason:               reason,
				AudioGeneratedFrames:       frames,
				AudioSampleRate:            rate,
				AudioDurationS:             float64(frames) / float64(rate),
				OutputUnitType:             "audio",
				OutputUnitCount:            units,
				ServingTimeToFirstOutputMs: firstMs,
				InterOutputLatencyMs:       mean(iols),
				InterOutputLatenciesMs:     iols,
				// The final stage carries the request's pipeline timings, as in vllm-omni
				// ([OmniTiming] reads preprocess= from the last stage).
				PipelineTimings: r.pipelineTimings(),
			},
		}
	}
	// abort is the snapshot of an aborted turn, when stage 1 had work for it.
	abort := func() *StageMetricsMessage {
		if conn.RxStats().Items == 0 && frames == 0 {
			return nil
		}
		m := snapshot(duplex.FinishAbort)
		return &m
	}
	// send hands one piece of a phrase's audio on; text is the phrase's transcript, carried by
	// its first piece only.
	var phraseOut bool // the current phrase has sent audio
	send := func(pcm []float32, text string) error {
		if len(pcm) == 0 {
			return nil
		}
		now := time.Now()
		if !phraseOut {
			phraseOut = true
			if units == 0 {
				firstMs = float64(now.Sub(start)) / float64(time.Millisecond)
			} else {
				iols = append(iols, float64(now.Sub(lastOut))/float64(time.Millisecond))
			}
			lastOut = now
			units++
		} else {
			text = ""
		}
		frames += len(pcm)
		return r.disp.output(ctx, ts, OutputMessage{Output: duplex.Output{Kind: duplex.OutAudio, Turn: ts.n, Text: text, Audio: pcm, SampleRate: rate}, RequestID: r.rid, StageID: 1, StageSubmitTS: submitTS})
	}
	// speakStream voices a phrase on a streaming TTS: each piece goes out as it arrives,
	// trimmed as TrimSilence trims a whole phrase.
	speakStream := func(st ttsStreamer, phrase string) error {
		lead := phraseLeadMs
		if units == 0 {
			lead = firstLeadMs
		}
		tr := newPhraseTrimmer(rate, silenceDBFS, lead, phraseTailMs)
		phraseOut = false
		t0 := time.Now()
		err := st.SynthesizeStream(ctx, phrase, func(pcm []float32) error { return send(tr.push(pcm), phrase) })
		if err == nil {
			err = send(tr.end(), phrase)
		}
		synthMs += msSince(t0) // the hand-offs of its pieces included
		switch {
		case errors.Is(err, audio.ErrEmptyText):
			return nil // nothing to say
		case err != nil:
			return fmt.Errorf("synthesizing phrase: %w: %w", ErrSynthesis, err)
		}
		return nil
	}
	speak := func(phrase string) error {
		if failed != nil || !speakable(phrase) {
			return nil
		}
		if st, ok := p.tts.(ttsStreamer); ok {
			return speakStream(st, phrase)
		}
		t0 := time.Now()
		pcm, err := p.tts.Synthesize(ctx, phrase)
		synthMs += msSince(t0)
		switch {
		case errors.Is(err, audio.ErrEmptyText):
			return nil // nothing to say (a phrase of symbols flite cannot voice)
		case err != nil:
			return fmt.Errorf("synthesizing phrase: %w: %w", ErrSynthesis, err)
		}
		// The reply's first audio carries speech at once; later phrases keep a short pause
		// on each side, the prosody between phrases.
		lead := phraseLeadMs
		if units == 0 {
			lead = firstLeadMs
		}
		if pcm = audio.TrimSilence(pcm, rate, silenceDBFS, lead, phraseTailMs); len(pcm) == 0 {
			return nil // flite produced only silence: nothing audible to send
		}
		phraseOut = false
		return send(pcm, phrase)
	}
	for {
		text, end, reason, err := conn.Recv(ctx)
		if err != nil {
			return abort()
		}
		if end {
			if err := speak(sp.Flush()); err != nil && failed == nil {
				failed = err
			}
			if ctx.Err() != nil {
				return abort()
			}
			if failed != nil {
				reason = duplex.FinishError
				p.fail(&response{rid: r.rid, ts: ts, disp: r.disp, submitTS: submitTS}, 1, failed)
			}
			r.disp.turnMetrics(ts, snapshot(reason))
			if failed == nil {
				_ = r.disp.output(ctx, ts, OutputMessage{Output: duplex.Output{Kind: duplex.OutFinished, Turn: ts.n, FinishReason: reason}, RequestID: r.rid, StageID: 1, Finished: true, StageSubmitTS: submitTS})
			}
			return nil
		}
		for _, ph := range sp.Push(text) {
			if err := speak(ph); err != nil && failed == nil {
				if ctx.Err() != nil {
					return abort()
				}
				failed = err // keep draining stage 0 so it is not blocked; report at the end
			}
		}
	}
}

// speakable reports whether flite has something to voice: a letter or a digit.
func speakable(s string) bool {
	return strings.ContainsFunc(s, func(r rune) bool { return unicode.IsLetter(r) || unicode.IsDigit(r) })
}
