package session

import (
	"context"

	"go.uber.org/zap"

	"github.com/omniserve/omniserve/internal/duplex"
)

// engineLink is the session's engine stream as the actor holds it: a part of the shell, since
// its methods call the engine. It holds the stream (nil until opened), the context engine calls
// run under (the jobs' context), the settings the stream was opened with, whether it holds
// nothing but uncommitted audio, and the listen decisions still owed to chunks forwarded ahead.
type engineLink struct {
	engine Engine
	ctx    context.Context
	opts   duplex.Options // the settings the engine stream was opened with
	// fresh: the engine was opened ahead of the first commit (decode-ahead) and holds nothing
	// but uncommitted audio, so a session.update may still reopen it (ahead.go).
	fresh bool
	// aheadListens counts the listen decisions still to come for forwarded chunks: the engine
	// answers every append with one, and before streaming ahead none reached the client.
	aheadListens int
	// budget is the input admitted for this stream since its last response began (admission.go).
	budget prefillBudget
	obs    engineObserver // logs and counts the stream's failures (engine_errors.go)
}

// forward streams the uncommitted input buffer in into the engine (as turn) ahead of the
// commit, so the ASR decodes while the user speaks and the commit pays only the final
// hypothesis. It forwards only while nothing could reorder it or change what it means: the
// engine is open (the first append opens it, ahead.go), the session is not busy (a response is
// active: input during a response stays buffered, as the overlap policies expect; or an engine
// job is queued or running: appends go straight to the engine's FIFO and must not overtake a
// queued commit), and the engine can discard (input_audio_buffer.clear must make the ASR
// forget). Otherwise the chunks stay local and the commit job feeds them, as before. wall is
// the statistics clock, read only when the turn's arrival has no stamp yet.
func (l *engineLink) forward(in *inputAudio, turn int, busy bool, wall func() float64, log *zap.Logger) {
	if l.engine == nil || busy || in.inputFwd == len(in.inputBuf) {
		return
	}
	if _, ok := l.engine.(AudioDiscarder); !ok {
		return
	}
	if in.inputFwd == 0 {
		// The turn's metrics arrival is its first append (keep-first; the commit's stamp is later).
		at := in.inputStartTS // the buffer's first append, also when the stream opened later
		if at <= 0 {
			at = wall()
		}
		l.engine.MarkTurnArrival(turn, at)
	}
	for _, chunk := range in.inputBuf[in.inputFwd:] { // the buffered chunks not yet forwarded
		if err := l.engine.AppendAudio(l.ctx, turn, chunk); err != nil {
			// Backpressure or a closing engine: the rest stays local for the commit job, which
			// reports a lasting failure.
			log.Debug("forwarding input ahead of commit", zap.Error(err))
			return
		}
		in.inputFwd++
		l.aheadListens++
	}
}

// unforward makes the engine forget the forwarded head of the input buffer in; the buffer
// itself is kept (the next commit feeds all of it). discarded reports that the engine forgot
// it (the open utterance's transcript deltas end there); err that it could not.
func (l *engineLink) unforward(in *inputAudio) (discarded bool, err error) {
	if in.inputFwd == 0 {
		return false, nil
	}
	in.inputFwd = 0
	d, ok := l.engine.(AudioDiscarder)
	if !ok {
		return false, nil
	}
	if err := d.DiscardAudio(l.ctx); err != nil {
		return false, err
	}
	return true, nil
}

// opened takes the stream eng just opened with opts: fresh when it may still be reopened by a
// session.update (it can discard what is forwarded ahead of a commit: engineLink.ahead).
func (l *engineLink) opened(eng Engine, opts duplex.Options, fresh bool) {
	l.engine, l.opts, l.fresh = eng, opts, fresh
}
