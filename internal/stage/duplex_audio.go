package stage

import (
	"context"
	"errors"
	"fmt"
	"github.com/omniserve/omniserve/internal/duplex"
	"time"

	"github.com/omniserve/omniserve/internal/audio"
	"github.com/omniserve/omniserve/internal/metrics"
	"github.com/omniserve/omniserve/internal/speech"
)

// The stream's audio calls. Each runs under the ear's lock, in the order the caller made them:
// the ear hears the unit (VAD, ASR feed, endpoints, semantic_vad pauses, speculation points),
// and the stream hands what it heard to the conversation, which commits transcripts and
// decides listen or speak.

// unit is one AppendAudio call's audio and when the stage started on it.
type unit struct {
	pcm      []float32
	start    time.Time
	submitTS float64
}

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
	if err := d.ear.lock(ctx); err != nil {
		return err
	}
	defer d.ear.unlock()
	d.conv.setInput(turn)
	u := unit{pcm: pcm16k, start: time.Now(), submitTS: metrics.Now()}
	// The unit joins the history only after it was fed (deferred, so that stream time advances
	// with the VAD's even on an error): feeding reads it from pcm16k, never from a history that
	// may be shorter than the unit.
	defer d.ear.record(pcm16k)
	evs, err := d.ear.vad.Process(pcm16k)
	if err != nil {
		return err
	}
	var eps []endpoint
	if d.opts.AutoResponse {
		eps, err = d.listenSegments(u, evs)
	} else {
		err = d.listenAll(ctx, u)
	}
	if err != nil {
		return err
	}
	return d.decide(ctx, u, eps)
}

// listenAll feeds the unit on a manual-turn stream: the client decides what is a turn, so the
// ASR hears everything, and the words it settles go out as transcript deltas.
func (d *DuplexStream) listenAll(ctx context.Context, u unit) error {
	if err := d.ear.feedTo(d.ear.unitEnd(u.pcm), u.pcm); err != nil {
		return err
	}
	if !d.opts.TranscriptDeltas {
		return nil
	}
	delta := d.ear.settledDelta()
	if delta == "" {
		return nil
	}
	return d.disp.output(ctx, nil, OutputMessage{Output: duplex.Output{Kind: duplex.OutTranscriptDelta, Turn: d.conv.upcoming(), Text: delta}, RequestID: d.rid, StageID: 0, StageSubmitTS: u.submitTS})
}

// listenSegments feeds the unit on an auto-response stream: the ASR hears the VAD's speech segments,
// a segment's end (or the semantic_vad pause it opened, once decided) is an endpoint, and a
// pause in an open segment may start a speculation.
func (d *DuplexStream) listenSegments(u unit, evs []speech.VADEvent) ([]endpoint, error) {
	var eps []endpoint
	for _, ev := range evs {
		ep, err := d.vadEvent(u, ev)
		if err != nil {
			return nil, err
		}
		if ep != nil {
			eps = append(eps, *ep)
		}
	}
	if endMs, eot := d.ear.decidePause(streamMs(d.ear.unitEnd(u.pcm))); eot != nil {
		ep, err := d.endpointAt(u, endMs, eot)
		if err != nil {
			return nil, err
		}
		if ep != nil {
			eps = append(eps, *ep)
		}
	}
	if d.ear.inSeg {
		if err := d.ear.feedTo(d.ear.unitEnd(u.pcm), u.pcm); err != nil {
			return nil, err
		}
		d.preempt()
	}
	return eps, nil
}

// vadEvent handles one VAD event of the unit; a segment's end that ends the turn now returns
// its endpoint.
func (d *DuplexStream) vadEvent(u unit, ev speech.VADEvent) (*endpoint, error) {
	switch ev.Kind {
	case speech.SpeechStarted:
		d.ear.speechStarted(ev.AtMs)
		d.conv.dropSpec("new segment") // none expected: a segment's end decides its speculation
	case speech.SpeechStopped:
		pause, err := d.ear.speechStopped(ev.AtMs, u.pcm)
		if err != nil {
			return nil, err
		}
		if pause {
			d.beginPause(ev.AtMs) // the estimate or the pause's length decides
			return nil, nil
		}
		return d.endpointAt(u, ev.AtMs, nil)
	}
	return nil, nil
}

// beginPause starts a semantic_vad pause whose speech ended at endMs, its partial transcript
// queued for the thinker's estimate now, in order with the stream's jobs.
func (d *DuplexStream) beginPause(endMs int64) {
	text, ask := d.ear.beginPause(endMs)
	if !ask {
		return
	}
	j, err := d.conv.queueEndOfTurn(text)
	if errors.Is(err, ErrQueueFull) {
		d.p.log.Debug("semantic_vad: no end-of-turn estimate, the stream's queue is full")
	}
	d.ear.awaitEstimate(j)
}

// endpointAt ends the open utterance at a VAD endpoint whose speech ended at endMs: it returns
// the endpoint with its transcript and the speculation it confirms, or nil when a remote ASR's
// transcription was queued (its transcript, response and speak decision follow from the
// transcriber; this unit stays a listen) or nothing was left to answer.
func (d *DuplexStream) endpointAt(u unit, endMs int64, eot *duplex.EndOfTurnDecision) (*endpoint, error) {
	sp := d.conv.takeSpec()
	switch d.ear.pending() {
	case heardRemote:
		d.conv.discardSpec(sp, "remote asr")
		return nil, d.queueTranscription(asrJob{respond: true, submitTS: u.submitTS, turn: d.conv.upcoming()})
	case heardNothing:
		d.conv.discardSpec(sp, "audio committed by hand")
		return nil, nil // committed by hand mid-segment: nothing left to answer
	}
	tr, err := d.ear.finish(true)
	if err != nil && !errors.Is(err, audio.ErrEmptyAudio) {
		d.conv.discardSpec(sp, "asr failed")
		return nil, err
	}
	if sp != nil && !sp.answers(endMs, tr.Text) {
		d.conv.discardSpec(sp, "endpoint differs")
		sp = nil
	}
	return &endpoint{tr: tr, sp: sp, eot: eot}, nil
}

// decide reports the unit's stage-0 work and its listen/speak decision: the conversation
// answers each endpoint. A confirmed speculation's outputs follow its speak decision, as a
// response's would.
func (d *DuplexStream) decide(ctx context.Context, u unit, eps []endpoint) error {
	// The unit's own stage-0 work (VAD + ASR) belongs to the turn it leads to.
	turn := d.conv.upcoming()
	_ = d.disp.stageMetrics(ctx, nil, StageMetricsMessage{
		RequestID: d.rid, StageID: 0, Turn: turn, StageSubmitTS: u.submitTS, FinalOutputType: finalOutputType(d.opts.WantAudio),
		Metrics: metrics.StageRequestStats{StageGenTimeMs: msSince(u.start), OutputUnitType: "text"},
	})
	decision := OutputMessage{Output: duplex.Output{Kind: duplex.OutDecision, Turn: turn, Decision: duplex.DecisionListen}, RequestID: d.rid, StageID: 0, StageSubmitTS: u.submitTS}
	confirmed, respondErr := d.conv.answer(ctx, eps, &decision, u.submitTS)
	err := d.disp.output(ctx, nil, decision)
	for _, sp := range confirmed {
		d.conv.releaseSpec(sp)
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
	if err := d.ear.lock(ctx); err != nil {
		return fmt.Errorf("discarding audio: %w", err)
	}
	defer d.ear.unlock()
	if d.opts.TranscriptDeltas {
		// An empty delta marks the cut in the output order: the open utterance's deltas still on
		// their way came before it, and the session drops them.
		defer func() {
			_ = d.disp.output(ctx, nil, OutputMessage{Output: duplex.Output{Kind: duplex.OutTranscriptDelta, Turn: d.conv.upcoming()}, RequestID: d.rid, StageID: 0})
		}()
	}
	d.ear.closeSegment()
	d.conv.dropSpec("audio discarded")
	if err := d.ear.discard(); err != nil {
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
	if err := d.ear.lock(ctx); err != nil {
		return nil, fmt.Errorf("committing audio: %w", err)
	}
	defer d.ear.unlock()
	turn = d.conv.setInput(turn)
	if err := d.ear.closeUtterance(); err != nil {
		return nil, fmt.Errorf("committing audio: %w", err)
	}
	switch d.ear.pending() {
	case heardNothing:
		return nil, fmt.Errorf("committing audio: %w", audio.ErrEmptyAudio)
	case heardRemote:
		return d.commitRemote(turn, respond)
	}
	tr, err := d.ear.finish(true)
	if err != nil {
		return nil, fmt.Errorf("committing audio: %w", err)
	}
	if _, err := d.conv.commitTranscript(ctx, turn, tr, respond, metrics.Now()); err != nil {
		err = fmt.Errorf("committing audio: %w", err)
		return func(context.Context) (duplex.Transcription, error) { return tr, err }, nil
	}
	return func(context.Context) (duplex.Transcription, error) { return tr, nil }, nil
}

// commitRemote is StartCommit with a remote ASR: the utterance is cut and queued for the
// transcriber, and wait waits for its commit.
func (d *DuplexStream) commitRemote(turn int, respond bool) (wait func(context.Context) (duplex.Transcription, error), err error) {
	done := make(chan commitResult, 1)
	if err := d.queueTranscription(asrJob{respond: respond, submitTS: metrics.Now(), done: done, turn: turn}); err != nil {
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

// SetTranscriptLogprobs turns each word's log posterior on the final transcripts on or off
// (DuplexOptions.TranscriptLogprobs), from the next utterance the stream ends: it runs in order
// with the audio calls. Only the local recognizer has them; a stream on a remote ASR refuses
// with ErrInvalidRequest.
func (d *DuplexStream) SetTranscriptLogprobs(ctx context.Context, on bool) error {
	if err := d.ear.lock(ctx); err != nil {
		return fmt.Errorf("setting transcript logprobs: %w", err)
	}
	defer d.ear.unlock()
	if _, ok := d.ear.asr.(logprobFinisher); on && !ok {
		return fmt.Errorf("setting transcript logprobs: %w: %s", ErrInvalidRequest, errNoLogprobs)
	}
	d.ear.logprobs = on
	return nil
}

// errNoLogprobs says why a remote recognizer cannot give transcript logprobs.
const errNoLogprobs = "word log probabilities need the local speech recognizer (this server's ASR is remote)"
