package requestclient

import (
	"context"
	"errors"

	"github.com/omniserve/omniserve/internal/duplex"
)

// specResponder is the part of *stage.DuplexStream that runs a response with per-response
// options (Respond with a spec that is not plain); a stream without it (a test fake) refuses
// them.
type specResponder interface {
	RespondWith(ctx context.Context, turn int, spec duplex.ResponseSpec) (int, error)
}

// errSpecUnsupported reports per-response options on a stream that has no per-response options.
var errSpecUnsupported = errors.New("per-response instructions and input are not supported by this stream")
