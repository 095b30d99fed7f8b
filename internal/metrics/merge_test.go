package metrics

import (
	"testing"

	"github.com/stretchr/testify/require"
)

// test_merge_stage_metric_event_token_weights_tpot (vllm-omni): segments of 4 tokens at 10 ms and
// 6 tokens at 20 ms merge to (10·3 + 20·5) / 8 = 16.25.
func TestMergeTokenWeightedTpot(t *testing.T) {
	t.Parallel()
	a := StageRequestStats{NumTokensOut: 4, VllmTpotMs: 10}
	b := StageRequestStats{NumTokensOut: 6, VllmTpotMs: 20}
	require.InDelta(t, 16.25, mergeStageStats(a, b).VllmTpotMs, 1e-12)

	var mg merger
	mg.add(a)
	mg.add(b)
	require.InDelta(t, 16.25, mg.result().VllmTpotMs, 1e-12)
	require.Equal(t, 10, mg.result().NumTokensOut)
}

func TestMergeRules(t *testing.T) {
	t.Parallel()
	tests := []struct {
		name  string
		segs  []StageRequestStats
		check func(t *testing.T, m StageRequestStats)
	}{
		{"sums", []StageRequestStats{
			{NumTokensIn: 1, NumTokensOut: 2, StageGenTimeMs: 3, PostprocessTimeMs: 4, AudioGeneratedFrames: 5,
				AudioDurationS: 0.5, ImagePixels: 6, OutputUnitCount: 1},
			{NumTokensIn: 10, NumTokensOut: 20, StageGenTimeMs: 30, PostprocessTimeMs: 40, AudioGeneratedFrames: 50,
				AudioDurationS: 0.25, ImagePixels: 60, OutputUnitCount: 1},
		}, func(t *testing.T, m StageRequestStats) {
			require.Equal(t, StageRequestStats{NumTokensIn: 11, NumTokensOut: 22, StageGenTimeMs: 33,
				PostprocessTimeMs: 44, AudioGeneratedFrames: 55, AudioDurationS: 0.75, ImagePixels: 66,
				OutputUnitCount: 2}, m)
		}},
		{"first positive and last positive", []StageRequestStats{
			{AudioSampleRate: 0, VllmTtftMs: 0, ServingTimeToFirstOutputMs: 5, DenoiseStepLatencyMs: 1},
			{AudioSampleRate: 16000, VllmTtftMs: 12, ServingTimeToFirstOutputMs: 7, ImageTimeToFirstOutputMs: 3, DenoiseStepLatencyMs: 2},
			{AudioSampleRate: 24000, VllmTtftMs: 30, DenoiseStepLatencyMs: 0},
		}, func(t *testing.T, m StageRequestStats) {
			require.Equal(t, 16000, m.AudioSampleRate)
			require.InDelta(t, 12.0, m.VllmTtftMs, 0)
			require.InDelta(t, 5.0, m.ServingTimeToFirstOutputMs, 0)
			require.InDelta(t, 3.0, m.ImageTimeToFirstOutputMs, 0)
			require.InDelta(t, 2.0, m.DenoiseStepLatencyMs, 0)
		}},
		{"last non-empty strings, keep-first others", []StageRequestStats{
			{BatchID: 1, BatchSize: 2, ReplicaID: 3, OutputUnitType: "text", FinishReason: "", RxDecodeTimeMs: 4,
				NumInferenceSteps: 5, DiffusionMetrics: map[string]float64{"a": 1}, RequestID: "r"},
			{BatchID: 9, BatchSize: 9, ReplicaID: 9, OutputUnitType: "", FinishReason: "stop", FinalOutputType: "audio",
				RxDecodeTimeMs: 9, NumInferenceSteps: 9, DiffusionMetrics: map[string]float64{"b": 2}, RequestID: "x"},
		}, func(t *testing.T, m StageRequestStats) {
			require.Equal(t, 1, m.BatchID)
			require.Equal(t, 2, m.BatchSize)
			require.Equal(t, 3, m.ReplicaID)
			require.Equal(t, "text", m.OutputUnitType)
			require.Equal(t, "stop", m.FinishReason)
			require.Equal(t, "audio", m.FinalOutputType)
			require.InDelta(t, 4.0, m.RxDecodeTimeMs, 0)
			require.Equal(t, 5, m.NumInferenceSteps)
			require.Equal(t, map[string]float64{"a": 1}, m.DiffusionMetrics)
			require.Equal(t, "r", m.RequestID)
		}},
		{"lists concatenate and means are recomputed", []StageRequestStats{
			{VllmItlsMs: []float64{8}, VllmItlMs: 8, InterOutputLatencyMs: 100},
			{VllmItlsMs: []float64{9, 10}, VllmItlMs: 9.5, InterOutputLatenciesMs: []float64{1, 3}},
		}, func(t *testing.T, m StageRequestStats) {
			require.Equal(t, []float64{8, 9, 10}, m.VllmItlsMs)
			require.InDelta(t, 9.0, m.VllmItlMs, 1e-12)
			require.Equal(t, []float64{1, 3}, m.InterOutputLatenciesMs)
			require.InDelta(t, 2.0, m.InterOutputLatencyMs, 1e-12)
		}},
		{"tpot ignores segments without tpot", []StageRequestStats{
			{NumTokensOut: 4, VllmTpotMs: 10},
			{NumTokensOut: 100},
			{NumTokensOut: 6, VllmTpotMs: 20},
		}, func(t *testing.T, m StageRequestStats) {
			require.InDelta(t, 16.25, m.VllmTpotMs, 1e-12)
		}},
		{"tpot weight is at least one", []StageRequestStats{
			{NumTokensOut: 1, VllmTpotMs: 10},
			{NumTokensOut: 0, VllmTpotMs: 20},
		}, func(t *testing.T, m StageRequestStats) {
			require.InDelta(t, 15.0, m.VllmTpotMs, 1e-12)
		}},
		{"time per output unit is the mean gap after the first output", []StageRequestStats{
			{StageGenTimeMs: 100, OutputUnitCount: 3, ServingTimeToFirstOutputMs: 40, InterOutputLatenciesMs: []float64{10, 20}},
			{StageGenTimeMs: 50, OutputUnitCount: 2, InterOutputLatenciesMs: []float64{30}},
		}, func(t *testing.T, m StageRequestStats) {
			// Not generation time minus a first-output figure from another clock (the reference).
			require.InDelta(t, 20.0, m.TimePerOutputUnitMs, 1e-12)
		}},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			t.Parallel()
			var mg merger
			for _, s := range tt.segs {
				mg.add(s)
			}
			require.Equal(t, len(tt.segs), mg.len())
			tt.check(t, mg.result())
		})
	}
}

// Folding incrementally equals folding pairwise from the first event with the running weight.
func TestMergerIncrementalEqualsChain(t *testing.T) {
	t.Parallel()
	segs := []StageRequestStats{
		{NumTokensOut: 4, VllmTpotMs: 10, VllmItlsMs: []float64{1}},
		{NumTokensOut: 6, VllmTpotMs: 20, VllmItlsMs: []float64{2}},
		{NumTokensOut: 11, VllmTpotMs: 5},
	}
	var mg merger
	for _, s := range segs {
		mg.add(s)
	}
	want := (10.0*3 + 20*5 + 5*10) / 18
	require.InDelta(t, want, mg.result().VllmTpotMs, 1e-12)
	// The caller's lists are never aliased.
	segs[0].VllmItlsMs[0] = 99
	require.Equal(t, []float64{1, 2}, mg.result().VllmItlsMs)
}
