package stage

import (
	"context"
	"errors"
	"fmt"
	"github.com/omniserve/omniserve/internal/duplex"
	"time"

	"github.com/omniserve/omniserve/internal/metrics"
)

// asrCutter is an asrStream whose utterance is transcribed by a network call (the remote ASR).
// Cut takes the utterance's audio under the audio lock and leaves the stream ready for the
// next one; the returned transcribe makes the call and runs outside the lock, on the stream's
// transcriber goroutine, so that a slow upstream never holds up appends, discards, commits or
// the VAD (barge-in). The local ASR decodes as audio arrives and finishes under the lock.
type asrCutter interface {
	Cut() (transcribe func(ctx context.Context) (string, error), err error)
}

// asrJob is one cut utterance waiting for its transcript. An endpoint job (done nil) commits
// the transcript, starts a response and sends the speak decision; a Commit job commits it
// (with respond, starting a response) and reports to done.
type asrJob struct {
	transcribe func(ctx context.Context) (string, error)
	respond    bool
	submitTS   float64
	done       chan commitResult // buffered (1); nil for an endpoint job
	turn       int               // the id of the input cut: its rows and response carry it
}

type commitResult struct {
	tr  duplex.Transcription
	err error
}

// queueTranscription cuts the open utterance and queues its transcription, in cut order
// (the caller holds the audio lock). A full queue fails at once instead of waiting under the
// lock: the transcriptions are that far behind the speech.
func (d *DuplexStream) queueTranscription(j asrJob) error {
	transcribe, err := d.ear.cut()
	if err != nil {
		return err
	}
	j.transcribe = transcribe
	select {
	case d.asrq <- j:
		return nil
	default:
		return fmt.Errorf("%w: %d transcriptions are waiting for the remote ASR", ErrQueueFull, cap(d.asrq))
	}
}

// transcribeLoop is the transcriber goroutine of a stream with a remote ASR: it transcribes the
// cut utterances one at a time, in cut order, and commits each. Close cancels d.ctx (which
// cuts a call in flight) and waits for it; utterances still queued then get ErrClosed.
func (d *DuplexStream) transcribeLoop() {
	defer close(d.asrDone)
	for {
		select {
		case <-d.ctx.Done():
			d.failQueuedTranscriptions()
			return
		case j := <-d.asrq:
			d.transcribeJob(j)
		}
	}
}

// failQueuedTranscriptions answers every queued commit with ErrClosed (the stream is closing).
func (d *DuplexStream) failQueuedTranscriptions() {
	for {
		select {
		case j := <-d.asrq:
			if j.done != nil {
				j.done <- commitResult{err: ErrClosed}
			}
		default:
			return
		}
	}
}

func (d *DuplexStream) transcribeJob(j asrJob) {
	start := time.Now()
	submitTS := metrics.Now()
	tr, err := j.transcribe(d.ctx)
	if d.ctx.Err() != nil {
		err = errors.Join(ErrClosed, err)
	}
	// The transcription is stage-0 work of the turn it leads to, as a local ASR's is.
	_ = d.disp.stageMetrics(d.ctx, nil, StageMetricsMessage{
		RequestID: d.rid, StageID: 0, Turn: j.turn, StageSubmitTS: submitTS, FinalOutputType: finalOutputType(d.opts.WantAudio),
		Metrics: metrics.StageRequestStats{StageGenTimeMs: msSince(start), OutputUnitType: "text"},
	})
	if err != nil {
		err = fmt.Errorf("transcribing the utterance: %w", err)
		if j.done != nil {
			j.done <- commitResult{err: err}
			return
		}
		// An endpoint's failure has no caller left to tell: it is reported like a failed
		// append (an Error output with turn -1), and the stream keeps listening.
		_ = d.disp.output(d.ctx, nil, OutputMessage{Output: duplex.Output{Kind: duplex.OutError, Turn: -1, Err: err}, RequestID: d.rid, StageID: 0})
		return
	}
	if j.done != nil {
		_, err := d.conv.commitTranscript(d.ctx, j.turn, duplex.Transcription{Text: tr}, j.respond, j.submitTS)
		j.done <- commitResult{tr: duplex.Transcription{Text: tr}, err: err}
		return
	}
	ts, err := d.conv.commitTranscript(d.ctx, j.turn, duplex.Transcription{Text: tr}, true, j.submitTS)
	if err != nil {
		_ = d.disp.output(d.ctx, nil, OutputMessage{Output: duplex.Output{Kind: duplex.OutError, Turn: -1, Err: fmt.Errorf("responding to the utterance: %w", err)}, RequestID: d.rid, StageID: 0})
		return
	}
	_ = d.disp.output(d.ctx, nil, OutputMessage{Output: duplex.Output{Kind: duplex.OutDecision, Turn: ts.n, Decision: duplex.DecisionSpeak}, RequestID: d.rid, StageID: 0, StageSubmitTS: j.submitTS})
}
