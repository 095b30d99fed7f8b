package metrics

import (
	"os"
	"strings"
	"testing"

	"github.com/stretchr/testify/require"
)

const chatRID = "chatcmpl-9f1c2e7ab34d4e11-5d0c3a1e"

// chatExample feeds a chat request's turn the numbers behind the reference's chat-completion
// example (testdata/chat_spec_4_5.txt), through the calls the chat path makes, with a fake wall
// clock; Finalize ends it and renders its record.
func chatExample(t *testing.T) *TurnMetrics {
	t.Helper()
	clk := newFakeClock(1000.0)
	a := NewRequestTurn(chatRID, 1000.0, 3, 2, true, false, clk.now)
	const submit = 1000.022477 // req_start_ts, also stage 0's first timestamp
	a.SetRequestStart(submit)

	clk.set(1000.830000)
	a.AddTransfer(0, 1, 2048*1024, 12.55, 0, true)
	clk.set(1000.834767)
	a.Accumulate(0, StageRequestStats{
		BatchID: 17, BatchSize: 1, NumTokensIn: 1512, NumTokensOut: 86, StageGenTimeMs: 790.113,
		OutputUnitType: "text", VllmTtftMs: 120.404, VllmTpotMs: 7.88, VllmItlMs: 7.902,
		VllmItlsMs: []float64{7.8, 8.0}, PipelineTimings: map[string]float64{"preprocess_ms": 21.337},
	}, "text", submit)

	clk.set(1000.978686)
	a.AddTransfer(1, 2, 112132, 16.17, 0, true)
	clk.set(1003.440075)
	a.Accumulate(1, StageRequestStats{
		BatchID: 9, BatchSize: 1, NumTokensOut: 262, StageGenTimeMs: 2580.332,
		RxTransferBytes: 2048 * 1024, RxDecodeTimeMs: 6.902, RxInFlightTimeMs: 2.114,
	}, "", 0)

	clk.set(1003.512604)
	a.Accumulate(2, StageRequestStats{
		BatchID: 5, BatchSize: 1, NumTokensOut: 42, StageGenTimeMs: 380.771,
		AudioGeneratedFrames: 199680, AudioSampleRate: 24000, AudioDurationS: 8.32, OutputUnitType: "audio",
		RxTransferBytes: 112132, RxDecodeTimeMs: 3.119, RxInFlightTimeMs: 1.007,
		PipelineTimings: map[string]float64{"preprocess_ms": 21.337},
	}, "audio", 0)
	return a // Finalize ends it now, with its reason
}

// rendered finalizes a turn without a logger and returns its rendered tables.
func rendered(t *testing.T, turn *TurnMetrics) []string {
	t.Helper()
	require.True(t, turn.Finalize(ReasonStop, nil, true))
	return turn.summarySnapshot().Entries
}

// TestChatExampleMatchesSpec renders the reference's 3-stage chat example from the same numbers
// and compares it byte for byte with that example (testdata/chat_spec_4_5.txt, copied verbatim
// from the reference specification), so the layout matches the reference's tables exactly.
func TestChatExampleMatchesSpec(t *testing.T) {
	t.Parallel()
	got := transcript(rendered(t, chatExample(t)))
	want, err := os.ReadFile("testdata/chat_spec_4_5.txt")
	require.NoError(t, err)
	require.Equal(t, string(want), got)
	checkGolden(t, "chat_summary", got)
}

// duplexExample drives one turn through the per-turn path with the numbers of the reference's
// one-turn duplex example.
func duplexExample(t *testing.T) (*TurnMetrics, *fakeClock) {
	t.Helper()
	clk := newFakeClock(1999.0)
	rid := DuplexResourceRequestID("sid-1", 0, 0, "stage0")

	const arrival = 2000.0
	clk.set(2000.001)
	turn := newTurn(rid, "resp-sid-1-0-3fa2b9c1", 2, arrival, 3, clk.now)

	clk.set(2000.600)
	turn.Accumulate(0, StageRequestStats{BatchID: 3, BatchSize: 1, NumTokensIn: 200, NumTokensOut: 20,
		StageGenTimeMs: 400.0, OutputUnitType: "text", VllmTtftMs: 58.12, VllmTpotMs: 11.873}, "text", 2000.010)
	turn.MarkFirstOutput(0, 2000.300, false)
	clk.set(2001.000)
	turn.AddTransfer(0, 1, 256*1024, 3.10, 0, true)
	clk.set(2001.500)
	turn.Accumulate(1, StageRequestStats{BatchID: 7, BatchSize: 1, NumTokensOut: 50, StageGenTimeMs: 209.33,
		RxTransferBytes: 256 * 1024, RxDecodeTimeMs: 1.0, RxInFlightTimeMs: 0.5}, "", 2000.300)
	clk.set(2002.002118)
	turn.Accumulate(1, StageRequestStats{BatchID: 8, BatchSize: 2, NumTokensOut: 41, StageGenTimeMs: 200.0,
		RxDecodeTimeMs: 0.441, RxInFlightTimeMs: 0.412}, "", 0)
	clk.set(2002.140455)
	turn.Accumulate(0, StageRequestStats{BatchID: 4, BatchSize: 2, NumTokensIn: 56, NumTokensOut: 18,
		StageGenTimeMs: 221.442, VllmTtftMs: 70.0, VllmTpotMs: 11.873}, "text", 0)
	turn.AddTransfer(1, 2, 56*1024, 2.05, 0, true)
	clk.set(2000.826903)
	turn.MarkFirstOutput(2, 0, true) // first audio packet at 0.826903 s after arrival
	turn.Accumulate(2, StageRequestStats{BatchID: 7, BatchSize: 1, NumTokensOut: 30, StageGenTimeMs: 176.905,
		AudioGeneratedFrames: 62400, AudioSampleRate: 24000, AudioDurationS: 2.6, OutputUnitType: "audio",
		RxTransferBytes: 56 * 1024, RxDecodeTimeMs: 1.641, RxInFlightTimeMs: 0.731}, "audio", 0)

	clk.set(2002.481907)
	return turn, clk
}

// TestDuplexExample renders the reference's duplex example with omniserve's deliberate
// differences: serving_time_to_first_output_ms is a real duration and shown (the reference held an
// epoch timestamp and hid it), and the all-blank list rows are not printed (see listCell).
func TestDuplexExample(t *testing.T) {
	t.Parallel()
	turn, _ := duplexExample(t)
	log, logs := observedLogger()
	require.True(t, turn.Finalize(ReasonStop, log, true))
	got := transcript(turn.summarySnapshot().Entries)
	checkGolden(t, "duplex_turn", got)
	rec, ok := turn.Record()
	require.True(t, ok)
	require.Equal(t, turn.summarySnapshot().Entries, logTables(nil, &rec, false).Entries,
		"the printed tables are a function of the turn's record")

	msgs := messages(logs)
	require.Len(t, msgs, 5)
	for i, m := range msgs {
		if strings.HasPrefix(m, "[OmniTiming]") {
			require.Equal(t, turn.summarySnapshot().Entries[i], m)
			continue
		}
		require.Equal(t, "\n"+turn.summarySnapshot().Entries[i], m, "tables are logged with a leading newline")
	}
	require.Contains(t, got, "| serving_time_to_first_output_ms | 300.000 |   0.000 | 826.903 |")
	require.NotContains(t, got, "inter_output_latencies_ms")
	require.NotContains(t, got, "total=")
}

func TestTableKindsGolden(t *testing.T) {
	t.Parallel()
	tests := []struct {
		name string
		got  func() string
	}{
		{"empty_table", func() string { return renderTable("StageRequestStats [request_id=r]", []string{"Field"}, nil) + "\n" }},
		{"stage_table_duplicates_diffusion", func() string {
			s, ok := renderStageTable("StageRequestStats [request_id=r1]", []StageRequestStats{
				{StageID: 0, NumTokensOut: 3, PostprocessTimeMs: 5, VllmItlsMs: []float64{1, 2, 4}},
				{StageID: 0, NumTokensOut: 1234567, DiffusionMetrics: map[string]float64{"vae_ms": 12.5, "steps_ms": 1}},
				{StageID: 1, OutputUnitType: "image", ReplicaID: 2},
			})
			require.True(t, ok)
			return s + "\n"
		}},
		{"stage_table_remote", func() string {
			// A remote thinker (stage 0) before a local talker: the remote row names the
			// backends, the local column is None.
			s, ok := renderStageTable("StageRequestStats [request_id=r1]", []StageRequestStats{
				{StageID: 0, NumTokensOut: 12, OutputUnitType: "text", Remote: "llm=10.0.0.5:8000,asr=10.0.0.6:8000"},
				{StageID: 1, NumTokensOut: 3, OutputUnitType: "audio"},
			})
			require.True(t, ok)
			return s + "\n"
		}},
		{"transfer_table", func() string {
			s, ok := renderTransferTable("TransferEdgeStats [request_id=r1]", []TransferEdgeStats{
				{FromStage: 0, ToStage: 1, SizeBytes: 1536, TxTimeMs: 0.25},
				{FromStage: 1, ToStage: 2, SizeBytes: 10 << 20, UsedShm: true},
			})
			require.True(t, ok)
			return s + "\n"
		}},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			t.Parallel()
			checkGolden(t, tt.name, tt.got())
		})
	}
}

// TestChatAudioInputGolden is omniserve's two-stage chat with an audio part, fed as the chat
// path feeds it: the part's transcription is the input preprocessing (preprocess_ms on both
// stages' snapshots, as the stages send it), so it is its own figure
// (input_preprocess_time_ms, [OmniTiming] preprocess=) and stage 0's stage_gen_time_ms and
// wall time start after it.
func TestChatAudioInputGolden(t *testing.T) {
	t.Parallel()
	const rid = "chatcmpl-5be0a1c2d3e4f506-0a1b2c3d"
	clk := newFakeClock(3000.0)
	a := NewRequestTurn(rid, 3000.0, 2, 1, true, false, clk.now)
	a.SetRequestStart(3000.0005)
	pt := map[string]float64{"preprocess_ms": 212.5}
	const submit = 3000.2145 // stage 0's submit time: after the 212.5 ms transcription
	clk.set(3000.390)
	a.AddTransfer(0, 1, 96, 0.42, 0, false)
	clk.set(3000.6105)
	a.Accumulate(0, StageRequestStats{
		BatchID: 3, BatchSize: 1, NumTokensIn: 61, NumTokensOut: 12, StageGenTimeMs: 395.75,
		OutputUnitType: "text", OutputUnitCount: 12, VllmTtftMs: 305.25, VllmTpotMs: 8.5, VllmItlMs: 8.5,
		VllmItlsMs: []float64{8, 9}, PipelineTimings: pt,
	}, "audio", submit)
	clk.set(3001.250)
	a.Accumulate(1, StageRequestStats{
		NumTokensIn: 12, StageGenTimeMs: 480.5, AudioGeneratedFrames: 48000, AudioSampleRate: 24000,
		AudioDurationS: 2, OutputUnitType: "audio", OutputUnitCount: 2, RxTransferBytes: 96,
		RxDecodeTimeMs: 0.05, RxInFlightTimeMs: 1.25, PipelineTimings: pt,
	}, "audio", 3000.391)
	got := transcript(rendered(t, a))
	require.Contains(t, got, "| input_preprocess_time_ms    |   212.500 |")
	require.Contains(t, got, "total=1.25s preprocess=0.21s engine=1.04s stages=[0:0.40s,1:0.48s]")
	checkGolden(t, "chat_audio_input", got)
}
