// Package stage runs the model pipeline: the stage graph of configs/*.yaml (by default the
// thinker, stage 0, on the local engine, and the talker, stage 1, on the TTS), local or remote
// per stage, connected by bounded connectors whose transfers are measured.
//
// Two kinds of work enter it. SubmitChat runs one chat request through the stages and reports
// everything it produces to a Sink (outputs in order, per-stage metrics, connector transfers);
// a prompt that cannot fit the sequence context is refused up front with a *ContextLengthError
// (errors.Is ErrContextLength). OpenDuplex opens a DuplexStream: the long-lived stage-0 stream
// of one realtime session, which owns its VAD, its ASR feed and its KV sequence, decides
// listen/speak for auto-response turns, and runs each response through the later stages.
//
// The duplex vocabulary is internal/duplex's, used here as it is: a stream opens with the
// session's duplex.Options (DuplexOptions adds the request id, the sampling and the resolved
// VAD), an OutputMessage carries a duplex.Output (and the statistics' envelope around it), and
// tools, tool choice and per-response options are duplex's types.
//
// Calls to a Sink for one request are serialized and in order, and a Sink must not block for
// long: internal/requestclient implements it and folds the outputs and metrics into the turn
// record. Statistics use wall-clock unix seconds (metrics.Now); timeouts use monotonic time.
package stage
