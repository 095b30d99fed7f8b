// Package rtcclient is a WebRTC client of the OpenAI Realtime API as a browser speaks it (OpenAI's
// WebRTC guide, docs/REALTIME.md "WebRTC"): it POSTs an SDP offer to /v1/realtime/calls
// (application/sdp with an ek_ key, or multipart sdp + session with the API key), exchanges
// events on the "oai-events" data channel, sends a microphone as Opus RTP paced by the clock in
// 20 ms frames, and decodes the answer's RTP to PCM with arrival times, so that tests and the
// latency bench can tell when the reply became audible. It is a client: it imports no server
// code, only the protocol's types and the Opus binding of internal/speech.
package rtcclient

import (
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"mime/multipart"
	"net/http"
	"net/textproto"
	"slices"
	"strings"
	"sync"
	"sync/atomic"
	"time"

	"github.com/pion/interceptor/pkg/stats"
	"github.com/pion/webrtc/v4"
	"github.com/pion/webrtc/v4/pkg/media"

	"github.com/omniserve/omniserve/internal/protocol"
	"github.com/omniserve/omniserve/internal/speech"
)

// AudibleLevel is the default level above which a decoded sample counts as audible: −40 dBFS,
// the latency bench's definition for WebSocket replies too.
const AudibleLevel = 0.01

// Config says where to call and what the call carries.
type Config struct {
	// BaseURL is the server's http(s)://host:port; the call is POSTed to BaseURL +
	// /v1/realtime/calls.
	BaseURL string
	// Key is the bearer token: an ek_ client secret (the offer is sent as application/sdp) or
	// the API key (with Session, as multipart/form-data).
	Key string
	// Session, when set, is the session object of the multipart form (JSON; "type":"realtime").
	Session json.RawMessage
	// Live, when set, makes a GPT-Live session instead of a Realtime call: the offer is POSTed
	// to BaseURL + /v1/live/sessions as {session: Live, transport: {type: "webrtc", sdp}} (a
	// MediaSessionConfig, JSON), and the answer's session id is SessionID.
	Live json.RawMessage
	// Signal, when set, exchanges the offer for the answer instead of the POST: the app's own
	// server makes the session (e.g. with an SDK), as a browser's page has it done.
	Signal func(ctx context.Context, offer string) (answer string, err error)
	// MicRate is the rate of the PCM16 that Speak takes (8000, 12000, 16000, 24000 or 48000;
	// 8000 for G.711); 0 = no microphone: the call only receives audio.
	MicRate int
	// Codec is what the call offers: CodecOpus (the default, with pion's other codecs, as a
	// browser offers), CodecPCMU or CodecPCMA (that codec alone).
	Codec string
	// OutRate is the rate the received Opus is decoded to (G.711 stays at 8000). Default 24000.
	OutRate int
	// Audible is the level (0..1 of full scale) a decoded sample must reach to be audible.
	// Default AudibleLevel.
	Audible float64
	// EventBuffer bounds the received events not yet read. Default 8192; a full buffer fails
	// the next read (ErrEventOverflow) instead of blocking the data channel.
	EventBuffer int
	// HTTP is the client of the signalling requests. Default: a 30 s timeout.
	HTTP *http.Client
}

// ErrEventOverflow is returned once the event buffer was full and an event was lost.
var ErrEventOverflow = errors.New("rtcclient: the event buffer overflowed: an event was lost")

// HTTPError is a refused signalling request: the status and OpenAI's error envelope.
type HTTPError struct {
	Status                     int
	Type, Code, Param, Message string
	Body                       string
}

func (e *HTTPError) Error() string {
	if e.Message != "" {
		return fmt.Sprintf("rtcclient: HTTP %d: %s (%s)", e.Status, e.Message, e.Code)
	}
	return fmt.Sprintf("rtcclient: HTTP %d: %q", e.Status, e.Body)
}

// Event is one server event from the data channel.
type Event struct {
	Type string
	At   time.Time      // arrival
	Data []byte         // the JSON as received
	M    map[string]any // the JSON decoded
}

// ResponseID is the event's response_id, or response.id for response.* lifecycle events.
func (e Event) ResponseID() string {
	if id, ok := e.M["response_id"].(string); ok {
		return id
	}
	if r, ok := e.M["response"].(map[string]any); ok {
		id, _ := r["id"].(string)
		return id
	}
	return ""
}

// Typed decodes the event into internal/protocol's server event types (protocol.OtherEvent for
// a type it has none for).
func (e Event) Typed() (protocol.ServerEvent, error) {
	ev, _, err := protocol.DecodeServerEvent(e.Data)
	if err != nil {
		return nil, fmt.Errorf("rtcclient: %w", err)
	}
	return ev, nil
}

// Client is one call. Its methods are safe for concurrent use, except that Next and WaitFor
// are for one reader.
type Client struct {
	cfg      Config
	pc       *webrtc.PeerConnection
	dc       *webrtc.DataChannel
	mic      *webrtc.TrackLocalStaticSample
	location string
	liveID   string // a Live session's id (Config.Live)

	ctx    context.Context // cancelled by Close: ends Speak and the reader goroutines
	cancel context.CancelFunc
	wg     sync.WaitGroup

	events   chan Event
	overflow atomic.Bool
	dcOpen   chan struct{}
	dcClosed chan struct{}
	seen     []string // types read by Next, in order (the reader's)

	mu         sync.Mutex
	closed     bool
	codec      string
	packets    int64
	bytes      int64
	firstPkt   time.Time
	arrivals   []int64 // every packet's arrival (Unix ns), in order; bounded by maxKept
	audible    []int64 // first audible sample of each audible packet (Unix ns), in arrival order
	lastPkt    time.Time
	onAudio    func(Packet)
	stats      stats.Getter // the interceptor's statistics (nil until the peer connection binds it)
	micSSRC    uint32
	readerErrs []error
}

// Packet is one received RTP packet, decoded.
type Packet struct {
	At      time.Time
	Seq     uint16
	Marker  bool
	PCM     []int16   // mono at OutRate for Opus, 8 kHz for G.711 (nil for another codec)
	Audible time.Time // when its first audible sample sounds, played back to back from arrival (zero: none)
}

// Dial makes the call: the offer POSTed, the answer applied. It returns once the server
// answered 201; the data channel opens shortly after (WaitFor "session.created").
func Dial(ctx context.Context, cfg Config) (*Client, error) {
	if cfg.OutRate == 0 {
		cfg.OutRate = 24000
	}
	if cfg.Audible == 0 {
		cfg.Audible = AudibleLevel
	}
	if cfg.EventBuffer == 0 {
		cfg.EventBuffer = 8192
	}
	if cfg.HTTP == nil {
		cfg.HTTP = &http.Client{Timeout: 30 * time.Second}
	}
	cctx, cancel := context.WithCancel(context.Background())
	c := &Client{cfg: cfg, ctx: cctx, cancel: cancel, events: make(chan Event, cfg.EventBuffer),
		dcOpen: make(chan struct{}), dcClosed: make(chan struct{})}
	pc, err := newPeerConnection(cfg.Codec, func(g stats.Getter) {
		c.mu.Lock()
		c.stats = g
		c.mu.Unlock()
	})
	if err != nil {
		cancel()
		return nil, fmt.Errorf("rtcclient: peer connection: %w", err)
	}
	c.pc = pc
	if err := c.setup(ctx); err != nil {
		_ = c.Close()
		return nil, err
	}
	return c, nil
}

func (c *Client) setup(ctx context.Context) error {
	if c.cfg.MicRate > 0 {
		capab, _, err := codecCapability(c.cfg.Codec)
		if err != nil {
			return err
		}
		mic, err := webrtc.NewTrackLocalStaticSample(capab, "mic", "rtcclient")
		if err != nil {
			return fmt.Errorf("rtcclient: microphone track: %w", err)
		}
		sender, err := c.pc.AddTrack(mic)
		if err != nil {
			return fmt.Errorf("rtcclient: microphone track: %w", err)
		}
		c.mic = mic
		if enc := sender.GetParameters().Encodings; len(enc) > 0 {
			c.micSSRC = uint32(enc[0].SSRC)
		}
		// The sender's RTCP (the server's receiver reports) must be read for the interceptors
		// to process it.
		c.wg.Add(1)
		go func() {
			defer c.wg.Done()
			buf := make([]byte, 1500)
			for {
				if _, _, err := sender.Read(buf); err != nil {
					return
				}
			}
		}()
	} else if _, err := c.pc.AddTransceiverFromKind(webrtc.RTPCodecTypeAudio, webrtc.RTPTransceiverInit{Direction: webrtc.RTPTransceiverDirectionRecvonly}); err != nil {
		return fmt.Errorf("rtcclient: audio transceiver: %w", err)
	}
	dc, err := c.pc.CreateDataChannel("oai-events", nil)
	if err != nil {
		return fmt.Errorf("rtcclient: data channel: %w", err)
	}
	c.dc = dc
	var openOnce, closeOnce sync.Once
	dc.OnOpen(func() { openOnce.Do(func() { close(c.dcOpen) }) })
	dc.OnClose(func() { closeOnce.Do(func() { close(c.dcClosed) }) })
	dc.OnMessage(func(m webrtc.DataChannelMessage) {
		ev := Event{At: time.Now(), Data: slices.Clone(m.Data)}
		if json.Unmarshal(m.Data, &ev.M) != nil {
			ev.Type = "(not JSON)"
		} else {
			ev.Type, _ = ev.M["type"].(string)
		}
		select {
		case c.events <- ev:
		default:
			c.overflow.Store(true)
		}
	})
	c.pc.OnTrack(func(tr *webrtc.TrackRemote, recv *webrtc.RTPReceiver) {
		c.mu.Lock()
		defer c.mu.Unlock()
		if c.closed {
			return
		}
		c.codec = strings.ToLower(tr.Codec().MimeType)
		c.wg.Add(2)
		go c.readTrack(tr)
		// The server's sender reports: read, as a browser does, so that the interceptors answer
		// them in receiver reports (LSR/DLSR: the server measures the round trip from those).
		go func() {
			defer c.wg.Done()
			for {
				if _, _, err := recv.ReadRTCP(); err != nil {
					return
				}
			}
		}()
	})

	offer, err := c.pc.CreateOffer(nil)
	if err != nil {
		return fmt.Errorf("rtcclient: offer: %w", err)
	}
	if err := c.pc.SetLocalDescription(offer); err != nil {
		return fmt.Errorf("rtcclient: offer: %w", err)
	}
	answer, loc, err := c.post(ctx, offer.SDP)
	if err != nil {
		return err
	}
	c.location = loc
	if err := c.pc.SetRemoteDescription(webrtc.SessionDescription{Type: webrtc.SDPTypeAnswer, SDP: answer}); err != nil {
		return fmt.Errorf("rtcclient: answer: %w", err)
	}
	return nil
}

// post sends the offer as the guide does and returns the answer and the Location header.
func (c *Client) post(ctx context.Context, offer string) (answer, location string, err error) {
	if c.cfg.Signal != nil {
		answer, err := c.cfg.Signal(ctx, offer)
		if err != nil {
			return "", "", fmt.Errorf("rtcclient: signalling: %w", err)
		}
		return answer, "", nil
	}
	if c.cfg.Live != nil {
		return c.postLive(ctx, offer)
	}
	var body bytes.Buffer
	ctype := "application/sdp"
	if c.cfg.Session != nil {
		mw := multipart.NewWriter(&body)
		for _, p := range []struct{ name, ctype, data string }{{"sdp", "application/sdp", offer}, {"session", "application/json", string(c.cfg.Session)}} {
			w, err := mw.CreatePart(textproto.MIMEHeader{"Content-Disposition": {`form-data; name="` + p.name + `"`}, "Content-Type": {p.ctype}})
			if err != nil {
				return "", "", err
			}
			_, _ = io.WriteString(w, p.data)
		}
		if err := mw.Close(); err != nil {
			return "", "", err
		}
		ctype = mw.FormDataContentType()
	} else {
		body.WriteString(offer)
	}
	resp, b, err := c.create(ctx, "/v1/realtime/calls", ctype, "application/sdp", &body)
	if err != nil {
		return "", "", err
	}
	if ct := resp.Header.Get("Content-Type"); !strings.HasPrefix(ct, "application/sdp") {
		return "", "", fmt.Errorf("rtcclient: the answer is %q, not application/sdp", ct)
	}
	return string(b), resp.Header.Get("Location"), nil
}

// postLive creates a GPT-Live session with the offer (OpenAI's Live WebRTC guide: the app's
// server POSTs it as JSON) and returns the answer; the session's id is kept for SessionID.
func (c *Client) postLive(ctx context.Context, offer string) (answer, location string, err error) {
	body, err := json.Marshal(map[string]any{"session": c.cfg.Live, "transport": map[string]string{"type": "webrtc", "sdp": offer}})
	if err != nil {
		return "", "", fmt.Errorf("rtcclient: the Live session: %w", err)
	}
	_, b, err := c.create(ctx, "/v1/live/sessions", "application/json", "application/json", bytes.NewReader(body))
	if err != nil {
		return "", "", err
	}
	var created struct {
		Session struct {
			ID string `json:"id"`
		} `json:"session"`
		Transport struct {
			Type string `json:"type"`
			SDP  string `json:"sdp"`
		} `json:"transport"`
	}
	if err := json.Unmarshal(b, &created); err != nil || created.Transport.Type != "webrtc" || created.Transport.SDP == "" || created.Session.ID == "" {
		return "", "", fmt.Errorf("rtcclient: the Live answer is not {session: {id}, transport: {type: webrtc, sdp}}: %q", b)
	}
	c.liveID = created.Session.ID
	return created.Transport.SDP, "", nil
}

// SessionID is a Live session's id (Config.Live), as the POST answered it.
func (c *Client) SessionID() string { return c.liveID }

// create POSTs an offer's body (ctype) to path with the client's key, asking for accept, and
// returns the 201 answer; any other status is an *HTTPError.
func (c *Client) create(ctx context.Context, path, ctype, accept string, body io.Reader) (*http.Response, []byte, error) {
	req, err := http.NewRequestWithContext(ctx, http.MethodPost, c.cfg.BaseURL+path, body)
	if err != nil {
		return nil, nil, fmt.Errorf("rtcclient: %w", err)
	}
	req.Header.Set("Content-Type", ctype)
	req.Header.Set("Accept", accept)
	if c.cfg.Key != "" {
		req.Header.Set("Authorization", "Bearer "+c.cfg.Key)
	}
	resp, b, err := c.do(req)
	if err != nil {
		return nil, nil, err
	}
	if resp.StatusCode != http.StatusCreated {
		return nil, nil, httpError(resp.StatusCode, b)
	}
	return resp, b, nil
}

func (c *Client) do(req *http.Request) (*http.Response, []byte, error) {
	resp, err := c.cfg.HTTP.Do(req)
	if err != nil {
		return nil, nil, fmt.Errorf("rtcclient: %s %s: %w", req.Method, req.URL.Path, err)
	}
	defer resp.Body.Close()
	b, err := io.ReadAll(io.LimitReader(resp.Body, 1<<20))
	if err != nil {
		return nil, nil, fmt.Errorf("rtcclient: %s %s: %w", req.Method, req.URL.Path, err)
	}
	return resp, b, nil
}

func httpError(status int, body []byte) *HTTPError {
	var env struct {
		Error struct {
			Type, Code, Param, Message string
		}
	}
	_ = json.Unmarshal(body, &env)
	e := env.Error
	return &HTTPError{Status: status, Type: e.Type, Code: e.Code, Param: e.Param, Message: e.Message, Body: string(body)}
}

// Location is the call's URL path, /v1/realtime/calls/rtc_….
func (c *Client) Location() string { return c.location }

// CallID is the call's id (rtc_…), the last segment of Location.
func (c *Client) CallID() string { return c.location[strings.LastIndexByte(c.location, '/')+1:] }

// PeerConnection is the underlying pion peer, for statistics.
func (c *Client) PeerConnection() *webrtc.PeerConnection { return c.pc }

// ChannelClosed is closed when the data channel closes (the server hung up).
func (c *Client) ChannelClosed() <-chan struct{} { return c.dcClosed }

// --- events -------------------------------------------------------------------------------

// Next returns the next server event.
func (c *Client) Next(ctx context.Context) (Event, error) {
	select {
	case ev := <-c.events:
		c.seen = append(c.seen, ev.Type)
		return ev, nil
	default:
	}
	if c.overflow.Load() {
		return Event{}, ErrEventOverflow
	}
	select {
	case ev := <-c.events:
		c.seen = append(c.seen, ev.Type)
		return ev, nil
	case <-ctx.Done():
		return Event{}, fmt.Errorf("rtcclient: waiting for an event: %w", ctx.Err())
	case <-c.ctx.Done():
		return Event{}, errors.New("rtcclient: closed")
	}
}

// WaitFor reads events until one of type typ, for at most d. An error event is returned as an
// error unless typ is "error".
func (c *Client) WaitFor(ctx context.Context, typ string, d time.Duration) (Event, error) {
	ctx, cancel := context.WithTimeout(ctx, d)
	defer cancel()
	for {
		ev, err := c.Next(ctx)
		if err != nil {
			return ev, fmt.Errorf("no %s within %v (last events %v): %w", typ, d, c.lastSeen(20), err)
		}
		if ev.Type == typ {
			return ev, nil
		}
		if ev.Type == "error" {
			return ev, fmt.Errorf("rtcclient: error event while waiting for %s: %s", typ, ev.Data)
		}
	}
}

// Seen is the types of every event read so far, in order.
func (c *Client) Seen() []string { return slices.Clone(c.seen) }

func (c *Client) lastSeen(n int) []string { return c.seen[max(0, len(c.seen)-n):] }

// Send sends a client event of internal/protocol on the data channel.
func (c *Client) Send(ev protocol.ClientEvent) error {
	b, err := encodeEvent(ev)
	if err != nil {
		return err
	}
	return c.SendJSON(b)
}

// UpdateSession sends session.update with session (marshalled as JSON).
func (c *Client) UpdateSession(session any) error {
	b, err := json.Marshal(map[string]any{"type": "session.update", "session": session})
	if err != nil {
		return fmt.Errorf("rtcclient: session.update: %w", err)
	}
	return c.SendJSON(b)
}

// SendJSON sends one event as written.
func (c *Client) SendJSON(b []byte) error {
	select {
	case <-c.dcOpen:
	case <-c.ctx.Done():
		return errors.New("rtcclient: closed")
	}
	if err := c.dc.SendText(string(b)); err != nil {
		return fmt.Errorf("rtcclient: sending on oai-events: %w", err)
	}
	return nil
}

// --- microphone -----------------------------------------------------------------------------

// Speak sends pcm (mono PCM16 at MicRate) as the microphone: one 20 ms Opus frame at each
// start + k·20 ms (a zero start: now), the last partial frame padded with silence. It returns
// when the last frame is sent, ctx ends or the client closes.
func (c *Client) Speak(ctx context.Context, pcm []int16, start time.Time) error {
	m, err := c.Microphone()
	if err != nil {
		return err
	}
	defer m.Close()
	if start.IsZero() {
		start = time.Now()
	}
	frame := m.FrameSamples()
	timer := time.NewTimer(0)
	defer timer.Stop()
	<-timer.C
	for k, i := 0, 0; i < len(pcm); k, i = k+1, i+frame {
		timer.Reset(time.Until(start.Add(time.Duration(k) * speech.OpusFrameMs * time.Millisecond)))
		select {
		case <-timer.C:
		case <-ctx.Done():
			return ctx.Err()
		case <-c.ctx.Done():
			return errors.New("rtcclient: closed")
		}
		if err := m.Send(pcm[i:min(i+frame, len(pcm))]); err != nil {
			return err
		}
	}
	return nil
}

// Microphone is the call's microphone fed one frame at a time by a caller that paces it (a
// microphone that never stops, as a browser's): one encoder for the whole stream, its state
// carried from frame to frame. For one goroutine.
type Microphone struct {
	c   *Client
	enc encoder
	pkt []byte
	buf []int16
}

// Microphone opens a microphone stream on the call (Config.MicRate); Close frees its encoder.
func (c *Client) Microphone() (*Microphone, error) {
	if c.mic == nil {
		return nil, errors.New("rtcclient: the call has no microphone (Config.MicRate)")
	}
	enc, err := newEncoder(c.cfg.Codec, c.cfg.MicRate)
	if err != nil {
		return nil, fmt.Errorf("rtcclient: microphone: %w", err)
	}
	return &Microphone{c: c, enc: enc, pkt: make([]byte, 1500), buf: make([]int16, enc.FrameSamples())}, nil
}

// FrameSamples is the samples of one frame at MicRate (20 ms).
func (m *Microphone) FrameSamples() int { return len(m.buf) }

// Send encodes pcm (at most one frame; a short one is padded with silence) and writes it now.
func (m *Microphone) Send(pcm []int16) error {
	if len(pcm) > len(m.buf) {
		return fmt.Errorf("rtcclient: microphone: %d samples, a frame is %d", len(pcm), len(m.buf))
	}
	if m.c.ctx.Err() != nil {
		return errors.New("rtcclient: closed")
	}
	clear(m.buf)
	copy(m.buf, pcm)
	n, err := m.enc.Encode(m.buf, m.pkt)
	if err != nil {
		return fmt.Errorf("rtcclient: microphone: %w", err)
	}
	if err := m.c.mic.WriteSample(media.Sample{Data: slices.Clone(m.pkt[:n]), Duration: speech.OpusFrameMs * time.Millisecond}); err != nil {
		return fmt.Errorf("rtcclient: microphone: %w", err)
	}
	return nil
}

// Close frees the encoder.
func (m *Microphone) Close() { m.enc.Close() }

// StartSpeaking runs Speak in a goroutine the client owns (Close ends and waits for it); the
// channel gets its result.
func (c *Client) StartSpeaking(pcm []int16, start time.Time) <-chan error {
	done := make(chan error, 1)
	c.mu.Lock()
	defer c.mu.Unlock()
	if c.closed {
		done <- errors.New("rtcclient: closed")
		return done
	}
	c.wg.Add(1)
	go func() {
		defer c.wg.Done()
		done <- c.Speak(c.ctx, pcm, start)
	}()
	return done
}

// --- received audio -----------------------------------------------------------------------

// maxKept bounds the arrival times kept for FirstAudibleAfter and FirstPacketAfter: an hour of
// 20 ms packets.
const maxKept = 180000

// keep appends v to a bounded series, dropping its oldest thousand when full.
func keep(s []int64, v int64) []int64 {
	if len(s) >= maxKept {
		s = slices.Delete(s, 0, 1000)
	}
	return append(s, v)
}

// OnAudio sets a function called with every received packet, on the reader goroutine and under
// the client's lock: once OnAudio returns, the previous function is not running and is not
// called again. f must be short and must not call the client's methods.
func (c *Client) OnAudio(f func(Packet)) {
	c.mu.Lock()
	defer c.mu.Unlock()
	c.onAudio = f
}

// playout places received audio in time the simplest way a player can: a packet plays from
// its arrival, or after the one before it while that still plays (a server may write a
// talk-spurt's first frames at once), as a WebSocket client plays deltas back to back.
type playout struct{ end time.Time }

// place returns when audio of duration d that arrived at at starts to play.
func (p *playout) place(at time.Time, d time.Duration) time.Time {
	start := at
	if p.end.After(start) {
		start = p.end
	}
	p.end = start.Add(d)
	return start
}

func (c *Client) readTrack(tr *webrtc.TrackRemote) {
	defer c.wg.Done()
	dec, rate, err := newDecoder(tr.Codec().MimeType, c.cfg.OutRate)
	if err != nil {
		c.mu.Lock()
		c.readerErrs = append(c.readerErrs, err)
		c.mu.Unlock()
		dec = nil
	}
	if dec != nil {
		defer dec.Close()
	}
	pcm := make([]int16, rate*120/1000) // the longest packet: 120 ms
	level := int16(c.cfg.Audible * 32767)
	var play playout
	for {
		p, _, err := tr.ReadRTP()
		if err != nil {
			return
		}
		pk := Packet{At: time.Now(), Seq: p.SequenceNumber, Marker: p.Marker}
		if dec != nil {
			n, err := dec.Decode(p.Payload, pcm)
			if err == nil {
				pk.PCM = slices.Clone(pcm[:n])
				start := play.place(pk.At, time.Duration(n)*time.Second/time.Duration(rate))
				for i, v := range pk.PCM {
					if v >= level || v <= -level {
						pk.Audible = start.Add(time.Duration(i) * time.Second / time.Duration(rate))
						break
					}
				}
			}
		}
		c.mu.Lock()
		c.packets++
		c.bytes += int64(len(p.Payload))
		if c.firstPkt.IsZero() {
			c.firstPkt = pk.At
		}
		c.lastPkt = pk.At
		c.arrivals = keep(c.arrivals, pk.At.UnixNano())
		if !pk.Audible.IsZero() {
			c.audible = keep(c.audible, pk.Audible.UnixNano())
		}
		if c.onAudio != nil {
			c.onAudio(pk)
		}
		c.mu.Unlock()
	}
}

// Stats are the received audio so far.
type Stats struct {
	Codec          string // "audio/opus", lower case; "" before the track arrived
	Packets, Bytes int64
	FirstPacket    time.Time
	LastPacket     time.Time
	FirstAudible   time.Time
	AudiblePackets int
	// MicRTT is the round trip measured from the server's RTCP receiver reports on the
	// microphone (MicRTTMeasured: at least one report answered a sender report of ours).
	MicRTT         time.Duration
	MicRTTMeasured bool
	// DecoderErr is why received Opus could not be decoded (nil: it could).
	DecoderErr error
}

// Stats returns the received audio's figures.
func (c *Client) Stats() Stats {
	c.mu.Lock()
	defer c.mu.Unlock()
	s := Stats{Codec: c.codec, Packets: c.packets, Bytes: c.bytes, FirstPacket: c.firstPkt, LastPacket: c.lastPkt,
		AudiblePackets: len(c.audible)}
	if len(c.audible) > 0 {
		s.FirstAudible = time.Unix(0, c.audible[0])
	}
	if len(c.readerErrs) > 0 {
		s.DecoderErr = c.readerErrs[0]
	}
	if c.stats != nil && c.micSSRC != 0 {
		if st := c.stats.Get(c.micSSRC); st != nil {
			s.MicRTT = st.RemoteInboundRTPStreamStats.RoundTripTime
			s.MicRTTMeasured = st.RemoteInboundRTPStreamStats.RoundTripTimeMeasurements > 0
		}
	}
	return s
}

// FirstAudibleAfter is when the first audible sample at or after t sounded (zero: none yet).
func (c *Client) FirstAudibleAfter(t time.Time) time.Time {
	c.mu.Lock()
	defer c.mu.Unlock()
	return firstAfter(c.audible, t)
}

// FirstPacketAfter is the arrival of the first packet at or after t (zero: none yet).
func (c *Client) FirstPacketAfter(t time.Time) time.Time {
	c.mu.Lock()
	defer c.mu.Unlock()
	return firstAfter(c.arrivals, t)
}

func firstAfter(s []int64, t time.Time) time.Time {
	if t.IsZero() {
		t = time.Unix(0, 0)
	}
	if i, _ := slices.BinarySearch(s, t.UnixNano()); i < len(s) {
		return time.Unix(0, s[i])
	}
	return time.Time{}
}

// --- ending -------------------------------------------------------------------------------

// Hangup asks the server to end the call (POST …/hangup with key: the API key).
func (c *Client) Hangup(ctx context.Context, key string) error {
	req, err := http.NewRequestWithContext(ctx, http.MethodPost, c.cfg.BaseURL+c.location+"/hangup", nil)
	if err != nil {
		return fmt.Errorf("rtcclient: hangup: %w", err)
	}
	req.Header.Set("Authorization", "Bearer "+key)
	resp, b, err := c.do(req)
	if err != nil {
		return err
	}
	if resp.StatusCode != http.StatusOK {
		return httpError(resp.StatusCode, b)
	}
	return nil
}

// Close closes the peer connection and waits for every goroutine the client started.
func (c *Client) Close() error {
	c.mu.Lock()
	c.closed = true
	c.mu.Unlock()
	c.cancel()
	err := c.pc.Close()
	c.wg.Wait()
	if err != nil {
		return fmt.Errorf("rtcclient: close: %w", err)
	}
	return nil
}
