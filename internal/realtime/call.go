package realtime

import (
	"context"
	"encoding/json"
	"sync"
	"sync/atomic"
	"time"

	"github.com/pion/webrtc/v4"
	"go.uber.org/zap"

	"github.com/omniserve/omniserve/internal/protocol"
	"github.com/omniserve/omniserve/internal/realtime/link"
	"github.com/omniserve/omniserve/internal/realtime/live"
	"github.com/omniserve/omniserve/internal/realtime/media"
	"github.com/omniserve/omniserve/internal/session"
)

// call is one WebRTC session. Its events flow over the connection core (link) on the
// "oai-events" data channel (dcTransport); its audio is RTP (internal/realtime/media). run owns
// every goroutine of the call: the session actor (runSession), the core's reader and writer
// (link.Conn), the player, and the RTP and RTCP readers (media, started by the peer
// connection's callbacks into media); it ends them all and waits for them.
type call struct {
	id     string
	pc     *webrtc.PeerConnection
	h      *handler
	cfg    CallsConfig
	log    *zap.Logger
	codec  media.Codec
	player *media.Player
	sess   *session.Session
	// dc is the data channel's part of the connection core; st and q are the call's stream and
	// queue; core, made by run, serves them.
	dc   *dcTransport
	st   *link.Stream
	q    *link.Queue
	core *link.Conn
	// rtp holds the RTP figures; lastRTP is their final value, taken by run before the peer
	// connection closes.
	rtp     *media.Recorder
	lastRTP RTPStats
	media   sync.WaitGroup // the player, the RTP receiver and the RTCP readers

	// inBuf is the microphone's decoded audio not yet appended (it goes to the session as each
	// packet arrives while a VAD listens, else in 100 ms pieces); inMu orders those appends with a commit or
	// clear from the data channel, so that a commit takes every sample received before it.
	inMu  sync.Mutex
	inBuf []byte
	// listens mirrors whether the session's VAD listens (turn_detection set, or auto-response),
	// from the session.created / .updated it sends: only then is time without packets silence.
	listens atomic.Bool

	// ended is closed, with reason set, by the first of: a hang-up, the peer connection failing
	// or closing, the connect timeout (connectBy, stopped once the peer connects).
	reason    atomic.Pointer[string]
	ended     chan struct{}
	connectBy *time.Timer
	// ctx and sess are set before ready is closed; the pion callbacks (which may fire before
	// that) wait for it.
	ctx       context.Context
	ctxCancel context.CancelFunc
	ready     chan struct{}

	// sbs are the server WebSockets joined to the call (GET /v1/realtime?call_id=, a Live
	// session's attach).
	sbs callSidebands
}

// callSidebands are a call's sidebands (sideband.go), under mu: done is closed, with ended set,
// once the session has ended (they close then); replay is a Live call's recent sideband events,
// replayed to a sideband that joins (livereplay.go).
type callSidebands struct {
	mu     sync.Mutex
	set    map[*wsConn]struct{}
	ended  bool
	done   chan struct{}
	replay sidebandReplay
}

// waitReady waits until the session exists; false when the call ended first.
func (cl *call) waitReady() bool {
	select {
	case <-cl.ready:
		return true
	case <-cl.ended:
		return false
	}
}

// end ends the call for reason, unless it has already ended for another.
func (cl *call) end(reason string) {
	if cl.reason.CompareAndSwap(nil, &reason) {
		close(cl.ended)
	}
}

func (cl *call) hangup(reason string) { cl.end(reason) }

// endReason is why the call ended ("" while it goes on).
func (cl *call) endReason() string {
	if r := cl.reason.Load(); r != nil {
		return *r
	}
	return ""
}

// callOut is where a call's session events go (the outbound of its sessionSink): audio deltas
// to the player (RTP), not to the data channel; everything else to the data channel's stream
// and every sideband. The player's own events come here too. A Live call's sidebands also get
// the reflected audio (live.SidebandOnly), and none of the player's Realtime events.
type callOut struct{ c *call }

func (o callOut) Send(ev link.Event) error {
	switch p := ev.Payload.(type) {
	case protocol.SessionCreated:
		o.c.listens.Store(sessionListens(p.Session))
	case protocol.SessionUpdated:
		o.c.listens.Store(sessionListens(p.Session))
	}
	switch ev.Type {
	case "response.output_audio.delta":
		// As on OpenAI's calls, a sideband gets no audio deltas either: the audio is RTP.
		return o.c.player.Delta(ev.Payload, ev.Epoch)
	case "response.done":
		if d, ok := ev.Payload.(protocol.ResponseDone); ok {
			o.c.player.ResponseDone(d.Response.ID)
		}
	case "output_audio_buffer.started", "output_audio_buffer.stopped", "output_audio_buffer.cleared":
		if o.c.liveOf() != nil {
			return nil // the player's events are Realtime's: Live has none (its track just goes silent)
		}
	}
	o.c.toSidebands(ev)
	if live.SidebandOnly(ev.Type) && o.c.liveOf() != nil {
		return nil // the audio reflected to a Live call's sidebands: the data channel's is RTP
	}
	return o.c.st.Send(ev)
}

func (o callOut) DropStale(epoch int) {
	o.c.player.Clear(epoch)
	o.c.sbs.mu.Lock()
	for sb := range o.c.sbs.set {
		sb.st.DropStale(epoch)
	}
	o.c.sbs.replay.dropStale(epoch)
	o.c.sbs.mu.Unlock()
	o.c.st.DropStale(epoch)
}

// dcTransport is the data channel's part of the connection core (link.Transport). pion hands
// each message to OnMessage on its own goroutine, which gives it to the core's reader (and
// waits for it: the session's backpressure holds back pion's delivery, as it did when the
// callback submitted itself); writes wait until the channel is open.
type dcTransport struct {
	log    *zap.Logger
	msgs   chan []byte
	done   chan struct{}                      // closed by Close: the core reads no more
	dc     atomic.Pointer[webrtc.DataChannel] // the open oai-events channel
	opened chan struct{}                      // closed once dc is set
	shut   atomic.Bool
	closed chan struct{} // closed when oai-events has closed (the browser answered our reset)
}

func newDCTransport(log *zap.Logger) *dcTransport {
	return &dcTransport{log: log, msgs: make(chan []byte), done: make(chan struct{}), opened: make(chan struct{}), closed: make(chan struct{})}
}

// open notes the oai-events channel open (OnOpen).
func (t *dcTransport) open(dc *webrtc.DataChannel) {
	if t.dc.CompareAndSwap(nil, dc) {
		close(t.opened)
	}
}

// onClose notes the channel closed (OnClose).
func (t *dcTransport) onClose() {
	if t.shut.CompareAndSwap(false, true) {
		close(t.closed)
	}
}

// deliver hands one message to the core's reader, or drops it once the core is closed (pion's
// callback must return: closing the peer connection waits for it).
func (t *dcTransport) deliver(data []byte) {
	select {
	case t.msgs <- data:
	case <-t.done:
	}
}

func (t *dcTransport) ReadFrame(ctx context.Context) ([]byte, error) {
	select {
	case m := <-t.msgs:
		return m, nil
	case <-ctx.Done():
		return nil, ctx.Err()
	}
}

// WriteFrame sends one event once the channel is open. A failed send is logged, not fatal: the
// call's liveness is its peer connection's, not the channel's.
func (t *dcTransport) WriteFrame(ctx context.Context, data []byte) error {
	select {
	case <-t.opened:
	case <-ctx.Done():
		return ctx.Err()
	}
	if err := t.dc.Load().SendText(string(data)); err != nil {
		t.log.Debug("data channel send", zap.Error(err))
	}
	return nil
}

// Close releases a delivery waiting for the reader. The channel itself the call closes
// (closeDataChannel), after the core has drained, with a hang-up's linger.
func (t *dcTransport) Close(int, string, time.Duration) { close(t.done) }

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

// run drives the call until the session ends, the peer goes away or hangup; start are the
// commands that start its session (a Live call's), before any other.
func (cl *call) run(start []session.Command) {
	defer cl.ctxCancel()
	sessDone := runSession(cl.ctx, cl.sess, nil, nil)
	cl.submitStart(start)
	stopPlayer := make(chan struct{})
	cl.goMedia(func() { cl.player.Run(stopPlayer) })
	cl.core = link.New(cl.ctx, cl.dc, cl.q, link.Options{DrainTimeout: time.Second, Log: cl.log})
	sink := sinkOf(cl.sess)
	cl.core.Start(cl.st, nil, replyWith(sink.guard, errorEventIn(sink.dialect()), cl.apply))
	reason := "session_ended"
	select {
	case <-cl.ended:
		reason = cl.endReason()
	case <-sessDone:
	}
	cl.connectBy.Stop()
	cl.log.Debug("call ending", zap.String("reason", reason))
	if reason != "session_ended" {
		cl.sess.Stop(reason)
		<-sessDone
	}
	cl.endSidebands()
	// session.closed is queued: the writer sends it (for at most a second) before the channel
	// goes; a channel never opened has nothing to drain to.
	code := 0
	if cl.dc.dc.Load() != nil {
		code = 1000
	}
	cl.core.Close(code, "call ended")
	close(stopPlayer)
	cl.closeDataChannel()
	cl.lastRTP = cl.rtp.Snapshot(cl.id) // the interceptor forgets the streams on Close
	_ = cl.pc.Close()
	cl.media.Wait()
}

// submitStart hands the session its start commands (a Live call's, from its POST), ahead of
// the microphone's audio (inMu held: Take waits) and of the data channel's events (its core has
// not started). The session runs, so its inbox drains; one that has ended takes no more.
func (cl *call) submitStart(start []session.Command) {
	if len(start) == 0 {
		return
	}
	cl.inMu.Lock()
	defer cl.inMu.Unlock()
	for _, cmd := range start {
		for {
			ctx, cancel := context.WithTimeout(cl.ctx, 100*time.Millisecond)
			err := cl.sess.Submit(ctx, cmd)
			cancel()
			if err == nil {
				break
			}
			if ended(cl.sess) || cl.ctx.Err() != nil {
				return
			}
		}
	}
}

// liveOf is a GPT-Live call's translator, its session's dialect (nil: a Realtime call).
func (cl *call) liveOf() *live.Translator {
	tr, _ := sinkOf(cl.sess).dialect().(*live.Translator)
	return tr
}

// goMedia starts one of the call's media goroutines (the player, the RTP receiver, the RTCP
// readers): run ends them (the player's stop, closing the peer connection for the readers) and
// waits for them.
func (cl *call) goMedia(f func()) {
	cl.media.Add(1)
	go func() {
		defer cl.media.Done()
		f()
	}()
}

// closeDataChannel closes an open channel first, by a stream reset the browser answers, a clean
// close: closing the peer connection aborts the SCTP association, which a browser reports on a
// channel still open as an error ("User-Initiated Abort"; the Agents SDK raises it).
func (cl *call) closeDataChannel() {
	dc := cl.dc.dc.Load()
	if dc == nil || dc.ReadyState() != webrtc.DataChannelStateOpen {
		return
	}
	_ = dc.Close()
	timer := time.NewTimer(time.Second)
	defer timer.Stop()
	select {
	case <-cl.dc.closed:
		// Our side is closed when the browser's reset arrived; the browser's is once our
		// acknowledgement of it does. An abort before that is still an error there.
		time.Sleep(closeLinger(cl.pc.SCTP().Stats().SmoothedRoundTripTime))
	case <-timer.C:
		cl.log.Info("the data channel did not close within 1 s of the hang-up; closing the call anyway")
	}
}

// apply acts on one client event from the data channel or a sideband. output_audio_buffer.clear
// (the browser SDK's barge-in, after response.cancel) cuts the audio and truncates the assistant
// item to what was played; other events go to the session as on the WebSocket. werr is the
// error event the sender gets; err says the session has ended.
func (cl *call) apply(ctx context.Context, data []byte) (werr *WireError, err error) {
	if tr := cl.liveOf(); tr != nil {
		return cl.applyLive(ctx, tr, data)
	}
	var env struct {
		Type    string `json:"type"`
		EventID string `json:"event_id"`
	}
	_ = json.Unmarshal(data, &env)
	if env.Type == "output_audio_buffer.clear" {
		itemID, played, had := cl.player.Clear(0)
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
	case *EventAck:
		return nil, nil // a call keeps no journal: nothing to trim, and an ack is never answered
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
	if tr := cl.liveOf(); tr != nil {
		return cl.takeLive(ctx, tr)
	}
	err := cl.sess.Submit(ctx, &session.AppendAudio{Base: session.Base{Kind: "input_audio_buffer.append"}, Data: cl.inBuf,
		Format: &session.AudioFormat{Type: "pcm16", Rate: 24000}})
	cl.inBuf = nil
	return err
}

// sessionListens reports whether a session object has a VAD listening to its input.
func sessionListens(o protocol.SessionObject) bool {
	switch o := o.(type) {
	case *protocol.Session:
		return o.Audio.Input.TurnDetection != nil || o.AutoResponse
	case *protocol.TranscriptionSession:
		return o.Audio.Input.TurnDetection != nil
	}
	return false
}

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

// Listens implements media.Input: whether the session's VAD listens.
func (cl *call) Listens() bool { return cl.listens.Load() }

// Take implements media.Input: the microphone's audio is buffered and appended to the session
// in pieces (rtcInputAppendBytes while a VAD listens, else rtcInputBatchBytes); false once the
// session has ended.
func (cl *call) Take(pcm []byte) bool {
	cl.inMu.Lock()
	defer cl.inMu.Unlock()
	cl.inBuf = append(cl.inBuf, pcm...)
	least := rtcInputBatchBytes
	if cl.listens.Load() {
		least = rtcInputAppendBytes
	}
	return len(cl.inBuf) < least || cl.appendInputLocked(cl.ctx) == nil
}

// receive hands the browser's audio track to the media receiver once the session exists.
func (cl *call) receive(t *webrtc.TrackRemote) {
	if cl.waitReady() {
		media.Receive(t, cl.codec, cl, cl.log)
	}
}
