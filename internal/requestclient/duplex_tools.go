package requestclient

import (
	"context"
	"errors"
	"fmt"

	"github.com/omniserve/omniserve/internal/duplex"
)

// toolStream is the part of *stage.DuplexStream that holds a session's tools for the responses
// the stream starts by itself; a stream without it (a test fake) refuses them.
type toolStream interface {
	SetTools(spec *duplex.ToolSpec) error
}

// errToolsUnsupported reports tools on a stream that cannot run them.
var errToolsUnsupported = errors.New("tools are not supported by this stream")

// SetTools sets the tools of the responses that start after it (nil: none), in wire order with
// the session's other engine work.
func (d *DuplexRequest) SetTools(ctx context.Context, spec *duplex.ToolSpec) error {
	ts, ok := d.stream.(toolStream)
	if !ok {
		return errToolsUnsupported
	}
	if err := d.barrier(ctx, func(context.Context) error { return ts.SetTools(spec) }); err != nil {
		return fmt.Errorf("setting tools: %w", err)
	}
	return nil
}
