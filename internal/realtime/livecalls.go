package realtime

import (
	"bytes"
	"context"
	"encoding/json"
	"fmt"
	"io"
	"mime"
	"net/http"
	"net/url"
	"strings"

	"go.uber.org/zap"

	"github.com/omniserve/omniserve/internal/auth"
	"github.com/omniserve/omniserve/internal/oaierror"
	"github.com/omniserve/omniserve/internal/realtime/live"
	"github.com/omniserve/omniserve/internal/session"
)

// GPT-Live over WebRTC (docs/LIVE.md): POST /v1/live/sessions {session, transport: {type:
// "webrtc", sdp}} makes a call of the WebRTC stack whose session speaks the Live dialect, and
// GET /v1/live/sessions/{id}/attach joins a sideband to it. The call, its data channel, its RTP
// and its sidebands are Realtime's; only the translator differs: it is started by the POST's
// session (live.Translator.StartMedia), takes the microphone's audio on its timeline
// (TakeMedia) and hands the reply's audio to the call's player.

// maxLiveSDPBytes bounds the offer inside a Live POST, checked before the SDP is parsed: a real
// offer is a few KB (the bound of an application/sdp offer on /v1/realtime/calls, the router's
// MaxOfferBytes; the JSON body as a whole has the router's bound of a multipart call).
const maxLiveSDPBytes = 64 << 10

// liveOffer is the POST's body.
type liveOffer struct {
	Session   json.RawMessage `json:"session"`
	Transport json.RawMessage `json:"transport"`
}

// readLiveOffer reads and checks the POST's JSON body: exactly session and transport, the
// transport {type: "webrtc", sdp} with an SDP within maxLiveSDPBytes.
func readLiveOffer(r *http.Request) (sess json.RawMessage, sdp string, oerr *oaierror.Error) {
	if ct, _, err := mime.ParseMediaType(r.Header.Get("Content-Type")); err != nil || ct != "application/json" {
		return nil, "", restError(http.StatusUnsupportedMediaType, "unsupported_content_type", "Content-Type",
			"send {session, transport: {type: \"webrtc\", sdp}} as application/json")
	}
	body, err := io.ReadAll(r.Body)
	if err != nil {
		return nil, "", restError(http.StatusBadRequest, "invalid_body", "", "reading the request: "+err.Error())
	}
	var raw map[string]json.RawMessage
	if json.Unmarshal(body, &raw) != nil || raw == nil {
		return nil, "", restError(http.StatusBadRequest, "invalid_json", "", "the body is not a JSON object")
	}
	for k := range raw {
		if k != "session" && k != "transport" {
			return nil, "", restError(http.StatusBadRequest, "unknown_parameter", k, fmt.Sprintf("Unknown parameter: '%s'.", k))
		}
	}
	sdp, oerr = liveTransport(raw["transport"])
	if oerr != nil {
		return nil, "", oerr
	}
	if s, ok := raw["session"]; !ok || string(bytes.TrimSpace(s)) == "null" {
		return nil, "", restError(http.StatusBadRequest, "missing_required_parameter", "session", "Missing required parameter: 'session'.")
	}
	return raw["session"], sdp, nil
}

// liveTransport checks the POST's transport and returns its SDP offer.
func liveTransport(raw json.RawMessage) (string, *oaierror.Error) {
	if len(bytes.TrimSpace(raw)) == 0 || string(bytes.TrimSpace(raw)) == "null" {
		return "", restError(http.StatusBadRequest, "missing_required_parameter", "transport",
			"Missing required parameter: 'transport' ({type: \"webrtc\", sdp}).")
	}
	var t map[string]json.RawMessage
	if json.Unmarshal(raw, &t) != nil {
		return "", restError(http.StatusBadRequest, "invalid_type", "transport", "'transport' must be an object {type: \"webrtc\", sdp}.")
	}
	for k := range t {
		if k != "type" && k != "sdp" {
			return "", restError(http.StatusBadRequest, "unknown_parameter", "transport."+k, fmt.Sprintf("Unknown parameter: 'transport.%s'.", k))
		}
	}
	var typ, sdp string
	if v, ok := t["type"]; !ok {
		return "", restError(http.StatusBadRequest, "missing_required_parameter", "transport.type", "Missing required parameter: 'transport.type'.")
	} else if json.Unmarshal(v, &typ) != nil || typ != "webrtc" {
		return "", restError(http.StatusBadRequest, "invalid_value", "transport.type",
			fmt.Sprintf("Invalid value for 'transport.type': %s. The only transport of POST /v1/live/sessions is \"webrtc\".", v))
	}
	v, ok := t["sdp"]
	if !ok {
		return "", restError(http.StatusBadRequest, "missing_required_parameter", "transport.sdp", "Missing required parameter: 'transport.sdp' (the SDP offer).")
	}
	if json.Unmarshal(v, &sdp) != nil {
		return "", restError(http.StatusBadRequest, "invalid_type", "transport.sdp", "'transport.sdp' must be a string (the SDP offer).")
	}
	if len(sdp) > maxLiveSDPBytes {
		return "", restError(http.StatusRequestEntityTooLarge, "request_too_large", "transport.sdp",
			fmt.Sprintf("the offer exceeds the limit of %d bytes", maxLiveSDPBytes))
	}
	if strings.TrimSpace(sdp) == "" {
		return "", restError(http.StatusBadRequest, "invalid_value", "transport.sdp", "'transport.sdp' is empty: send the SDP offer.")
	}
	return sdp, nil
}

// CreateLive serves POST /v1/live/sessions: a GPT-Live session over WebRTC. The session config
// is checked as session.start's is (strict, named paths) before a slot is taken; the answer is
// {session: {id}, transport: {type: "webrtc", sdp}} with 201, and session.started follows on
// the data channel.
func (c *Calls) CreateLive(w http.ResponseWriter, r *http.Request) {
	sec, res := c.h.cfg.Secrets.Check(r, c.h.cfg.APIKey)
	if res != auth.OK {
		oaierror.Write(w, restError(http.StatusUnauthorized, "invalid_api_key", "", "missing or invalid API key"))
		return
	}
	if sec != nil {
		oaierror.Write(w, restError(http.StatusUnauthorized, "invalid_api_key", "", "GPT-Live takes the API key, not a client secret (ek_)"))
		return
	}
	sessRaw, offer, oerr := readLiveOffer(r)
	if oerr == nil {
		oerr = c.checkLiveServed()
	}
	if oerr != nil {
		oaierror.Write(w, oerr)
		return
	}
	tr := live.New(c.h.cfg.Live)
	start, werr := tr.StartMedia(sessRaw)
	if werr != nil {
		oaierror.Write(w, restError(http.StatusBadRequest, werr.Code, werr.Param, werr.Message))
		return
	}
	if m := tr.Model(); !c.h.sessions.AcceptsModel(m) {
		oaierror.Write(w, &oaierror.Error{Status: http.StatusNotFound, Type: "invalid_request_error", Param: "session.model", Code: "model_not_found",
			Message: fmt.Sprintf("The model `%s` is not served here; served: %s", m, strings.Join(c.h.sessions.ServedModels(), ", "))})
		return
	}
	opts := c.h.cfg.Live.SessionOptions()
	cl, answer, oerr := c.open(r, offer, callSession{opts: opts, d: tr, live: true, start: start})
	if oerr != nil {
		if oerr.Param == "sdp" {
			oerr.Param = "transport.sdp"
		}
		if oerr.Status == http.StatusServiceUnavailable {
			w.Header().Set("Retry-After", "1")
		}
		oaierror.Write(w, oerr)
		return
	}
	id := live.SessionID(cl.sess.ID())
	cl.log.Debug("live session created", zap.String("live_session_id", id))
	w.Header().Set("Content-Type", "application/json")
	w.WriteHeader(http.StatusCreated)
	_ = json.NewEncoder(w).Encode(map[string]any{
		"session":   map[string]string{"id": id},
		"transport": map[string]string{"type": "webrtc", "sdp": answer},
	})
}

// checkLiveServed refuses a Live session where the pipeline has no full-duplex engine.
func (c *Calls) checkLiveServed() *oaierror.Error {
	if c.h.sessions.SupportsDuplex() {
		return nil
	}
	return restError(http.StatusBadRequest, "unsupported", "", "GPT-Live needs a full-duplex pipeline, which this server does not run")
}

// Attach serves GET /v1/live/sessions/{id}/attach: a sideband joined to a Live WebRTC session
// (the app's backend), with the server's API key. It gets every event the data channel gets
// and its commands act on the session (but session.start and input_audio.append); the session
// ending closes it with a close frame (1000) after its last event, session.closed, which is
// what ?graceful_close=true asks for.
func (c *Calls) Attach(w http.ResponseWriter, r *http.Request, id string) {
	sec, res := c.h.cfg.Secrets.Check(r, c.h.cfg.APIKey)
	if res != auth.OK || sec != nil {
		oaierror.Write(w, restError(http.StatusUnauthorized, "invalid_api_key", "", "missing or invalid API key (a sideband takes the server's API key)"))
		return
	}
	if oerr := checkAttachQuery(r.URL.Query()); oerr != nil {
		oaierror.Write(w, oerr)
		return
	}
	cl := c.joinSideband(func() *call { return c.live[id] })
	if cl == nil {
		oaierror.Write(w, restError(http.StatusNotFound, "session_not_found", "session_id", fmt.Sprintf("No live GPT-Live WebRTC session %q.", id)))
		return
	}
	defer c.finished()
	if !cl.waitReady() || ended(cl.sess) {
		// An ended session is refused before the upgrade, while its call still winds down.
		oaierror.Write(w, restError(http.StatusNotFound, "session_not_found", "session_id", fmt.Sprintf("No live GPT-Live WebRTC session %q.", id)))
		return
	}
	c.serveSideband(w, r, cl, false, zap.String("live_session_id", id))
}

// checkAttachQuery refuses a sideband's query parameter other than graceful_close=true|false.
func checkAttachQuery(q url.Values) *oaierror.Error {
	for k, v := range q {
		switch {
		case k != "graceful_close":
			return restError(http.StatusBadRequest, "unknown_parameter", k, fmt.Sprintf("Unknown parameter: '%s' (the sideband takes graceful_close).", k))
		case len(v) != 1 || (v[0] != "true" && v[0] != "false"):
			return restError(http.StatusBadRequest, "invalid_value", "graceful_close", "graceful_close is true or false.")
		}
	}
	return nil
}

// applyLive acts on one client event of a Live call, from its data channel or a sideband: the
// translator decodes it (answering some itself, as on the WebSocket) and the session gets its
// commands.
func (cl *call) applyLive(ctx context.Context, tr *live.Translator, data []byte) (*WireError, error) {
	cmd, werr := tr.Decode(data)
	if werr != nil {
		return werr, nil
	}
	if self, ok := cmd.(selfAnswered); ok {
		return nil, answerSelf(ctx, cl.sess, sinkOf(cl.sess), self)
	}
	return nil, cl.sess.Submit(ctx, cmd)
}

// takeLive hands the microphone's buffered audio of a Live call to its translator, which puts
// it on the session's timeline (inMu held).
func (cl *call) takeLive(ctx context.Context, tr *live.Translator) error {
	reply := tr.TakeMedia(cl.inBuf)
	cl.inBuf = nil
	if reply == nil {
		return nil
	}
	return answerSelf(ctx, cl.sess, sinkOf(cl.sess), reply)
}

// ended reports whether sess has ended.
func ended(sess *session.Session) bool {
	select {
	case <-sess.Done():
		return true
	default:
		return false
	}
}
