package metrics

import (
	"strconv"
	"sync"

	"github.com/prometheus/client_golang/prometheus"
)

// FinalizedRequest is the one immutable record a chat request or duplex turn yields when it
// closes (TurnMetrics.Record): the --log-stats tables and structured records render it
// (tableSummary), Prometheus observes it (ObserveFinalized) and tracing exports it.
type FinalizedRequest struct {
	Duplex         bool // a duplex assistant turn, not a chat completion
	FinishedReason string
	E2E            RequestE2EStats
	Stages         []StageRequestStats // one row per stage (collapsed for turns)
	Transfers      []TransferEdgeStats
	// AudioTTFPSeconds is the time from arrival to the first audio packet; <= 0 when unknown.
	AudioTTFPSeconds float64
	AudioTTFPStage   int
	// ToolCalls are the tool and MCP calls timed for a turn (StartMs set), nil for none.
	ToolCalls []ToolCallStats
	// Dialect is the wire protocol of a duplex turn's session (one of Dialects; "" for a chat
	// request): the dialect label of the duplex families and the turn span's omniserve.dialect.
	Dialect string
	// TraceID is the id (32 hex digits) of the trace the record was exported in, "" when it
	// was not traced (or not sampled): the latency histograms carry it as an exemplar, so a
	// dashboard can go from a slow bucket to the turn's trace.
	TraceID string
	// tables is what the --log-stats tables show beside the fields above (tableSummary).
	tables tableInputs
}

// Bucket sets of vllm-omni (vllm_omni/metrics/definitions.py), so dashboards built for it fit.
var (
	secondsBuckets     = []float64{0.05, 0.1, 0.25, 0.5, 1, 2, 5, 10, 20, 30, 60, 120, 300}
	secondsFastBuckets = []float64{0.001, 0.005, 0.01, 0.025, 0.05, 0.1, 0.25, 0.5, 1, 2.5, 5, 10, 60}
	rtfBuckets         = []float64{0.1, 0.25, 0.5, 0.75, 0.9, 1.0, 1.25, 1.5, 2, 5, 10}
	bytesBuckets       = []float64{1 << 10, 4 << 10, 16 << 10, 64 << 10, 256 << 10, 1 << 20, 4 << 20, 16 << 20, 64 << 20, 256 << 20}
)

// defaultAudioSampleRate is used to turn frames into seconds when a snapshot has no rate.
const defaultAudioSampleRate = 24000

// Collectors are the omniserve_* Prometheus families (vllm-omni's families plus the duplex
// per-turn ones its RFC #6614 planned; docs/STATS.md lists them).
// Labels are bounded: model_name (constant), kind (chat | duplex) where chat and duplex share a
// family, finished_reason (the normalized set), stage and from_stage/to_stage (pipeline
// indices); never a session, request or response id. Every family is exported from start-up
// (the label combinations are known up front), so dashboards and alerts see zeros, not gaps.
// A nil *Collectors does nothing.
type Collectors struct {
	requestSuccess   *prometheus.CounterVec
	requestFailure   *prometheus.CounterVec
	e2eLatency       *prometheus.HistogramVec
	ttft             *prometheus.HistogramVec
	itl              *prometheus.HistogramVec
	promptTokens     prometheus.Counter
	generationTokens prometheus.Counter
	duplexTurns      *prometheus.CounterVec
	inputToAudio     *prometheus.HistogramVec
	inputToText      *prometheus.HistogramVec
	audioDelivered   *prometheus.HistogramVec
	audioPlayed      *prometheus.HistogramVec
	audioUnderrun    *prometheus.HistogramVec
	activeSessions   prometheus.Gauge
	detachedSessions prometheus.Gauge
	sessionDuration  prometheus.Histogram
	admissionReject  prometheus.Counter
	panics           *prometheus.CounterVec
	toolCalls        *prometheus.CounterVec
	mcpCallDuration  *prometheus.HistogramVec
	mcpCallFailures  *prometheus.CounterVec
	engineErrors     *prometheus.CounterVec
	functionCall     prometheus.Histogram
	transcription    prometheus.Histogram
	txSpeechEndDone  prometheus.Histogram
	txFirstDelta     prometheus.Histogram
	txItems          *prometheus.CounterVec
	evictions        prometheus.Counter
	stalled          prometheus.Counter
	bargeIn          prometheus.Histogram
	semanticTurns    *prometheus.CounterVec
	endOfTurnProb    prometheus.Histogram
	audioTTFP        *prometheus.HistogramVec
	audioDuration    *prometheus.HistogramVec
	audioRTF         *prometheus.HistogramVec
	transferSize     *prometheus.HistogramVec
	transferTx       *prometheus.HistogramVec
	transferBlocked  *prometheus.HistogramVec
	transferRxDecode *prometheus.HistogramVec
	transferInFlight *prometheus.HistogramVec
	load             *loadCollector
	kv               *kvCollector
}

// Request kinds (the kind label).
const (
	kindChat   = "chat"
	kindDuplex = "duplex"
)

// finishedReasons is every value the finished_reason label takes.
var finishedReasons = []string{ReasonStop, ReasonLength, reasonToolCalls, ReasonBargeIn, ReasonCancel, ReasonClose, ReasonAbort, ReasonError}

// succeeded reports a finished reason that counts as a success: the model finished (stop), hit
// its token limit (length) or called tools (tool_calls). Everything else (cancelled, barged in, closed, aborted, failed)
// is a failure of the request, counted apart.
func succeeded(reason string) bool {
	return reason == ReasonStop || reason == ReasonLength || reason == reasonToolCalls
}

// NewCollectors registers the families on reg with a constant model_name label. It panics if a
// family is already registered on reg, like prometheus.MustRegister: that is a wiring bug.
func NewCollectors(reg prometheus.Registerer, model string) *Collectors {
	reg = prometheus.WrapRegistererWith(prometheus.Labels{"model_name": model}, reg)
	hist := func(sub, name, help string, buckets []float64, labels ...string) *prometheus.HistogramVec {
		return prometheus.NewHistogramVec(prometheus.HistogramOpts{
			Namespace: "omniserve", Subsystem: sub, Name: name, Help: help, Buckets: buckets,
		}, labels)
	}
	hist1 := func(sub, name, help string, buckets []float64) prometheus.Histogram {
		return prometheus.NewHistogram(prometheus.HistogramOpts{
			Namespace: "omniserve", Subsystem: sub, Name: name, Help: help, Buckets: buckets,
		})
	}
	counter := func(sub, name, help string, labels ...string) *prometheus.CounterVec {
		return prometheus.NewCounterVec(prometheus.CounterOpts{Namespace: "omniserve", Subsystem: sub, Name: name, Help: help}, labels)
	}
	counter1 := func(sub, name, help string) prometheus.Counter {
		return prometheus.NewCounter(prometheus.CounterOpts{Namespace: "omniserve", Subsystem: sub, Name: name, Help: help})
	}
	gauge1 := func(sub, name, help string) prometheus.Gauge {
		return prometheus.NewGauge(prometheus.GaugeOpts{Namespace: "omniserve", Subsystem: sub, Name: name, Help: help})
	}
	c := &Collectors{
		requestSuccess: counter("request", "success_total",
			"Chat requests and duplex turns that finished (stop), hit their token limit (length) or called tools (tool_calls).", "kind", "finished_reason"),
		requestFailure: counter("request", "failure_total",
			"Chat requests and duplex turns cut short: barge_in, cancel, close, abort or error.", "kind", "finished_reason"),
		e2eLatency: hist("request", "e2e_latency_seconds",
			"Time from the start of the user input (t0) to the end of generation.", secondsBuckets, "kind"),
		ttft: hist("request", "time_to_first_token_seconds",
			"Stage-0 time to first token, from submission (queueing and prefill included).", secondsFastBuckets, "kind"),
		itl: hist("request", "inter_token_latency_seconds",
			"Stage-0 time between consecutive output tokens.", secondsFastBuckets, "kind"),
		promptTokens: counter1("request", "prompt_tokens_total",
			"Stage-0 input tokens of finalized requests and turns."),
		generationTokens: counter1("request", "generation_tokens_total",
			"Output tokens of all stages of finalized requests and turns, cut-short ones included."),
		duplexTurns: counter("duplex", "turns_total", "Finalized duplex assistant turns by finished_reason and dialect (the session's wire protocol).", "finished_reason", "dialect"),
		inputToAudio: hist("duplex", "input_end_to_first_audio_seconds",
			"Time from the end of the user input (commit, speech_stopped, item create) to the turn's first audio frame.", secondsBuckets, "dialect"),
		inputToText: hist("duplex", "input_end_to_first_text_seconds",
			"Time from the end of the user input to the turn's first text unit.", secondsBuckets, "dialect"),
		audioDelivered: hist("duplex", "audio_delivered_seconds",
			"Audio actually sent to the client per turn.", secondsBuckets, "dialect"),
		audioPlayed: hist("duplex", "audio_played_seconds",
			"Audio the client acknowledged as played per turn (its last playback.ack's played_ms); turns without an ack are not observed.", secondsBuckets, "dialect"),
		audioUnderrun: hist("duplex", "audio_underrun_seconds",
			"Time per turn the client's playback ran out of sent audio (paced delivery fell behind).", secondsFastBuckets, "dialect"),
		activeSessions: gauge1("duplex", "active_sessions",
			"Duplex engine streams open now."),
		detachedSessions: gauge1("duplex", "detached_sessions",
			"Realtime sessions whose connection was lost, kept for a resume (they hold their admission slot and engine stream)."),
		sessionDuration: hist1("duplex", "session_duration_seconds",
			"Lifetime of a duplex engine stream, from open to close.", []float64{1, 5, 15, 30, 60, 120, 300, 600, 1800, 3600, 7200}),
		admissionReject: counter1("duplex", "admission_rejections_total",
			"Duplex streams refused because the engine was at capacity."),
		evictions: counter1("duplex", "evictions_total",
			"Detached realtime sessions (kept for a resume) ended to admit a new client when every slot was taken."),
		stalled: counter1("realtime", "stalled_clients_total",
			"Realtime connections closed (or detached for resume) because an event waited past realtime.stall_timeout: the client stopped reading."),
		panics: counter("", "panics_total",
			"Go panics recovered at a goroutine root (the goroutine's work ended with an error, the server kept serving), by component.", "component"),
		toolCalls: counter("", "tool_calls_total",
			"Tool calls the model made, by api: chat (a message.tool_calls entry) or realtime (a function_call, mcp_call or mcp_approval_request item).", "api"),
		mcpCallDuration: hist("realtime", "mcp_call_duration_seconds",
			"Realtime MCP tool calls that reached their server: time from the request to its answer (or failure), by outcome (completed or failed).", secondsFastBuckets, "outcome"),
		functionCall: hist1("realtime", "function_call_duration_seconds",
			"Realtime function calls the client answered: time from the call's arguments (response.function_call_arguments.done) to its function_call_output item.", secondsBuckets),
		mcpCallFailures: counter("realtime", "mcp_call_failures_total",
			"Realtime MCP tool calls that failed, by kind: the mcp_call item's error type (protocol_error, tool_execution_error, http_error) or cancelled (its response ended first).", "kind"),
		engineErrors: counter("engine", "errors_total",
			"Engine failures that reached a client (a realtime error event, a failed response, a failed chat completion), by cause: the condition that failed the work.", "cause"),
		transcription: hist1("realtime", "transcription_latency_seconds",
			"Transcription sessions: time from an item's commit (the client's, or the server VAD's at the end of its silence window) to its final transcript.", secondsFastBuckets),
		txSpeechEndDone: hist1("realtime", "transcription_speech_end_to_completed_seconds",
			"Transcription sessions: time from an item's speech end (the server VAD's speech_stopped; a manual commit's commit) to its final transcript (completed items).", secondsFastBuckets),
		txFirstDelta: hist1("realtime", "transcription_first_delta_seconds",
			"Transcription sessions: time from an item's speech end (or manual commit) to its first transcript delta; 0 when the first words went out while the user still spoke (items with a delta).", secondsFastBuckets),
		txItems: counter("realtime", "transcription_items_total",
			"Transcription session items that ended, by outcome: completed, failed, or cancelled (cut short by the session's close or input_audio_buffer.clear).", "outcome"),
		bargeIn: hist1("duplex", "barge_in_latency_seconds",
			"Time from the onset of the user's speech to the cut of the response it barged in on (server VAD).", secondsFastBuckets),
		semanticTurns: counter("realtime", "semantic_vad_turns_total",
			"Turns semantic_vad ended, by reason: semantic (the thinker's end-of-turn probability reached the eagerness's threshold), max_wait (the pause reached the eagerness's maximum wait) or silence (no estimate: silence alone).", "reason"),
		endOfTurnProb: hist1("realtime", "semantic_vad_end_of_turn_probability",
			"semantic_vad: the thinker's end-of-turn probability at each turn it decided (turns with an estimate).", []float64{0.001, 0.01, 0.05, 0.1, 0.2, 0.3, 0.5, 0.7, 0.9, 1}),
		audioTTFP: hist("audio", "time_to_first_packet_seconds",
			"Time from request or turn arrival to the first audio packet.", secondsBuckets, "kind", "stage"),
		audioDuration: hist("audio", "duration_seconds",
			"Duration of the audio generated for a request or turn.", secondsBuckets, "stage"),
		audioRTF: hist("audio", "real_time_factor",
			"Audio generation time divided by the generated audio duration.", rtfBuckets, "stage"),
		transferSize: hist("transfer", "size_bytes",
			"Bytes moved over a stage connector per request.", bytesBuckets, "from_stage", "to_stage"),
		transferTx: hist("transfer", "tx_seconds",
			"Connector hand-off time per request (encoding and enqueueing, no backpressure).", secondsFastBuckets, "from_stage", "to_stage"),
		transferBlocked: hist("transfer", "backpressure_seconds",
			"Time a connector sender waited for room on a full queue, per request.", secondsFastBuckets, "from_stage", "to_stage"),
		transferRxDecode: hist("transfer", "rx_decode_seconds",
			"Connector receive decode time per request.", secondsFastBuckets, "from_stage", "to_stage"),
		transferInFlight: hist("transfer", "in_flight_seconds",
			"Time at least one item was queued on a connector, per request.", secondsFastBuckets, "from_stage", "to_stage"),
		load: newLoadCollector(),
		kv:   newKVCollector(),
	}
	reg.MustRegister(c.requestSuccess, c.requestFailure, c.e2eLatency, c.ttft, c.itl, c.promptTokens,
		c.generationTokens, c.duplexTurns, c.inputToAudio, c.inputToText, c.audioDelivered, c.audioPlayed, c.audioUnderrun, c.activeSessions,
		c.detachedSessions, c.sessionDuration, c.admissionReject, c.evictions, c.stalled, c.panics, c.toolCalls, c.mcpCallDuration, c.mcpCallFailures, c.engineErrors, c.functionCall, c.transcription, c.txSpeechEndDone, c.txFirstDelta, c.txItems, c.bargeIn, c.semanticTurns, c.endOfTurnProb, c.audioTTFP, c.audioDuration, c.audioRTF, c.transferSize,
		c.transferTx, c.transferBlocked, c.transferRxDecode, c.transferInFlight, c.load, c.kv)
	// Present from start-up: every bounded label combination that is known up front.
	for _, comp := range panicComponents {
		c.panics.WithLabelValues(comp)
	}
	for _, api := range toolCallAPIs {
		c.toolCalls.WithLabelValues(api)
	}
	for _, o := range []string{ItemCompleted, ItemFailed, ItemCancelled} {
		c.txItems.WithLabelValues(o) // every outcome shows from the start, at 0
	}
	for _, r := range endOfTurnReasons {
		c.semanticTurns.WithLabelValues(r)
	}
	for _, o := range []string{"completed", "failed"} {
		c.mcpCallDuration.WithLabelValues(o)
	}
	for _, k := range mcpFailureKinds {
		c.mcpCallFailures.WithLabelValues(k)
	}
	for _, k := range EngineErrorCauses {
		c.engineErrors.WithLabelValues(k)
	}
	for _, kind := range []string{kindChat, kindDuplex} {
		for _, r := range finishedReasons {
			if succeeded(r) {
				c.requestSuccess.WithLabelValues(kind, r)
			} else {
				c.requestFailure.WithLabelValues(kind, r)
			}
		}
		c.e2eLatency.WithLabelValues(kind)
		c.ttft.WithLabelValues(kind)
		c.itl.WithLabelValues(kind)
	}
	for _, d := range Dialects {
		for _, r := range finishedReasons {
			c.duplexTurns.WithLabelValues(r, d)
		}
		for _, h := range []*prometheus.HistogramVec{c.inputToAudio, c.inputToText, c.audioDelivered, c.audioPlayed, c.audioUnderrun} {
			h.WithLabelValues(d)
		}
	}
	return c
}

// SessionOpened counts a duplex stream that opened; call SessionClosed when it ends.
func (c *Collectors) SessionOpened() {
	if c != nil {
		c.activeSessions.Inc()
	}
}

// SessionClosed counts a duplex stream that ended after lifetime seconds.
func (c *Collectors) SessionClosed(lifetime float64) {
	if c != nil {
		c.activeSessions.Dec()
		c.sessionDuration.Observe(max(lifetime, 0))
	}
}

// AddDetachedSessions moves the gauge of sessions waiting for a resume.
func (c *Collectors) AddDetachedSessions(delta int) {
	if c != nil {
		c.detachedSessions.Add(float64(delta))
	}
}

// panicComponents are the goroutine roots that recover a panic (the panics_total labels).
var panicComponents = []string{"session", "session_jobs", "http", "engine"}

// CountStalledClient counts a realtime client found not reading by the age of its oldest event.
func (c *Collectors) CountStalledClient() {
	if c != nil {
		c.stalled.Inc()
	}
}

// CountEviction counts a detached session ended to admit a new client.
func (c *Collectors) CountEviction() {
	if c != nil {
		c.evictions.Inc()
	}
}

// CountPanic counts a panic recovered at the root of a component's goroutine.
func (c *Collectors) CountPanic(component string) {
	if c != nil {
		c.panics.WithLabelValues(component).Inc()
	}
}

// toolCallAPIs are the api label values of omniserve_tool_calls_total.
var toolCallAPIs = []string{"chat", "realtime"}

// CountToolCall counts one tool call the model made through api (toolCallAPIs).
func (c *Collectors) CountToolCall(api string) {
	if c != nil {
		c.toolCalls.WithLabelValues(api).Inc()
	}
}

// mcpFailureKinds are the kind label values of omniserve_realtime_mcp_call_failures_total.
var mcpFailureKinds = []string{"protocol_error", "tool_execution_error", "http_error", "cancelled"}

// observeMCPCall records one realtime MCP call: its duration (seconds < 0: it never reached
// the server, only the failure is counted), failure ("" when it completed, else a
// mcpFailureKinds value) and the exemplar of the turn's trace (nil: none). ObserveFinalized
// calls it for each MCP call of a turn's record.
func (c *Collectors) observeMCPCall(seconds float64, failure string, ex prometheus.Labels) {
	if c == nil {
		return
	}
	outcome := "completed"
	if failure != "" {
		outcome = "failed"
		kind := "protocol_error"
		for _, k := range mcpFailureKinds {
			if k == failure {
				kind = k
			}
		}
		c.mcpCallFailures.WithLabelValues(kind).Inc()
	}
	if seconds >= 0 {
		observe(c.mcpCallDuration.WithLabelValues(outcome), seconds, ex)
	}
}

// ObserveTranscriptionItem observes a transcription session item that ended: its outcome, and
// for a completed item its commit → completed (transcription_latency_seconds, as before the
// item record), speech end → completed and speech end → first delta.
func (c *Collectors) ObserveTranscriptionItem(r TranscriptionItem) {
	if c == nil {
		return
	}
	c.txItems.WithLabelValues(r.Outcome).Inc()
	if r.Outcome != ItemCompleted {
		return
	}
	if ms := r.CommitToDoneMs(); ms >= 0 {
		c.transcription.Observe(ms / 1000)
	}
	if ms := r.SpeechEndToDoneMs(); ms >= 0 {
		c.txSpeechEndDone.Observe(ms / 1000)
	}
	if ms, ok := r.speechEndToFirstDeltaMs(); ok {
		c.txFirstDelta.Observe(max(ms, 0) / 1000)
	}
}

// BargeIn observes a server-VAD barge-in's latency in seconds.
func (c *Collectors) BargeIn(latency float64) {
	if c != nil && latency >= 0 {
		c.bargeIn.Observe(latency)
	}
}

// endOfTurnReasons is every value of semantic_vad_turns_total's reason label.
var endOfTurnReasons = []string{"semantic", "max_wait", "silence"}

// ObserveEndOfTurn counts a turn semantic_vad ended and, when it had an estimate, the
// thinker's end-of-turn probability at the decision.
func (c *Collectors) ObserveEndOfTurn(reason string, prob float64, scored bool) {
	if c == nil {
		return
	}
	c.semanticTurns.WithLabelValues(reason).Inc()
	if scored {
		c.endOfTurnProb.Observe(prob)
	}
}

// AdmissionRejected counts a duplex stream refused for capacity.
func (c *Collectors) AdmissionRejected() {
	if c != nil {
		c.admissionReject.Inc()
	}
}

// promReason bounds the finished_reason label to finishedReasons.
func promReason(r string) string { return NormalizeFinishedReason(r) }

// exemplarTraceID is the exemplar label holding a trace id (the name Grafana's exemplar links
// and Prometheus' docs use).
const exemplarTraceID = "trace_id"

// observe records v on o, with the exemplar ex when it is set (OpenMetrics exposition shows
// the latest exemplar per bucket).
func observe(o prometheus.Observer, v float64, ex prometheus.Labels) {
	if ex != nil {
		if eo, ok := o.(prometheus.ExemplarObserver); ok {
			eo.ObserveWithExemplar(v, ex)
			return
		}
	}
	o.Observe(v)
}

// ObserveFinalized records one finalized chat request or duplex turn. The chat and turn finalize
// paths call it once per request (TurnMetrics.Record).
func (c *Collectors) ObserveFinalized(r FinalizedRequest) {
	if c == nil {
		return
	}
	reason := promReason(r.FinishedReason)
	var ex prometheus.Labels // only a traced record pays for its exemplar
	if r.TraceID != "" {
		ex = prometheus.Labels{exemplarTraceID: r.TraceID}
	}
	kind := kindChat
	if r.Duplex {
		kind = kindDuplex
		c.observeDuplexTurn(r, reason, ex)
	}
	if succeeded(reason) {
		c.requestSuccess.WithLabelValues(kind, reason).Inc()
	} else {
		c.requestFailure.WithLabelValues(kind, reason).Inc()
	}
	observe(c.e2eLatency.WithLabelValues(kind), max(r.E2E.E2ETotalMs, 0)/1000, ex)
	var prompt, gen int
	for _, s := range r.Stages {
		if s.StageID == 0 {
			prompt += s.NumTokensIn
			if s.VllmTtftMs > 0 {
				observe(c.ttft.WithLabelValues(kind), s.VllmTtftMs/1000, ex)
			}
			for _, v := range s.VllmItlsMs {
				c.itl.WithLabelValues(kind).Observe(v / 1000)
			}
		}
		gen += s.NumTokensOut
		dur := s.AudioDurationS
		if dur <= 0 && s.AudioGeneratedFrames > 0 {
			rate := s.AudioSampleRate
			if rate <= 0 {
				rate = defaultAudioSampleRate
			}
			dur = float64(s.AudioGeneratedFrames) / float64(rate)
		}
		if dur > 0 {
			stage := strconv.Itoa(s.StageID)
			c.audioDuration.WithLabelValues(stage).Observe(dur)
			if s.StageGenTimeMs > 0 {
				c.audioRTF.WithLabelValues(stage).Observe(s.StageGenTimeMs / 1000 / dur)
			}
		}
	}
	c.promptTokens.Add(float64(prompt))
	c.generationTokens.Add(float64(gen))
	if r.AudioTTFPSeconds > 0 {
		observe(c.audioTTFP.WithLabelValues(kind, strconv.Itoa(r.AudioTTFPStage)), r.AudioTTFPSeconds, ex)
	}
	for _, tc := range r.ToolCalls {
		switch tc.Kind {
		case ToolKindMCP:
			c.observeMCPCall(tc.DurationMs/1000, tc.Error, ex) // < 0: never reached its server
		case ToolKindFunction:
			observe(c.functionCall, max(tc.DurationMs, 0)/1000, ex)
		}
	}
	for _, e := range r.Transfers {
		from, to := strconv.Itoa(e.FromStage), strconv.Itoa(e.ToStage)
		if e.SizeBytes > 0 {
			c.transferSize.WithLabelValues(from, to).Observe(float64(e.SizeBytes))
		}
		if e.TxTimeMs > 0 {
			c.transferTx.WithLabelValues(from, to).Observe(e.TxTimeMs / 1000)
		}
		if e.BackpressureTimeMs > 0 {
			c.transferBlocked.WithLabelValues(from, to).Observe(e.BackpressureTimeMs / 1000)
		}
		if e.RxDecodeTimeMs > 0 {
			c.transferRxDecode.WithLabelValues(from, to).Observe(e.RxDecodeTimeMs / 1000)
		}
		if e.InFlightTimeMs > 0 {
			c.transferInFlight.WithLabelValues(from, to).Observe(e.InFlightTimeMs / 1000)
		}
	}
}

// observeDuplexTurn records what only a duplex turn has, under its dialect.
func (c *Collectors) observeDuplexTurn(r FinalizedRequest, reason string, ex prometheus.Labels) {
	d := NormalizeDialect(r.Dialect)
	c.duplexTurns.WithLabelValues(reason, d).Inc()
	if v := r.E2E.InputEndToFirstAudioMs; v > 0 {
		observe(c.inputToAudio.WithLabelValues(d), v/1000, ex)
	}
	if v := r.E2E.InputEndToFirstTextMs; v > 0 {
		observe(c.inputToText.WithLabelValues(d), v/1000, ex)
	}
	if v := r.E2E.AudioDeliveredS; v > 0 {
		c.audioDelivered.WithLabelValues(d).Observe(v)
		c.audioUnderrun.WithLabelValues(d).Observe(r.E2E.AudioUnderrunS) // zero included: the share of clean turns
	}
	if v := r.E2E.AudioPlayedS; v > 0 {
		c.audioPlayed.WithLabelValues(d).Observe(v)
	}
}

// InitStages creates the per-stage and per-edge series of a numStages pipeline (stage i, edge
// i→i+1) at zero, so that those families are exported from start-up too.
func (c *Collectors) InitStages(numStages int) {
	if c == nil {
		return
	}
	c.load.mu.Lock()
	c.load.stages = numStages
	c.load.mu.Unlock()
	for i := range numStages {
		st := strconv.Itoa(i)
		for _, kind := range []string{kindChat, kindDuplex} {
			c.audioTTFP.WithLabelValues(kind, st)
		}
		c.audioDuration.WithLabelValues(st)
		c.audioRTF.WithLabelValues(st)
		if i+1 < numStages {
			to := strconv.Itoa(i + 1)
			for _, h := range []*prometheus.HistogramVec{c.transferSize, c.transferTx, c.transferBlocked, c.transferRxDecode, c.transferInFlight} {
				h.WithLabelValues(st, to)
			}
		}
	}
}

// StageLoad is one stage's admitted work at a moment (what the queue / running gauges show).
type StageLoad struct {
	Stage            int
	Running, Waiting int
}

// loadCollector exports omniserve_stage_running_requests and omniserve_stage_waiting_requests
// from a function read at scrape time, so the gauges are never stale.
type loadCollector struct {
	running, waiting *prometheus.Desc
	mu               sync.Mutex
	fn               func() []StageLoad
	stages           int
}

func newLoadCollector() *loadCollector {
	return &loadCollector{
		running: prometheus.NewDesc("omniserve_stage_running_requests",
			"Requests and duplex responses holding a worker of the stage now.", []string{"stage"}, nil),
		waiting: prometheus.NewDesc("omniserve_stage_waiting_requests",
			"Requests and duplex responses admitted to the stage and waiting for a worker.", []string{"stage"}, nil),
	}
}

func (l *loadCollector) Describe(ch chan<- *prometheus.Desc) {
	ch <- l.running
	ch <- l.waiting
}

func (l *loadCollector) Collect(ch chan<- prometheus.Metric) {
	l.mu.Lock()
	fn, n := l.fn, l.stages
	l.mu.Unlock()
	loads := map[int]StageLoad{}
	for i := range n {
		loads[i] = StageLoad{Stage: i}
	}
	if fn != nil {
		for _, s := range fn() {
			loads[s.Stage] = s
		}
	}
	for _, s := range loads {
		st := strconv.Itoa(s.Stage)
		ch <- prometheus.MustNewConstMetric(l.running, prometheus.GaugeValue, float64(s.Running), st)
		ch <- prometheus.MustNewConstMetric(l.waiting, prometheus.GaugeValue, float64(s.Waiting), st)
	}
}

// EngineKV is the local engine's shared KV cache as the collectors export it.
type EngineKV struct {
	Cells, CellsHeld, CellsReserved, Sequences int
	FullEvents                                 int64
	// DecodeErrors counts decode steps that failed for another reason than a full cache.
	DecodeErrors int64
	// RefusedSlots and RefusedKV count sequence opens refused for want of a slot or of room
	// to reserve a window in the cache.
	RefusedSlots, RefusedKV int64
}

// kvCollector exports the engine's KV cache figures from a function read at scrape time.
type kvCollector struct {
	cells, held, reserved, seqs, full, decodeErrs, refused *prometheus.Desc
	mu                                                     sync.Mutex
	fn                                                     func() EngineKV
}

func newKVCollector() *kvCollector {
	return &kvCollector{
		cells: prometheus.NewDesc("omniserve_engine_kv_cells",
			"Cells of the engine's shared KV cache (engine.context_size).", nil, nil),
		held: prometheus.NewDesc("omniserve_engine_kv_cells_held",
			"KV cells the open sequences hold now.", nil, nil),
		reserved: prometheus.NewDesc("omniserve_engine_kv_cells_reserved",
			"KV cells reserved by the open sequences (each reserves its whole window when it opens).", nil, nil),
		seqs: prometheus.NewDesc("omniserve_engine_sequences",
			"Open engine sequences (one per realtime session and per chat request generating).", nil, nil),
		full: prometheus.NewDesc("omniserve_engine_kv_cache_full_total",
			"Decode steps that found the shared KV cache full (the longest sequence was truncated, or failed under engine overflow \"error\"); a planned cache keeps this at 0.", nil, nil),
		decodeErrs: prometheus.NewDesc("omniserve_engine_decode_errors_total",
			"Decode steps llama.cpp failed for another reason than a full KV cache (each failed the step's sequences with cause decode_failed).", nil, nil),
		refused: prometheus.NewDesc("omniserve_engine_sequences_refused_total",
			"Engine sequence opens refused up front, by reason: slots (engine.max_sequences live) or kv (no room to reserve a window in the cache).", []string{"reason"}, nil),
	}
}

func (k *kvCollector) Describe(ch chan<- *prometheus.Desc) {
	ch <- k.cells
	ch <- k.held
	ch <- k.reserved
	ch <- k.seqs
	ch <- k.full
	ch <- k.decodeErrs
	ch <- k.refused
}

func (k *kvCollector) Collect(ch chan<- prometheus.Metric) {
	k.mu.Lock()
	fn := k.fn
	k.mu.Unlock()
	var s EngineKV
	if fn != nil {
		s = fn()
	}
	ch <- prometheus.MustNewConstMetric(k.cells, prometheus.GaugeValue, float64(s.Cells))
	ch <- prometheus.MustNewConstMetric(k.held, prometheus.GaugeValue, float64(s.CellsHeld))
	ch <- prometheus.MustNewConstMetric(k.seqs, prometheus.GaugeValue, float64(s.Sequences))
	ch <- prometheus.MustNewConstMetric(k.reserved, prometheus.GaugeValue, float64(s.CellsReserved))
	ch <- prometheus.MustNewConstMetric(k.full, prometheus.CounterValue, float64(s.FullEvents))
	ch <- prometheus.MustNewConstMetric(k.decodeErrs, prometheus.CounterValue, float64(s.DecodeErrors))
	ch <- prometheus.MustNewConstMetric(k.refused, prometheus.CounterValue, float64(s.RefusedSlots), "slots")
	ch <- prometheus.MustNewConstMetric(k.refused, prometheus.CounterValue, float64(s.RefusedKV), "kv")
}

// SetEngineKV makes the engine KV families read fn at every scrape (a server without a local
// engine exports zeros).
func (c *Collectors) SetEngineKV(fn func() EngineKV) {
	if c == nil {
		return
	}
	c.kv.mu.Lock()
	c.kv.fn = fn
	c.kv.mu.Unlock()
}

// SetStageLoad makes the queue / running gauges read fn at every scrape.
func (c *Collectors) SetStageLoad(fn func() []StageLoad) {
	if c == nil {
		return
	}
	c.load.mu.Lock()
	c.load.fn = fn
	c.load.mu.Unlock()
}
