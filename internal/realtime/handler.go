package realtime

import (
	"context"
	"fmt"
	"net/http"
	"net/url"
	"strings"
	"time"

	"github.com/coder/websocket"
	"go.uber.org/zap"

	"github.com/omniserve/omniserve/internal/auth"
	"github.com/omniserve/omniserve/internal/clientsecret"
	"github.com/omniserve/omniserve/internal/oaierror"
	"github.com/omniserve/omniserve/internal/protocol"
	"github.com/omniserve/omniserve/internal/realtime/link"
	"github.com/omniserve/omniserve/internal/realtime/live"
	"github.com/omniserve/omniserve/internal/realtime/vllm"
	"github.com/omniserve/omniserve/internal/session"
)

// HandlerConfig configures the endpoint. Zero values take the documented defaults.
type HandlerConfig struct {
	// APIKey, when set, is required as "Authorization: Bearer <key>" or as the
	// "openai-insecure-api-key.<key>" WebSocket subprotocol (browser clients).
	APIKey string
	// HandshakeTimeout bounds the wait for session.resume, the first event of a resume
	// connection, for the first frame of a client that speaks first (autostart=0), and for a
	// Live socket's session.start (with Live.IdleTimeout set). Default
	// 10 s. (Any other new session needs no handshake: session.created goes out at once, as
	// OpenAI sends it, and the idle timeout bounds a silent client.)
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
	// StallTimeout bounds the age of the oldest undelivered event: a client that lets an event
	// wait longer is not reading (however large the buffers) and is closed as too slow, or
	// detached for resume. Default 10 s.
	StallTimeout time.Duration
	// OnStall counts a client found stalled (nil: not counted).
	OnStall func()
	// BaseContext is the server-owned parent of every session (never the request context, which
	// ends with the upgrade). Default context.Background().
	BaseContext context.Context
	// OriginPatterns are extra allowed browser origins (coder/websocket AcceptOptions).
	OriginPatterns []string
	// Trace, when set, is called with the upgrade (or WebRTC call) request and the id of the
	// session it created: it starts the session span, continuing the request's traceparent,
	// which then parents the spans of the session's turns. The returned func ends the span
	// with the session's close reason and tracing field.
	// The session runs under the returned context (BaseContext with the span's context).
	Trace func(base context.Context, r *http.Request, sessionID string) (context.Context, func(reason string, tracing any))
	// JournalBytes and JournalEvents bound each resumable session's replay journal (the recent
	// events a resuming client may have missed). Defaults 1 MiB and 1024 events.
	JournalBytes  int
	JournalEvents int
	// Secrets are the minted client secrets: an "ek_" key opens a session with the
	// configuration it was minted with (nil: no client secrets).
	Secrets *clientsecret.Store
	// InvalidEventBurst and InvalidEventRate bound the error events one session's client can
	// provoke (invalid events, refused commands, invalid acks): a burst of InvalidEventBurst,
	// refilled at InvalidEventRate per second; the first invalid event over it ends the session
	// (ReasonInvalidEvents, close 1008). Defaults 100 and 10/s: a client's mistakes are served,
	// a flood or an error loop is not.
	InvalidEventBurst int
	InvalidEventRate  float64
	// InvalidEvents counts invalid events and the sessions closed for them (nil: not counted).
	InvalidEvents InvalidEventCounter
	// Live are the settings of GPT-Live sessions (LivePath).
	Live live.Options
}

// WithDefaults is c with every zero value replaced by its documented default (the server's
// config table has the same defaults: internal/server TestDefaultsAgree compares them).
func (c HandlerConfig) WithDefaults() HandlerConfig {
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
	if c.StallTimeout <= 0 {
		c.StallTimeout = 10 * time.Second
	}
	if c.BaseContext == nil {
		c.BaseContext = context.Background()
	}
	if c.JournalBytes <= 0 {
		c.JournalBytes = 1 << 20
	}
	if c.JournalEvents <= 0 {
		c.JournalEvents = 1024
	}
	if c.InvalidEventBurst <= 0 {
		c.InvalidEventBurst = 100
	}
	if c.InvalidEventRate <= 0 {
		c.InvalidEventRate = 10
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
	return &handler{cfg: cfg.WithDefaults(), sessions: sessions, log: log.Named("realtime")}
}

// newSink is a new session's sink over out, in dialect d, with its own budget of invalid
// events (bound to the session once it exists: floodGuard.bind).
func (h *handler) newSink(out outbound, d dialect) *sessionSink {
	return &sessionSink{out: out, d: d,
		guard: newFloodGuard(h.cfg.InvalidEventBurst, h.cfg.InvalidEventRate, d.Name(), h.cfg.InvalidEvents)}
}

// authorized applies the server's one key check (internal/auth), so the endpoint mounted
// on its own (tests, other routers) accepts exactly what the /v1 middleware accepts.
func (h *handler) authorized(r *http.Request) (*clientsecret.Secret, bool) {
	sec, res := h.cfg.Secrets.Check(r, h.cfg.APIKey)
	return sec, res == auth.OK
}

func truthy(v string) bool {
	switch strings.ToLower(v) {
	case "1", "true", "on", "yes":
		return true
	}
	return false
}

func (h *handler) ServeHTTP(w http.ResponseWriter, r *http.Request) {
	sec, ok := h.authorized(r)
	if !ok {
		oaierror.Write(w, oaierror.New(http.StatusUnauthorized, "invalid_request_error", "invalid_api_key", "missing or invalid API key"))
		return
	}
	isLive := r.URL.Path == LivePath
	if h.resumes(r, isLive) {
		h.serveResume(w, r)
		return
	}
	opts, oerr := h.sessionOptions(r, sec, isLive)
	if oerr != nil {
		oaierror.Write(w, oerr)
		return
	}
	duplex, beta := opts.Duplex, opts.Beta
	slot, err := h.sessions.Acquire(r.Context())
	if err != nil {
		w.Header().Set("Retry-After", "1")
		oaierror.Write(w, oaierror.New(http.StatusServiceUnavailable, "rate_limit_error", "resource_exhausted", err.Error()))
		return
	}
	defer slot.Release()
	resumable := h.sessions.ResumeGrace() > 0 && !isLive // a new Live socket is a new session
	var j *link.Journal
	if resumable {
		j = link.NewJournal(h.cfg.JournalBytes, h.cfg.JournalEvents)
	}
	st := link.NewStream(beta, j)
	var sess *session.Session
	runCtx := h.cfg.BaseContext
	if !duplex || h.sessions.SupportsDuplex() {
		d := h.dialectFor(opts, isLive)
		opts.Dialect = d.Name()
		sink := h.newSink(st, d)
		sess = h.sessions.NewSession(slot, opts, sink)
		sink.guard.bind(sess.Stop)
		// The balancer learns which replica holds the session from this header (stickiness for
		// resume, deploy/haproxy/haproxy.cfg).
		w.Header().Set(SessionIDHeader, sess.ID())
		if h.cfg.Trace != nil {
			var end func(string, any)
			runCtx, end = h.cfg.Trace(runCtx, r, sess.ID())
			defer func() {
				select {
				case <-sess.Done():
					end(sess.CloseReason(), sess.Tracing())
				default: // the upgrade failed: the session never ran
					end("upgrade_failed", nil)
				}
			}()
		}
	}
	limitSendBuffer(r.Context())
	ws := h.accept(w, r, beta)
	if ws == nil {
		return
	}
	c := h.newConn(ws, st, link.NewQueue(h.cfg.SendQueue, h.cfg.SendQueueBytes, resumable), h.log)
	if sess == nil {
		c.refuse(link.Event{Type: "error", Payload: protocol.NewErrorEvent("invalid_request_error", "unsupported",
			"full-duplex realtime (?duplex=1) is not supported by this pipeline", "", "duplex")}, websocket.StatusPolicyViolation, "duplex unsupported", true)
		return
	}
	h.runOn(runCtx, c, r, sess, slot)
}

// runOn runs the new session sess (holding slot) on connection c until it ends: the handshake of
// a client that speaks first (autostart=0), then the session's actor and the connection. The
// session may outlive this connection (resume grace): this goroutine owns its actor and holds its
// slot until the actor returns. The session exists from the upgrade on: Run sends
// session.created with the full default session at once (after the client's first
// session.update, for a client that speaks first), and session.update may follow at any time.
func (h *handler) runOn(ctx context.Context, c *wsConn, r *http.Request, sess *session.Session, slot *session.Slot) {
	var first *session.UpdateSession
	var pending *link.Frame
	if waitsForFirst(r.URL.Query()) {
		var open bool
		if first, pending, open = h.speaksFirst(c, sess, slot); !open {
			return
		}
	}
	c.st.Attach(c.q, 0)
	c.log.Debug("session opened", zap.String("session_id", sess.ID()), zap.String("dialect", sinkOf(sess).dialect().Name()))
	if pending != nil {
		c.dispatchFirst(sess, *pending)
	}
	// The slot comes back when the session ends, not when its socket has closed: a client found
	// not reading keeps only its socket for slowCloseWait (conn.go).
	ran := runSession(ctx, sess, first, slot.Release)
	c.serve(sess, 0)
	<-ran
	// One line per session, at Info: why it ended (client_close, disconnect, slow_client, ...).
	c.log.Info("session ended", zap.String("session_id", sess.ID()), zap.String("reason", sess.CloseReason()),
		zap.String("dialect", sinkOf(sess).dialect().Name()))
}

// resumes reports a connection that resumes a session (?session_id= or the resume token's
// header), where sessions are resumable; a Live socket never does (Live has no resume).
func (h *handler) resumes(r *http.Request, isLive bool) bool {
	return !isLive && h.sessions.ResumeGrace() > 0 && (r.URL.Query().Has("session_id") || r.Header.Get(ResumeTokenHeader) != "")
}

// sessionOptions are the options of the session a new connection opens: openOptions', or a
// Live session's. Live is the native duplex session with the engine's auto-response, configured
// by session.start (its URL carries no parameters), and it takes the API key only: it has no
// ephemeral keys, the app's server holds the key.
func (h *handler) sessionOptions(r *http.Request, sec *clientsecret.Secret, isLive bool) (session.Options, *oaierror.Error) {
	if !isLive {
		return h.openOptions(r, sec)
	}
	if sec != nil {
		return session.Options{}, oaierror.New(http.StatusUnauthorized, "invalid_request_error", "invalid_api_key",
			"GPT-Live takes the API key, not a client secret (ek_)")
	}
	opts := h.cfg.Live.SessionOptions()
	opts.Initial = h.cfg.Live.StartPatch(h.cfg.HandshakeTimeout)
	return opts, nil
}

// openOptions are the options of the session a new connection opens, from its request: the
// client secret's configuration and kind, ?intent=transcription, ?model= (refused before the
// upgrade when not served, so no slot is taken), ?duplex=1 and the dialect.
func (h *handler) openOptions(r *http.Request, sec *clientsecret.Secret) (session.Options, *oaierror.Error) {
	var initial *session.ConfigPatch
	if sec != nil {
		p, werr := sessionPatch(sec.Session)
		if werr != nil { // validated at minting; only a bug gets here
			return session.Options{}, oaierror.New(http.StatusInternalServerError, "server_error", "invalid_client_secret", werr.Message)
		}
		initial = &p
	}
	q := r.URL.Query()
	transcription, oerr := transcriptionIntent(q, sec)
	if oerr != nil {
		return session.Options{}, oerr
	}
	if m := q.Get("model"); q.Has("model") && !transcription && !h.sessions.AcceptsModel(m) {
		// What the chat endpoint answers for an unknown model (the SDKs raise it as the
		// connection's error).
		return session.Options{}, &oaierror.Error{Status: http.StatusNotFound, Type: "invalid_request_error", Param: "model", Code: "model_not_found",
			Message: fmt.Sprintf("The model `%s` is not served here; served: %s", m, strings.Join(h.sessions.ServedModels(), ", "))}
	}
	// /v1/duplex is ?duplex=1's other name (vllm-omni's clients use both).
	duplex := (truthy(q.Get("duplex")) || r.URL.Path == DuplexPath) && !transcription // a transcription session never answers
	return session.Options{Duplex: duplex, Model: modelParam(q, transcription), Beta: isBeta(r), Initial: initial, Transcription: transcription}, nil
}

// transcriptionIntent says whether the connection opens a transcription session:
// ?intent=transcription (no model: OpenAI's guide omits it, and a model given anyway is
// ignored rather than refused), or a client secret minted for one (a secret opens the kind of
// session it was minted for; the SDKs always name a model in the URL, which a transcription
// session ignores).
func transcriptionIntent(q url.Values, sec *clientsecret.Secret) (bool, *oaierror.Error) {
	transcription := false
	if q.Has("intent") {
		if q.Get("intent") != "transcription" {
			return false, &oaierror.Error{Status: http.StatusBadRequest, Type: "invalid_request_error", Param: "intent", Code: "invalid_value",
				Message: fmt.Sprintf("Invalid value for 'intent': %q. The only intent is \"transcription\".", q.Get("intent"))}
		}
		transcription = true
	}
	if sec == nil {
		return transcription, nil
	}
	minted := secretIsTranscription(sec.Session)
	if transcription && !minted {
		return false, &oaierror.Error{Status: http.StatusBadRequest, Type: "invalid_request_error", Param: "intent", Code: "invalid_value",
			Message: "this client secret was minted for a conversation session; ?intent=transcription needs one minted with session.type \"transcription\""}
	}
	return minted, nil
}

// accept upgrades the request; nil when the upgrade failed (the library answered).
func (h *handler) accept(w http.ResponseWriter, r *http.Request, beta bool) *websocket.Conn {
	protos := []string{"realtime"}
	if beta && offersProtocol(r, betaProtocol) && !offersProtocol(r, "realtime") {
		protos = append(protos, betaProtocol)
	}
	ws, err := websocket.Accept(w, r, &websocket.AcceptOptions{Subprotocols: protos, OriginPatterns: h.cfg.OriginPatterns})
	if err != nil {
		h.log.Debug("websocket upgrade failed", zap.Error(err))
		return nil
	}
	// Reads are bounded by hand (MaxEventBytes → event_too_large, the connection survives); the
	// library limit only stops abuse far beyond that.
	ws.SetReadLimit(4*h.cfg.MaxEventBytes + 1<<20)
	return ws
}

const betaProtocol = "openai-beta.realtime-v1"

// DuplexPath is the endpoint's other mount point: /v1/realtime?duplex=1 under vllm-omni's
// other name for it.
const DuplexPath = "/v1/duplex"

// LivePath is GPT-Live's primary WebSocket (docs/LIVE.md): a duplex session in the Live dialect.
const LivePath = "/v1/live/sessions"

// dialectFor is the dialect of a new session: GPT-Live's on LivePath, vllm-omni's native duplex dialect for a duplex
// session (?duplex=1|true|on, /v1/duplex), OpenAI Realtime otherwise (docs/REALTIME.md,
// "vllm-omni duplex dialect"). The session's sink keeps it, so a resume speaks it too.
func (h *handler) dialectFor(opts session.Options, isLive bool) dialect {
	if isLive {
		return live.New(h.cfg.Live)
	}
	if opts.Duplex {
		return vllm.New()
	}
	return openAIDialect{}
}

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

// modelParam is the connection's model; a transcription session has none (its transcription
// model lives in audio.input.transcription).
func modelParam(q url.Values, transcription bool) string {
	if transcription {
		return ""
	}
	return q.Get("model")
}
