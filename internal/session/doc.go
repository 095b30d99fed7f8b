// Package session implements the realtime Session actor: the per-connection turn state
// machine, epoch fence, begin/end of responses with their metrics hooks, overlap (barge-in)
// policy, output pacing, timeouts, resume, and admission of sessions (Manager). It is
// transport- and dialect-independent: the connection (internal/realtime) hands it Commands,
// which its dialect translator decoded from the client's frames, and the session answers with
// Events through a Sink. An Event carries an Effect: what happened in the conversation
// (effects*.go: a response started or done, audio out, an item added, speech started, an
// error with its code and param, the session closing...), named for what it is, never for how a
// dialect spells it, with the epoch and model flag the connection's epoch fence needs.
// Conversation items go out as the session's own Item. The dialect's translator
// (internal/realtime/openai for OpenAI Realtime, GA and beta) turns each effect into its wire
// events; a new dialect is a new translator and changes no file here
// (internal/realtime/openai/toy_dialect_test.go drives a session in a dialect of its own).
//
//	client frame ─▶ dialect.Decode ─▶ Command ─▶ Session.Submit ─▶ inbox ─▶ actor (Run)
//	                                                                          │
//	client frame ◀─ protocol.Encode ◀─ dialect.Encode ◀─ Sink.Send(Event{Effect}) ◀┘
//
// The configuration goes out the same way: settings_effects.go's SessionView is the resolved
// session (session.created / .updated / .resumed and a client secret's preview carry it), and
// the translator spells it (internal/realtime/openai/session.go). No file here imports
// internal/protocol.
//
// # Names of the duplex layers
//
// One realtime conversation is one object per layer, each named for its layer: Session here
// (the wire session: its actor, items, responses, pacing), requestclient.DuplexRequest (the
// session's request on the pipeline: its input queue, fence and turn statistics) and
// stage.DuplexStream (stage 0's long-lived stream: VAD, ASR, the KV sequence).
//
// # Core and shell
//
// The session is a conversation core inside a thin actor shell. The core is the sub-states
// below: plain structs held as named fields of the Session (s.responses, s.conv,
// s.inputAudio...), never embedded, so that the Session reaches only its own fields and
// methods. Their decisions are methods and functions that take the sub-state and one typed
// input (an engine output, a job's result, a client command, a timer that fired) and return
// the new state and the effects as values: no I/O, no goroutine, no clock read (the time is
// passed in). Each is table-tested without a Session (lifecycle_test.go, responses_core_test.go,
// <file>_test.go).
//
// The effects are actions (plan.go), of three kinds:
//
//   - the client's events: emit, errorOut, audioOut (a paced frame and its echo reference),
//     dropStale;
//   - the engine's calls as values (engineCall: beginTurn, endTurn with its outcome, signal,
//     markArrival, markInputEnd, streamAudio, forwardAhead, bargedIn, markCleared), each made
//     through engineLink and returning what follows from the engine's answer (a settle job, an
//     error); the jobs to queue (queueJob, with what a full queue does instead); the timers to
//     arm or stop (armPace, timerCall: the semantic pause, the idle follow-up); opening the
//     stream (openEngine, openAhead);
//   - the core's next input (input: endActive, responseDone, nextEpoch, settled, cancelActive,
//     failActive, paceOutput, commitInput, keepAudio, turnEnd...), a step decided when the
//     shell reaches it, because it must see the state the actions before it left (the MCP calls
//     a cancelled response still ran, its item settled, the response a barge-in cancelled).
//
// One Session method runs them in order (Session.run), and one is the core's step for an input
// (Session.decide, with decideInput for the input path): it calls the decision with the
// sub-states, the epoch and the clock's reading, and returns its actions. For example:
//
//	response.cancel ─▶ run(cancelActive) ─▶ responses.cancel(now, eng, turn)
//	    ─▶ [dropStale, emit(cleared), endActive, responseDone, nextEpoch, queueJob(heard text)]
//	    ─▶ run: endActive ─▶ responses.ended ─▶ [endTurn{outcome}] ─▶ engineLink: EndTurn
//	input_audio_buffer.append ─▶ run(appendAudio) ─▶ inputAudio.append(c, hearing)
//	    ─▶ [emit(speech_started), stopIdle, emit(barge_in), cancelActive, bargedIn, keepAudio]
//	    ─▶ run: keepAudio ─▶ inputAudio.keep ─▶ [openAhead, forwardAhead, pauseEnd]
//	engine output ─▶ responses.route ─▶ outputPlan{route, handoff, begin} ─▶ Session.routeOutput
//
// The shell (Session, session.go) is the actor: its Run goroutine owns every piece of state,
// so none of it has a lock (the MCP network work is the one part on goroutines of its own,
// which toolState starts and Run cancels and waits for). It owns the loop (next: one select over
// every channel; the connection's end reaches it as a Stop), the bounded queues, the clock
// (ManagerConfig.Now, WallClock), the timers (sessionTimers, idleFollowUp, semState's pause
// timer, the resume grace), the engine stream (engineLink, engine_link.go: opening, forwarding
// ahead, discarding, the engine calls, and engineObserver for its failures) and the engine jobs
// (jobs.go: the actor never waits on the engine), and it runs the effects: send, with the epoch
// fence and the slow-client rule. The two seams that send themselves (semState, transcriber) do
// it through a narrow send func the session gives them, and reach the rest of it through small
// fields and arguments, never through the Session.
//
// The sub-states, one file each:
//
//   - settings.go (settings): the configuration. Config and Options, the dialect, the model
//     name, the fixed voice, and session.update's own checks (settings.next; nextConfig adds
//     the server's); config.go has Config and ConfigPatch.Apply, the field-by-field validation.
//   - input.go, input_path.go (inputAudio): the input audio up to the engine. Decoding and
//     noise reduction onto the input clock (takeAppend), the echo canceller, the overlap VAD
//     with the timing of its onsets and the edges to announce (listen, hear, resetVAD), the
//     turn's t0 (speechArrival), the uncommitted buffer and what of it may still be forwarded
//     (buffer, takeBuffer, commitRefusal). input_path.go holds the decisions of one append, in
//     the order the audio takes: append → takeAppend → (with turn_detection) hearAppend → barge
//     → with auto_response the engine append (streamAudio), else keep: buffer, openAhead,
//     forwardAhead and the end of a turn (turnEnd, pauseEnd); and input_audio_buffer.clear.
//   - semvad.go, semvad_duplex.go (semState): semantic_vad's pauses: when one begins, the
//     end-of-turn estimate on a goroutine of its own (ask, answer), the decision (decide) and what
//     it does (end, timedOut, answered: speech_stopped with end_of_turn, the turn's input end, the
//     decision counted; the session commits the turn, vadResponds), and the engine's own
//     decision on auto-response (engineEnded).
//   - jobs.go (jobQueue, outputQueue): the engine jobs in wire order with their results, and the
//     engine's outputs on their way to the actor.
//   - conversation.go (conversation): the conversation's items, lookups by item and call id,
//     insertion, removal (deleteItem), retrieval (retrieveItem), truncation and the history
//     budget; item.item() is an item as the client sees it (Item, effects_item.go).
//     truncation.go: session.truncation (applyTruncation) and the items of the turns the
//     engine dropped from its context (conversation.truncated, each item tagged with its turn).
//   - responses.go, responses_core.go, lifecycle.go (responses, response, playback, replyText):
//     the active response, the turn state and number, the engine turns that are over, the
//     input waiting for an answer, the cached usage; a response's ids, its text (replyText), its
//     audio frames, pacing and what the user heard of it (playback). The decisions: where an
//     engine output goes (route), a job's late result (fenceLate), the response object (info),
//     the started and done sequences (startedEvents, doneEvents), a text output, truncation and
//     playback.ack, the refusals of a cancel or a second response; and the lifecycle
//     (lifecycle.go): begin, pace, cancel, fail, ended, completed, followUpPlan, replyJob.
//     playback_finished.go: the responses that ended, which a playback.ack may still name
//     (finishedAck, with ack_only's cut); commit_outcome.go: a commit without audio of its own
//     (emptyCommit: audio the engine already took, or a silence commit) and the listen it may
//     owe until the engine's turn is over (settleListen); overlap_commit.go: a commit during a
//     response in a dialect with overlap tiers (commitTier: an acknowledgement, ackCommit, or a
//     turn answered after the response), from the speech over it (inputAudio.overlapSpeechMs).
//   - toolstate.go, tools.go, mcp.go, mcp_call.go (toolState, mcpState, mcpCall, mcpResp): the
//     tools' runtime state and logic. The tools of a response (sessionTools, resolveTools,
//     followUpOptions), MCP servers with the goroutines that list and call them (list, start,
//     takeCall; opened and closed by Run), a call's outcome and what follows it
//     (mcpResp.afterCall), what the engine was last given, and the client's answered function
//     calls (answeredCalls). Unlike the others it also turns the model's calls and the client's
//     answers into items, events and engine jobs (emitMCPCall, emitFunctionCall, handleResult,
//     createItem, createFunctionOutput, answerApproval, sync), through the actor's functions it
//     is given (toolIO), never the Session; where a response must start, it returns a followUp
//     the actor starts (startFollowUp).
//   - resume.go (attachment): the connection the session is attached to, whether it is
//     detached and since when, the resume grace, the rotating resume token, and the channels
//     that bring the actor a lost connection and a resume attempt.
//   - transcripts.go (transcripts): a transcription session's live deltas and the utterance
//     ends the engine's outputs have not reached yet.
//   - transcription.go (transcriber, over transcripts): input transcription's events (deltas,
//     completed, failed), a transcription session's refusals and its item records (Prometheus,
//     --log-stats), and the stream's logprobs setting (syncLogprobs).
//
// The shell's own files run those decisions: plan.go (the actions and Session.run),
// lifecycle.go and input_path.go (Session.decide and decideInput, the core's step), turn.go (how
// a turn is born: a commit, response.create or the engine's speak decision, each ending in
// beginResponse), handlers.go (the other client events: session.update, items), idle.go
// (turn_detection.idle_timeout_ms), ahead.go (decode ahead of the commit), response.go (a
// response's outputs), outputs.go (the engine's outputs, routed by responses.route, and job
// results), tools.go, mcp.go and mcp_call.go (function and MCP tools), resume.go, budget.go (the
// inbox's byte budget), usage.go, limits.go. backend.go and pipeline_backend.go bind the
// session to the engine (requestclient); manager.go admits sessions.
//
// Not yet pure (decide and act in one place): the commit (handleCommit, commit,
// commitStreamed: the user item, the transcriber's records and the commit job around
// beginResponse), response.create (handleCreateResponse), beginResponse's own prologue (the idle
// follow-up, the semantic pause and the VAD reset before responses.begin), the engine outputs
// (routeOutput, turnOutput, onResponseOutput) and job results (handleResult), session.update
// with the reopening of a stale stream (engineLink.stale decides), the clear's and unforward's steps (they call the seams that send:
// semState.abandon, transcriber), and the steps that reach toolState (cancelCallsOf, sync,
// emitCallItem), whose MCP and function-call logic sends through toolIO.
//
// # Turns: one id, one owner
//
// The session numbers turns (Session.input) and owns each one. Every input goes to the engine
// with the id of the turn it builds (append, commit, text item, tool result), a response takes
// that id and the next input starts the next one, input_audio_buffer.clear abandons it
// (Engine.ClearTurnInput) and moves on; the engine's own auto-response answers the current id
// and reports it in its speak decision. The engine tags every row, output and end report with the
// id. A response's turn has one handle (requestclient.Turn): Engine.BeginTurn returns it,
// Engine.Respond takes it, and the endActive step ends the turn once with its outcome (Engine.EndTurn:
// the reason, what was delivered and played, and whether the response never started). How a turn is born, served
// and recorded: turn.go (beginResponse), lifecycle.go (responses.ended, endTurn), requestclient/duplex_turns.go
// (routing and the record), metrics/turn.go (the figures); docs/STATS.md "One turn, one id".
//
// # Queues, and why each exists
//
// A session's work passes through four bounded queues. Each has a job the others cannot do;
// merging them would block the actor on the engine or lose an ordering.
//
//   - inbox (realtime reader → actor; 64 events and server.session_inbox_bytes): the actor is
//     single-threaded and applies client events in wire order; the reader waits past the bound,
//     so TCP pushes back on the client.
//   - session jobs (actor → one worker goroutine, runJobs; 16 jobs): commit, respond, item text
//     and history edits wait for the engine (a commit waits for its transcript); the actor hands
//     them to the worker and gets the result back as a message, so barge-in, cancel, pacing, idle
//     and shutdown never wait behind the engine.
//   - input op queue (requestclient.DuplexRequest; 16 MiB of audio and MaxInputStall, 5 s, without
//     progress): the one place where appends and commits keep their order. Appends are
//     fire-and-forget from the actor, a commit follows the appends before it; a full queue answers
//     at once with ErrInputBackpressure instead of blocking the actor.
//   - sequence and ASR jobs (stage.DuplexStream; pipeline.stream_queue, 16): the engine work of
//     the session's one KV sequence runs in order on its own goroutine, and the ASR finishes a
//     commit off the audio path, so decoding never stalls the next append.
//
// # Two VADs, and why
//
// The session VAD (input.go) runs on the actor when an append arrives: the server_vad events
// (speech_started / speech_stopped with their positions) and the barge-in decision must not
// wait behind queued engine work. Barge-in is timed from the append; the overlap rules (240 ms,
// or 150 ms of pitched speech) and the echo gate run here. The stream VAD (stage/duplex_audio.go)
// runs on the audio the engine consumes: it endpoints auto_response turns for the engine's
// listen/speak decisions and gates the ASR feed by speech segments, in the order and at the
// position of the audio the ASR sees, also when the ASR is remote. WebRTC's VAD costs about
// 3.6 µs per 30 ms frame (docs/BENCHMARKS.md), so running it twice costs nothing measurable;
// the settings are kept equal by passing the session's turn detection down as it is
// (duplex.Options.Turn).
//
// # Panics
//
// recover() runs only at the roots of the session's goroutines (the actor loop and the job
// worker): a panic is logged with its stack, counted (ManagerMetrics.CountPanic), and ends the
// session with an error event and reason ReasonInternalError; the open turn is finalized as an
// abort.
package session
