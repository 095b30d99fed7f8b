// Package realtime is the WebSocket endpoint /v1/realtime, the WebRTC calls
// (/v1/realtime/calls) and their sidebands: it hands the client's frames to the session's
// dialect (dialect.go, chosen at the upgrade: internal/realtime/openai, OpenAI Realtime; or
// internal/realtime/vllm, vllm-omni's native duplex dialect on ?duplex=1 and /v1/duplex; or
// internal/realtime/live, GPT-Live on /v1/live/sessions, whose own answers (its Reply) go out at
// once and whose errors have Live's shape), gives
// the commands to the session, and sends refusals as OpenAI-style error events, within the
// session's budget of invalid events (flood.go). Acknowledgements (session.event_ack) stay in the
// connection: they trim the resume journal and are never answered. Every
// transport runs over the one connection core, internal/realtime/link (the reader, the writer,
// the bounded outbound queue with the stalled-reader rule, the event stamping and resume
// journal, the close path); each supplies only its link.Transport (websocket.go, and the data
// channel's dcTransport in call.go). A call's media (RTP, Opus, the pacer) is
// internal/realtime/media.
//
// The session's events carry wire-neutral effects; they reach the core through one adapter,
// session_sink.go: the only place a session.Event becomes the core's link.Event, through the
// session's dialect (Encode), on the session's goroutine and in its order.
//
//	client ─frames─► link.Conn reader ─► Handler: dialect.Decode ─► Command ─► session.Submit
//	session ─Event{Effect}─► sessionSink: dialect.Encode ─link.Event─► link.Stream/Queue ─► link.Conn writer ─frames─► client
//	               (a call: callOut ─► audio deltas to media.Player (RTP), the rest to the data channel and sidebands)
//
// # Goroutines
//
// Each has one owner that starts it, ends it and waits for it:
//
//   - A WebSocket session: the HTTP handler's goroutine (ServeHTTP, or serveResume) owns the
//     connection and the session. It starts the session's actor (runSession), runs the core's
//     watch itself (link.Conn.Serve) and closes the core (its reader and writer: two
//     goroutines, link's doc), then waits for the actor. Per session: the handler's goroutine,
//     the actor, the core's reader and writer (before: also a dispatcher and a queue watcher).
//   - A sideband: the HTTP handler's goroutine (Calls.Sideband) owns its core, as above, with no
//     session of its own; Calls.Close waits for it.
//   - A call: Calls.Create starts the call's run goroutine, which Calls.Close waits for. run
//     owns everything else: the session's actor, the core's reader and writer over the data
//     channel, the player (media.Player.Run), and, through the peer connection's callbacks,
//     the RTP receiver (media.Receive) and two RTCP readers, which end when run closes the
//     peer connection; run waits for them all (call.media).
//
// Timers: the core's (link), the handshakes' (link.Conn.First: a resume's, and the first frame
// of a client that speaks first, handshake.go), a call's connect timeout (an AfterFunc that ends
// the call), a call's hang-up waits (the data channel's close, the linger) and the answer's ICE
// gathering bound. The invalid-event budget (flood.go) has no timer: it refills when asked.
package realtime
