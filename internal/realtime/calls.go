package realtime

import (
	"context"
	"crypto/rand"
	"encoding/hex"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"mime"
	"mime/multipart"
	"net"
	"net/http"
	"slices"
	"sort"
	"strings"
	"sync"
	"time"

	"github.com/pion/ice/v4"
	"github.com/pion/interceptor"
	"github.com/pion/sdp/v3"
	"github.com/pion/webrtc/v4"
	"go.uber.org/zap"

	"github.com/omniserve/omniserve/internal/auth"
	"github.com/omniserve/omniserve/internal/oaierror"
	"github.com/omniserve/omniserve/internal/realtime/link"
	"github.com/omniserve/omniserve/internal/realtime/live"
	"github.com/omniserve/omniserve/internal/realtime/media"
	"github.com/omniserve/omniserve/internal/session"
)

// RTPStats and RTPTotals are a call's RTP figures (internal/realtime/media), as the server's
// metrics read them.
type (
	RTPStats  = media.RTPStats
	RTPTotals = media.RTPTotals
)

// CallsConfig configures the WebRTC transport (POST /v1/realtime/calls).
type CallsConfig struct {
	// UDPPort is the one UDP port every call's media uses (ICE UDP mux); 0 picks a free one.
	UDPPort int
	// PublicIPs, when set, are the addresses announced in the answer instead of the host's own
	// (NAT 1:1: a container or a cloud VM behind a static NAT).
	PublicIPs []string
	// ConnectTimeout ends a call whose peer has not connected by then, freeing its admission
	// slot (an ek_ key's offers never connected must not hold every slot). Default 10 s.
	ConnectTimeout time.Duration
	// ICETCP also offers ICE-TCP candidates (passive, RFC 6544) on TCPPort, for browsers on
	// networks that block UDP; 0 picks a free port. Media over TCP suffers head-of-line
	// blocking on loss, so UDP stays preferred (browsers try UDP pairs first).
	ICETCP  bool
	TCPPort int
	// Interfaces, when set, are the only network interfaces whose addresses are gathered and
	// announced (e.g. "eth0"); empty: every interface, loopback included.
	Interfaces []string
	// OnCallEnd, when set, gets each ended call's final RTP figures (the server's metrics
	// observe them per call); it is called on the call's goroutine and must not block.
	OnCallEnd func(RTPStats)
}

// Calls is the WebRTC transport: POST /v1/realtime/calls makes a call (a session whose audio is
// Opus RTP and whose events flow on the "oai-events" data channel), POST
// /v1/realtime/calls/{id}/hangup ends it. Close hangs up every call and frees the UDP port.
type Calls struct {
	h       *handler
	cfg     CallsConfig
	mux     ice.UDPMux
	port    int
	tcpMux  ice.TCPMux // nil without ICE-TCP
	tcpPort int
	se      webrtc.SettingEngine

	mu     sync.Mutex
	calls  map[string]*call
	live   map[string]*call // the Live calls, by Live session id (live_…)
	ended  RTPTotals        // of the calls that have ended
	closed bool
	// running counts the calls and sidebands Close waits for; idle, made by Close while some
	// run, is closed when the last one ends.
	running int
	idle    chan struct{}
}

// started counts a call or sideband that Close must wait for (c.mu held).
func (c *Calls) startedLocked() { c.running++ }

// finished ends what started counted.
func (c *Calls) finished() {
	c.mu.Lock()
	defer c.mu.Unlock()
	c.running--
	if c.running == 0 && c.idle != nil {
		close(c.idle)
		c.idle = nil
	}
}

// NewCalls opens the UDP port and returns the transport; hcfg and sessions are the WebSocket
// endpoint's (same key check, client secrets, queue bounds and sessions).
func NewCalls(cfg CallsConfig, hcfg HandlerConfig, sessions *session.Manager, log *zap.Logger) (*Calls, error) {
	if log == nil {
		log = zap.NewNop()
	}
	if cfg.ConnectTimeout <= 0 {
		cfg.ConnectTimeout = 10 * time.Second
	}
	udpOpts := []ice.UDPMuxFromPortOption{ice.UDPMuxFromPortWithLoopback(), ice.UDPMuxFromPortWithNetworks(ice.NetworkTypeUDP4)}
	keep := interfaceFilter(cfg.Interfaces)
	if keep != nil {
		udpOpts = append(udpOpts, ice.UDPMuxFromPortWithInterfaceFilter(keep))
	}
	mux, err := openUDPMux(cfg.UDPPort, udpOpts)
	if err != nil {
		return nil, err
	}
	c := &Calls{h: &handler{cfg: hcfg.WithDefaults(), sessions: sessions, log: log.Named("calls")}, cfg: cfg, mux: mux, calls: map[string]*call{}, live: map[string]*call{}}
	for _, a := range mux.GetListenAddresses() {
		if ua, ok := a.(*net.UDPAddr); ok {
			c.port = ua.Port
		}
	}
	c.se.SetICEUDPMux(mux)
	// A connected peer that stops answering ICE's keepalives (consent freshness: killed, or its
	// network gone) is disconnected after 5 s and failed 10 s later, which ends the call and frees
	// its slot (pion's defaults are 5 s + 25 s: 7161a1b held such a slot 31–33 s).
	c.se.SetICETimeouts(5*time.Second, 10*time.Second, 2*time.Second)
	c.se.SetIncludeLoopbackCandidate(true)
	networks := []webrtc.NetworkType{webrtc.NetworkTypeUDP4}
	if keep != nil {
		c.se.SetInterfaceFilter(keep)
	}
	if cfg.ICETCP {
		ln, err := net.Listen("tcp4", fmt.Sprintf(":%d", cfg.TCPPort))
		if err != nil {
			_ = mux.Close()
			return nil, fmt.Errorf("opening the WebRTC ICE-TCP port %d: %w", cfg.TCPPort, err)
		}
		c.tcpPort = ln.Addr().(*net.TCPAddr).Port
		c.tcpMux = ice.NewTCPMuxDefault(ice.TCPMuxParams{Listener: ln, ReadBufferSize: 64,
			// What a sender may queue on one connection before its packets are dropped: media
			// is better late-dropped than blocking the call's writer.
			WriteBufferSize: 4 << 20})
		c.se.SetICETCPMux(c.tcpMux)
		networks = append(networks, webrtc.NetworkTypeTCP4)
	}
	c.se.SetNetworkTypes(networks)
	if len(cfg.PublicIPs) > 0 {
		// NAT 1:1: the host candidates carry the public addresses instead of the local ones.
		if err := c.se.SetICEAddressRewriteRules(webrtc.ICEAddressRewriteRule{External: cfg.PublicIPs,
			AsCandidateType: webrtc.ICECandidateTypeHost, Mode: webrtc.ICEAddressRewriteReplace}); err != nil {
			_ = c.closePorts()
			return nil, fmt.Errorf("webrtc public ips: %w", err)
		}
	}
	return c, nil
}

// Port is the UDP port the calls' media uses.
func (c *Calls) Port() int { return c.port }

// TCPPort is the ICE-TCP port (0: ICE-TCP is off).
func (c *Calls) TCPPort() int { return c.tcpPort }

// openUDPMux opens port on every kept interface. Port 0 is one free port for them all (the
// mux binds each interface's address on its own, and a 0 there would give each its own port):
// it is learnt from the wildcard address first, and retried if another process takes it in
// between.
func openUDPMux(port int, opts []ice.UDPMuxFromPortOption) (*ice.MultiUDPMuxDefault, error) {
	for try := 0; ; try++ {
		p := port
		if port == 0 {
			pc, err := net.ListenPacket("udp4", ":0")
			if err != nil {
				return nil, fmt.Errorf("finding a free UDP port for WebRTC: %w", err)
			}
			p = pc.LocalAddr().(*net.UDPAddr).Port
			_ = pc.Close()
		}
		mux, err := ice.NewMultiUDPMuxFromPort(p, opts...)
		if err == nil {
			return mux, nil
		}
		if port != 0 || try == 2 {
			return nil, fmt.Errorf("opening the WebRTC UDP port %d: %w", p, err)
		}
	}
}

// interfaceFilter keeps the named interfaces; nil (no filter) when none are named.
func interfaceFilter(names []string) func(string) bool {
	if len(names) == 0 {
		return nil
	}
	return func(name string) bool { return slices.Contains(names, name) }
}

// closePorts closes the UDP mux and, with ICE-TCP, its listener.
func (c *Calls) closePorts() error {
	err := c.mux.Close()
	if c.tcpMux != nil {
		err = errors.Join(err, c.tcpMux.Close())
	}
	return err
}

// Active is the number of live calls.
func (c *Calls) Active() int {
	c.mu.Lock()
	defer c.mu.Unlock()
	return len(c.calls)
}

// Close hangs up every call, waits for them and closes the UDP port.
func (c *Calls) Close(ctx context.Context) error {
	c.mu.Lock()
	c.closed = true
	live := make([]*call, 0, len(c.calls))
	for _, cl := range c.calls {
		live = append(live, cl)
	}
	if c.running > 0 && c.idle == nil {
		c.idle = make(chan struct{})
	}
	idle := c.idle
	c.mu.Unlock()
	for _, cl := range live {
		cl.hangup(session.ReasonShutdown)
	}
	if idle != nil {
		select {
		case <-idle:
		case <-ctx.Done():
			return ctx.Err()
		}
	}
	return c.closePorts()
}

func callError(w http.ResponseWriter, status int, code, param, msg string) {
	oaierror.Write(w, restError(status, code, param, msg))
}

// restError is a refused REST request of the WebRTC endpoints: the usual {error: {…}} body.
func restError(status int, code, param, msg string) *oaierror.Error {
	typ := "invalid_request_error"
	if status >= 500 {
		typ = "server_error"
	}
	return &oaierror.Error{Status: status, Type: typ, Code: code, Param: param, Message: msg}
}

// Create serves POST /v1/realtime/calls.
func (c *Calls) Create(w http.ResponseWriter, r *http.Request) {
	sec, res := c.h.cfg.Secrets.Check(r, c.h.cfg.APIKey)
	if res != auth.OK {
		callError(w, http.StatusUnauthorized, "invalid_api_key", "", "missing or invalid API key")
		return
	}
	offer, sessRaw, status, perr := readOffer(r, sec != nil)
	if perr != nil {
		callError(w, status, perr.Code, perr.Param, perr.Message)
		return
	}
	if sec != nil {
		sessRaw = sec.Session
	}
	patch, werr := sessionPatch(sessRaw)
	if werr != nil {
		callError(w, http.StatusBadRequest, werr.Code, werr.Param, werr.Message)
		return
	}
	cl, answer, oerr := c.open(r, offer, callSession{opts: session.Options{Initial: &patch, Transcription: secretIsTranscription(sessRaw)}, d: openAIDialect{}})
	if oerr != nil {
		if oerr.Status == http.StatusServiceUnavailable {
			w.Header().Set("Retry-After", "1")
		}
		oaierror.Write(w, oerr)
		return
	}
	w.Header().Set("Location", "/v1/realtime/calls/"+cl.id)
	w.Header().Set("Content-Type", "application/sdp")
	w.WriteHeader(http.StatusCreated)
	_, _ = io.WriteString(w, answer)
}

// callSession is what a new call's session is made of: its options and dialect; a Live call
// (live: its dialect is a live.Translator, and its Live id finds it) also has the start's
// commands, submitted before any other.
type callSession struct {
	opts  session.Options
	d     dialect
	live  bool
	start []session.Command
}

// open makes the call of offer with its session and starts it: an admission slot (first, so
// that a full server answers 503 before any work on the offer), the offer's check (checkOffer),
// the peer connection and its answer, the session, its run. An error is the REST answer (an
// offer that cannot be answered names param "sdp").
func (c *Calls) open(r *http.Request, offer string, cs callSession) (*call, string, *oaierror.Error) {
	slot, err := c.h.sessions.Acquire(r.Context())
	if err != nil {
		return nil, "", restError(http.StatusServiceUnavailable, "resource_exhausted", "", err.Error())
	}
	codec, werr := checkOffer(offer)
	if werr != nil {
		slot.Release()
		return nil, "", restError(http.StatusBadRequest, werr.Code, werr.Param, werr.Message)
	}
	cl, answer, err := c.newCall(r.Context(), offer, codec)
	if err != nil {
		slot.Release()
		return nil, "", restError(http.StatusBadRequest, "invalid_sdp", "sdp", "the SDP offer could not be answered: "+err.Error())
	}
	if cs.live {
		cl.listens.Store(true) // a Live session always listens (the engine's auto-response)
	}
	sink := c.h.newSink(callOut{cl}, cs.d)
	cl.sess = c.h.sessions.NewSession(slot, cs.opts, sink)
	c.mu.Lock()
	if c.closed {
		c.mu.Unlock()
		cl.connectBy.Stop()
		_ = cl.pc.Close()
		slot.Release()
		return nil, "", restError(http.StatusServiceUnavailable, "shutting_down", "", "the server is shutting down")
	}
	c.calls[cl.id] = cl
	if cs.live {
		c.live[live.SessionID(cl.sess.ID())] = cl
	}
	c.startedLocked()
	c.mu.Unlock()
	sink.guard.bind(cl.sess.Stop)
	c.run(r, cl, slot, cs.start)
	return cl, answer, nil
}

// run starts the call's goroutine: it runs the call (its session started by start) until it
// ends, then forgets it.
func (c *Calls) run(r *http.Request, cl *call, slot *session.Slot, start []session.Command) {
	runCtx := c.h.cfg.BaseContext
	var endSpan func(string, any)
	if c.h.cfg.Trace != nil {
		runCtx, endSpan = c.h.cfg.Trace(runCtx, r, cl.sess.ID())
	}
	cl.ctx, cl.ctxCancel = context.WithCancel(runCtx)
	close(cl.ready)
	go func() {
		defer c.finished()
		defer slot.Release()
		cl.run(start) // returns after the session's Run did
		if endSpan != nil {
			// Never blocks: run returns after the session's Run did.
			select {
			case <-cl.sess.Done():
				endSpan(cl.sess.CloseReason(), cl.sess.Tracing())
			default:
				endSpan("unknown", nil)
			}
		}
		c.mu.Lock()
		delete(c.calls, cl.id)
		delete(c.live, live.SessionID(cl.sess.ID())) // none for a Realtime call
		c.ended.Add(cl.lastRTP)
		c.mu.Unlock()
		if c.cfg.OnCallEnd != nil {
			c.cfg.OnCallEnd(cl.lastRTP)
		}
	}()
}

// Hangup serves POST /v1/realtime/calls/{id}/hangup (id from the path's last-but-one element).
func (c *Calls) Hangup(w http.ResponseWriter, r *http.Request, id string) {
	if _, res := c.h.cfg.Secrets.Check(r, c.h.cfg.APIKey); res != auth.OK {
		callError(w, http.StatusUnauthorized, "invalid_api_key", "", "missing or invalid API key")
		return
	}
	c.mu.Lock()
	cl := c.calls[id]
	c.mu.Unlock()
	if cl == nil {
		callError(w, http.StatusNotFound, "call_not_found", "call_id", fmt.Sprintf("no live call %q", id))
		return
	}
	cl.hangup(session.ReasonClientClose)
	w.WriteHeader(http.StatusOK)
}

// readOffer takes the SDP offer (and, with the API key, the optional session) from
// application/sdp or multipart/form-data (parts "sdp" and "session").
func readOffer(r *http.Request, withSecret bool) (offer string, sess json.RawMessage, status int, werr *WireError) {
	ct, params, err := mime.ParseMediaType(r.Header.Get("Content-Type"))
	if err != nil {
		ct = ""
	}
	bad := func(code, param, msg string) (string, json.RawMessage, int, *WireError) {
		return "", nil, http.StatusBadRequest, &WireError{Code: code, Param: param, Message: msg}
	}
	switch ct {
	case "application/sdp":
		b, err := io.ReadAll(r.Body)
		if err != nil {
			return bad("invalid_body", "", "reading the offer: "+err.Error())
		}
		return string(b), nil, 0, nil
	case "multipart/form-data":
		mr := multipart.NewReader(r.Body, params["boundary"])
		for {
			part, err := mr.NextPart()
			if errors.Is(err, io.EOF) {
				break
			}
			if err != nil {
				return bad("invalid_body", "", "reading the multipart form: "+err.Error())
			}
			b, err := io.ReadAll(part)
			if err != nil {
				return bad("invalid_body", part.FormName(), "reading part "+part.FormName()+": "+err.Error())
			}
			switch part.FormName() {
			case "sdp":
				offer = string(b)
			case "session":
				if withSecret {
					return bad("invalid_request_error", "session", "a client secret carries its session; send the offer as application/sdp")
				}
				sess = b
			default:
				return bad("unknown_parameter", part.FormName(), "unknown form field "+part.FormName()+"; expected sdp and session")
			}
		}
		if offer == "" {
			return bad("missing_required_parameter", "sdp", "missing required form field 'sdp'")
		}
		return offer, sess, 0, nil
	}
	return "", nil, http.StatusUnsupportedMediaType, &WireError{Code: "unsupported_content_type", Param: "Content-Type",
		Message: "send the SDP offer as application/sdp, or as multipart/form-data with fields sdp and session"}
}

// checkOffer refuses what no call can come of: SDP that does not parse, an offer without an
// audio m-line, or one whose audio offers none of Opus, PCMU and PCMA. It returns the codec the
// call will use.
func checkOffer(offer string) (media.Codec, *WireError) {
	var d sdp.SessionDescription
	if err := d.UnmarshalString(offer); err != nil {
		return media.Codec{}, &WireError{Code: "invalid_sdp", Param: "sdp", Message: "the SDP offer does not parse: " + err.Error()}
	}
	hasAudio := false
	for _, m := range d.MediaDescriptions {
		hasAudio = hasAudio || m.MediaName.Media == "audio"
	}
	if !hasAudio {
		return media.Codec{}, &WireError{Code: "invalid_sdp", Param: "sdp", Message: "the SDP offer has no audio m-line (add a microphone track or a recvonly audio transceiver)"}
	}
	c, ok := media.OfferCodec(&d)
	if !ok {
		return media.Codec{}, &WireError{Code: "invalid_sdp", Param: "sdp", Message: "the SDP offer's audio has no supported codec: offer opus/48000/2, PCMU/8000 or PCMA/8000"}
	}
	return c, nil
}

func newCallID() string {
	var b [16]byte
	_, _ = rand.Read(b[:])
	return "rtc_" + hex.EncodeToString(b[:])
}

// newCall makes the peer connection and its answer (all candidates in it: no trickle).
func (c *Calls) newCall(ctx context.Context, offer string, codec media.Codec) (*call, string, error) {
	rec := &media.Recorder{}
	pc, err := c.peerConnection(codec, rec)
	if err != nil {
		return nil, "", err
	}
	cp := codec.Capability()
	track, err := webrtc.NewTrackLocalStaticRTP(webrtc.RTPCodecCapability{MimeType: cp.MimeType, ClockRate: cp.ClockRate, Channels: cp.Channels}, "audio", "omniserve")
	if err != nil {
		_ = pc.Close()
		return nil, "", err
	}
	sender, err := pc.AddTrack(track)
	if err != nil {
		_ = pc.Close()
		return nil, "", err
	}
	if enc := sender.GetParameters().Encodings; len(enc) > 0 {
		rec.SetOut(uint32(enc[0].SSRC))
	}
	id := newCallID()
	log := c.h.log.With(zap.String("call_id", id))
	st := link.NewStream(false, nil)
	cl := &call{id: id, pc: pc, st: st, log: log, h: c.h, cfg: c.cfg,
		q: link.NewQueue(c.h.cfg.SendQueue, c.h.cfg.SendQueueBytes, false), dc: newDCTransport(log),
		codec: codec, ended: make(chan struct{}), ready: make(chan struct{}),
		sbs: callSidebands{set: map[*wsConn]struct{}{}, done: make(chan struct{})}, rtp: rec}
	cl.player = media.NewPlayer(callOut{cl}, track, codec, log)
	st.Attach(cl.q, 0)
	// The connect timeout runs from the answer's making: a peer connection connected by then
	// stops it.
	cl.connectBy = time.AfterFunc(c.cfg.ConnectTimeout, func() { cl.end(session.ReasonTimeout) })
	cl.wire(sender)
	sdp, err := answer(ctx, pc, offer)
	if err != nil {
		cl.connectBy.Stop()
		_ = pc.Close()
		return nil, "", err
	}
	return cl, sdp, nil
}

// peerConnection makes a call's peer connection: the call's codec alone (the answer then names
// it alone, and both directions use it) and the interceptors, with rec's stats.
func (c *Calls) peerConnection(codec media.Codec, rec *media.Recorder) (*webrtc.PeerConnection, error) {
	m := &webrtc.MediaEngine{}
	if err := m.RegisterCodec(webrtc.RTPCodecParameters{RTPCodecCapability: codec.Capability(), PayloadType: codec.PayloadType()}, webrtc.RTPCodecTypeAudio); err != nil {
		return nil, err
	}
	ir := &interceptor.Registry{}
	if err := media.RegisterInterceptors(m, ir, rec); err != nil {
		return nil, err
	}
	api := webrtc.NewAPI(webrtc.WithMediaEngine(m), webrtc.WithInterceptorRegistry(ir), webrtc.WithSettingEngine(c.se))
	return api.NewPeerConnection(webrtc.Configuration{})
}

// wire starts reading the browser's RTCP and hooks the call to the peer connection's events: its
// audio track (the RTP receiver), the oai-events data channel (the core's transport) and its
// state (connected, failed).
func (cl *call) wire(sender *webrtc.RTPSender) {
	buf := make([]byte, 1500)
	// RTCP from the browser: read so the interceptors (reports, NACK) work.
	cl.goMedia(func() { drain(func() error { _, _, err := sender.Read(buf); return err }) })
	cl.pc.OnTrack(func(t *webrtc.TrackRemote, recv *webrtc.RTPReceiver) {
		if t.Kind() != webrtc.RTPCodecTypeAudio {
			return
		}
		cl.rtp.SetIn(uint32(t.SSRC()))
		cl.goMedia(func() { cl.receive(t) })
		// The browser's sender reports: read so that our receiver reports answer them.
		cl.goMedia(func() { drain(func() error { _, _, err := recv.ReadRTCP(); return err }) })
	})
	cl.pc.OnDataChannel(func(dc *webrtc.DataChannel) {
		if dc.Label() != "oai-events" {
			return
		}
		dc.OnOpen(func() { cl.dc.open(dc) })
		dc.OnClose(cl.dc.onClose)
		dc.OnMessage(func(msg webrtc.DataChannelMessage) {
			if cl.waitReady() {
				cl.dc.deliver(msg.Data)
			}
		})
	})
	cl.pc.OnConnectionStateChange(func(s webrtc.PeerConnectionState) {
		switch s {
		case webrtc.PeerConnectionStateConnected:
			cl.connectBy.Stop()
		case webrtc.PeerConnectionStateFailed, webrtc.PeerConnectionStateClosed:
			cl.end(session.ReasonDisconnect)
		}
	})
}

// drain calls read until it fails (the peer connection closed).
func drain(read func() error) {
	for read() == nil {
	}
}

// answer answers offer on pc, with every candidate gathered (at most 5 s).
func answer(ctx context.Context, pc *webrtc.PeerConnection, offer string) (string, error) {
	if err := pc.SetRemoteDescription(webrtc.SessionDescription{Type: webrtc.SDPTypeOffer, SDP: offer}); err != nil {
		return "", err
	}
	ans, err := pc.CreateAnswer(nil)
	if err != nil {
		return "", err
	}
	gathered := webrtc.GatheringCompletePromise(pc)
	if err := pc.SetLocalDescription(ans); err != nil {
		return "", err
	}
	timer := time.NewTimer(5 * time.Second)
	defer timer.Stop()
	select {
	case <-gathered:
	case <-ctx.Done():
		return "", ctx.Err()
	case <-timer.C:
	}
	return pc.LocalDescription().SDP, nil
}

// ServeHTTP routes POST /v1/realtime/calls and POST /v1/realtime/calls/{id}/hangup, and
// GPT-Live's POST /v1/live/sessions and GET /v1/live/sessions/{id}/attach.
func (c *Calls) ServeHTTP(w http.ResponseWriter, r *http.Request) {
	if rest, ok := strings.CutPrefix(r.URL.Path, LivePath); ok {
		c.serveLive(w, r, rest)
		return
	}
	rest, _ := strings.CutPrefix(r.URL.Path, "/v1/realtime/calls")
	switch {
	case rest == "" || rest == "/":
		if r.Method != http.MethodPost {
			callError(w, http.StatusMethodNotAllowed, "method_not_allowed", "", r.Method+" is not allowed on "+r.URL.Path)
			return
		}
		c.Create(w, r)
	case strings.HasSuffix(rest, "/hangup") && strings.Count(rest, "/") == 2:
		if r.Method != http.MethodPost {
			callError(w, http.StatusMethodNotAllowed, "method_not_allowed", "", r.Method+" is not allowed on "+r.URL.Path)
			return
		}
		c.Hangup(w, r, strings.TrimSuffix(strings.TrimPrefix(rest, "/"), "/hangup"))
	default:
		callError(w, http.StatusNotFound, "not_found", "", "no route for "+r.Method+" "+r.URL.Path)
	}
}

// serveLive routes the Live paths under LivePath (rest is what follows it).
func (c *Calls) serveLive(w http.ResponseWriter, r *http.Request, rest string) {
	switch {
	case (rest == "" || rest == "/") && r.Method == http.MethodPost:
		c.CreateLive(w, r)
	case strings.HasSuffix(rest, "/attach") && strings.Count(rest, "/") == 2 && r.Method == http.MethodGet:
		c.Attach(w, r, strings.TrimSuffix(strings.TrimPrefix(rest, "/"), "/attach"))
	default:
		callError(w, http.StatusNotFound, "not_found", "", "no route for "+r.Method+" "+r.URL.Path)
	}
}

// RTPStats are the live calls' RTP figures, by call id.
func (c *Calls) RTPStats() []RTPStats {
	c.mu.Lock()
	live := make([]*call, 0, len(c.calls))
	for _, cl := range c.calls {
		live = append(live, cl)
	}
	c.mu.Unlock()
	out := make([]RTPStats, 0, len(live))
	for _, cl := range live {
		out = append(out, cl.rtp.Snapshot(cl.id))
	}
	sort.Slice(out, func(i, j int) bool { return out[i].CallID < out[j].CallID })
	return out
}

// EndedRTP are the totals of the calls that have ended.
func (c *Calls) EndedRTP() RTPTotals {
	c.mu.Lock()
	defer c.mu.Unlock()
	return c.ended
}
