package requestclient

import (
	"context"
	"errors"
	"fmt"

	"github.com/omniserve/omniserve/internal/duplex"
)

// truncationStream is implemented by streams whose truncation setting can change while open
// (*stage.DuplexStream).
type truncationStream interface {
	SetTruncation(ctx context.Context, t duplex.Truncation) error
}

// errNoTruncationSetter reports a stream that keeps the truncation it was opened with.
var errNoTruncationSetter = errors.New("the stream cannot change its truncation")

// SetTruncation changes how the stream keeps its conversation within the context window
// (duplex.Options.Truncation), from its next job on.
func (d *DuplexRequest) SetTruncation(ctx context.Context, t duplex.Truncation) error {
	s, ok := d.stream.(truncationStream)
	if !ok {
		return fmt.Errorf("setting truncation: %w", errNoTruncationSetter)
	}
	if err := s.SetTruncation(ctx, t); err != nil {
		return fmt.Errorf("setting truncation: %w", err)
	}
	return nil
}
