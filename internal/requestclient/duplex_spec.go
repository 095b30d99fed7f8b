package requestclient

import (
	"context"
	"errors"

	"github.com/omniserve/omniserve/internal/stage"
)

// specResponder is the part of *stage.DuplexStream behind RespondWith; a stream without it
// (a test fake) refuses per-response options.
type specResponder interface {
	RespondWith(ctx context.Context, turn int, spec stage.ResponseSpec) (int, error)
}

// errSpecUnsupported reports RespondWith on a stream that has no per-response options.
var errSpecUnsupported = errors.New("per-response instructions and input are not supported by this stream")

// RespondWith is Respond with per-response options (instructions, input, out of band), in wire
// order with the session's other engine work.
func (d *DuplexRequest) RespondWith(ctx context.Context, turn int, spec ResponseSpec) (int, error) {
	rs, ok := d.stream.(specResponder)
	if !ok {
		return 0, errSpecUnsupported
	}
	return d.respond(ctx, turn, func(ctx context.Context) (int, error) { return rs.RespondWith(ctx, turn, spec.toStage()) })
}
