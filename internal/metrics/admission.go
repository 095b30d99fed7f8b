package metrics

import "github.com/prometheus/client_golang/prometheus"

// RegisterAdmission registers the realtime admission gauges on reg, with a constant model_name
// label as NewCollectors does: held reads the admission slots held now (every session kind:
// WebSocket, WebRTC calls, transcription sessions, and sessions detached for a resume), limit is
// their number. omniserve_duplex_active_sessions counts engine streams only, so it reads 0 while
// transcription sessions or WebRTC calls still opening hold every slot; an autoscaler reads
// these instead.
func RegisterAdmission(reg prometheus.Registerer, model string, held func() int, limit int) {
	reg = prometheus.WrapRegistererWith(prometheus.Labels{"model_name": model}, reg)
	reg.MustRegister(
		prometheus.NewGaugeFunc(prometheus.GaugeOpts{Namespace: "omniserve", Subsystem: "realtime", Name: "admitted_sessions",
			Help: "Realtime admission slots held now, by every session kind (WebSocket, WebRTC, transcription, detached awaiting a resume)."},
			func() float64 { return float64(held()) }),
		prometheus.NewGaugeFunc(prometheus.GaugeOpts{Namespace: "omniserve", Subsystem: "realtime", Name: "session_slots",
			Help: "Realtime admission slots in all (server.max_sessions, bounded by the engine's sequences)."},
			func() float64 { return float64(limit) }),
	)
}
