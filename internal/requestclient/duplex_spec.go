package requestclient

import (
	"context"
	"errors"
	"fmt"

	"github.com/omniserve/omniserve/internal/stage"
)

// specResponder is the part of *stage.DuplexStream behind RespondWith; a stream without it
// (a test fake) refuses per-response options.
type specResponder interface {
	RespondWith(ctx context.Context, spec stage.ResponseSpec) (int, error)
}

// ErrSpecUnsupported reports RespondWith on a stream that has no per-response options.
var ErrSpecUnsupported = errors.New("per-response instructions and input are not supported by this stream")

// RespondWith is Respond with per-response options (instructions, input, out of band), in wire
// order with the session's other engine work.
func (d *DuplexRequest) RespondWith(ctx context.Context, spec ResponseSpec) (int, error) {
	rs, ok := d.stream.(specResponder)
	if !ok {
		return 0, ErrSpecUnsupported
	}
	var turn int
	d.responding.Add(1)
	defer d.responding.Add(-1)
	err := d.barrier(ctx, func(ctx context.Context) error {
		var err error
		turn, err = rs.RespondWith(ctx, spec.toStage())
		return err
	})
	if err != nil {
		if d.turns != nil {
			d.turns.noEngineTurn()
		}
		return 0, fmt.Errorf("starting a response: %w", err)
	}
	if d.turns != nil {
		d.turns.bind(turn)
	}
	return turn, nil
}
