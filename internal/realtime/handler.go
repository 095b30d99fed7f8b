package realtime

import (
	"context"
	"crypto/rand"
	"encoding/hex"
	"encoding/json"
	"fmt"
	"io"
	"net/http"
	"strings"
	"sync"
	"sync/atomic"
	"time"

	"github.com/coder/websocket"
	"go.uber.org/zap"

	"github.com/omniserve/omniserve/internal/auth"
	"github.com/omniserve/omniserve/internal/session"
)

// HandlerConfig configures the endpoint. Zero values take the documented defaults.
type HandlerConfig struct {
	// APIKey, when set, is required as "Authorization: Bearer <key>" or as the
	// "openai-insecure-api-key.<key>" WebSocket subprotocol (browser clients).
	APIKey string
	// HandshakeTimeout is no longer used: the session exists from the upgrade on (session.created
	// goes out at once, as OpenAI sends it) and its idle timeout bounds a silent client.
	// Deprecated: kept so that existing configurations still compile.
	HandshakeTimeout time.Duration
	// MaxEventBytes is the largest inbound event. Default 15 MiB.
	MaxEventBytes int64
	// SendQueue bounds queued outbound model events per connection. Default 512.
	SendQueue int
	// SendQueueBytes bounds the bytes of queued outbound events per connection (estimated
	// from their fields); a client that lets more pile up is closed as too slow (1008).
	// Default 16 MiB.
	SendQueueBytes int
	// WriteTimeout bounds one frame write; a client that cannot take a frame in time is gone.
	// Default 5 s.
	WriteTimeout time.Duration
	// BaseContext is the server-owned parent of every session (never the request context, which
	// ends with the upgrade). Default context.Background().
	BaseContext context.Context
	// OriginPatterns are extra allowed browser origins (coder/websocket AcceptOptions).
	OriginPatterns []string
}

func (c HandlerConfig) withDefaults() HandlerConfig {
	if c.HandshakeTimeout <= 0 {
		c.HandshakeTimeout = 10 * time.Second
	}
	if c.MaxEventBytes <= 0 {
		c.MaxEventBytes = 15 << 20
	}
	if c.SendQueue <= 0 {
		c.SendQueue = 512
	}
	if c.SendQueueBytes <= 0 {
		c.SendQueueBytes = 16 << 20
	}
	if c.WriteTimeout <= 0 {
		c.WriteTimeout = 5 * time.Second
	}
	if c.BaseContext == nil {
		c.BaseContext = context.Background()
	}
	return c
}

type handler struct {
	cfg      HandlerConfig
	sessions *session.Manager
	log      *zap.Logger
}

// NewHandler returns the /v1/realtime endpoint. Mount it for GET; it answers 401 (bad key) and
// 503 (no admission slot) before the upgrade.
func NewHandler(cfg HandlerConfig, sessions *session.Manager, log *zap.Logger) http.Handler {
	if log == nil {
		log = zap.NewNop()
	}
	return &handler{cfg: cfg.withDefaults(), sessions: sessions, log: log.Named("realtime")}
}

// authorized applies the server's one key check (internal/auth), so the endpoint mounted
// on its own (tests, other routers) accepts exactly what the /v1 middleware accepts.
func (h *handler) authorized(r *http.Request) bool {
	return auth.Check(r, h.cfg.APIKey) == auth.OK
}

func writeHTTPError(w http.ResponseWriter, status int, typ, code, msg string) {
	w.Header().Set("Content-Type", "application/json")
	w.WriteHeader(status)
	_ = json.NewEncoder(w).Encode(map[string]any{"error": map[string]any{"message": msg, "type": typ, "code": code, "param": nil}})
}

func truthy(v string) bool {
	switch strings.ToLower(v) {
	case "1", "true", "on", "yes":
		return true
	}
	return false
}

func (h *handler) ServeHTTP(w http.ResponseWriter, r *http.Request) {
	if !h.authorized(r) {
		writeHTTPError(w, http.StatusUnauthorized, "invalid_request_error", "invalid_api_key", "missing or invalid API key")
		return
	}
	duplex := truthy(r.URL.Query().Get("duplex"))
	beta := isBeta(r)
	slot, err := h.sessions.Acquire()
	if err != nil {
		w.Header().Set("Retry-After", "1")
		writeHTTPError(w, http.StatusServiceUnavailable, "rate_limit_error", "resource_exhausted", err.Error())
		return
	}
	defer slot.Release()
	protos := []string{"realtime"}
	if beta && offersProtocol(r, betaProtocol) && !offersProtocol(r, "realtime") {
		protos = append(protos, betaProtocol)
	}
	ws, err := websocket.Accept(w, r, &websocket.AcceptOptions{Subprotocols: protos, OriginPatterns: h.cfg.OriginPatterns})
	if err != nil {
		h.log.Debug("websocket upgrade failed", zap.Error(err))
		return
	}
	// Reads are bounded by hand (MaxEventBytes → event_too_large, the connection survives); the
	// library limit only stops abuse far beyond that.
	ws.SetReadLimit(4*h.cfg.MaxEventBytes + 1<<20)
	c := &conn{h: h, ws: ws, q: newOutQueue(h.cfg.SendQueue, h.cfg.SendQueueBytes), log: h.log, beta: beta}
	c.serve(duplex, r.URL.Query().Get("model"), slot)
}

const betaProtocol = "openai-beta.realtime-v1"

// isBeta reports a beta Realtime client: the OpenAI-Beta: realtime=v1 header or the
// openai-beta.realtime-v1 subprotocol. The dialect is fixed for the connection.
func isBeta(r *http.Request) bool {
	for _, v := range r.Header.Values("OpenAI-Beta") {
		for _, p := range strings.Split(v, ",") {
			if strings.EqualFold(strings.TrimSpace(p), "realtime=v1") {
				return true
			}
		}
	}
	return offersProtocol(r, betaProtocol)
}

func offersProtocol(r *http.Request, proto string) bool {
	for _, line := range r.Header.Values("Sec-WebSocket-Protocol") {
		for _, p := range strings.Split(line, ",") {
			if strings.TrimSpace(p) == proto {
				return true
			}
		}
	}
	return false
}

// conn is one WebSocket connection: the handler goroutine reads, one writer goroutine writes,
// one session actor owns the session state.
type conn struct {
	h    *handler
	ws   *websocket.Conn
	q    *outQueue
	log  *zap.Logger
	seq  int64
	beta bool // beta dialect: beta event names
	// sess is set once the session exists; the writer stops it when the client stops reading.
	sess atomic.Pointer[session.DuplexSession]
}

func (c *conn) serve(duplex bool, model string, slot *session.Slot) {
	ctx, cancel := context.WithCancel(c.h.cfg.BaseContext)
	defer cancel()
	var wg sync.WaitGroup
	writerDone := make(chan struct{})
	wg.Add(1)
	go func() { defer wg.Done(); defer close(writerDone); c.writeLoop(ctx) }()
	finish := func(code websocket.StatusCode, reason string) {
		c.q.close()
		select {
		case <-writerDone:
		case <-time.After(c.h.cfg.WriteTimeout):
		}
		if code == 0 {
			_ = c.ws.CloseNow()
		} else {
			closeCtxDone := make(chan struct{})
			go func() { defer close(closeCtxDone); _ = c.ws.Close(code, reason) }()
			select {
			case <-closeCtxDone:
			case <-time.After(time.Second):
				_ = c.ws.CloseNow()
				<-closeCtxDone
			}
		}
		cancel()
		wg.Wait()
	}

	if duplex && !c.h.sessions.SupportsDuplex() {
		_ = c.q.Send(session.Event{Type: "error", Fields: session.ErrorFields("invalid_request_error", "unsupported",
			"full-duplex realtime (?duplex=1) is not supported by this pipeline", "", "duplex")})
		finish(websocket.StatusPolicyViolation, "duplex unsupported")
		return
	}

	frames := make(chan frame)
	readerDone := make(chan struct{})
	go func() { defer close(readerDone); c.readFrames(ctx, frames) }()
	// The session exists from the upgrade on: Run sends session.created with the full default
	// session at once, and session.update may follow at any time.
	sess := c.h.sessions.NewSession(slot, session.Options{Duplex: duplex, Model: model, Beta: c.beta}, c.q)
	c.sess.Store(sess)
	c.log.Debug("session opened", zap.String("session_id", sess.ID()), zap.Bool("duplex", duplex), zap.Bool("beta", c.beta))
	reasonCh := make(chan string, 1)
	wg.Add(1)
	go func() { defer wg.Done(); reasonCh <- sess.Run(ctx, nil) }()
	wg.Add(1)
	go func() {
		defer wg.Done()
		c.dispatch(ctx, frames, sess)
	}()
	reason := <-reasonCh
	c.log.Debug("session ended", zap.String("session_id", sess.ID()), zap.String("reason", reason))
	switch reason {
	case session.ReasonDisconnect:
		finish(0, "")
	case session.ReasonSlowClient:
		finish(websocket.StatusPolicyViolation, "connection too slow")
	case session.ReasonShutdown:
		finish(websocket.StatusGoingAway, "server shutting down")
	default:
		finish(websocket.StatusNormalClosure, reason)
	}
	<-readerDone
}

// readEvent reads one frame, bounded by MaxEventBytes; an oversized frame is discarded and
// reported, and the connection stays usable.
func (c *conn) readEvent(ctx context.Context) ([]byte, *WireError, error) {
	typ, r, err := c.ws.Reader(ctx)
	if err != nil {
		return nil, nil, err
	}
	max := c.h.cfg.MaxEventBytes
	data, err := io.ReadAll(io.LimitReader(r, max+1))
	if err != nil {
		return nil, nil, err
	}
	if int64(len(data)) > max {
		if _, err := io.Copy(io.Discard, r); err != nil {
			return nil, nil, err
		}
		return nil, &WireError{Code: "event_too_large", Param: "", Message: fmt.Sprintf("the event exceeds %d bytes", max)}, nil
	}
	if typ != websocket.MessageText {
		return nil, &WireError{Code: "invalid_json", Message: "events must be JSON text frames"}, nil
	}
	return data, nil, nil
}

// frame is one inbound frame, or the read error that ended the connection.
type frame struct {
	data []byte
	werr *WireError
	err  error
}

// readFrames is the connection's reader goroutine. Timeouts are applied by the consumers, not
// through the read ctx: cancelling a read ctx closes a coder/websocket connection, and the
// handshake timeout must still be able to send its error event.
func (c *conn) readFrames(ctx context.Context, out chan<- frame) {
	for {
		data, werr, err := c.readEvent(ctx)
		select {
		case out <- frame{data: data, werr: werr, err: err}:
		case <-ctx.Done():
			return
		}
		if err != nil {
			return
		}
	}
}

// dispatch decodes frames and hands commands to the session in wire order.
func (c *conn) dispatch(ctx context.Context, frames <-chan frame, sess *session.DuplexSession) {
	for {
		var f frame
		select {
		case f = <-frames:
		case <-ctx.Done():
			return
		}
		if f.err != nil {
			sess.Stop(session.ReasonDisconnect)
			return
		}
		werr := f.werr
		if werr == nil {
			var cmd session.Command
			if cmd, werr = DecodeClientEvent(f.data); werr == nil {
				if err := sess.Submit(ctx, cmd); err != nil {
					return
				}
				continue
			}
		}
		if err := c.q.Send(werr.Event()); err != nil {
			sess.Stop(session.ReasonSlowClient)
			return
		}
	}
}

func (c *conn) writeLoop(ctx context.Context) {
	var buf []session.Event
	for {
		var done bool
		buf, done = c.q.take(buf[:0])
		for _, ev := range buf {
			if c.q.isStale(ev) {
				continue
			}
			if err := c.write(ctx, ev); err != nil {
				c.q.fail(fmt.Errorf("writing to the client: %w", err))
				if s := c.sess.Load(); s != nil && ctx.Err() == nil {
					// A client that stops reading is closed now (1008), not when the session
					// next has something to say: its slot goes back within WriteTimeout.
					c.log.Warn("realtime client is not reading; closing the connection (1008)",
						zap.String("session_id", s.ID()), zap.Duration("write_timeout", c.h.cfg.WriteTimeout), zap.Error(err))
					s.Stop(session.ReasonSlowClient)
				}
				return
			}
		}
		if done || c.q.err() != nil {
			return
		}
		if len(buf) > 0 {
			continue
		}
		select {
		case <-c.q.notify:
		case <-ctx.Done():
			return
		}
	}
}

// write stamps event_id and the monotonic server_event_seq, then sends one text frame.
func (c *conn) write(ctx context.Context, ev session.Event) error {
	c.seq++
	m := make(map[string]any, len(ev.Fields)+3)
	for k, v := range ev.Fields {
		m[k] = v
	}
	m["type"] = ev.Type
	if c.beta || ev.Beta {
		t, keep := betaName(ev.Type)
		if !keep {
			c.seq--
			return nil
		}
		m["type"] = t
	}
	m["event_id"] = newEventID()
	m["server_event_seq"] = c.seq
	data, err := json.Marshal(m)
	if err != nil {
		return fmt.Errorf("encoding %s: %w", ev.Type, err)
	}
	wctx, cancel := context.WithTimeout(ctx, c.h.cfg.WriteTimeout)
	defer cancel()
	if err := c.ws.Write(wctx, websocket.MessageText, data); err != nil {
		return err
	}
	return nil
}

func newEventID() string {
	var b [16]byte
	_, _ = rand.Read(b[:])
	return "event_" + hex.EncodeToString(b[:])
}

// betaName returns the beta spelling (OpenAI-Beta: realtime=v1) of a GA server event; keep is
// false for GA-only events that beta clients do not get (conversation.item.done: beta sends one
// conversation.item.created per item).
func betaName(ga string) (name string, keep bool) {
	switch ga {
	case "conversation.item.done":
		return "", false
	case "conversation.item.added":
		return "conversation.item.created", true
	case "response.output_text.delta":
		return "response.text.delta", true
	case "response.output_text.done":
		return "response.text.done", true
	case "response.output_audio.delta":
		return "response.audio.delta", true
	case "response.output_audio.done":
		return "response.audio.done", true
	case "response.output_audio_transcript.delta":
		return "response.audio_transcript.delta", true
	case "response.output_audio_transcript.done":
		return "response.audio_transcript.done", true
	}
	return ga, true
}
