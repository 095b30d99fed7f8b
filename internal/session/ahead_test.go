package session

import (
	"context"
	"sync"
	"testing"

	"github.com/stretchr/testify/require"
	"go.uber.org/zap"

	"github.com/omniserve/omniserve/internal/duplex"
	"github.com/omniserve/omniserve/internal/requestclient"
)

// streamsBackend opens a new asrEngine per stream and records the settings of each.
type streamsBackend struct {
	t       *testing.T
	mu      sync.Mutex
	opts    []duplex.Options
	engines []*asrEngine
}

func (b *streamsBackend) SupportsDuplex() bool { return true }
func (b *streamsBackend) Open(_ context.Context, _ requestclient.Fence, o duplex.Options, out func(duplex.Output)) (Engine, error) {
	e := &asrEngine{fakeEngine: &fakeEngine{t: b.t, out: out}}
	b.mu.Lock()
	defer b.mu.Unlock()
	b.opts = append(b.opts, o)
	b.engines = append(b.engines, e)
	return e, nil
}

func (b *streamsBackend) streams() ([]duplex.Options, []*asrEngine) {
	b.mu.Lock()
	defer b.mu.Unlock()
	return append([]duplex.Options(nil), b.opts...), append([]*asrEngine(nil), b.engines...)
}

func (a *asrEngine) heardNow() []string {
	a.amu.Lock()
	defer a.amu.Unlock()
	return append([]string(nil), a.heard...)
}

func startAheadSession(t *testing.T, b Backend) (*Session, *sink, func() string) {
	t.Helper()
	m := NewManager(ManagerConfig{MaxSessions: 1}, b, zap.NewNop())
	sk := &sink{ch: make(chan Event, 1024)}
	s, wait := runSession(t, m, Options{}, sk, manual16k)
	return s, sk, wait
}

// TestFirstTurnDecodesAhead: the first turn's appends reach the engine's ASR as they arrive,
// before the commit (the stream opens at the first append), so the commit feeds nothing and
// pays only the final hypothesis.
func TestFirstTurnDecodesAhead(t *testing.T) {
	b := &streamsBackend{t: t}
	s, sk, wait := startAheadSession(t, b)
	ctx := context.Background()
	for _, v := range []float64{0.1, 0.2, 0.3} {
		require.NoError(t, s.Submit(ctx, &AppendAudio{Data: pcmOf(v, 1600)}))
	}
	drainUntilAck(t, s, sk)
	_, engines := b.streams()
	require.Len(t, engines, 1, "the first append opens the stream")
	eng := engines[0]
	require.Len(t, eng.heardNow(), 3, "every append reached the ASR before any commit")
	require.NotContains(t, eng.list(), "commit")

	require.NoError(t, s.Submit(ctx, &CommitInput{}))
	tr := sk.until(t, "conversation.item.input_audio_transcription.completed")
	require.Equal(t, "0.1 0.2 0.3", tr.wire()["transcript"])
	require.Equal(t, []string{"mark", "append", "append", "append", "mark", "commit"}, eng.list(),
		"the commit feeds nothing: the ASR had everything")
	require.NoError(t, s.Submit(ctx, &CloseSession{}))
	require.Equal(t, ReasonClientClose, wait())
}

// TestUpdateReopensEarlyStream: a session.update between the first append and the first
// commit that changes the stream's settings reopens the early stream with the new settings
// and the buffered audio, so nothing is lost and the model gets the new instructions as its
// system prompt (no extra system message); an update that leaves the stream's settings alone
// keeps it.
func TestUpdateReopensEarlyStream(t *testing.T) {
	b := &streamsBackend{t: t}
	s, sk, wait := startAheadSession(t, b)
	ctx := context.Background()
	appendAudio := func(v float64) { require.NoError(t, s.Submit(ctx, &AppendAudio{Data: pcmOf(v, 1600)})) }
	appendAudio(0.1)
	appendAudio(0.2)
	require.NoError(t, s.Submit(ctx, &UpdateSession{Patch: ConfigPatch{Voice: ptr("echo")}}))
	sk.until(t, "session.updated")
	opts, _ := b.streams()
	require.Len(t, opts, 1, "a voice change does not touch the stream")

	require.NoError(t, s.Submit(ctx, &UpdateSession{Patch: ConfigPatch{Instructions: ptr("Be brief."), Temperature: ptr(0.6)}}))
	sk.until(t, "session.updated")
	appendAudio(0.3)
	drainUntilAck(t, s, sk)
	opts, engines := b.streams()
	require.Len(t, opts, 2, "the update reopened the early stream")
	require.Equal(t, "Be brief.", opts[1].Instructions)
	require.InDelta(t, 0.6, *opts[1].Temperature, 1e-9)
	require.Contains(t, engines[0].list(), "close:")
	require.Equal(t, []string{"0.1", "0.2", "0.3"}, engines[1].heardNow(),
		"the new stream heard the buffered audio and the next append")

	require.NoError(t, s.Submit(ctx, &CommitInput{}))
	tr := sk.until(t, "conversation.item.input_audio_transcription.completed")
	require.Equal(t, "0.1 0.2 0.3", tr.wire()["transcript"], "no audio lost to the reopen")
	for _, c := range engines[1].list() {
		require.NotContains(t, c, "text:", "the instructions came with the open, not as a message")
	}

	// After the commit the stream holds a conversation: an update no longer reopens it.
	require.NoError(t, s.Submit(ctx, &UpdateSession{Patch: ConfigPatch{Temperature: ptr(0.9)}}))
	sk.until(t, "session.updated")
	opts, _ = b.streams()
	require.Len(t, opts, 2)
	require.NoError(t, s.Submit(ctx, &CloseSession{}))
	require.Equal(t, ReasonClientClose, wait())
}
