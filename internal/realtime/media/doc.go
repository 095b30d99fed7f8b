// Package media is a WebRTC call's audio: the codec a call negotiates (Opus, or G.711 for a
// client without it), the receiver that decodes the browser's RTP into 24 kHz PCM16 for the
// session (loss concealment, pauses as silence), the player that re-frames the session's audio
// into paced 20 ms RTP frames (talk-spurts, marker bits, the truncation point of a barge-in),
// and the RTP figures of a call (stats interceptor, RTCP reports).
//
// It knows nothing of sessions or connections: the player's own events
// (output_audio_buffer.started, .stopped, .cleared) go out as the connection core's outbound
// events (internal/realtime/link), and the receiver hands its audio to an Input the call
// implements.
//
// Goroutines: none of its own. A call (internal/realtime) runs Player.Run and Receive each on
// one goroutine it starts, stops (Run's stop channel; Receive ends with its track when the peer
// connection closes) and waits for.
package media
