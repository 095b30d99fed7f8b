package requestclient

import (
	"bytes"
	"testing"

	"github.com/prometheus/client_golang/prometheus"
	"github.com/prometheus/common/expfmt"
	"github.com/stretchr/testify/require"

	"github.com/omniserve/omniserve/internal/duplex"
	"github.com/omniserve/omniserve/internal/metrics"
	"github.com/omniserve/omniserve/internal/stage"
)

// setClock is a wall clock the test moves by hand: however often a path reads it, every
// figure is the same, so the paths can be compared exactly.
type setClock struct{ now float64 }

func (c *setClock) read() float64 { return c.now }

// feedChat drives a two-stage (text + audio) chat request through its Sink the way the pipeline
// does: text deltas, connector sends, stage 0's snapshot, audio, and stage 1's Finished with
// its snapshot; then the request is reported. It returns the state and the audio's time to
// first packet as the clock gave it.
func feedChat(t *testing.T, opts Options, reason string) (*chatState, float64) {
	t.Helper()
	clk := &setClock{now: 5000}
	opts.Clock = clk.read
	c := New(nil, opts, nil)
	st := newChatState(c, stage.ChatRequest{RequestID: "chatcmpl-figures", WantAudio: true}, clk.now, 2)
	clk.now += 0.004
	st.setReqStart(clk.now)
	for i, txt := range []string{"Go", " forward", " ten", " meters."} {
		clk.now += 0.030
		st.OnOutput(stage.OutputMessage{Output: duplex.Output{Kind: duplex.OutText, Turn: 1, Text: txt}, StageID: 0})
		st.OnTransfer(stage.TransferEvent{From: 0, To: 1, Turn: 1, SizeBytes: int64(10 + i), TxMs: 0.25 + float64(i)/10})
	}
	clk.now += 0.020
	st.OnStageMetrics(stage.StageMetricsMessage{StageID: 0, Turn: 1, StageSubmitTS: 5000.006, FinalOutputType: "audio",
		Metrics: metrics.StageRequestStats{NumTokensIn: 42, NumTokensOut: 5, StageGenTimeMs: 180.5, VllmTtftMs: 61.25,
			VllmItlsMs: []float64{9.5, 10.25, 11, 12.75}, OutputUnitType: "text", OutputUnitCount: 5}})
	clk.now += 0.100
	ttfp := clk.now - 5000
	st.OnOutput(stage.OutputMessage{Output: duplex.Output{Kind: duplex.OutAudio, Turn: 1, Audio: make([]float32, 240), SampleRate: 24000}, StageID: 1})
	clk.now += 0.250
	st.OnOutput(stage.OutputMessage{Output: duplex.Output{Kind: duplex.OutFinished, Turn: 1, FinishReason: reason}, StageID: 1, Finished: true, Metrics: &metrics.StageRequestStats{NumTokensIn: 4, StageGenTimeMs: 320.75, AudioGeneratedFrames: 36000,
		AudioSampleRate: 24000, AudioDurationS: 1.5, OutputUnitType: "audio", OutputUnitCount: 1,
		RxTransferBytes: 46, RxDecodeTimeMs: 0.5, RxInFlightTimeMs: 3.25}})
	st.report()
	return st, ttfp
}

func exposition(t *testing.T, reg *prometheus.Registry) string {
	t.Helper()
	fams, err := reg.Gather()
	require.NoError(t, err)
	var b bytes.Buffer
	for _, f := range fams {
		_, err := expfmt.MetricFamilyToText(&b, f)
		require.NoError(t, err)
	}
	return b.String()
}

// TestChatPrometheusWithoutLogStats: with --log-stats off and Prometheus on (the server's
// default) a chat request logs no tables, and /metrics gets exactly what the turn's record
// gives with them, family by family.
func TestChatPrometheusWithoutLogStats(t *testing.T) {
	for _, reason := range []string{duplex.FinishStop, duplex.FinishLength, "abort"} {
		t.Run(reason, func(t *testing.T) {
			// The record's observation with the tables on.
			refReg := prometheus.NewRegistry()
			refCol := metrics.NewCollectors(refReg, "m")
			onReg := prometheus.NewRegistry()
			on, ttfp := feedChat(t, Options{LogStats: true, Collectors: metrics.NewCollectors(onReg, "m")}, reason)
			require.True(t, on.turn.HasTables(), "--log-stats logs the record's tables")
			require.True(t, on.turn.Finalized(), "reported: the turn is closed once")
			rec, ok := on.turn.Record()
			require.True(t, ok)
			rec.AudioTTFPSeconds, rec.AudioTTFPStage = ttfp, 1
			refCol.ObserveFinalized(rec)
			want := exposition(t, refReg)
			require.Contains(t, want, `omniserve_request_prompt_tokens_total{model_name="m"} 42`)

			offReg := prometheus.NewRegistry()
			off, _ := feedChat(t, Options{Collectors: metrics.NewCollectors(offReg, "m")}, reason)
			require.NotNil(t, off.turn, "Prometheus alone still makes the request a turn")
			require.False(t, off.turn.HasTables(), "--log-stats off: no tables")
			offRec, ok := off.turn.Record()
			require.True(t, ok)
			require.Equal(t, rec.E2E.E2ETotalTokens, offRec.E2E.E2ETotalTokens,
				"the same record without the tables: its trace has the request's tokens")
			require.Positive(t, offRec.E2E.E2ETotalTokens)
			require.Equal(t, want, exposition(t, offReg))
			require.Equal(t, want, exposition(t, onReg), "with --log-stats on Prometheus sees the same figures")

			none, _ := feedChat(t, Options{}, reason)
			require.Nil(t, none.turn, "neither tables nor Prometheus: no turn at all")
		})
	}
}
