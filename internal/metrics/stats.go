package metrics

import (
	"maps"
	"slices"
	"time"
)

// Clock returns wall-clock unix seconds. Statistics use wall time (not monotonic) so that
// engine submit timestamps and receipt timestamps taken on different goroutines compare.
type Clock func() float64

// Now is the real Clock.
func Now() float64 {
	return float64(time.Now().UnixNano()) / 1e9
}

// stageStats is the per-stage running total the engine attaches to a snapshot. It is never
// rendered (vllm-omni's STAGE_EXCLUDE) and never merged: the first segment's value is kept.
type stageStats struct {
	TotalToken     int
	TotalGenTimeMs float64
}

// StageRequestStats is one stage's statistics for one request (or one segment of a duplex turn).
// Fields follow vllm-omni's dataclass order (vllm_omni/metrics/stats.py); the `stats` tag is the
// vllm-omni field name. Every field has exactly one row in stageFields, which drives rendering and merging; a test
// fails when a field is added without a row.
//
// "None" in vllm-omni maps to the Go zero value: an empty optional string renders as None, a
// nil list renders as None, a nil map is absent.
type StageRequestStats struct {
	BatchID                    int                `stats:"batch_id"`
	BatchSize                  int                `stats:"batch_size"`
	NumTokensIn                int                `stats:"num_tokens_in"`
	NumTokensOut               int                `stats:"num_tokens_out"`
	StageGenTimeMs             float64            `stats:"stage_gen_time_ms"`
	RxTransferBytes            int                `stats:"rx_transfer_bytes"`
	RxDecodeTimeMs             float64            `stats:"rx_decode_time_ms"`
	RxInFlightTimeMs           float64            `stats:"rx_in_flight_time_ms"`
	StageStats                 *stageStats        `stats:"stage_stats"`
	StageID                    int                `stats:"stage_id"`
	ReplicaID                  int                `stats:"replica_id"`
	FinalOutputType            string             `stats:"final_output_type"`
	FinishReason               string             `stats:"finish_reason"`
	RequestID                  string             `stats:"request_id"`
	PostprocessTimeMs          float64            `stats:"postprocess_time_ms"`
	DiffusionMetrics           map[string]float64 `stats:"diffusion_metrics"`
	AudioGeneratedFrames       int                `stats:"audio_generated_frames"`
	AudioSampleRate            int                `stats:"audio_sample_rate"`
	AudioDurationS             float64            `stats:"audio_duration_s"`
	ImagePixels                int                `stats:"image_pixels"`
	NumInferenceSteps          int                `stats:"num_inference_steps"`
	DenoiseStepLatencyMs       float64            `stats:"denoise_step_latency_ms"`
	PipelineTimings            map[string]float64 `stats:"pipeline_timings"`
	OutputUnitType             string             `stats:"output_unit_type"`
	OutputUnitCount            int                `stats:"output_unit_count"`
	ServingTimeToFirstOutputMs float64            `stats:"serving_time_to_first_output_ms"`
	ImageTimeToFirstOutputMs   float64            `stats:"image_time_to_first_output_ms"`
	TimePerOutputUnitMs        float64            `stats:"time_per_output_unit_ms"`
	InterOutputLatencyMs       float64            `stats:"inter_output_latency_ms"`
	InterOutputLatenciesMs     []float64          `stats:"inter_output_latencies_ms"`
	VllmTtftMs                 float64            `stats:"vllm_ttft_ms"`
	VllmTpotMs                 float64            `stats:"vllm_tpot_ms"`
	VllmItlMs                  float64            `stats:"vllm_itl_ms"`
	VllmItlsMs                 []float64          `stats:"vllm_itls_ms"`
	// Remote (omniserve; vllm-omni has no such field) names the remote backends that did
	// the stage's work, e.g. "llm=10.0.0.5:8000,asr=10.0.0.6:8000"; "" for a local stage. Its
	// row is shown only when some stage of the table is remote, so local tables keep the
	// reference layout (docs/STATS.md).
	Remote string `stats:"remote"`
}

// clone returns a deep copy: stageStats, lists and maps are not shared with m, so a snapshot the
// engine keeps mutating cannot change what a turn already accumulated.
func (m StageRequestStats) clone() StageRequestStats {
	c := m
	if m.StageStats != nil {
		ss := *m.StageStats
		c.StageStats = &ss
	}
	c.DiffusionMetrics = maps.Clone(m.DiffusionMetrics)
	c.PipelineTimings = maps.Clone(m.PipelineTimings)
	c.InterOutputLatenciesMs = slices.Clone(m.InterOutputLatenciesMs)
	c.VllmItlsMs = slices.Clone(m.VllmItlsMs)
	return c
}

// TransferEdgeStats accumulates one connector edge (from → to) of one request: the sender adds TX
// (size, hand-off time), the receiving stage's snapshot adds RX (decode, in-flight time).
type TransferEdgeStats struct {
	FromStage      int
	ToStage        int
	RequestID      string
	SizeBytes      int64
	TxTimeMs       float64
	UsedShm        bool
	RxDecodeTimeMs float64
	InFlightTimeMs float64
	// BackpressureTimeMs is the time the sender waited for room on a full connector queue. It is
	// not transfer time (tx_time_ms is the hand-off cost only) and is not part of totalTimeMs.
	BackpressureTimeMs float64
}

// totalTimeMs is tx + rx decode + in flight.
func (t TransferEdgeStats) totalTimeMs() float64 {
	return t.TxTimeMs + t.RxDecodeTimeMs + t.InFlightTimeMs
}

// RequestE2EStats is the end-to-end record of one finalized request (or duplex turn).
type RequestE2EStats struct {
	RequestID            string
	E2ETotalMs           float64
	E2ETotalTokens       int64
	TransfersTotalTimeMs float64
	TransfersTotalBytes  int64

	// Duplex-turn figures vllm-omni has no name for (docs/STATS.md). Zero means unknown and
	// the row is not printed, so chat tables keep vllm-omni's layout.

	// InputMs runs from t0 (the first append of the user input, or its commit) to the end of
	// that input (commit, speech_stopped, VAD endpoint or item create): the user's turn.
	InputMs float64
	// InputEndToFirstTextMs / InputEndToFirstAudioMs run from the end of the user's input (commit,
	// speech_stopped, VAD endpoint or item create) to the first text unit / audio frame.
	InputEndToFirstTextMs  float64
	InputEndToFirstAudioMs float64
	// AudioDeliveredS is the audio actually sent to the client (not what was generated).
	AudioDeliveredS float64
	// AudioPlayedS is the audio the client acknowledged as played (its last playback.ack of
	// the turn); zero when it sent none.
	AudioPlayedS float64
	// DeliveryTotalMs runs from t0 to the end of delivery: the last audio frame sent, or the
	// cancel that stopped it. E2ETotalMs ends when the last stage produced its last unit.
	DeliveryTotalMs float64
	// AudioUnderrunS is the time the client's playback ran out of sent audio during the turn.
	AudioUnderrunS float64
	// DeliveryDetachedMs is the part of the delivery paused because the client was disconnected
	// and then resumed the session (included in DeliveryTotalMs).
	DeliveryDetachedMs float64
}

// timingIdentity names a duplex turn in titles and the [OmniTiming] line, so each turn's tables can
// be told apart within a session. Empty strings and a negative Turn are omitted.
type timingIdentity struct {
	Req      string
	Response string
	Turn     int
	Reason   string
}
