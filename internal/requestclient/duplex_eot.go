package requestclient

import (
	"context"
	"fmt"

	"github.com/omniserve/omniserve/internal/stage"
)

// EndOfTurn is the thinker's estimate that the user's open utterance ends the turn
// (stage.EndOfTurn): Prob of the chat template's end-of-user-turn token after Text, the ASR's
// partial hypothesis.
type EndOfTurn struct {
	Prob float64
	Text string
}

// errNoEndOfTurn reports a stream that cannot estimate the end of a turn (a remote thinker, an
// ASR without partial hypotheses): semantic_vad falls back to silence alone.
var errNoEndOfTurn = stage.ErrNoEndOfTurn

// endOfTurnStream is the optional part of a stream that estimates the end of a turn.
type endOfTurnStream interface {
	StartEndOfTurn(ctx context.Context) (wait func(context.Context) (stage.EndOfTurn, error), err error)
}

// EndOfTurnProb estimates, after every earlier append, whether the user's open utterance ends
// the turn. Only the read of the ASR's hypothesis runs in the append FIFO (and never fails
// there: a failed estimate must not stop the appends queued behind it); the score is waited
// for outside it.
func (d *DuplexRequest) EndOfTurnProb(ctx context.Context) (EndOfTurn, error) {
	es, ok := d.stream.(endOfTurnStream)
	if !ok {
		return EndOfTurn{}, fmt.Errorf("estimating the end of turn: %w", errNoEndOfTurn)
	}
	var wait func(context.Context) (stage.EndOfTurn, error)
	var startErr error
	if err := d.barrier(ctx, func(ctx context.Context) error {
		wait, startErr = es.StartEndOfTurn(ctx)
		return nil
	}); err != nil {
		return EndOfTurn{}, fmt.Errorf("estimating the end of turn: %w", err)
	}
	if startErr != nil {
		return EndOfTurn{}, startErr
	}
	e, err := wait(ctx)
	if err != nil {
		return EndOfTurn{}, err
	}
	return EndOfTurn{Prob: e.Prob, Text: e.Text}, nil
}
