// Package metrics holds omniserve's --log-stats statistics: the per-stage, per-transfer and
// end-to-end records, the turn (TurnMetrics) that collects them for one duplex response or one
// chat completion, the PrettyTable-compatible table renderer with its [OmniTiming] line, and the
// Prometheus collectors.
//
// A turn closes once (Finalize) and yields one immutable record, FinalizedRequest
// (TurnMetrics.Record): the --log-stats tables and their structured form are a function of it
// (tableSummary, logRecords), Prometheus observes it (Collectors.ObserveFinalized) and tracing
// exports it. Nothing aggregates across requests: every turn renders its own tables.
//
// It follows vllm-omni's `vllm_omni/metrics` (names, byte layout, Prometheus buckets) so its logs
// read like vllm-omni's, except where vllm-omni was wrong: a turn's arrival
// stamp survives the previous turn's finalize, nothing is collected with --log-stats off, snapshots
// before a turn merge per stage instead of piling up, server-VAD barge-in and engine errors keep
// their own finished reasons, serving_time_to_first_output_ms is a real duration, and every stats
// field has a merge rule. It imports no other omniserve package.
//
// Clocks: every timestamp is wall-clock unix seconds as float64 (Now), so that engine submit
// times and receipt times compare.
package metrics
