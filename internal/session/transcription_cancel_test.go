package session

import (
	"context"
	"strings"
	"testing"

	"github.com/stretchr/testify/require"
	"go.uber.org/zap"
	"go.uber.org/zap/zapcore"
	"go.uber.org/zap/zaptest/observer"

	"github.com/omniserve/omniserve/internal/duplex"
	"github.com/omniserve/omniserve/internal/metrics"
	"github.com/omniserve/omniserve/internal/requestclient"
)

// stuckEngine is a fakeEngine whose transcription never finishes: Commit waits for its
// context (the session's jobs end with it at close).
type stuckEngine struct{ *fakeEngine }

func (e *stuckEngine) Commit(ctx context.Context, turn int, respond bool) (duplex.Transcription, error) {
	_, _ = e.fakeEngine.Commit(ctx, turn, respond)
	<-ctx.Done()
	return duplex.Transcription{}, ctx.Err()
}

type stuckBackend struct{ eng *stuckEngine }

func (b *stuckBackend) SupportsDuplex() bool { return true }
func (b *stuckBackend) Open(_ context.Context, _ requestclient.Fence, _ duplex.Options, out func(duplex.Output)) (Engine, error) {
	b.eng.out = out
	return b.eng, nil
}

// A transcription session that ends while an item's transcript is on its way still records
// the item: outcome cancelled with the close reason, its commit and audio, in the metrics and
// as its --log-stats table. (Before, it left no record at all.)
func TestTranscriptionItemCancelledAtClose(t *testing.T) {
	rec := &itemMetrics{}
	core, logs := observer.New(zapcore.InfoLevel)
	eng := &stuckEngine{&fakeEngine{t: t}}
	m := NewManager(ManagerConfig{MaxSessions: 1, LogStats: true, Metrics: rec}, &stuckBackend{eng}, zap.New(core))
	sk := &recSink{sink: sink{ch: make(chan Event, 1024)}}
	slot, err := m.Acquire(context.Background())
	require.NoError(t, err)
	defer slot.Release()
	s := m.NewSession(slot, Options{Transcription: true}, sk)
	done := make(chan string, 1)
	go func() {
		done <- s.Run(context.Background(), &UpdateSession{Patch: ConfigPatch{Type: ptr("transcription"), TurnDetectionSet: true,
			InputFormat: &AudioFormat{Type: "pcm16", Rate: 16000}}})
	}()
	ctx := context.Background()
	require.NoError(t, s.Submit(ctx, &AppendAudio{Base: Base{Kind: "input_audio_buffer.append"}, Data: make([]byte, 6400)}))
	require.NoError(t, s.Submit(ctx, &CommitInput{}))
	committed := sk.until(t, "input_audio_buffer.committed").wire()["item_id"].(string)
	s.Stop(ReasonShutdown)
	require.Equal(t, ReasonShutdown, <-done)
	require.NotContains(t, sk.seen(), "conversation.item.input_audio_transcription.completed")

	rec.mu.Lock()
	defer rec.mu.Unlock()
	require.Len(t, rec.items, 1)
	it := rec.items[0]
	require.Equal(t, committed, it.ItemID)
	require.Equal(t, metrics.ItemCancelled, it.Outcome)
	require.Equal(t, ReasonShutdown, it.Reason)
	require.Empty(t, it.Error)
	require.InDelta(t, 200, it.AudioMs, 1e-6, "the committed audio: 6400 bytes of 16 kHz pcm16")
	require.Positive(t, it.Committed)
	require.GreaterOrEqual(t, it.CommitToDoneMs(), 0.0)
	var tables []string
	for _, e := range logs.All() {
		if strings.Contains(e.Message, "TranscriptionItemStats") {
			tables = append(tables, e.Message)
		}
	}
	require.Equal(t, []string{"\n" + metrics.RenderTranscriptionItem(it)}, tables)
	require.Contains(t, tables[0], "outcome=cancelled reason=shutdown")
}

// The utterance input_audio_buffer.clear drops after speech_started or its deltas named it is
// recorded as cancelled (reason input_audio_buffer_cleared, no commit); so is one the close
// cuts, and a committed item whose transcript the close cut. A completed item is recorded once.
func TestTranscriptionItemCancelledByClear(t *testing.T) {
	now := 1000.0
	rec := &itemMetrics{}
	m := NewManager(ManagerConfig{MaxSessions: 1, Metrics: rec, WallClock: func() float64 { return now }},
		&fakeBackend{&fakeEngine{t: t}}, zap.NewNop())
	sk := &recSink{sink: sink{ch: make(chan Event, 64)}}
	slot, err := m.Acquire(context.Background())
	require.NoError(t, err)
	defer slot.Release()
	s := m.NewSession(slot, Options{Transcription: true}, sk) // not run: the test is the actor
	s.settings.cfg.TurnDetection = nil
	deltaOut := func(text string) {
		s.routeOutput(duplex.Output{Kind: duplex.OutTranscriptDelta, Text: text})
	}

	deltaOut("go")
	spoken := s.inputAudio.speechItemID
	require.NotEmpty(t, spoken)
	now = 1000.5
	s.run(clearInput{eventID: ""})
	deltaOut("") // the stream's mark of the discard

	now = 1001
	deltaOut("stop")
	first := commitAudioItem(s, 640)
	s.tx.endUtterance(first.ID, s.link.opts.TranscriptDeltas)
	now = 1001.25
	s.tx.completed(first.ID, duplex.Transcription{Text: "stop"})
	s.run(trimHistory{})

	now = 1002
	second := commitAudioItem(s, 1200)
	s.tx.endUtterance(second.ID, s.link.opts.TranscriptDeltas)
	s.inputAudio.speechItemID = "item_after" // speech_started of the next utterance
	now = 1003
	s.tx.cancelOpen(ReasonDisconnect, &s.inputAudio.speechItemID)
	s.tx.cancelOpen(ReasonDisconnect, &s.inputAudio.speechItemID) // nothing is recorded twice

	require.Len(t, rec.items, 4)
	cleared, completed, cut, after := rec.items[0], rec.items[1], rec.items[2], rec.items[3]
	require.Equal(t, spoken, cleared.ItemID)
	require.Equal(t, metrics.ItemCancelled, cleared.Outcome)
	require.Equal(t, "input_audio_buffer_cleared", cleared.Reason)
	require.Zero(t, cleared.Committed, "never committed")
	require.Equal(t, 1, cleared.Deltas)
	require.InDelta(t, 1000.5, cleared.Done, 0)

	require.Equal(t, first.ID, completed.ItemID)
	require.Equal(t, metrics.ItemCompleted, completed.Outcome)

	require.Equal(t, second.ID, cut.ItemID)
	require.Equal(t, metrics.ItemCancelled, cut.Outcome)
	require.Equal(t, ReasonDisconnect, cut.Reason)
	require.InDelta(t, 1200, cut.AudioMs, 0)
	require.InDelta(t, 1000, cut.CommitToDoneMs(), 1e-6, "it waited from its commit to the close")
	require.Empty(t, cut.Transcript)

	require.Equal(t, "item_after", after.ItemID)
	require.Equal(t, metrics.ItemCancelled, after.Outcome)
	require.Zero(t, after.Committed)
	require.Empty(t, s.tx.open)
}
