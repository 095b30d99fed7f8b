package realtime

import (
	"context"
	"testing"

	"github.com/stretchr/testify/require"
	"go.uber.org/goleak"

	"github.com/omniserve/omniserve/internal/otlpreceiver"
	"github.com/omniserve/omniserve/internal/tracing"
)

func TestMain(m *testing.M) {
	goleak.VerifyTestMain(m)
}

// The tracer cost is measured over a real export: every session and turn of a round reaches the
// receiver as spans (session, turn, its input and output.audio) before the time is taken, and a
// receiver that got fewer turn spans than turns fails the measurement.
func TestTracerCostPerTurnExportsEveryTurn(t *testing.T) {
	rcv, err := otlpreceiver.Start(0)
	require.NoError(t, err)
	defer func() { require.NoError(t, rcv.Close()) }()
	turns := func() int { return rcv.CountNamed(tracing.TurnSpanName) }
	ctx := context.Background()

	us, err := timeTracer(ctx, rcv.Endpoint(), turns, 50)
	require.NoError(t, err)
	require.Positive(t, us)
	for _, name := range []string{tracing.TurnSpanName, tracing.SessionSpanName, tracing.InputSpanName, tracing.OutputSpanName, "stage 0", "stage 2", "transfer 1->2"} {
		require.Equal(t, 50, rcv.CountNamed(name), name)
	}

	lost := func() int { return turns() / 2 }
	_, err = timeTracer(ctx, rcv.Endpoint(), lost, 10)
	require.ErrorContains(t, err, "turn spans")

	us, err = tracerCostPerTurn(ctx, 20) // with a receiver of its own
	require.NoError(t, err)
	require.Positive(t, us)
	require.Equal(t, 50+10, turns(), "nothing of it reached the first receiver")
}
