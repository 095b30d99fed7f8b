// Package requestclient is the stage pipeline's client: it sits between the session / HTTP
// layers and internal/stage, and owns only what it adds to the pipeline.
//
//   - Chat requests (chat*.go): a chat completion's request id, its event stream and its turn.
//   - Duplex streams (duplex*.go): the long-lived stage-0 stream of one session epoch
//     (Client.OpenDuplex returns its DuplexRequest). Inputs (AppendAudio, Commit, AppendText,
//     DiscardAudio, Respond, ...) run in wire order through one op FIFO bounded by bytes and by
//     time. Queuing never blocks: an append returns at once (a refusal is
//     ErrInputBackpressure), and a barrier (Commit, Respond, ...) waits only for its own op,
//     which the session runs off its actor. The pipeline's outputs reach the session's callback
//     in the order the stages produced them, as the duplex.Output values the stages made.
//   - The turn registry (duplex_turns.go, which reads a turn's life top to bottom): every stage
//     output, stage-metrics message and transfer is ingested into the turn
//     (metrics.TurnMetrics) it belongs to, by the turn's id alone; a closed turn makes one
//     record (tables, structured record, Prometheus, traces). It exists only with LogStats on or
//     Prometheus collectors set.
//
// # One turn handle
//
// A response's turn is driven through one value, Turn (turn.go):
//
//	t := d.BeginTurn(id, responseID, turnID, arrival) // attach the response; the handle
//	n, err := d.Respond(ctx, t, spec)                 // start it; n: the engine turn of its outputs
//	t.Bind(n)                                         // the owner binds it (or the speak decision's turn)
//	closed, settle := d.EndTurn(t, outcome)           // close it once, with its TurnOutcome
//
// The owner (the session's actor) keeps the handle on its response, with the wire ids its dialect
// needs; nothing else names the turn. EndTurn takes the whole outcome in one call: the reason,
// the delivery figures, the tool calls, and whether the response never started.
//
// # Vocabulary
//
// The duplex vocabulary (options, turn detection, outputs, tools and tool choice) is
// internal/duplex's, passed through as it is: this package neither copies it into types of its
// own nor re-exports it. Of the pipeline's and the engine's names it passes on only what callers
// build chat requests with (the aliases ChatRequest, ChatMessage, Sampling and TokenLogprob, the
// sampling limits and the grammar helpers), one definition each.
//
// # Goroutines
//
// One per DuplexRequest: runOps, which runs the op FIFO; OpenDuplex starts it, Close cancels it
// and waits for it. The Sink methods (OnOutput, OnStageMetrics, OnTransfer, OnTurnEnd) run on
// the pipeline's dispatcher goroutine of the stream and hand outputs on without blocking.
package requestclient
