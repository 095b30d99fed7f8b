package stage

import (
	"context"
	"errors"
	"fmt"
	"time"

	"github.com/omniserve/omniserve/internal/audio"
	"github.com/omniserve/omniserve/internal/duplex"
	"github.com/omniserve/omniserve/internal/metrics"
	"github.com/omniserve/omniserve/internal/speech"
)

// audioState is the listening side of a duplex stream: VAD, the ASR stream, and a short history
// of recent audio so that the ASR also hears the prefix padding before a detected onset.
type audioState struct {
	vad *speech.VAD
	asr asrStream

	hist    []float32 // the most recent samples, at most 2*histCap
	histCap int
	pos     int64 // samples received so far (stream time)
	fed     int64 // samples up to which the ASR has been fed
	inSeg   bool  // VAD-gated feeding: inside a speech segment
	asrHas  bool  // the ASR's open utterance has audio
	closed  bool
	// preemptedAt is the speech end (VAD ms) of the pause a speculation was last tried on.
	preemptedAt int64
	// The open utterance's transcript deltas (TranscriptDeltas): the words sent, and the
	// previous partial hypothesis.
	deltaSent, partialPrev string
	// logprobs: final transcripts carry each word's log posterior (TranscriptLogprobs); only
	// set on a recognizer that has them.
	logprobs bool
}

func newAudioState(vad *speech.VAD, asr asrStream, historyMs int) audioState {
	capSamples := historyMs * audio.ASRSampleRate / 1000
	return audioState{vad: vad, asr: asr, histCap: capSamples, hist: make([]float32, 0, 2*capSamples), preemptedAt: -1}
}

func (a *audioState) close() {
	if a.closed {
		return
	}
	a.closed = true
	a.asr.Close()
	a.vad.Close()
}

// record appends samples to the history, keeping at least histCap of them.
func (a *audioState) record(pcm []float32) {
	if len(pcm) >= a.histCap {
		a.hist = append(a.hist[:0], pcm[len(pcm)-a.histCap:]...)
	} else {
		if len(a.hist)+len(pcm) > cap(a.hist) {
			keep := a.hist[len(a.hist)-(a.histCap-len(pcm)):]
			a.hist = append(a.hist[:0], keep...) // copy within: keep starts after dst
		}
		a.hist = append(a.hist, pcm...)
	}
	a.pos += int64(len(pcm))
}

// feedTo writes samples [fed, end) to the ASR. Samples before a.pos come from the history;
// chunk is the unit being appended (stream positions a.pos onward, not recorded yet), so a unit
// longer than the history still reaches the ASR whole. Only history samples older than
// audio_history_ms can be skipped (an onset placed before what the history still holds).
func (a *audioState) feedTo(end int64, chunk []float32) error {
	histStart := a.pos - int64(len(a.hist))
	from := max(a.fed, histStart)
	end = min(end, a.pos+int64(len(chunk)))
	if end <= from {
		return nil
	}
	if from < a.pos {
		upto := min(end, a.pos)
		if err := a.asr.Write(a.hist[from-histStart : upto-histStart]); err != nil {
			return err
		}
		from = upto
	}
	if from < end {
		if err := a.asr.Write(chunk[from-a.pos : end-a.pos]); err != nil {
			return err
		}
	}
	a.fed = end
	a.asrHas = true
	return nil
}

func sampleAt(ms int64) int64 { return ms * audio.ASRSampleRate / 1000 }

// finish ends the ASR utterance and returns its transcript, with each word's log posterior
// when a.logprobs asks for them and keep is set (a discard keeps nothing, so it does not pay
// for the lattice passes).
func (a *audioState) finish(keep bool) (duplex.Transcription, error) {
	a.asrHas = false
	a.deltaSent, a.partialPrev = "", ""
	var tr duplex.Transcription
	var err error
	if lf, ok := a.asr.(logprobFinisher); ok && keep && a.logprobs {
		tr.Text, tr.Logprobs, err = lf.FinishLogprobs()
		if tr.Logprobs == nil {
			tr.Logprobs = []audio.WordLogprob{} // asked for: an empty transcript has an empty list
		}
	} else {
		tr.Text, err = a.asr.Finish()
	}
	if c, ok := a.asr.(interface{ UtteranceCPU() time.Duration }); ok {
		tr.RecognizerCPU = c.UtteranceCPU()
	}
	return tr, err
}

// settledDelta is the words of the open utterance newly settled since the last call ("" when
// none, or when the recognizer cannot tell a partial hypothesis).
func (a *audioState) settledDelta() string {
	pa, ok := a.asr.(interface{ Partial() string })
	if !ok || !a.asrHas {
		return ""
	}
	p := pa.Partial()
	if p == a.partialPrev {
		return ""
	}
	d := audio.StableDelta(a.deltaSent, a.partialPrev, p, false)
	a.partialPrev = p
	a.deltaSent += d
	return d
}

func (d *DuplexStream) lockAudio(ctx context.Context) error {
	select {
	case d.audioMu <- struct{}{}:
	case <-ctx.Done():
		return ctx.Err()
	}
	if d.audio.closed {
		<-d.audioMu
		return ErrClosed
	}
	return nil
}

func (d *DuplexStream) unlockAudio() { <-d.audioMu }

// AppendAudio consumes one unit of 16 kHz mono audio: VAD and streaming ASR. It sends one
// Decision output for the unit, "listen", or "speak" when the unit holds a VAD endpoint and
// AutoResponse is on (then a Transcript output precedes it and a response starts), and one
// StageMetricsMessage with the unit's stage-0 time. turn is the caller's id of the input the
// unit belongs to (<= 0: the current input); the unit's rows carry it, and a response the
// unit's endpoint starts answers it.
func (d *DuplexStream) AppendAudio(ctx context.Context, turn int, pcm16k []float32) (err error) {
	defer func() {
		if err != nil {
			err = fmt.Errorf("appending audio: %w", err)
		}
	}()
	if len(pcm16k) == 0 {
		return audio.ErrEmptyAudio
	}
	if err := audio.CheckFinite(pcm16k); err != nil {
		return err
	}
	if err := d.lockAudio(ctx); err != nil {
		return err
	}
	defer d.unlockAudio()
	d.setInput(turn)
	start := time.Now()
	submitTS := metrics.Now()
	a := &d.audio
	// The unit joins the history only after it was fed (deferred, so that stream time advances
	// with the VAD's even on an error): feeding reads it from pcm16k, never from a history that
	// may be shorter than the unit.
	defer a.record(pcm16k)
	evs, err := a.vad.Process(pcm16k)
	if err != nil {
		return err
	}
	// endpoints are the unit's confirmed endpoints: each transcript, and the speculation
	// started on it when one was (confirmed only if it answered the same speech end and text).
	type endpoint struct {
		tr  duplex.Transcription
		sp  *speculation
		eot *duplex.EndOfTurnDecision
	}
	var endpoints []endpoint
	// endpointAt ends the open utterance at a VAD endpoint whose speech ended at endMs: its
	// transcript joins endpoints, or a remote ASR's transcription is queued.
	endpointAt := func(endMs int64, eot *duplex.EndOfTurnDecision) error {
		sp := d.takeSpec()
		if c, ok := a.asr.(asrCutter); ok && a.asrHas {
			// Remote ASR: the endpoint's transcript, response and speak decision
			// follow from the transcriber; this unit stays a listen.
			if sp != nil {
				d.discardSpec(sp, "remote asr")
			}
			return d.queueTranscription(c, asrJob{respond: true, submitTS: submitTS, turn: d.upcoming()})
		}
		if !a.asrHas {
			if sp != nil {
				d.discardSpec(sp, "audio committed by hand")
			}
			return nil // committed by hand mid-segment: nothing left to answer
		}
		tr, err := a.finish(true)
		if err != nil && !errors.Is(err, audio.ErrEmptyAudio) {
			if sp != nil {
				d.discardSpec(sp, "asr failed")
			}
			return err
		}
		if sp != nil && (sp.endMs != endMs || sp.transcript != tr.Text) {
			d.discardSpec(sp, "endpoint differs")
			sp = nil
		}
		endpoints = append(endpoints, endpoint{tr: tr, sp: sp, eot: eot})
		return nil
	}
	if !d.opts.AutoResponse {
		// Manual turns: the client decides what is a turn, so the ASR hears everything.
		if err := a.feedTo(a.pos+int64(len(pcm16k)), pcm16k); err != nil {
			return err
		}
		if d.opts.TranscriptDeltas {
			if delta := a.settledDelta(); delta != "" {
				if err := d.disp.output(ctx, nil, OutputMessage{Output: duplex.Output{Kind: duplex.OutTranscriptDelta, Turn: d.upcoming(), Text: delta}, RequestID: d.rid, StageID: 0, StageSubmitTS: submitTS}); err != nil {
					return err
				}
			}
		}
	} else {
		for _, ev := range evs {
			switch ev.Kind {
			case speech.SpeechStarted:
				a.fed, a.inSeg = max(a.fed, sampleAt(ev.AtMs)), true
				d.sem = nil // a semantic_vad pause that had not ended the turn: the same turn goes on
				d.mu.Lock()
				d.dropSpecLocked("new segment") // none expected: a segment's end decides its speculation
				d.mu.Unlock()
			case speech.SpeechStopped:
				// The stop is reported silence_duration_ms after the speech ended; the ASR
				// already heard up to here while in the segment.
				if err := a.feedTo(sampleAt(ev.AtMs+int64(d.opts.VAD.SilenceDurationMs)), pcm16k); err != nil {
					return err
				}
				a.inSeg = false
				if d.semOn && a.asrHas {
					d.beginSemPause(ev.AtMs) // the estimate or the pause's length decides
					continue
				}
				if err := endpointAt(ev.AtMs, nil); err != nil {
					return err
				}
			}
		}
		if d.sem != nil {
			endMs := d.sem.endMs
			if eot := d.decideSemPause(streamMs(a.pos + int64(len(pcm16k)))); eot != nil {
				if err := endpointAt(endMs, eot); err != nil {
					return err
				}
			}
		}
		if a.inSeg {
			if err := a.feedTo(a.pos+int64(len(pcm16k)), pcm16k); err != nil {
				return err
			}
			d.preempt()
		}
	}
	// The unit's own stage-0 work (VAD + ASR) belongs to the turn it leads to.
	turn = d.upcoming()
	_ = d.disp.stageMetrics(ctx, nil, StageMetricsMessage{
		RequestID: d.rid, StageID: 0, Turn: turn, StageSubmitTS: submitTS, FinalOutputType: finalOutputType(d.opts.WantAudio),
		Metrics: metrics.StageRequestStats{StageGenTimeMs: msSince(start), OutputUnitType: "text"},
	})
	decision := OutputMessage{Output: duplex.Output{Kind: duplex.OutDecision, Turn: turn, Decision: duplex.DecisionListen}, RequestID: d.rid, StageID: 0, StageSubmitTS: submitTS}
	var respondErr error
	var confirmed []*speculation
	for _, e := range endpoints {
		if e.sp != nil {
			if err := d.confirmSpec(ctx, e.sp, e.tr.Logprobs, submitTS); err != nil {
				respondErr = err
				continue
			}
			confirmed = append(confirmed, e.sp)
			decision.Decision, decision.Turn, decision.EndOfTurn = duplex.DecisionSpeak, e.sp.ts.n, e.eot
			continue
		}
		ts, err := d.commitTranscript(ctx, d.upcoming(), e.tr, true, submitTS)
		if err != nil {
			respondErr = err
			continue
		}
		decision.Decision, decision.Turn, decision.EndOfTurn = duplex.DecisionSpeak, ts.n, e.eot
	}
	err = d.disp.output(ctx, nil, decision)
	// A confirmed speculation's outputs follow its speak decision, as a response's would.
	for _, sp := range confirmed {
		d.releaseSpec(sp)
	}
	if err != nil {
		return err
	}
	return respondErr
}

// DiscardAudio forgets the audio heard since the last commit (input_audio_buffer.clear): the
// ASR's open utterance is ended and its hypothesis dropped, so the next Commit transcribes only
// audio appended after this call. The VAD keeps running on stream time (its events are
// positions in the whole stream); an open segment is closed so that auto-response does not
// answer the dropped audio at its endpoint.
func (d *DuplexStream) DiscardAudio(ctx context.Context) error {
	if err := d.lockAudio(ctx); err != nil {
		return fmt.Errorf("discarding audio: %w", err)
	}
	defer d.unlockAudio()
	if d.opts.TranscriptDeltas {
		// An empty delta marks the cut in the output order: the open utterance's deltas still on
		// their way came before it, and the session drops them.
		defer func() {
			_ = d.disp.output(ctx, nil, OutputMessage{Output: duplex.Output{Kind: duplex.OutTranscriptDelta, Turn: d.upcoming()}, RequestID: d.rid, StageID: 0})
		}()
	}
	a := &d.audio
	a.fed, a.inSeg, d.sem = a.pos, false, nil
	d.mu.Lock()
	d.dropSpecLocked("audio discarded")
	d.mu.Unlock()
	if !a.asrHas {
		return nil
	}
	if c, ok := a.asr.(asrCutter); ok {
		// Dropped without a transcription: nobody wants its text.
		_, _ = c.Cut()
		a.asrHas = false
		a.deltaSent, a.partialPrev = "", ""
		return nil
	}
	if _, err := a.finish(false); err != nil && !errors.Is(err, audio.ErrEmptyAudio) {
		return fmt.Errorf("discarding audio: %w", err)
	}
	return nil
}

// commit ends the user's audio turn: the ASR's final transcript goes out as a Transcript
// output, joins the conversation, and with respond a response starts. With nothing heard since
// the last commit it fails with audio.ErrEmptyAudio.
func (d *DuplexStream) commit(ctx context.Context, turn int, respond bool) (duplex.Transcription, error) {
	wait, err := d.StartCommit(ctx, turn, respond)
	if err != nil {
		return duplex.Transcription{}, err
	}
	return wait(ctx)
}

// StartCommit is Commit in two steps: the utterance is cut now, in order with the audio calls
// (after every earlier append), and wait returns its transcript once it is committed. With a
// remote ASR the transcription runs on the stream's transcriber meanwhile, so audio calls made
// after StartCommit returns go on while the upstream works; with the local ASR everything is
// done when StartCommit returns. wait giving up on its ctx does not undo the commit. turn is
// the caller's id of the input committed (<= 0: the current input).
func (d *DuplexStream) StartCommit(ctx context.Context, turn int, respond bool) (wait func(context.Context) (duplex.Transcription, error), err error) {
	if err := d.lockAudio(ctx); err != nil {
		return nil, fmt.Errorf("committing audio: %w", err)
	}
	defer d.unlockAudio()
	turn = d.setInput(turn)
	a := &d.audio
	d.sem = nil // committed by hand: the pause has nothing left to decide
	if a.inSeg {
		if err := a.feedTo(a.pos, nil); err != nil {
			return nil, fmt.Errorf("committing audio: %w", err)
		}
	}
	if !a.asrHas {
		return nil, fmt.Errorf("committing audio: %w", audio.ErrEmptyAudio)
	}
	if c, ok := a.asr.(asrCutter); ok {
		done := make(chan commitResult, 1)
		if err := d.queueTranscription(c, asrJob{respond: respond, submitTS: metrics.Now(), done: done, turn: turn}); err != nil {
			return nil, fmt.Errorf("committing audio: %w", err)
		}
		return func(ctx context.Context) (duplex.Transcription, error) {
			select {
			case r := <-done:
				if r.err != nil {
					return r.tr, fmt.Errorf("committing audio: %w", r.err)
				}
				return r.tr, nil
			case <-ctx.Done():
				return duplex.Transcription{}, fmt.Errorf("committing audio: %w", ctx.Err())
			}
		}, nil
	}
	tr, err := a.finish(true)
	if err != nil {
		return nil, fmt.Errorf("committing audio: %w", err)
	}
	if _, err := d.commitTranscript(ctx, turn, tr, respond, metrics.Now()); err != nil {
		err = fmt.Errorf("committing audio: %w", err)
		return func(context.Context) (duplex.Transcription, error) { return tr, err }, nil
	}
	return func(context.Context) (duplex.Transcription, error) { return tr, nil }, nil
}

// SetTranscriptLogprobs turns each word's log posterior on the final transcripts on or off
// (DuplexOptions.TranscriptLogprobs), from the next utterance the stream ends: it runs in order
// with the audio calls. Only the local recognizer has them; a stream on a remote ASR refuses
// with ErrInvalidRequest.
func (d *DuplexStream) SetTranscriptLogprobs(ctx context.Context, on bool) error {
	if err := d.lockAudio(ctx); err != nil {
		return fmt.Errorf("setting transcript logprobs: %w", err)
	}
	defer d.unlockAudio()
	if _, ok := d.audio.asr.(logprobFinisher); on && !ok {
		return fmt.Errorf("setting transcript logprobs: %w: %s", ErrInvalidRequest, errNoLogprobs)
	}
	d.audio.logprobs = on
	return nil
}

// errNoLogprobs says why a remote recognizer cannot give transcript logprobs.
const errNoLogprobs = "word log probabilities need the local speech recognizer (this server's ASR is remote)"

// commitTranscript sends the Transcript output, adds the user message and optionally starts a
// response (returned; nil without respond), all as turn's.
func (d *DuplexStream) commitTranscript(ctx context.Context, turn int, tr duplex.Transcription, respond bool, submitTS float64) (*turnState, error) {
	if err := d.disp.output(ctx, nil, OutputMessage{Output: duplex.Output{Kind: duplex.OutTranscript, Turn: turn, Text: tr.Text, WordLogprobs: tr.Logprobs}, RequestID: d.rid, StageID: 0, StageSubmitTS: submitTS}); err != nil {
		return nil, err
	}
	if tr.Text != "" && !d.opts.TranscribeOnly {
		if err := d.addMessage(turn, "user", tr.Text); err != nil {
			return nil, err
		}
	}
	if !respond {
		return nil, nil
	}
	if t := d.toolSpec(); t != nil {
		// The stream's own turn with the session's tools: declared, parsed or forced as a
		// response's own are.
		return d.startResponseSpec(turn, 0, &duplex.ResponseSpec{Tools: t})
	}
	return d.startResponse(turn, 0)
}
