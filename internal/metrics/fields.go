package metrics

// fieldKind says how a StageRequestStats field is stored, rendered and compared with zero.
type fieldKind uint8

const (
	kindInt fieldKind = iota + 1
	kindFloat
	kindString   // optional string: "" is vllm-omni's None and renders as "None"
	kindList     // []float64: nil renders "None", a non-empty list "<mean> (n=k)"
	kindMap      // map[string]float64
	kindStageRef // *stageStats
)

// mergeRule is how the collapse of several segments of one stage into one row folds a field.
type mergeRule uint8

const (
	mergeUnset         mergeRule = iota // never valid in the table; the coverage test rejects it
	mergeKeepFirst                      // not merged: the first segment's value stays
	mergeSum                            // additive
	mergeFirstPositive                  // first value > 0 wins
	mergeLastPositive                   // last value > 0 wins
	mergeLastNonEmpty                   // last non-empty string wins
	mergeConcat                         // lists are concatenated
	mergeMeanOfList                     // mean of the concatenated list named by field.meanOf (0 if empty)
	mergeTokenWeighted                  // vllm_tpot_ms: weight max(out-1,1) per segment with tpot > 0
	mergeRecomputeTPOU                  // time_per_output_unit_ms: mean of the merged inter-output gaps
)

// stageField is one row of the explicit field table. Exactly one accessor matching kind is set;
// it returns a pointer so the same row reads (render) and writes (merge) the field.
type stageField struct {
	name     string
	kind     fieldKind
	excluded bool // STAGE_EXCLUDE: never a table row
	merge    mergeRule
	meanOf   int // for mergeMeanOfList: index of the list field in stageFields
	i        func(*StageRequestStats) *int
	f        func(*StageRequestStats) *float64
	s        func(*StageRequestStats) *string
	l        func(*StageRequestStats) *[]float64
	m        func(*StageRequestStats) *map[string]float64
	ref      func(*StageRequestStats) **stageStats
}

func intField(name string, excluded bool, r mergeRule, get func(*StageRequestStats) *int) stageField {
	return stageField{name: name, kind: kindInt, excluded: excluded, merge: r, i: get}
}

func floatField(name string, excluded bool, r mergeRule, get func(*StageRequestStats) *float64) stageField {
	return stageField{name: name, kind: kindFloat, excluded: excluded, merge: r, f: get}
}

func stringField(name string, excluded bool, r mergeRule, get func(*StageRequestStats) *string) stageField {
	return stageField{name: name, kind: kindString, excluded: excluded, merge: r, s: get}
}

func listField(name string, get func(*StageRequestStats) *[]float64) stageField {
	return stageField{name: name, kind: kindList, merge: mergeConcat, l: get}
}

func mapField(name string, excluded bool, get func(*StageRequestStats) *map[string]float64) stageField {
	return stageField{name: name, kind: kindMap, excluded: excluded, merge: mergeKeepFirst, m: get}
}

// Indices of the list fields that the two mean fields are recomputed from.
const (
	idxInterOutputLatencies = 29
	idxVllmItls             = 33
)

// stageFields lists every StageRequestStats field in dataclass order with its rendering and merge
// rule. Fields vllm-omni does not merge (batch_id, batch_size, replica_id, rx_*,
// diffusion_metrics, ...) are mergeKeepFirst: vllm-omni silently dropped a key without a rule,
// so here every field has one and a test fails when a field is added without it.
var stageFields = [...]stageField{
	// batch_id / batch_size: first positive, not keep-first. A duplex turn's stage-0 row starts
	// with listen units (VAD + ASR) that ran no engine batch and report 0; keep-first would hide
	// the batch of the turn's generation, which the same request's chat table shows.
	intField("batch_id", false, mergeFirstPositive, func(m *StageRequestStats) *int { return &m.BatchID }),
	intField("batch_size", false, mergeFirstPositive, func(m *StageRequestStats) *int { return &m.BatchSize }),
	intField("num_tokens_in", false, mergeSum, func(m *StageRequestStats) *int { return &m.NumTokensIn }),
	intField("num_tokens_out", false, mergeSum, func(m *StageRequestStats) *int { return &m.NumTokensOut }),
	floatField("stage_gen_time_ms", false, mergeSum, func(m *StageRequestStats) *float64 { return &m.StageGenTimeMs }),
	intField("rx_transfer_bytes", true, mergeKeepFirst, func(m *StageRequestStats) *int { return &m.RxTransferBytes }),
	floatField("rx_decode_time_ms", true, mergeKeepFirst, func(m *StageRequestStats) *float64 { return &m.RxDecodeTimeMs }),
	floatField("rx_in_flight_time_ms", true, mergeKeepFirst, func(m *StageRequestStats) *float64 { return &m.RxInFlightTimeMs }),
	{name: "stage_stats", kind: kindStageRef, excluded: true, merge: mergeKeepFirst,
		ref: func(m *StageRequestStats) **stageStats { return &m.StageStats }},
	intField("stage_id", true, mergeKeepFirst, func(m *StageRequestStats) *int { return &m.StageID }),
	intField("replica_id", false, mergeKeepFirst, func(m *StageRequestStats) *int { return &m.ReplicaID }),
	stringField("final_output_type", true, mergeLastNonEmpty, func(m *StageRequestStats) *string { return &m.FinalOutputType }),
	stringField("finish_reason", true, mergeLastNonEmpty, func(m *StageRequestStats) *string { return &m.FinishReason }),
	stringField("request_id", true, mergeKeepFirst, func(m *StageRequestStats) *string { return &m.RequestID }),
	floatField("postprocess_time_ms", false, mergeSum, func(m *StageRequestStats) *float64 { return &m.PostprocessTimeMs }),
	mapField("diffusion_metrics", false, func(m *StageRequestStats) *map[string]float64 { return &m.DiffusionMetrics }),
	intField("audio_generated_frames", false, mergeSum, func(m *StageRequestStats) *int { return &m.AudioGeneratedFrames }),
	intField("audio_sample_rate", false, mergeFirstPositive, func(m *StageRequestStats) *int { return &m.AudioSampleRate }),
	floatField("audio_duration_s", false, mergeSum, func(m *StageRequestStats) *float64 { return &m.AudioDurationS }),
	intField("image_pixels", false, mergeSum, func(m *StageRequestStats) *int { return &m.ImagePixels }),
	intField("num_inference_steps", false, mergeKeepFirst, func(m *StageRequestStats) *int { return &m.NumInferenceSteps }),
	floatField("denoise_step_latency_ms", false, mergeLastPositive, func(m *StageRequestStats) *float64 { return &m.DenoiseStepLatencyMs }),
	mapField("pipeline_timings", true, func(m *StageRequestStats) *map[string]float64 { return &m.PipelineTimings }),
	stringField("output_unit_type", false, mergeLastNonEmpty, func(m *StageRequestStats) *string { return &m.OutputUnitType }),
	intField("output_unit_count", false, mergeSum, func(m *StageRequestStats) *int { return &m.OutputUnitCount }),
	floatField("serving_time_to_first_output_ms", false, mergeFirstPositive, func(m *StageRequestStats) *float64 { return &m.ServingTimeToFirstOutputMs }),
	floatField("image_time_to_first_output_ms", false, mergeFirstPositive, func(m *StageRequestStats) *float64 { return &m.ImageTimeToFirstOutputMs }),
	floatField("time_per_output_unit_ms", false, mergeRecomputeTPOU, func(m *StageRequestStats) *float64 { return &m.TimePerOutputUnitMs }),
	{name: "inter_output_latency_ms", kind: kindFloat, merge: mergeMeanOfList, meanOf: idxInterOutputLatencies,
		f: func(m *StageRequestStats) *float64 { return &m.InterOutputLatencyMs }},
	listField("inter_output_latencies_ms", func(m *StageRequestStats) *[]float64 { return &m.InterOutputLatenciesMs }),
	floatField("vllm_ttft_ms", false, mergeFirstPositive, func(m *StageRequestStats) *float64 { return &m.VllmTtftMs }),
	floatField("vllm_tpot_ms", false, mergeTokenWeighted, func(m *StageRequestStats) *float64 { return &m.VllmTpotMs }),
	{name: "vllm_itl_ms", kind: kindFloat, merge: mergeMeanOfList, meanOf: idxVllmItls,
		f: func(m *StageRequestStats) *float64 { return &m.VllmItlMs }},
	listField("vllm_itls_ms", func(m *StageRequestStats) *[]float64 { return &m.VllmItlsMs }),
	stringField("remote", false, mergeLastNonEmpty, func(m *StageRequestStats) *string { return &m.Remote }),
}

// Names of the fields that rendering treats specially.
const (
	fieldDiffusion   = "diffusion_metrics"
	fieldPostprocess = "postprocess_time_ms"
)
