package metrics

import (
	"strings"
	"testing"

	"github.com/prometheus/client_golang/prometheus"
	"github.com/prometheus/client_golang/prometheus/testutil"
	"github.com/stretchr/testify/require"
)

func TestCollectorsLintAndObserve(t *testing.T) {
	t.Parallel()
	reg := prometheus.NewPedanticRegistry()
	c := NewCollectors(reg, "dummy:tiny")

	turn, _ := duplexExample(t)
	require.True(t, turn.Finalize(FinishedReasonForCancel(cancelTurnDetected), nil, false))
	rec, ok := turn.Record()
	require.True(t, ok)
	c.ObserveFinalized(rec)

	chat := chatExample(t)
	_, ok = chat.Record()
	require.False(t, ok, "no record before the close")
	require.True(t, chat.Finalize("length", nil, false))
	chatRec, ok := chat.Record()
	require.True(t, ok)
	c.ObserveFinalized(chatRec)

	problems, err := testutil.GatherAndLint(reg)
	require.NoError(t, err)
	require.Empty(t, problems)
	for _, col := range []prometheus.Collector{c.requestSuccess, c.requestFailure, c.e2eLatency, c.ttft, c.itl,
		c.promptTokens, c.generationTokens, c.duplexTurns, c.inputToAudio, c.inputToText, c.audioDelivered, c.audioPlayed, c.audioUnderrun,
		c.activeSessions, c.sessionDuration, c.admissionReject, c.bargeIn, c.audioTTFP, c.audioDuration, c.audioRTF,
		c.transferSize, c.transferTx, c.transferBlocked, c.transferRxDecode, c.transferInFlight} {
		problems, err := testutil.CollectAndLint(col)
		require.NoError(t, err)
		require.Empty(t, problems)
	}

	// A barged-in turn is a failure of the request, counted apart; a truncated chat a success.
	require.InDelta(t, 1.0, testutil.ToFloat64(c.requestFailure.WithLabelValues("duplex", "barge_in")), 0)
	require.InDelta(t, 0.0, testutil.ToFloat64(c.requestSuccess.WithLabelValues("duplex", "stop")), 0)
	require.InDelta(t, 1.0, testutil.ToFloat64(c.requestSuccess.WithLabelValues("chat", "length")), 0)
	require.InDelta(t, 1.0, testutil.ToFloat64(c.duplexTurns.WithLabelValues("barge_in", "openai")), 0, "a record with no dialect is OpenAI's")
	require.InDelta(t, float64(256+1512), testutil.ToFloat64(c.promptTokens), 0)
	require.InDelta(t, float64(38+91+30+86+262+42), testutil.ToFloat64(c.generationTokens), 0)

	const want = `
# HELP omniserve_audio_time_to_first_packet_seconds Time from request or turn arrival to the first audio packet.
# TYPE omniserve_audio_time_to_first_packet_seconds histogram
omniserve_audio_time_to_first_packet_seconds_bucket{kind="duplex",model_name="dummy:tiny",stage="2",le="0.05"} 0
omniserve_audio_time_to_first_packet_seconds_bucket{kind="duplex",model_name="dummy:tiny",stage="2",le="0.1"} 0
omniserve_audio_time_to_first_packet_seconds_bucket{kind="duplex",model_name="dummy:tiny",stage="2",le="0.25"} 0
omniserve_audio_time_to_first_packet_seconds_bucket{kind="duplex",model_name="dummy:tiny",stage="2",le="0.5"} 0
omniserve_audio_time_to_first_packet_seconds_bucket{kind="duplex",model_name="dummy:tiny",stage="2",le="1"} 1
omniserve_audio_time_to_first_packet_seconds_bucket{kind="duplex",model_name="dummy:tiny",stage="2",le="2"} 1
omniserve_audio_time_to_first_packet_seconds_bucket{kind="duplex",model_name="dummy:tiny",stage="2",le="5"} 1
omniserve_audio_time_to_first_packet_seconds_bucket{kind="duplex",model_name="dummy:tiny",stage="2",le="10"} 1
omniserve_audio_time_to_first_packet_seconds_bucket{kind="duplex",model_name="dummy:tiny",stage="2",le="20"} 1
omniserve_audio_time_to_first_packet_seconds_bucket{kind="duplex",model_name="dummy:tiny",stage="2",le="30"} 1
omniserve_audio_time_to_first_packet_seconds_bucket{kind="duplex",model_name="dummy:tiny",stage="2",le="60"} 1
omniserve_audio_time_to_first_packet_seconds_bucket{kind="duplex",model_name="dummy:tiny",stage="2",le="120"} 1
omniserve_audio_time_to_first_packet_seconds_bucket{kind="duplex",model_name="dummy:tiny",stage="2",le="300"} 1
omniserve_audio_time_to_first_packet_seconds_bucket{kind="duplex",model_name="dummy:tiny",stage="2",le="+Inf"} 1
omniserve_audio_time_to_first_packet_seconds_sum{kind="duplex",model_name="dummy:tiny",stage="2"} 0.826902999999902
omniserve_audio_time_to_first_packet_seconds_count{kind="duplex",model_name="dummy:tiny",stage="2"} 1
`
	require.NoError(t, testutil.GatherAndCompare(reg, strings.NewReader(want), "omniserve_audio_time_to_first_packet_seconds"))

	// Every family is omniserve_*, counters and only counters end in _total, and no label value
	// carries a session, request or response id.
	mfs, err := reg.Gather()
	require.NoError(t, err)
	require.Len(t, mfs, 46, "all but the backpressure family, which nothing observed and no stage was initialized")
	for _, mf := range mfs {
		name := mf.GetName()
		require.True(t, strings.HasPrefix(name, "omniserve_"), name)
		isCounter := mf.GetType().String() == "COUNTER"
		require.Equal(t, isCounter, strings.HasSuffix(name, "_total"), name)
		for _, m := range mf.GetMetric() {
			for _, lp := range m.GetLabel() {
				v := lp.GetValue()
				require.False(t, strings.Contains(v, "resp-") || strings.Contains(v, "duplex-") ||
					strings.Contains(v, "chatcmpl-"), "%s has id label %s=%s", name, lp.GetName(), v)
			}
		}
	}
	require.Equal(t, 2, testutil.CollectAndCount(c.transferSize), "edges 0->1 and 1->2")
	require.Equal(t, 1, testutil.CollectAndCount(c.audioDuration), "turn stage 2 and chat stage 2 share one series")
}

// A duplex turn is counted under its session's dialect; a name outside the known set cannot
// grow the label's cardinality.
func TestObserveFinalizedByDialect(t *testing.T) {
	t.Parallel()
	for _, tc := range []struct{ dialect, want string }{
		{"vllm_duplex", "vllm_duplex"},
		{"live", "live"},
		{"openai", "openai"},
		{"", "openai"},
		{"made-up", "openai"},
	} {
		t.Run(tc.dialect, func(t *testing.T) {
			t.Parallel()
			c := NewCollectors(prometheus.NewPedanticRegistry(), "m")
			rec := FinalizedRequest{Duplex: true, FinishedReason: ReasonStop, Dialect: tc.dialect,
				E2E: RequestE2EStats{InputEndToFirstAudioMs: 420, AudioDeliveredS: 2}}
			c.ObserveFinalized(rec)
			for _, d := range Dialects {
				want := 0.0
				if d == tc.want {
					want = 1
				}
				require.InDelta(t, want, testutil.ToFloat64(c.duplexTurns.WithLabelValues(ReasonStop, d)), 0, d)
			}
			require.Equal(t, 3*(len(finishedReasons)), testutil.CollectAndCount(c.duplexTurns), "every dialect × reason from start-up, nothing more")
			require.Equal(t, len(Dialects), testutil.CollectAndCount(c.inputToAudio))
		})
	}
}

// Every family is exported from start-up, before any request: dashboards see zeros, not gaps.
func TestCollectorsPresentAtStartup(t *testing.T) {
	t.Parallel()
	reg := prometheus.NewPedanticRegistry()
	c := NewCollectors(reg, "m")
	c.InitStages(2)
	mfs, err := reg.Gather()
	require.NoError(t, err)
	require.Len(t, mfs, 49)
	problems, err := testutil.GatherAndLint(reg)
	require.NoError(t, err)
	require.Empty(t, problems)
	c.SetStageLoad(func() []StageLoad { return []StageLoad{{Stage: 0, Running: 2, Waiting: 3}} })
	const loads = `
# HELP omniserve_stage_running_requests Requests and duplex responses holding a worker of the stage now.
# TYPE omniserve_stage_running_requests gauge
omniserve_stage_running_requests{model_name="m",stage="0"} 2
omniserve_stage_running_requests{model_name="m",stage="1"} 0
# HELP omniserve_stage_waiting_requests Requests and duplex responses admitted to the stage and waiting for a worker.
# TYPE omniserve_stage_waiting_requests gauge
omniserve_stage_waiting_requests{model_name="m",stage="0"} 3
omniserve_stage_waiting_requests{model_name="m",stage="1"} 0
`
	require.NoError(t, testutil.GatherAndCompare(reg, strings.NewReader(loads),
		"omniserve_stage_running_requests", "omniserve_stage_waiting_requests"))
	c.SessionOpened()
	c.SessionOpened()
	c.SessionClosed(3)
	c.AdmissionRejected()
	require.InDelta(t, 1.0, testutil.ToFloat64(c.activeSessions), 0)
	require.InDelta(t, 1.0, testutil.ToFloat64(c.admissionReject), 0)
	c.AddDetachedSessions(2)
	c.AddDetachedSessions(-1)
	require.InDelta(t, 1.0, testutil.ToFloat64(c.detachedSessions), 0)
}

func TestCollectorsRejectDoubleRegistration(t *testing.T) {
	t.Parallel()
	reg := prometheus.NewPedanticRegistry()
	NewCollectors(reg, "m")
	require.Panics(t, func() { NewCollectors(reg, "m") })
}

// MCP calls: a completed and a failed call observe their duration by outcome; a failure is
// counted by its kind (an unknown one as protocol_error); a call that never reached its
// server (seconds < 0) is counted but not timed.
func TestObserveMCPCall(t *testing.T) {
	t.Parallel()
	reg := prometheus.NewPedanticRegistry()
	c := NewCollectors(reg, "m")
	c.observeMCPCall(0.2, "", nil)
	c.observeMCPCall(0.03, "tool_execution_error", nil)
	c.observeMCPCall(-1, "cancelled", nil)
	c.observeMCPCall(-1, "weird", nil)
	require.InDelta(t, 1.0, testutil.ToFloat64(c.mcpCallFailures.WithLabelValues("tool_execution_error")), 0)
	require.InDelta(t, 1.0, testutil.ToFloat64(c.mcpCallFailures.WithLabelValues("cancelled")), 0)
	require.InDelta(t, 1.0, testutil.ToFloat64(c.mcpCallFailures.WithLabelValues("protocol_error")), 0)
	require.InDelta(t, 0.0, testutil.ToFloat64(c.mcpCallFailures.WithLabelValues("http_error")), 0)
	mfs, err := reg.Gather()
	require.NoError(t, err)
	samples := map[string]uint64{}
	for _, mf := range mfs {
		if mf.GetName() != "omniserve_realtime_mcp_call_duration_seconds" {
			continue
		}
		for _, m := range mf.GetMetric() {
			for _, l := range m.GetLabel() {
				if l.GetName() == "outcome" {
					samples[l.GetValue()] = m.GetHistogram().GetSampleCount()
				}
			}
		}
	}
	require.Equal(t, map[string]uint64{"completed": 1, "failed": 1}, samples)
	var nilC *Collectors
	nilC.observeMCPCall(1, "", nil) // a server without metrics
}

// A traced record's latency observations carry its trace id as the bucket's exemplar, with the
// observed value; an untraced record's carry none.
func TestLatencyExemplarsCarryTheTraceID(t *testing.T) {
	t.Parallel()
	const traceID = "0af7651916cd43dd8448eb211c80319c"
	tests := []struct {
		name    string
		traceID string
	}{
		{"traced", traceID},
		{"not traced", ""},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			reg := prometheus.NewPedanticRegistry()
			c := NewCollectors(reg, "dummy:tiny")
			turn, _ := duplexExample(t)
			require.True(t, turn.Finalize(ReasonStop, nil, false))
			rec, ok := turn.Record()
			require.True(t, ok)
			rec.TraceID = tc.traceID
			c.ObserveFinalized(rec)
			fams, err := reg.Gather()
			require.NoError(t, err)
			want := map[string]float64{ // family → the value observed for it
				"omniserve_request_e2e_latency_seconds":        rec.E2E.E2ETotalMs / 1000,
				"omniserve_audio_time_to_first_packet_seconds": rec.AudioTTFPSeconds,
			}
			for _, st := range rec.Stages {
				if st.StageID == 0 {
					want["omniserve_request_time_to_first_token_seconds"] = st.VllmTtftMs / 1000
				}
			}
			got := map[string]float64{}
			for _, f := range fams {
				for _, m := range f.GetMetric() {
					for _, b := range m.GetHistogram().GetBucket() {
						ex := b.GetExemplar()
						if ex == nil {
							continue
						}
						require.Len(t, ex.GetLabel(), 1, f.GetName())
						require.Equal(t, exemplarTraceID, ex.GetLabel()[0].GetName())
						require.Equal(t, tc.traceID, ex.GetLabel()[0].GetValue())
						require.LessOrEqual(t, ex.GetValue(), b.GetUpperBound(), "the exemplar sits in its bucket")
						got[f.GetName()] = ex.GetValue()
					}
				}
			}
			if tc.traceID == "" {
				require.Empty(t, got)
				return
			}
			for fam, v := range want {
				require.Positive(t, v, fam)
				require.InDelta(t, v, got[fam], 1e-12, fam)
			}
		})
	}
}

// semantic_vad's decisions: one count per turn by reason, and the probability of the turns that
// had an estimate.
func TestObserveEndOfTurn(t *testing.T) {
	t.Parallel()
	reg := prometheus.NewPedanticRegistry()
	c := NewCollectors(reg, "m")
	c.ObserveEndOfTurn("semantic", 0.8, true)
	c.ObserveEndOfTurn("max_wait", 0.01, true)
	c.ObserveEndOfTurn("silence", 0, false)
	c.ObserveEndOfTurn("semantic", 0.6, true)
	require.InDelta(t, 2, testutil.ToFloat64(c.semanticTurns.WithLabelValues("semantic")), 0)
	require.InDelta(t, 1, testutil.ToFloat64(c.semanticTurns.WithLabelValues("max_wait")), 0)
	require.InDelta(t, 1, testutil.ToFloat64(c.semanticTurns.WithLabelValues("silence")), 0)
	mfs, err := reg.Gather()
	require.NoError(t, err)
	found := false
	for _, mf := range mfs {
		if mf.GetName() == "omniserve_realtime_semantic_vad_end_of_turn_probability" {
			found = true
			h := mf.GetMetric()[0].GetHistogram()
			require.EqualValues(t, 3, h.GetSampleCount(), "the turns with an estimate")
			require.InDelta(t, 1.41, h.GetSampleSum(), 1e-9)
		}
	}
	require.True(t, found)
	var nilC *Collectors
	nilC.ObserveEndOfTurn("semantic", 1, true) // a nil *Collectors does nothing
}
