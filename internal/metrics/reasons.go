package metrics

import (
	"encoding/base64"
	"strconv"
	"strings"
)

// Finished reasons a turn or request is logged with (vllm-omni's set, plus length). Anything
// else normalizes to ReasonAbort.
const (
	ReasonStop = "stop"
	// ReasonLength is a response cut by max_output_tokens / max_tokens (the wire says
	// max_output_tokens; every log says length, as chat does).
	ReasonLength = "length"
	// reasonToolCalls is a reply that ended in tool calls (Chat Completions' finish_reason).
	reasonToolCalls = "tool_calls"
	ReasonBargeIn   = "barge_in"
	ReasonCancel    = "cancel"
	ReasonClose     = "close"
	ReasonAbort     = "abort"
	ReasonError     = "error"
)

// Cancel sources: the `reason` a session passes when it cancels the active response.
const (
	cancelBargeIn                = "barge_in"
	cancelTurnDetected           = "turn_detected"
	CancelSessionClose           = "session_close"
	CancelDisconnect             = "disconnect"
	CancelDisconnectGraceExpired = "disconnect_grace_expired"
	cancelTimeout                = "timeout"
	cancelNewResponse            = "new_response"
	cancelOutputAudioBufferClear = "output_audio_buffer_clear"
	cancelInputCancel            = "input.cancel"
	cancelResponseCancel         = "response.cancel"
	cancelClientCancelled        = "client_cancelled"
	cancelEngineError            = "engine_error"
	cancelLeaseExpired           = "lease_expired"
)

// FinishedReasonForCancel maps a cancel source to the logged finished_reason with vllm-omni's
// table, except in two deliberate ways: server-VAD barge-in (`turn_detected`) is a barge-in, not a
// cancel (vllm-omni logged every real barge-in as a cancel), and an engine / data-plane error
// ends the turn as `error`, not `stop` (so a failed turn does not look like a normal one). Only
// the logged reason is mapped; the wire event keeps its own documented reason, which clients read.
func FinishedReasonForCancel(source string) string {
	switch source {
	case cancelBargeIn, cancelTurnDetected:
		return ReasonBargeIn
	case CancelSessionClose, CancelDisconnect, CancelDisconnectGraceExpired, cancelLeaseExpired:
		return ReasonClose
	case cancelEngineError:
		return ReasonError
	case cancelTimeout, cancelNewResponse, cancelOutputAudioBufferClear, cancelInputCancel,
		cancelResponseCancel, cancelClientCancelled:
		return ReasonCancel
	}
	if isKnownReason(source) {
		return source
	}
	return ReasonCancel
}

// NormalizeFinishedReason passes the known reasons through and maps anything else to abort.
func NormalizeFinishedReason(r string) string {
	if isKnownReason(r) {
		return r
	}
	return ReasonAbort
}

func isKnownReason(r string) bool {
	switch r {
	case ReasonStop, ReasonLength, reasonToolCalls, ReasonBargeIn, ReasonCancel, ReasonClose, ReasonAbort, ReasonError:
		return true
	}
	return false
}

const duplexIDPrefix = "duplex-s."

// DuplexResourceRequestID is the id of a duplex session's long-lived stage request
// (architecture.md "Identities"): `duplex-s.<base64url(session_id), no padding>.i.<incarnation>
// .e.<epoch>.r.<role>`, eight dot-separated parts. base64url never contains '.', so the id
// splits unambiguously.
func DuplexResourceRequestID(sessionID string, incarnation, epoch int, role string) string {
	return duplexIDPrefix + base64.RawURLEncoding.EncodeToString([]byte(sessionID)) +
		".i." + strconv.Itoa(incarnation) + ".e." + strconv.Itoa(epoch) + ".r." + role
}

// duplexResourceID is a parsed DuplexResourceRequestID.
type duplexResourceID struct {
	SessionID   string
	Incarnation int
	Epoch       int
	Role        string
}

// parseDuplexResourceRequestID parses an id made by DuplexResourceRequestID.
func parseDuplexResourceRequestID(rid string) (duplexResourceID, bool) {
	if !strings.HasPrefix(rid, duplexIDPrefix) {
		return duplexResourceID{}, false
	}
	parts := strings.Split(rid, ".")
	if len(parts) != 8 || parts[2] != "i" || parts[4] != "e" || parts[6] != "r" {
		return duplexResourceID{}, false
	}
	// One spelling per id: Strict rejects non-zero trailing bits, and the re-encoding check
	// rejects what the decoder skips (\r and \n) or any other non-canonical form.
	sid, err := base64.RawURLEncoding.Strict().DecodeString(parts[1])
	if err != nil || len(sid) == 0 || base64.RawURLEncoding.EncodeToString(sid) != parts[1] {
		return duplexResourceID{}, false
	}
	inc, ok1 := parseNonNegative(parts[3])
	ep, ok2 := parseNonNegative(parts[5])
	if !ok1 || !ok2 || !validRole(parts[7]) {
		return duplexResourceID{}, false
	}
	return duplexResourceID{SessionID: string(sid), Incarnation: inc, Epoch: ep, Role: parts[7]}, true
}

// IsDuplexResourceRequestID reports whether rid is an 8-part duplex resource id. Unlike the
// reference predicate it also validates the integers, the base64 and the role charset
// `[A-Za-z0-9_-]+`, since omniserve only has to accept the ids it makes itself.
func IsDuplexResourceRequestID(rid string) bool {
	_, ok := parseDuplexResourceRequestID(rid)
	return ok
}

func parseNonNegative(s string) (int, bool) {
	if s == "" || (len(s) > 1 && s[0] == '0') {
		return 0, false
	}
	for _, c := range s {
		if c < '0' || c > '9' {
			return 0, false
		}
	}
	n, err := strconv.Atoi(s)
	return n, err == nil
}

func validRole(s string) bool {
	if s == "" {
		return false
	}
	for _, c := range s {
		ok := c == '_' || c == '-' || (c >= '0' && c <= '9') || (c >= 'a' && c <= 'z') || (c >= 'A' && c <= 'Z')
		if !ok {
			return false
		}
	}
	return true
}
