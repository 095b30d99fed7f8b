// Package metrics holds omniserve's --log-stats statistics: the per-stage, per-transfer and
// end-to-end records, the request aggregator, the per-turn aggregator of duplex sessions, the
// PrettyTable-compatible table renderer with its [OmniTiming] line, and the Prometheus
// collectors. It follows vllm-omni's `vllm_omni/metrics` (spec §4, §5) with the corrections of
// spec §10, and imports no other omniserve package.
//
// Clocks: every timestamp is wall-clock unix seconds as float64 (Now), so that engine submit
// times and receipt times compare.
package metrics
