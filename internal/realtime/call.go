package realtime

import (
	"context"
	"encoding/binary"
	"encoding/json"
	"errors"
	"net"
	"sync"
	"sync/atomic"
	"time"

	"github.com/pion/webrtc/v4"
	"go.uber.org/zap"

	"github.com/omniserve/omniserve/internal/session"
)

// call is one WebRTC session. Its goroutines (the session actor, the data-channel writer, the
// player, the RTP and RTCP readers) are owned by run, which ends them all and waits for them.
type call struct {
	id     string
	pc     *webrtc.PeerConnection
	st     *stream
	q      *outQueue
	sink   *callSink
	player *player
	sess   *session.Session
	h      *handler
	cfg    CallsConfig
	log    *zap.Logger
	codec  rtcCodec
	// rtp holds the RTP figures; lastRTP is their final value, taken by run before the peer
	// connection closes.
	rtp     *rtpRecorder
	lastRTP RTPStats

	// inBuf is the microphone's decoded audio not yet appended (it goes to the session as each
	// packet arrives while a VAD listens, else in 100 ms pieces); inMu orders those appends with a commit or
	// clear from the data channel, so that a commit takes every sample received before it.
	inMu  sync.Mutex
	inBuf []byte

	dcOpen chan *webrtc.DataChannel
	dc     atomic.Pointer[webrtc.DataChannel] // the open oai-events channel
	// listens mirrors whether the session's VAD listens (turn_detection set, or auto-response),
	// from the session.created / .updated it sends: only then is time without packets silence.
	listens     atomic.Bool
	dcClosed    chan struct{} // closed when oai-events has closed
	dcCloseOnce sync.Once
	connected   chan struct{}
	failed      chan struct{}
	stop        chan struct{} // closed by hangup
	stopOnce    sync.Once
	connOnce    sync.Once
	failOnce    sync.Once
	reason      string
	reasonMu    sync.Mutex
	wg          sync.WaitGroup // readers and the player
	// ctx and sess are set before ready is closed; the pion callbacks (which may fire before
	// that) wait for it.
	ctx       context.Context
	ctxCancel context.CancelFunc
	ready     chan struct{}
	wdone     chan struct{} // closed when the data-channel writer has ended

	// sidebands are the server WebSockets joined to the call (GET /v1/realtime?call_id=);
	// sbDone is closed, with sbEnded set, once the session has ended: they close then.
	sbMu      sync.Mutex
	sidebands map[*conn]struct{}
	sbEnded   bool
	sbDone    chan struct{}
}

// waitReady waits until the session exists; false when the call ended first.
func (cl *call) waitReady() bool {
	select {
	case <-cl.ready:
		return true
	case <-cl.stop:
		return false
	case <-cl.failed:
		return false
	}
}

func (cl *call) once(o *sync.Once, ch chan struct{}) { o.Do(func() { close(ch) }) }

func (cl *call) hangup(reason string) {
	cl.stopOnce.Do(func() {
		cl.reasonMu.Lock()
		cl.reason = reason
		cl.reasonMu.Unlock()
		close(cl.stop)
	})
}

// callSink is the session's Sink on a call: audio deltas go to the player (RTP), not to the
// data channel; everything else goes to the data channel through the stream and queue the
// WebSocket uses.
type callSink struct{ c *call }

func (s *callSink) Send(ev session.Event) error {
	switch e := ev.Effect.(type) {
	case session.SessionCreated:
		s.c.listens.Store(sessionListens(e.View))
	case session.SessionUpdated:
		s.c.listens.Store(sessionListens(e.View))
	case session.OutputDelta:
		if e.Kind == session.PartAudio {
			// As on OpenAI's calls, a sideband gets no audio deltas either: the audio is RTP.
			return s.c.player.delta(e, ev.Epoch)
		}
	case session.ResponseDone:
		s.c.player.responseDone(e.Response.ID)
	}
	s.c.toSidebands(ev)
	return s.c.st.Send(ev)
}

func (s *callSink) DropStale(epoch int) {
	s.c.player.clear(epoch)
	s.c.sbMu.Lock()
	for sb := range s.c.sidebands {
		sb.st.DropStale(epoch)
	}
	s.c.sbMu.Unlock()
	s.c.st.DropStale(epoch)
}

// A hang-up lets the acknowledgement of the browser's stream reset travel before the
// association is aborted: at least dcCloseLinger (a round trip and a retransmission on a LAN),
// two smoothed round trips of the call's SCTP association on a longer path, at most
// dcCloseLingerMax.
const (
	dcCloseLinger    = 250 * time.Millisecond
	dcCloseLingerMax = 2 * time.Second
)

// closeLinger is the hang-up's linger for an association whose smoothed round-trip time is
// srttS seconds (0: not measured yet).
func closeLinger(srttS float64) time.Duration {
	l := time.Duration(2 * srttS * float64(time.Second))
	return min(max(l, dcCloseLinger), dcCloseLingerMax)
}

// run drives the call until the session ends, the peer goes away or hangup.
func (cl *call) run() {
	ctx := cl.ctx
	defer cl.ctxCancel()
	sessDone := make(chan struct{})
	go func() { defer close(sessDone); cl.sess.Run(ctx, nil) }()
	stopPlayer := make(chan struct{})
	cl.wg.Add(2)
	go func() { defer cl.wg.Done(); cl.player.run(stopPlayer) }()
	go func() { defer cl.wg.Done(); defer close(cl.wdone); cl.writeLoop() }()
	connectBy := time.NewTimer(cl.cfg.ConnectTimeout)
	defer connectBy.Stop()
	reason := ""
	for reason == "" {
		select {
		case <-cl.connected:
			connectBy.Stop()
			cl.connected = nil
		case <-connectBy.C:
			reason = session.ReasonTimeout
		case <-cl.failed:
			reason = session.ReasonDisconnect
		case <-cl.stop:
			cl.reasonMu.Lock()
			reason = cl.reason
			cl.reasonMu.Unlock()
		case <-sessDone:
			reason = "session_ended"
		}
	}
	cl.log.Debug("call ending", zap.String("reason", reason))
	if reason != "session_ended" {
		cl.sess.Stop(reason)
		<-sessDone
	}
	cl.endSidebands()
	// session.closed is queued: give the writer a moment to send it before the channel goes.
	cl.q.close()
	select {
	case <-cl.wdone:
	case <-time.After(time.Second):
	}
	close(stopPlayer)
	// Closing the peer connection aborts the SCTP association, which a browser reports on a
	// channel still open as an error ("User-Initiated Abort"; the Agents SDK raises it): the
	// channel is closed first, by a stream reset the browser answers, a clean close.
	if dc := cl.dc.Load(); dc != nil && dc.ReadyState() == webrtc.DataChannelStateOpen {
		_ = dc.Close()
		select {
		case <-cl.dcClosed:
			// Our side is closed when the browser's reset arrived; the browser's is once our
			// acknowledgement of it does. An abort before that is still an error there.
			time.Sleep(closeLinger(cl.pc.SCTP().Stats().SmoothedRoundTripTime))
		case <-time.After(time.Second):
			cl.log.Info("the data channel did not close within 1 s of the hang-up; closing the call anyway")
		}
	}
	cl.lastRTP = cl.rtp.snapshot(cl.id) // the interceptor forgets the streams on Close
	_ = cl.pc.Close()
	cl.wg.Wait()
}

// writeLoop sends the session's events on the data channel once it is open, in order.
func (cl *call) writeLoop() {
	var dc *webrtc.DataChannel
	select {
	case dc = <-cl.dcOpen:
	case <-cl.stop:
		return
	case <-cl.failed:
		return
	}
	for {
		data, done, err := cl.st.next(cl.q)
		if err != nil || done {
			return
		}
		if data == nil {
			select {
			case <-cl.q.notify:
			case <-cl.failed:
				return
			}
			continue
		}
		if err := dc.SendText(string(data)); err != nil {
			cl.log.Debug("data channel send", zap.Error(err))
		}
	}
}

// onMessage takes one client event from the data channel; a bad one gets its error event on
// the data channel.
func (cl *call) onMessage(msg webrtc.DataChannelMessage) {
	if !cl.waitReady() {
		return
	}
	if werr, err := cl.apply(cl.ctx, msg.Data); err == nil && werr != nil {
		_ = cl.st.Send(errorEvent(werr))
	}
}

// apply acts on one client event from the data channel or a sideband. output_audio_buffer.clear
// (the browser SDK's barge-in, after response.cancel) cuts the audio and truncates the assistant
// item to what was played; other events go to the session as on the WebSocket. werr is the
// error event the sender gets; err says the session has ended.
func (cl *call) apply(ctx context.Context, data []byte) (werr *WireError, err error) {
	var env struct {
		Type    string `json:"type"`
		EventID string `json:"event_id"`
	}
	_ = json.Unmarshal(data, &env)
	if env.Type == "output_audio_buffer.clear" {
		itemID, played, had := cl.player.clear(0)
		if had && itemID != "" {
			return nil, cl.sess.Submit(ctx, &session.TruncateItem{Base: session.Base{ID: env.EventID, Kind: "conversation.item.truncate"},
				ItemID: itemID, AudioEndMs: played})
		}
		return nil, nil
	}
	cmd, werr := DecodeClientEvent(data)
	if werr != nil {
		return werr, nil
	}
	switch cmd.(type) {
	case *ResumeSession:
		return &WireError{Code: "invalid_request_error", Param: "type", EventID: cmd.EventID(), Message: "session.resume is not available on a call"}, nil
	case *session.CommitInput, *session.CreateResponse, *session.ClearInput:
		// After the microphone's audio received so far: appended first (a commit, or a
		// response.create, which commits the buffer when no committed input awaits an answer),
		// or dropped with the rest of the buffer (clear).
		cl.inMu.Lock()
		defer cl.inMu.Unlock()
		if _, drop := cmd.(*session.ClearInput); drop {
			cl.inBuf = nil
		} else if err := cl.appendInputLocked(ctx); err != nil {
			return nil, err
		}
	}
	return nil, cl.sess.Submit(ctx, cmd)
}

// appendInputLocked hands the microphone's buffered audio to the session (inMu held).
func (cl *call) appendInputLocked(ctx context.Context) error {
	if len(cl.inBuf) == 0 {
		return nil
	}
	err := cl.sess.Submit(ctx, &session.AppendAudio{Base: session.Base{Kind: "input_audio_buffer.append"}, Data: cl.inBuf,
		Format: &session.AudioFormat{Type: "pcm16", Rate: 24000}})
	cl.inBuf = nil
	return err
}

// sessionListens reports whether a session object has a VAD listening to its input.
func sessionListens(v session.SessionView) bool {
	return v.Input.TurnDetection != nil || (!v.Transcription && v.AutoResponse)
}

// rtpQuietAfter is how long without a packet from the browser means it sends nothing for now
// (Opus DTX, or a source it found silent): the input's time still passes, so a session whose
// VAD listens sees the pause as silence instead of waiting for the next packet to end the
// user's turn. Without a VAD nothing is added: a commit takes exactly the audio received.
const rtpQuietAfter = 100 * time.Millisecond

// The microphone's audio goes to the session in pieces of at least rtcInputAppendBytes while the
// session's VAD listens: 10 ms of 24 kHz PCM16, under one packet's 20 ms (a streaming resampler
// may hand out a few samples less for one), so every packet goes on as it arrives and the VAD
// sees the end of the user's speech when a WebSocket client's 20 ms appends would show it (100
// ms pieces delayed it by about 40 ms on average). Without a VAD (push-to-talk) a commit takes
// what is held anyway (the call flushes it first), so the pieces stay at rtcInputBatchBytes
// (100 ms), a fifth of the appends; the microphone's packets between the client's commit and its
// response.create wait in the buffer for the next commit (a response.create after a commit does
// not commit them).
const (
	rtcInputAppendBytes = 24000 * 2 * 10 / 1000
	rtcInputBatchBytes  = 24000 * 2 * 100 / 1000
)

// receive decodes the browser's RTP (Opus, or G.711) to 24 kHz PCM16 and appends it to the
// session's input buffer (rtcInputAppendBytes, rtcInputBatchBytes). A gap in the sequence
// numbers is concealed (PLC); a gap in time (no packet for rtpQuietAfter, or a timestamp jump
// when packets resume after a DTX pause) is appended as silence, each span once, while the
// session's VAD listens.
func (cl *call) receive(t *webrtc.TrackRemote) {
	dec, err := cl.codec.newDecoder()
	if err != nil {
		cl.log.Error("audio decoder", zap.Error(err))
		return
	}
	defer dec.Close()
	pcm := make([]int16, dec.MaxFrameSamples())
	var (
		lastSeq uint16
		lastTS  uint32
		have    bool
		gaps    quietFill
	)
	if !cl.waitReady() {
		return
	}
	var buf []byte // this packet's audio (with concealed losses or silence before it)
	take := func() bool {
		cl.inMu.Lock()
		defer cl.inMu.Unlock()
		cl.inBuf = append(cl.inBuf, buf...)
		buf = buf[:0]
		least := rtcInputBatchBytes
		if cl.listens.Load() {
			least = rtcInputAppendBytes
		}
		return len(cl.inBuf) < least || cl.appendInputLocked(cl.ctx) == nil
	}
	for {
		if have {
			_ = t.SetReadDeadline(time.Now().Add(rtpQuietAfter))
		}
		pkt, _, err := t.ReadRTP()
		if err != nil {
			if ne := net.Error(nil); have && errors.As(err, &ne) && ne.Timeout() {
				if cl.listens.Load() {
					buf = appendSilence(buf, gaps.quiet(time.Now()))
				}
				if len(buf) > 0 && !take() {
					return
				}
				continue
			}
			return
		}
		if have {
			lost := int(pkt.SequenceNumber - lastSeq - 1)
			for gap := lost; gap > 0 && gap < 10; gap-- {
				n, err := dec.Decode(nil, pcm)
				if err == nil {
					buf = appendPCM(buf, pcm[:n])
				}
			}
			// The timestamps cover the lost packets too: what is beyond them was not sent.
			if lost >= 0 && lost < 10 && cl.listens.Load() {
				span := time.Duration(int64(pkt.Timestamp-lastTS)-int64(lost+1)*int64(cl.codec.perTick)) * time.Second / time.Duration(cl.codec.clock)
				buf = appendSilence(buf, gaps.resumed(span))
			}
		}
		have, lastSeq, lastTS = true, pkt.SequenceNumber, pkt.Timestamp
		gaps.packet(time.Now())
		n, err := dec.Decode(pkt.Payload, pcm)
		if err != nil {
			cl.log.Debug("audio decode", zap.Error(err))
			continue
		}
		buf = appendPCM(buf, pcm[:n])
		if !take() {
			return
		}
	}
}

// quietFill keeps the silence appended for a pause in the browser's packets, so that each span
// of time is appended once: while no packet comes (quiet, by the clock) and when packets resume
// after a timestamp jump (resumed, by the RTP clock), whichever sees it first.
type quietFill struct {
	lastAt time.Time     // arrival of the last packet
	filled time.Duration // silence appended since it
}

const rtpFrame = 20 * time.Millisecond

// packet records a packet's arrival: a new pause starts from it.
func (q *quietFill) packet(now time.Time) { q.lastAt, q.filled = now, 0 }

// quiet is the silence to append now, no packet having come since the last one: the time since
// it, beyond that packet's own frame and what was already appended, in whole frames.
func (q *quietFill) quiet(now time.Time) time.Duration {
	d := (now.Sub(q.lastAt) - rtpFrame - q.filled).Truncate(rtpFrame)
	if d <= 0 {
		return 0
	}
	q.filled += d
	return d
}

// resumed is the silence to append before a packet whose timestamp is span past the end of the
// last one (a DTX pause): what quiet has not appended already, in whole frames.
func (q *quietFill) resumed(span time.Duration) time.Duration {
	d := (span - q.filled).Truncate(rtpFrame)
	if d <= 0 {
		return 0
	}
	q.filled += d
	return d
}

// appendSilence appends d of 24 kHz PCM16 silence.
func appendSilence(b []byte, d time.Duration) []byte {
	return append(b, make([]byte, 2*int(d*24000/time.Second))...)
}

func appendPCM(b []byte, pcm []int16) []byte {
	for _, v := range pcm {
		b = binary.LittleEndian.AppendUint16(b, uint16(v))
	}
	return b
}
