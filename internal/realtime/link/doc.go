// Package link is the connection core every realtime transport shares: the WebSocket
// (/v1/realtime), a call's sideband WebSocket and a WebRTC call's data channel, and the next
// transport. Frames come in and go to a handler in wire order; events go out through one bounded
// queue (Queue: a count and a byte budget, a reserve for the events that end a response, the
// epoch fence DropStale) and one writer, which stamps each event (event_id, server_event_seq)
// as it takes it (Stream), keeping the recent frames for a resume (Journal); a client that stops
// reading is found (a write blocked past the write timeout, an overflow, an event older than
// the stall timeout) and the connection is closed along one path with its reason (Close): the
// close frame waits behind the write in flight (SlowCloseWait), so a client that reads again
// learns why.
//
// A transport supplies only what differs (Transport: read one frame, write one frame, close).
// The outbound element is the core's own Event, not the session's: producers convert into it
// (internal/realtime/session_sink.go is the one adapter from the session).
//
//	frames ─► Transport.ReadFrame ─► reader ─► Handler (decode, Submit to the session) ─► error replies ─┐
//	session ─► Stream.Send ─► Queue (bounded, epoch fence) ─► writer (Stream numbers) ─► Transport.WriteFrame
//	                                                  └─ Serve watches: overflow, stall, lost ─► Close(code, reason)
//
// # Goroutines per connection
//
// Two, both started, cancelled and waited for by the Conn; the Conn itself is owned by the
// transport's goroutine that created it (for a WebSocket, the HTTP handler's goroutine of the
// upgrade; for a call, the call's run goroutine):
//
//   - the reader, started by New: it reads frames and holds each until First (a handshake) or
//     Start takes them, then dispatches them in wire order on itself (the handler's
//     backpressure holds back the reading). It ends when a read fails, the handler ends the
//     dispatch, or Close cancels the connection's context (after closing the transport, which
//     ends a pending read).
//   - the writer, started by Start: it writes the pre frames (a resume's replay), then what the
//     stream numbers from the queue. It ends when the queue is closed and drained or failed, a
//     write fails, the session moves to another connection, or Close cancels the context.
//
// Close cancels both and waits for both. The owner's goroutine runs the watch (Serve: the
// stall ticker, the queue's failure, the losses the reader and writer report) itself, and then
// Close; nothing else runs per connection. No timer outlives the call that made it.
package link
