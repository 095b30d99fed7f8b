package metrics

import (
	"slices"

	"github.com/prometheus/client_golang/prometheus"
)

// InvalidEvents counts what realtime clients get wrong: every invalid event (a frame that is
// no valid event, a command the session refused, an invalid session.event_ack) by dialect and
// reason (its error code), and every session closed for sending more than its budget
// (internal/realtime's floodGuard). A client that loops on errors, or floods, shows here.
type InvalidEvents struct {
	events *prometheus.CounterVec
	closes *prometheus.CounterVec
}

// The realtime dialects (the wire protocols a session speaks): the dialect label's values,
// present from start-up at 0 in every family that has the label.
const (
	DialectOpenAI     = "openai"      // OpenAI Realtime (GA and beta), the calls and transcription sessions
	DialectVllmDuplex = "vllm_duplex" // vllm-omni's native duplex (?duplex=1, /v1/duplex)
	DialectGPTLive    = "live"        // OpenAI GPT-Live (/v1/live/sessions)
)

// Dialects is every value of the dialect label.
var Dialects = []string{DialectOpenAI, DialectVllmDuplex, DialectGPTLive}

// NormalizeDialect keeps the label bounded: a name outside Dialects (or none) counts as
// OpenAI's, the dialect of every session that names none.
func NormalizeDialect(d string) string {
	if slices.Contains(Dialects, d) {
		return d
	}
	return DialectOpenAI
}

// NewInvalidEvents registers the two families on reg with a constant model_name label, as
// NewCollectors does.
func NewInvalidEvents(reg prometheus.Registerer, model string) *InvalidEvents {
	reg = prometheus.WrapRegistererWith(prometheus.Labels{"model_name": model}, reg)
	m := &InvalidEvents{
		events: prometheus.NewCounterVec(prometheus.CounterOpts{Namespace: "omniserve", Subsystem: "realtime", Name: "invalid_events_total",
			Help: "Invalid realtime client events (answered with an error event, or, for session.event_ack, never answered), by dialect and reason (the error code)."},
			[]string{"dialect", "reason"}),
		closes: prometheus.NewCounterVec(prometheus.CounterOpts{Namespace: "omniserve", Subsystem: "realtime", Name: "invalid_event_closes_total",
			Help: "Realtime sessions closed (1008, session.closed reason too_many_invalid_events) because their client sent invalid events faster than its budget, by dialect."},
			[]string{"dialect"}),
	}
	reg.MustRegister(m.events, m.closes)
	for _, d := range Dialects {
		m.closes.WithLabelValues(d)
	}
	return m
}

// CountInvalidEvent counts one invalid event.
func (m *InvalidEvents) CountInvalidEvent(dialect, reason string) {
	if m != nil {
		m.events.WithLabelValues(dialect, reason).Inc()
	}
}

// CountInvalidEventClose counts one session closed for too many invalid events.
func (m *InvalidEvents) CountInvalidEventClose(dialect string) {
	if m != nil {
		m.closes.WithLabelValues(dialect).Inc()
	}
}
