package session

import (
	"context"
	"fmt"
	"sync"
	"testing"

	"github.com/stretchr/testify/require"
	"go.uber.org/zap"

	"github.com/omniserve/omniserve/internal/audio"
	"github.com/omniserve/omniserve/internal/duplex"
	"github.com/omniserve/omniserve/internal/requestclient"
)

// logprobEngine is a fakeEngine whose transcripts carry a word logprob while its setting is
// on, as the pipeline's local recognizer does.
type logprobEngine struct {
	*fakeEngine
	mu sync.Mutex
	on bool
}

func (e *logprobEngine) SetTranscriptLogprobs(_ context.Context, on bool) error {
	e.mu.Lock()
	e.on = on
	e.mu.Unlock()
	e.rec(fmt.Sprintf("logprobs:%v", on))
	return nil
}

func (e *logprobEngine) Commit(ctx context.Context, turn int, respond bool) (duplex.Transcription, error) {
	tr, err := e.fakeEngine.Commit(ctx, turn, respond)
	e.mu.Lock()
	defer e.mu.Unlock()
	if e.on {
		tr.Logprobs = []audio.WordLogprob{{Word: tr.Text, Logprob: -0.25}}
	}
	return tr, err
}

type logprobBackend struct {
	eng       *logprobEngine
	supported bool
}

func (b *logprobBackend) SupportsDuplex() bool             { return true }
func (b *logprobBackend) SupportsTranscriptLogprobs() bool { return b.supported }
func (b *logprobBackend) Open(_ context.Context, _ requestclient.Fence, o duplex.Options, out func(duplex.Output)) (Engine, error) {
	b.eng.out = out
	b.eng.mu.Lock()
	b.eng.on = o.TranscriptLogprobs
	b.eng.mu.Unlock()
	b.eng.rec(fmt.Sprintf("open logprobs:%v", o.TranscriptLogprobs))
	return b.eng, nil
}

func startLogprobTranscription(t *testing.T, supported bool) (*Session, *recSink, *logprobEngine, func() string) {
	t.Helper()
	eng := &logprobEngine{fakeEngine: &fakeEngine{t: t}}
	m := NewManager(ManagerConfig{MaxSessions: 1}, &logprobBackend{eng: eng, supported: supported}, zap.NewNop())
	sk := &recSink{sink: sink{ch: make(chan Event, 1024)}}
	slot, err := m.Acquire(context.Background())
	require.NoError(t, err)
	s := m.NewSession(slot, Options{Transcription: true}, sk)
	done := make(chan string, 1)
	go func() {
		reason := s.Run(context.Background(), &UpdateSession{Patch: ConfigPatch{Type: ptr("transcription"), TurnDetectionSet: true,
			InputFormat: &AudioFormat{Type: "pcm16", Rate: 16000}}})
		slot.Release()
		done <- reason
	}()
	sk.until(t, "session.created")
	sk.until(t, "session.updated")
	return s, sk, eng, func() string { return <-done }
}

// include item.input_audio_transcription.logprobs: session.updated echoes it, and each
// completed transcript committed while it is on carries its words' logprobs in OpenAI's shape
// (token with its leading space, logprob, bytes); turned off, the key is left out. The engine
// stream follows the setting in wire order.
func TestTranscriptionLogprobsFollowInclude(t *testing.T) {
	s, sk, eng, wait := startLogprobTranscription(t, true)
	ctx := context.Background()
	include := func(on bool) {
		t.Helper()
		require.NoError(t, s.Submit(ctx, &UpdateSession{Base: Base{ID: "evt_u"}, Patch: ConfigPatch{TranscriptLogprobs: ptr(on)}}))
		sess := sk.until(t, "session.updated").wire()["session"].(map[string]any)
		if on {
			require.Equal(t, []any{"item.input_audio_transcription.logprobs"}, sess["include"])
		} else {
			require.Nil(t, sess["include"])
		}
	}
	commit := func() map[string]any {
		t.Helper()
		require.NoError(t, s.Submit(ctx, &AppendAudio{Base: Base{Kind: "input_audio_buffer.append"}, Data: make([]byte, 6400)}))
		require.NoError(t, s.Submit(ctx, &CommitInput{}))
		return sk.until(t, "conversation.item.input_audio_transcription.completed").wire()
	}

	include(true)
	done := commit()
	require.Equal(t, "hello", done["transcript"])
	require.Equal(t, []any{map[string]any{"token": "hello", "logprob": -0.25, "bytes": []any{104.0, 101.0, 108.0, 108.0, 111.0}}}, done["logprobs"])

	include(false)
	done = commit()
	require.Equal(t, "hello", done["transcript"])
	require.NotContains(t, done, "logprobs", "not asked for: left out")

	include(true)
	done = commit()
	require.Len(t, done["logprobs"], 1)

	require.NoError(t, s.Submit(ctx, &CloseSession{}))
	require.Equal(t, ReasonClientClose, wait())
	var settings []string
	for _, c := range eng.list() {
		switch c {
		case "open logprobs:true", "open logprobs:false", "logprobs:true", "logprobs:false", "commit":
			settings = append(settings, c)
		}
	}
	require.Equal(t, []string{"open logprobs:true", "commit", "logprobs:false", "commit", "logprobs:true", "commit"}, settings)
}

// A backend whose recognizer gives no logprobs (a remote ASR) refuses include with its param
// instead of sending transcripts without them; the session goes on without.
func TestTranscriptionLogprobsRefusedWithoutSupport(t *testing.T) {
	s, sk, _, wait := startLogprobTranscription(t, false)
	ctx := context.Background()
	require.NoError(t, s.Submit(ctx, &UpdateSession{Base: Base{ID: "evt_u"}, Patch: ConfigPatch{TranscriptLogprobs: ptr(true)}}))
	e := sk.until(t, "error").wire()["error"].(map[string]any)
	require.Equal(t, "unsupported_value", e["code"])
	require.Equal(t, "session.include", e["param"])
	require.NoError(t, s.Submit(ctx, &UpdateSession{Base: Base{ID: "evt_v"}, Patch: ConfigPatch{TranscriptLogprobs: ptr(false)}}))
	require.Nil(t, sk.until(t, "session.updated").wire()["session"].(map[string]any)["include"])
	require.NoError(t, s.Submit(ctx, &CloseSession{}))
	require.Equal(t, ReasonClientClose, wait())
}
