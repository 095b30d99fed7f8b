// Package live is OpenAI's GPT-Live dialect (GET /v1/live/sessions; docs/LIVE.md and
// shared/spec/gpt-live.md): a translator over the realtime connection core and the one duplex
// session, as internal/realtime/openai and internal/realtime/vllm are for theirs.
//
// A Live session is a native duplex session with the engine's auto-response forced on: the
// engine decides when to speak, its VAD ends the user's turns and barge-in cuts the reply to
// what was heard. The Live view of it drops every item and response event and keeps only what
// Live has: the session snapshot (session.started / updated / closed), input and output
// transcript deltas, one paced output audio track, and the acks of appended context, all timed
// on the session's timeline (milliseconds of input audio received).
//
// The translator holds what Live has and the session does not, so there is one per session:
//
//   - the start handshake: nothing is sent before session.start, which is checked strictly
//     (config.go: an unknown key at any depth is refused with its dotted path) and becomes the
//     session's first session.update; the session's session.created is never sent, its answer
//     to that update is session.started; a refused start leaves the socket open for another;
//   - the timeline (timeline.go): every session.input_audio.append advances it by its samples;
//     the acks of instructions / thinking / commentary appends go out once it reaches their
//     end_ms, session.usage.updated every 15 s of it; a muted input is replaced by digital
//     silence of the same length, so the clock keeps running while the model hears nothing;
//   - what the session cannot be asked from the actor's side: commentary to speak waits until
//     the user has stopped and no reply is playing, then asks for a response;
//   - Responses delegation's tasks (tasks.go): each an out-of-band, text-only response of the
//     session, its effects told as response.event (the Responses API's stream), never as the
//     track's; function outputs join the conversation and the task goes on, and its final text
//     is said as commentary.
//
// Decode runs on the connection's reader and Encode on the session's actor; the translator's
// lock orders them. Frames the dialect answers itself (mute acks, session.update's delegation,
// the timeline's acks and usage) come back from Decode as a Reply: its events go to the client
// at once, then its commands to the session.
package live
