// Package stage runs the model pipeline: the stage graph of configs/*.yaml (by default the
// thinker, stage 0, on the local engine, and the talker, stage 1, on the TTS), local or remote
// per stage, connected by bounded connectors whose transfers are measured.
//
// Two kinds of work enter it. SubmitChat runs one chat request through the stages and reports
// everything it produces to a Sink (outputs in order, per-stage metrics, connector transfers);
// a prompt that cannot fit the sequence context is refused up front with a *ContextLengthError
// (errors.Is ErrContextLength). OpenDuplex opens a DuplexStream: the long-lived stage-0 stream
// of one realtime session, which listens, keeps the conversation in its KV sequence, decides
// listen/speak for auto-response turns, and runs each response through the later stages.
//
// The duplex vocabulary is internal/duplex's, used here as it is: a stream opens with the
// session's duplex.Options (DuplexOptions adds the request id, the sampling and the resolved
// VAD), an OutputMessage carries a duplex.Output (and the statistics' envelope around it), and
// tools, tool choice and per-response options are duplex's types.
//
// # The duplex stream, by job
//
// A DuplexStream is a thin owner of two parts and of the goroutines and queues between them:
//
//   - the ear (duplex_ear.go, duplex_semvad.go): the VAD, the ASR feed (gated by the VAD's
//     speech segments on auto-response streams, with a short audio history for the prefix
//     padding), endpointing, semantic_vad's undecided pauses, partial transcripts and the
//     points where a speculation may start. It decides nothing about the conversation.
//   - the conversation (duplex_conversation.go, duplex_tools.go, duplex_history.go,
//     duplex_usage.go, duplex_eot.go, preempt.go): the history, the KV sequence that holds its
//     rendering, the turn ids, the responses and speculations, the tools declaration, and the
//     listen/speak decision at an endpoint.
//
// Every response, plain (Respond), with per-response options (RespondWith, an auto-response
// turn with tools) or speculative (preempt.go), runs one path (duplex_respond.go): take a
// thinker worker, put the prompt into a sequence, generate (respond.go, which feeds the talker),
// and fold the reply into the conversation. The kinds differ only in their prompt and in what
// stays afterwards (reply.fateOf).
//
// The stream's goroutines, per stream:
//
//   - the caller's audio calls (AppendAudio, DiscardAudio, StartCommit, ...) run under the
//     ear's lock, one at a time, in call order (duplex_audio.go): the ear hears the unit and
//     the stream hands its endpoints to the conversation;
//   - the sequence goroutine (DuplexStream.loop) runs the jobs the conversation queues
//     (prefills, responses, end-of-turn scores, SettleInput markers) in FIFO order on the
//     stream's job queue (pipeline.stream_queue), so audio keeps flowing while it speaks; it
//     alone touches the KV sequence;
//   - with a remote ASR, the transcriber (duplex_asr.go) transcribes cut utterances in order
//     from its own queue, so that a slow upstream never holds the audio lock;
//   - the dispatcher (dispatch.go) delivers the stream's events to its Sink, and each response
//     with audio has a talker goroutine (talker.go) behind its connector.
//
// Close stops the dispatcher, closes the conversation, cancels the stream's ctx, and waits for
// the sequence goroutine, the transcriber, any audio call and the dispatcher, in that order.
//
// Calls to a Sink for one request are serialized and in order, and a Sink must not block for
// long: internal/requestclient implements it and folds the outputs and metrics into the turn
// record. Statistics use wall-clock unix seconds (metrics.Now); timeouts use monotonic time.
package stage
