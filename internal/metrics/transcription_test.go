package metrics

import (
	"testing"

	"github.com/prometheus/client_golang/prometheus"
	"github.com/prometheus/client_golang/prometheus/testutil"
	dto "github.com/prometheus/client_model/go"
	"github.com/stretchr/testify/require"
)

// vadItem is a server-VAD item: committed at its speech end, its first partial 0.42 s before
// that (while the user still spoke), completed 0.1875 s after.
func vadItem() TranscriptionItem {
	return TranscriptionItem{ItemID: "item_7f3a", SessionID: "sess_91c2", AudioMs: 2340,
		SpeechEnd: 1000.5, Committed: 1000.5, FirstDelta: 1000.08, Done: 1000.6875, Deltas: 4,
		RecognizerMs: 93.6, Transcript: "go forward ten meters", Outcome: ItemCompleted}
}

func TestTranscriptionItemFigures(t *testing.T) {
	t.Parallel()
	manual := TranscriptionItem{Committed: 10, Done: 10.25, FirstDelta: 10.25, Outcome: ItemCompleted}
	tests := []struct {
		name                  string
		rec                   TranscriptionItem
		endToDone, commitDone float64
		firstDelta            float64
		hasDelta              bool
	}{
		{"server VAD, partial before the speech end", vadItem(), 187.5, 187.5, -420, true},
		{"manual commit: measured from the commit", manual, 250, 250, 250, true},
		{"no delta", TranscriptionItem{Committed: 5, Done: 5.5}, 500, 500, 0, false},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			t.Parallel()
			require.InDelta(t, tc.endToDone, tc.rec.SpeechEndToDoneMs(), 1e-6)
			require.InDelta(t, tc.commitDone, tc.rec.CommitToDoneMs(), 1e-6)
			ms, ok := tc.rec.speechEndToFirstDeltaMs()
			require.Equal(t, tc.hasDelta, ok)
			require.InDelta(t, tc.firstDelta, ms, 1e-6)
		})
	}
	rtf, ok := vadItem().RecognizerRTF()
	require.True(t, ok)
	require.InDelta(t, 0.04, rtf, 1e-9)
	_, ok = TranscriptionItem{AudioMs: 640}.RecognizerRTF()
	require.False(t, ok, "not measured")
	require.Equal(t, 4, vadItem().words())
	require.Equal(t, 21, vadItem().chars())
}

func TestTranscriptionItemTables(t *testing.T) {
	t.Parallel()
	failed := TranscriptionItem{ItemID: "item_80b1", SessionID: "sess_91c2", AudioMs: 640,
		Committed: 2000, Done: 2000.031, Outcome: ItemFailed, Error: "engine_error"}
	checkGolden(t, "transcription_item", RenderTranscriptionItem(vadItem())+"\n")
	checkGolden(t, "transcription_item_failed", RenderTranscriptionItem(failed)+"\n")
	// Cut short: committed (it waited 1.2 s for its transcript), or only spoken.
	committed := TranscriptionItem{ItemID: "item_80b2", SessionID: "sess_91c2", AudioMs: 2340, SpeechEnd: 3000, Committed: 3000,
		FirstDelta: 2999.6, Done: 3001.2, Deltas: 3, Outcome: ItemCancelled, Reason: "disconnect"}
	spoken := TranscriptionItem{ItemID: "item_80b3", SessionID: "sess_91c2", FirstDelta: 3500.4, Done: 3501, Deltas: 2,
		Outcome: ItemCancelled, Reason: "input_audio_buffer_cleared"}
	checkGolden(t, "transcription_item_cancelled", RenderTranscriptionItem(committed)+"\n"+RenderTranscriptionItem(spoken)+"\n")
}

func TestLogTranscriptionItem(t *testing.T) {
	t.Parallel()
	log, logs := observedLogger()
	LogTranscriptionItem(log, vadItem(), false)
	LogTranscriptionItem(log, vadItem(), true)
	all := logs.All()
	require.Len(t, all, 2)
	require.Equal(t, "\n"+RenderTranscriptionItem(vadItem()), all[0].Message)
	require.Equal(t, "TranscriptionItemStats", all[1].Message)
	f := all[1].ContextMap()
	require.Equal(t, "transcription_item", f["kind"])
	require.Equal(t, "item_7f3a", f["item_id"])
	require.NotContains(t, f, "session_id", "the session's logger carries it")
	require.Equal(t, ItemCompleted, f["outcome"])
	require.InDelta(t, 187.5, f["speech_end_to_done_ms"], 1e-6)
	require.InDelta(t, -420, f["speech_end_to_first_delta_ms"], 1e-6)
	require.InDelta(t, 4.0, f["deltas"], 0)
	require.NotPanics(t, func() { LogTranscriptionItem(nil, vadItem(), false) })
}

func TestObserveTranscriptionItem(t *testing.T) {
	t.Parallel()
	reg := prometheus.NewPedanticRegistry()
	c := NewCollectors(reg, "m")
	c.ObserveTranscriptionItem(vadItem())
	c.ObserveTranscriptionItem(TranscriptionItem{Committed: 1, Done: 1.1, Outcome: ItemFailed, Error: "engine_error"})
	c.ObserveTranscriptionItem(TranscriptionItem{Committed: 1, Done: 2, Outcome: ItemCancelled, Reason: "disconnect"})
	require.InDelta(t, 1.0, testutil.ToFloat64(c.txItems.WithLabelValues(ItemCompleted)), 0)
	require.InDelta(t, 1.0, testutil.ToFloat64(c.txItems.WithLabelValues(ItemFailed)), 0)
	require.InDelta(t, 1.0, testutil.ToFloat64(c.txItems.WithLabelValues(ItemCancelled)), 0)
	// Failed and cancelled items are counted, not timed; the partial before the speech end observes 0.
	for _, tc := range []struct {
		name string
		sum  float64
	}{
		{"omniserve_realtime_transcription_latency_seconds", 0.1875},
		{"omniserve_realtime_transcription_speech_end_to_completed_seconds", 0.1875},
		{"omniserve_realtime_transcription_first_delta_seconds", 0},
	} {
		h := histogram(t, reg, tc.name)
		require.Equal(t, uint64(1), h.GetSampleCount(), tc.name)
		require.InDelta(t, tc.sum, h.GetSampleSum(), 1e-9, tc.name)
	}
	var nilC *Collectors
	require.NotPanics(t, func() { nilC.ObserveTranscriptionItem(vadItem()) })
}

// histogram is the registry's unlabelled histogram family name.
func histogram(t *testing.T, reg *prometheus.Registry, name string) *dto.Histogram {
	t.Helper()
	mfs, err := reg.Gather()
	require.NoError(t, err)
	for _, mf := range mfs {
		if mf.GetName() == name {
			require.Len(t, mf.GetMetric(), 1)
			return mf.GetMetric()[0].GetHistogram()
		}
	}
	require.Failf(t, "no family", "%s", name)
	return nil
}
