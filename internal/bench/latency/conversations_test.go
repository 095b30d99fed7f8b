package latency

import (
	"strings"
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/omniserve/omniserve/internal/bench"
	"github.com/omniserve/omniserve/internal/rtcclient"
)

// TestStepKeepsUp: each keep-up rule fails a step on its own, and the reason names it.
func TestStepKeepsUp(t *testing.T) {
	t.Parallel()
	good := func() stepResult {
		return stepResult{n: 4, audible: []float64{500, 620, 790}, bargeIn: []float64{120, 250}, late: []float64{3, 40}, turns: 3}
	}
	tests := []struct {
		name   string
		mutate func(*stepResult)
		want   string // "" = keeps up
	}{
		{"all rules hold", func(*stepResult) {}, ""},
		{"an error", func(r *stepResult) { r.errs = []string{"server error: x"} }, "error: server error: x"},
		{"no turn", func(r *stepResult) { r.turns = 0 }, "no turn completed"},
		{"a wrong transcript", func(r *stepResult) { r.wrongTranscripts, r.firstWrong = 1, `"a" against "b"` }, `1 transcripts differ from the reference; first "a" against "b"`},
		{"slow first audio", func(r *stepResult) { r.audible = append(r.audible, 801) }, "speech end → first audible p99 801 ms > 800 ms"},
		{"slow barge-in", func(r *stepResult) { r.bargeIn = append(r.bargeIn, 301) }, "barge-in onset → silence p99 301 ms > 300 ms"},
		{"a late append", func(r *stepResult) { r.late = append(r.late, 401) }, "an append went 401 ms behind the microphone's clock"},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			t.Parallel()
			r := good()
			tc.mutate(&r)
			ok, why := r.keepsUp(500)
			require.Equal(t, tc.want == "", ok)
			require.Equal(t, tc.want, why)
		})
	}
}

// TestReferenceTranscripts: a clip's first transcript is its reference; later ones are
// compared with it, case and spacing aside.
func TestReferenceTranscripts(t *testing.T) {
	t.Parallel()
	r := &convRun{refs: map[refKey]string{}}
	agrees := func(k refKey, text string) bool { ok, _ := r.reference(k, text); return ok }
	require.True(t, agrees(refKey{clip: 0}, "Go forward ten meters"))
	require.True(t, agrees(refKey{clip: 0}, " go  forward ten METERS "))
	ok, ref := r.reference(refKey{clip: 0}, "go forward two meters")
	require.False(t, ok)
	require.Equal(t, "go forward ten meters", ref)
	require.True(t, agrees(refKey{clip: -1}, "one two three"), "each clip has its own reference")
	require.True(t, agrees(refKey{clip: 0, rtc: true}, "go forward two meters"), "a call's Opus-coded speech has its own reference")
	require.False(t, agrees(refKey{clip: 0, rtc: true}, "go forward ten meters"))
}

// TestWebRTCSplit: a step's calls are the share of its conversations rounded, at least one when
// the share is > 0, spread over the step.
func TestWebRTCSplit(t *testing.T) {
	t.Parallel()
	tests := []struct {
		n     int
		share float64
		want  int
		calls string // which conversations are calls
	}{
		{1, 0, 0, "."},
		{8, 0, 0, "........"},
		{1, 0.25, 1, "R"},
		{1, 0.5, 1, "R"},
		{2, 0.5, 1, ".R"},
		{4, 0.25, 1, "...R"},
		{8, 0.25, 2, "...R...R"},
		{6, 0.5, 3, ".R.R.R"},
		{3, 0.5, 2, ".RR"},
		{4, 1, 4, "RRRR"},
		{24, 0.01, 1, strings.Repeat(".", 23) + "R"},
	}
	for _, tc := range tests {
		k := rtcCount(tc.n, tc.share)
		require.Equal(t, tc.want, k, "n %d share %v", tc.n, tc.share)
		var got strings.Builder
		for i := range tc.n {
			if isRTC(i, tc.n, k) {
				got.WriteByte('R')
			} else {
				got.WriteByte('.')
			}
		}
		require.Equal(t, tc.calls, got.String(), "n %d share %v", tc.n, tc.share)
	}
}

// TestConversationOptionsCheck: a share outside 0..1, or calls on a dialect that has none, are
// refused by name.
func TestConversationOptionsCheck(t *testing.T) {
	t.Parallel()
	require.NoError(t, ConversationOptions{Dialect: "live"}.Check())
	require.NoError(t, ConversationOptions{Dialect: "realtime", WebRTCShare: 0.25}.Check())
	require.ErrorContains(t, ConversationOptions{Dialect: "realtime", WebRTCShare: 1.5}.Check(), "--webrtc-share 1.5: want a share from 0 to 1")
	require.ErrorContains(t, ConversationOptions{Dialect: "realtime", WebRTCShare: -0.1}.Check(), "want a share from 0 to 1")
	require.ErrorContains(t, ConversationOptions{Dialect: "vllm", WebRTCShare: 0.5}.Check(), `speak the realtime dialect, not "vllm"`)
}

// TestTransportFigures: a step with calls reports rtc_ keys (and ws_ keys when some of it was
// on the WebSocket), each transport's own samples; a step without calls reports neither.
func TestTransportFigures(t *testing.T) {
	t.Parallel()
	res := &stepResult{n: 4, rtcN: 1}
	res.add(&convResult{audible: []float64{500, 520}, bargeIn: []float64{100}, turns: 2})
	res.add(&convResult{rtc: true, audible: []float64{610, 640}, bargeIn: []float64{180}, late: []float64{30}, turns: 2})
	require.Equal(t, []float64{500, 520, 610, 640}, res.audible, "the calls' turns count in the step's figures")
	require.Equal(t, 4, res.turns)
	byName := map[string]bench.Figure{}
	var names []string
	for _, f := range transportFigures("conv_realtime_n4_", res) {
		byName[f.Name] = f
		names = append(names, f.Name)
	}
	require.Equal(t, []string{"conv_realtime_n4_rtc_conversations",
		"conv_realtime_n4_rtc_speech_end_to_audible_ms", "conv_realtime_n4_rtc_bargein_onset_to_silence_ms",
		"conv_realtime_n4_ws_speech_end_to_audible_ms", "conv_realtime_n4_ws_bargein_onset_to_silence_ms"}, names)
	require.Equal(t, []float64{1}, byName["conv_realtime_n4_rtc_conversations"].Samples)
	require.Equal(t, []float64{610, 640}, byName["conv_realtime_n4_rtc_speech_end_to_audible_ms"].Samples)
	require.Equal(t, []float64{180}, byName["conv_realtime_n4_rtc_bargein_onset_to_silence_ms"].Samples)
	require.Equal(t, []float64{500, 520}, byName["conv_realtime_n4_ws_speech_end_to_audible_ms"].Samples)

	all := &stepResult{n: 1, rtcN: 1}
	all.add(&convResult{rtc: true, audible: []float64{600}})
	require.Len(t, transportFigures("p_", all), 3, "all calls: no ws_ keys")
	require.Empty(t, transportFigures("p_", &stepResult{n: 4}))
}

// TestCallEvents: a call's data channel events as a conversation reads them; the rest skipped.
func TestCallEvents(t *testing.T) {
	t.Parallel()
	at := time.Now()
	tests := []struct {
		typ  string
		m    map[string]any
		want convEvent
		ok   bool
	}{
		{"conversation.item.input_audio_transcription.completed", map[string]any{"transcript": "go forward"}, convEvent{kind: "transcript", text: "go forward"}, true},
		{"output_audio_buffer.stopped", nil, convEvent{kind: "done"}, true},
		{"output_audio_buffer.cleared", nil, convEvent{kind: "cleared"}, true},
		{"error", nil, convEvent{kind: "error", text: `{"type":"error"}`}, true},
		{"response.output_audio_transcript.delta", nil, convEvent{}, false},
	}
	for _, tc := range tests {
		ce, ok := rtcConvEvent(rtcclient.Event{Type: tc.typ, At: at, M: tc.m, Data: []byte(`{"type":"error"}`)})
		require.Equal(t, tc.ok, ok, tc.typ)
		if ok {
			tc.want.at = at
			require.Equal(t, tc.want, ce, tc.typ)
		}
	}
}

// TestCallReplyEnds: on a call the reply being heard ends at output_audio_buffer.stopped; one
// that ends with nothing audible fails the turn; a barge-in's stop is not read from events but
// heard on the playback clock, liveGapMs after the old audio's last audible sample.
func TestCallReplyEnds(t *testing.T) {
	t.Parallel()
	now := time.Now()
	c := &conv{rtc: true, res: &convResult{rtc: true}, turn: 3}
	c.waiting = true
	require.ErrorContains(t, c.on(convEvent{kind: "done", at: now}), "turn 3: the reply's audio ended")
	c.waiting = false
	require.NoError(t, c.on(convEvent{kind: "done", at: now}))
	require.Equal(t, now, c.doneAt)

	c = &conv{rtc: true, res: &convResult{rtc: true}}
	c.onset = now.Add(-time.Second)
	c.lastAudible = now.Add(-time.Second + 120*time.Millisecond)
	require.NoError(t, c.on(convEvent{kind: "cleared", at: now.Add(-900 * time.Millisecond)}))
	require.Empty(t, c.res.bargeIn, "cleared is not the stop on a call")
	c.oldAudioStopped()
	require.Len(t, c.res.bargeIn, 1)
	require.InDelta(t, 120, c.res.bargeIn[0], 0.001)
	require.True(t, c.onset.IsZero())
}

// TestStepWindows: a soak's samples fall into the window of the time they were taken (the
// tail after the last whole window joins it), each window carries the RSS read at its end,
// and the figures compare the last window with the first.
func TestStepWindows(t *testing.T) {
	t.Parallel()
	start := time.Date(2026, 12, 8, 0, 0, 0, 0, time.UTC)
	at := func(d time.Duration) time.Time { return start.Add(d) }
	res := &stepResult{
		start:     start,
		audible:   []float64{500, 600, 700, 510, 990, 520, 530},
		audibleAt: []time.Time{at(time.Second), at(9 * time.Minute), at(9*time.Minute + 59*time.Second), at(10 * time.Minute), at(25 * time.Minute), at(29 * time.Minute), at(30*time.Minute + 2*time.Second)},
		windowRSS: []int{200 << 10, 204 << 10, 206 << 10},
	}
	ws := res.windows(10*time.Minute, 30*time.Minute)
	require.Len(t, ws, 3)
	require.Equal(t, []float64{500, 600, 700}, ws[0].audible)
	require.Equal(t, []float64{510}, ws[1].audible)
	require.Equal(t, []float64{990, 520, 530}, ws[2].audible, "the tail after 30 min joins the last window")
	require.Equal(t, 206<<10, ws[2].rssKiB)

	byName := map[string]bench.Figure{}
	for _, f := range windowFigures("conv_realtime_n8_", ws) {
		byName[f.Name] = f
	}
	require.Equal(t, []float64{500, 600, 700}, byName["conv_realtime_n8_w1_speech_end_to_audible_ms"].Samples)
	require.InDelta(t, 990.0/700, byName["conv_realtime_n8_p99_last_over_first_window"].Samples[0], 1e-9)
	require.InDelta(t, 6.0, byName["conv_realtime_n8_rss_growth_after_first_window_mib"].Samples[0], 1e-9)
	require.InDelta(t, 204.0, byName["conv_realtime_n8_w2_rss_mib"].Samples[0], 1e-9)

	var out strings.Builder
	printWindows(&out, ws)
	require.Contains(t, out.String(), "window 3 (20m0s–30m0s): 3 turns, speech end → audible p50 530 p99 990 ms, server RSS 206.0 MiB")
	require.Contains(t, out.String(), "last window's p99 / first's: 1.414")
}

// TestWindowOption: a window must leave a first and a last one in the step.
func TestWindowOption(t *testing.T) {
	t.Parallel()
	o := ConversationOptions{Dialect: "realtime", StepTime: time.Hour, Window: 10 * time.Minute}
	require.NoError(t, o.Check())
	o.Window = 31 * time.Minute
	require.ErrorContains(t, o.Check(), "--window 31m0s: want at most half of --step-time")
}
