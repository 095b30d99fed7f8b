package session

import (
	"context"
	"encoding/binary"
	"fmt"
	"strings"
	"sync"
	"testing"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
	"go.uber.org/zap"

	"github.com/omniserve/omniserve/internal/duplex"
	"github.com/omniserve/omniserve/internal/requestclient"
)

// asrEngine models the engine's ASR contract on top of fakeEngine: appends accumulate an
// utterance (labelled by each chunk's first sample), Commit transcribes and ends it, and
// DiscardAudio forgets it.
type asrEngine struct {
	*fakeEngine
	amu   sync.Mutex
	heard []string
}

func (a *asrEngine) AppendAudio(ctx context.Context, turn int, pcm []float32) error {
	a.amu.Lock()
	a.heard = append(a.heard, fmt.Sprintf("%.1f", pcm[0]))
	a.amu.Unlock()
	return a.fakeEngine.AppendAudio(ctx, turn, pcm)
}

func (a *asrEngine) Commit(ctx context.Context, turn int, respond bool) (duplex.Transcription, error) {
	_, _ = a.fakeEngine.Commit(ctx, turn, respond)
	a.amu.Lock()
	defer a.amu.Unlock()
	tr := strings.Join(a.heard, " ")
	a.heard = nil
	return duplex.Transcription{Text: tr}, nil
}

func (a *asrEngine) DiscardAudio(context.Context) error {
	a.rec("discard")
	a.amu.Lock()
	a.heard = nil
	a.amu.Unlock()
	return nil
}

type asrBackend struct{ eng *asrEngine }

func (b *asrBackend) SupportsDuplex() bool { return true }
func (b *asrBackend) Open(_ context.Context, f requestclient.Fence, _ duplex.Options, out func(duplex.Output)) (Engine, error) {
	assert.Contains(b.eng.t, f.SessionID, "duplex-")
	b.eng.out = out
	return b.eng, nil
}

// pcmOf is n samples of value v as pcm16 bytes.
func pcmOf(v float64, n int) []byte {
	b := make([]byte, 2*n)
	for i := range n {
		binary.LittleEndian.PutUint16(b[2*i:], uint16(int16(v*32767)))
	}
	return b
}

// TestClearForgetsForwardedInput: once the engine is open, appends stream into it ahead of the
// commit; input_audio_buffer.clear must make it forget them, so the next committed turn's
// transcript holds only the audio appended after the clear. Input during a response stays
// buffered in the session until the commit.
func TestClearForgetsForwardedInput(t *testing.T) {
	eng := &asrEngine{fakeEngine: &fakeEngine{t: t}}
	m := NewManager(ManagerConfig{MaxSessions: 1}, &asrBackend{eng}, zap.NewNop())
	sk := &sink{ch: make(chan Event, 1024)}
	s, wait := runSession(t, m, Options{}, sk, manual16k)
	ctx := context.Background()
	appendAudio := func(v float64) {
		require.NoError(t, s.Submit(ctx, &AppendAudio{Data: pcmOf(v, 1600)}))
	}
	transcript := func() string {
		return sk.until(t, "conversation.item.input_audio_transcription.completed").wire()["transcript"].(string)
	}

	// Turn 1's first append opens the engine and streams into it ahead of the commit too.
	appendAudio(0.1)
	require.NoError(t, s.Submit(ctx, &CommitInput{}))
	require.Equal(t, "0.1", transcript())
	require.Equal(t, []string{"mark", "append", "mark", "commit"}, eng.list())

	// Turn 2 streams ahead (its first append stamps the turn's arrival, keep-first; the commit
	// stamps too); the clear drops it from the engine as well.
	appendAudio(0.2)
	appendAudio(0.3)
	require.NoError(t, s.Submit(ctx, &ClearInput{}))
	sk.until(t, "input_audio_buffer.cleared")
	appendAudio(0.4)
	appendAudio(0.5)
	require.NoError(t, s.Submit(ctx, &CommitInput{}))
	require.Equal(t, "0.4 0.5", transcript())
	require.Equal(t, []string{"mark", "append", "mark", "commit",
		"mark", "append", "append", "discard", "mark", "append", "append", "mark", "commit"}, eng.list(),
		"appends after turn 1 reach the engine as they arrive, before their commit")

	// Input during a response stays in the session; the commit feeds it after the response.
	appendAudio(0.6)
	require.NoError(t, s.Submit(ctx, &CommitInput{ResponseCreate: ptr(true)}))
	sk.until(t, "response.output_audio.delta")
	n := len(eng.list())
	appendAudio(0.7)
	require.NoError(t, s.Submit(ctx, &Heartbeat{}))
	sk.until(t, "session.heartbeat_ack") // the actor handled the append
	require.Len(t, eng.list(), n, "nothing reaches the engine while the response is active")
	require.NoError(t, s.Submit(ctx, &CloseSession{}))
	require.Equal(t, ReasonClientClose, wait())
	// One id per turn: a commit alone does not end the turn's input (a response does), the clear
	// abandons the input's id, the response takes the id of the input it answers and is closed
	// once under it.
	require.Equal(t, []string{"append:1", "commit:1",
		"append:1", "append:1", "clear:1", "append:2", "append:2", "commit:2",
		"append:2", "commit:2", "respond:2", "close:2"}, eng.idList())
}
