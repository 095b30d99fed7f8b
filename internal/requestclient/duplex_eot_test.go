package requestclient

import (
	"context"
	"errors"
	"testing"

	"github.com/stretchr/testify/require"
	"go.uber.org/zap"

	"github.com/omniserve/omniserve/internal/stage"
)

// eotStream is a fakeStream that estimates the end of a turn: a scripted answer, or a failure
// to start.
type eotStream struct {
	fakeStream
	fail bool
}

func (f *eotStream) StartEndOfTurn(context.Context) (func(context.Context) (stage.EndOfTurn, error), error) {
	f.record("eot")
	if f.fail {
		return nil, errors.New("no room for a score")
	}
	return func(context.Context) (stage.EndOfTurn, error) {
		return stage.EndOfTurn{Prob: 0.8, Text: "go forward"}, nil
	}, nil
}

// TestDuplexEndOfTurn: the estimate runs in wire order after the appends before it; a stream
// without estimates says so with errNoEndOfTurn, and a failed estimate does not stop the
// appends queued behind it (it is an answer, not a broken input chain).
func TestDuplexEndOfTurn(t *testing.T) {
	ctx := context.Background()
	plain := &fakeStream{t: t}
	d, _, _ := newTestDuplex(t, Options{}, zap.NewNop(), plain)
	_, err := d.EndOfTurnProb(ctx)
	require.ErrorIs(t, err, errNoEndOfTurn)
	require.NoError(t, d.Close(ctx, ""))

	fs := &eotStream{fakeStream: fakeStream{t: t}}
	out := &outputs{}
	d = New(nil, Options{}, zap.NewNop()).newDuplex(Fence{SessionID: "duplex-eot"}, "", 2, out.add)
	d.start(fs)
	require.NoError(t, d.AppendAudio(ctx, 1, []float32{0.1}))
	e, err := d.EndOfTurnProb(ctx)
	require.NoError(t, err)
	require.Equal(t, EndOfTurn{Prob: 0.8, Text: "go forward"}, e)
	fs.fail = true
	_, err = d.EndOfTurnProb(ctx)
	require.ErrorContains(t, err, "no room for a score")
	require.NoError(t, d.AppendAudio(ctx, 1, []float32{0.2}))
	_, err = d.Commit(ctx, 1, false)
	require.NoError(t, err)
	require.Equal(t, []string{"append", "eot", "eot", "append", "commit"}, fs.callList())
	require.Zero(t, out.errors())
	require.NoError(t, d.Close(ctx, ""))
}
