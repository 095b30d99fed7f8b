package metrics

import (
	"strconv"

	"github.com/prometheus/client_golang/prometheus"
)

// FinalizedRequest is what a finalized chat request or duplex turn reports to Prometheus.
type FinalizedRequest struct {
	Duplex         bool // a duplex assistant turn, not a chat completion
	FinishedReason string
	E2E            RequestE2EStats
	Stages         []StageRequestStats // one row per stage (collapsed for turns)
	Transfers      []TransferEdgeStats
	// AudioTTFPSeconds is the time from arrival to the first audio packet; <= 0 when unknown.
	AudioTTFPSeconds float64
	AudioTTFPStage   int
}

// Bucket sets of the reference (spec §5.1).
var (
	secondsBuckets     = []float64{0.05, 0.1, 0.25, 0.5, 1, 2, 5, 10, 20, 30, 60, 120, 300}
	secondsFastBuckets = []float64{0.001, 0.005, 0.01, 0.025, 0.05, 0.1, 0.25, 0.5, 1, 2.5, 5, 10, 60}
	rtfBuckets         = []float64{0.1, 0.25, 0.5, 0.75, 0.9, 1.0, 1.25, 1.5, 2, 5, 10}
	bytesBuckets       = []float64{1 << 10, 4 << 10, 16 << 10, 64 << 10, 256 << 10, 1 << 20, 4 << 20, 16 << 20, 64 << 20, 256 << 20}
)

// defaultAudioSampleRate is used to turn frames into seconds when a snapshot has no rate.
const defaultAudioSampleRate = 24000

// Collectors are the omniserve_* Prometheus families fed at request and turn finalize (spec §5,
// RFC #6614 phase 2). Labels are bounded: model_name (constant), finished_reason (the normalized
// set), stage and from_stage/to_stage (pipeline indices); never a session, request or response
// id. A nil *Collectors does nothing.
type Collectors struct {
	requestSuccess   *prometheus.CounterVec
	e2eLatency       prometheus.Histogram
	promptTokens     prometheus.Counter
	generationTokens prometheus.Counter
	duplexTurns      *prometheus.CounterVec
	audioTTFP        *prometheus.HistogramVec
	audioDuration    *prometheus.HistogramVec
	audioRTF         *prometheus.HistogramVec
	transferSize     *prometheus.HistogramVec
	transferTx       *prometheus.HistogramVec
	transferRxDecode *prometheus.HistogramVec
	transferInFlight *prometheus.HistogramVec
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
	c := &Collectors{
		requestSuccess: prometheus.NewCounterVec(prometheus.CounterOpts{
			Namespace: "omniserve", Subsystem: "request", Name: "success_total",
			Help: "Finalized requests and duplex turns by finished_reason.",
		}, []string{"finished_reason"}),
		e2eLatency: prometheus.NewHistogram(prometheus.HistogramOpts{
			Namespace: "omniserve", Subsystem: "request", Name: "e2e_latency_seconds",
			Help: "End-to-end latency of a request or duplex turn, from arrival to finalize.", Buckets: secondsBuckets,
		}),
		promptTokens: prometheus.NewCounter(prometheus.CounterOpts{
			Namespace: "omniserve", Subsystem: "request", Name: "prompt_tokens_total",
			Help: "Stage-0 input tokens of finalized requests and turns.",
		}),
		generationTokens: prometheus.NewCounter(prometheus.CounterOpts{
			Namespace: "omniserve", Subsystem: "request", Name: "generation_tokens_total",
			Help: "Output tokens of all stages of finalized requests and turns.",
		}),
		duplexTurns: prometheus.NewCounterVec(prometheus.CounterOpts{
			Namespace: "omniserve", Subsystem: "duplex", Name: "turns_total",
			Help: "Finalized duplex assistant turns by finished_reason.",
		}, []string{"finished_reason"}),
		audioTTFP: hist("audio", "time_to_first_packet_seconds",
			"Time from request or turn arrival to the first audio packet.", secondsBuckets, "stage"),
		audioDuration: hist("audio", "duration_seconds",
			"Duration of the audio generated for a request or turn.", secondsBuckets, "stage"),
		audioRTF: hist("audio", "real_time_factor",
			"Audio generation time divided by the generated audio duration.", rtfBuckets, "stage"),
		transferSize: hist("transfer", "size_bytes",
			"Bytes moved over a stage connector per request.", bytesBuckets, "from_stage", "to_stage"),
		transferTx: hist("transfer", "tx_seconds",
			"Connector send time per request.", secondsFastBuckets, "from_stage", "to_stage"),
		transferRxDecode: hist("transfer", "rx_decode_seconds",
			"Connector receive decode time per request.", secondsFastBuckets, "from_stage", "to_stage"),
		transferInFlight: hist("transfer", "in_flight_seconds",
			"Connector in-flight time per request.", secondsFastBuckets, "from_stage", "to_stage"),
	}
	reg.MustRegister(c.requestSuccess, c.e2eLatency, c.promptTokens, c.generationTokens, c.duplexTurns,
		c.audioTTFP, c.audioDuration, c.audioRTF, c.transferSize, c.transferTx, c.transferRxDecode,
		c.transferInFlight)
	return c
}

// promReason bounds the finished_reason label: the duplex reasons plus chat's "length".
func promReason(r string) string {
	if r == "length" {
		return r
	}
	return NormalizeFinishedReason(r)
}

// ObserveFinalized records one finalized chat request or duplex turn. The chat and turn finalize
// paths call it once per request (TurnMetrics.Record, Aggregator.FinalizedRequest).
func (c *Collectors) ObserveFinalized(r FinalizedRequest) {
	if c == nil {
		return
	}
	reason := promReason(r.FinishedReason)
	c.requestSuccess.WithLabelValues(reason).Inc()
	if r.Duplex {
		c.duplexTurns.WithLabelValues(reason).Inc()
	}
	c.e2eLatency.Observe(max(r.E2E.E2ETotalMs, 0) / 1000)
	var prompt, gen int
	for _, s := range r.Stages {
		if s.StageID == 0 {
			prompt += s.NumTokensIn
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
		c.audioTTFP.WithLabelValues(strconv.Itoa(r.AudioTTFPStage)).Observe(r.AudioTTFPSeconds)
	}
	for _, e := range r.Transfers {
		from, to := strconv.Itoa(e.FromStage), strconv.Itoa(e.ToStage)
		if e.SizeBytes > 0 {
			c.transferSize.WithLabelValues(from, to).Observe(float64(e.SizeBytes))
		}
		if e.TxTimeMs > 0 {
			c.transferTx.WithLabelValues(from, to).Observe(e.TxTimeMs / 1000)
		}
		if e.RxDecodeTimeMs > 0 {
			c.transferRxDecode.WithLabelValues(from, to).Observe(e.RxDecodeTimeMs / 1000)
		}
		if e.InFlightTimeMs > 0 {
			c.transferInFlight.WithLabelValues(from, to).Observe(e.InFlightTimeMs / 1000)
		}
	}
}
