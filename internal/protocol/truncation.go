package protocol

import (
	"bytes"
	"encoding/json"
	"fmt"
)

// Truncation is session.truncation as OpenAI's GA session object spells it: the string "auto"
// or "disabled", or {type: "retention_ratio", retention_ratio, token_limits?:
// {post_instructions?}}. It marshals back in the same shape.
type Truncation struct {
	Type             string  // auto | disabled | retention_ratio
	RetentionRatio   float64 // retention_ratio: [0, 1]
	PostInstructions int     // retention_ratio: token_limits.post_instructions (0 = none)
}

type retentionRatioJSON struct {
	Type           string       `json:"type"`
	RetentionRatio float64      `json:"retention_ratio"`
	TokenLimits    *tokenLimits `json:"token_limits,omitempty"`
}

type tokenLimits struct {
	PostInstructions *int `json:"post_instructions,omitempty"`
}

// MarshalJSON writes the string modes as strings and retention_ratio as its object.
func (t Truncation) MarshalJSON() ([]byte, error) {
	if t.Type != "retention_ratio" {
		mode := t.Type
		if mode == "" {
			mode = "auto"
		}
		return json.Marshal(mode)
	}
	v := retentionRatioJSON{Type: t.Type, RetentionRatio: t.RetentionRatio}
	if t.PostInstructions > 0 {
		n := t.PostInstructions
		v.TokenLimits = &tokenLimits{PostInstructions: &n}
	}
	return json.Marshal(v)
}

// UnmarshalJSON reads any of the shapes MarshalJSON writes (a server's session object).
func (t *Truncation) UnmarshalJSON(b []byte) error {
	v, e := decodeTruncation(map[string]json.RawMessage{"truncation": b})
	if e != nil {
		return e
	}
	if v == nil {
		*t = Truncation{}
		return nil
	}
	*t = *v
	return nil
}

const truncationParam = "session.truncation"

// decodeTruncation reads session.truncation: nil when absent or null (no change), else the
// setting, or the refusal of a malformed one with its param.
func decodeTruncation(obj map[string]json.RawMessage) (*Truncation, *Error) {
	v, ok := obj["truncation"]
	if !ok || bytes.Equal(bytes.TrimSpace(v), []byte("null")) {
		return nil, nil
	}
	var mode string
	if json.Unmarshal(v, &mode) == nil {
		if mode != "auto" && mode != "disabled" {
			return nil, &Error{Code: "invalid_value", Param: truncationParam,
				Message: fmt.Sprintf("Invalid value: '%s'. Supported values are: 'auto', 'disabled' or a retention_ratio object.", mode)}
		}
		return &Truncation{Type: mode}, nil
	}
	var raw map[string]json.RawMessage
	if json.Unmarshal(v, &raw) != nil {
		return nil, &Error{Code: "invalid_type", Param: truncationParam,
			Message: `truncation must be "auto", "disabled" or {"type": "retention_ratio", "retention_ratio": 0..1, "token_limits": {"post_instructions": n}}`}
	}
	return decodeRetentionRatio(raw)
}

// decodeRetentionRatio reads truncation's object form.
func decodeRetentionRatio(raw map[string]json.RawMessage) (*Truncation, *Error) {
	for k := range raw {
		switch k {
		case "type", "retention_ratio", "token_limits":
		default:
			return nil, &Error{Code: "unknown_parameter", Param: truncationParam + "." + k, Message: fmt.Sprintf("Unknown parameter: '%s.%s'.", truncationParam, k)}
		}
	}
	var typ string
	if json.Unmarshal(raw["type"], &typ) != nil || typ != "retention_ratio" {
		return nil, &Error{Code: "invalid_value", Param: truncationParam + ".type", Message: `truncation.type must be "retention_ratio"`}
	}
	t := &Truncation{Type: typ}
	r, ok := raw["retention_ratio"]
	if !ok {
		return nil, &Error{Code: "missing_required_parameter", Param: truncationParam + ".retention_ratio", Message: "Missing required parameter: 'session.truncation.retention_ratio'."}
	}
	if json.Unmarshal(r, &t.RetentionRatio) != nil {
		return nil, &Error{Code: "invalid_type", Param: truncationParam + ".retention_ratio", Message: "retention_ratio must be a number"}
	}
	if t.RetentionRatio < 0 || t.RetentionRatio > 1 {
		return nil, &Error{Code: "invalid_value", Param: truncationParam + ".retention_ratio",
			Message: fmt.Sprintf("Invalid 'session.truncation.retention_ratio': %g. Expected a value between 0 and 1.", t.RetentionRatio)}
	}
	lim, ok := raw["token_limits"]
	if !ok || bytes.Equal(bytes.TrimSpace(lim), []byte("null")) {
		return t, nil
	}
	var tl map[string]json.RawMessage
	if json.Unmarshal(lim, &tl) != nil {
		return nil, &Error{Code: "invalid_type", Param: truncationParam + ".token_limits", Message: "token_limits must be an object"}
	}
	for k, v := range tl {
		if k != "post_instructions" {
			return nil, &Error{Code: "unknown_parameter", Param: truncationParam + ".token_limits." + k, Message: fmt.Sprintf("Unknown parameter: '%s.token_limits.%s'.", truncationParam, k)}
		}
		if bytes.Equal(bytes.TrimSpace(v), []byte("null")) {
			continue
		}
		var n int
		if json.Unmarshal(v, &n) != nil {
			return nil, &Error{Code: "invalid_type", Param: truncationParam + ".token_limits.post_instructions", Message: "post_instructions must be an integer"}
		}
		if n < 1 {
			return nil, &Error{Code: "integer_below_min_value", Param: truncationParam + ".token_limits.post_instructions",
				Message: fmt.Sprintf("Invalid 'session.truncation.token_limits.post_instructions': integer below minimum value. Expected a value greater than or equal to 1, but got %d instead.", n)}
		}
		t.PostInstructions = n
	}
	return t, nil
}
