package protocol

import (
	"bytes"
	"encoding/json"
)

// decodeTracing reads session.tracing as the GA API defines it: null, "auto", or an object
// with workflow_name, group_id (strings) and metadata (an object). Anything else is refused
// with its param, never silently dropped.
func decodeTracing(v json.RawMessage) (any, *Error) {
	v = bytes.TrimSpace(v)
	if bytes.Equal(v, []byte("null")) {
		return nil, nil
	}
	var s string
	if json.Unmarshal(v, &s) == nil {
		if s != "auto" {
			return nil, &Error{Code: "invalid_value", Param: "session.tracing", Message: `tracing must be null, "auto" or a tracing configuration object`}
		}
		return s, nil
	}
	var obj map[string]json.RawMessage
	if json.Unmarshal(v, &obj) != nil {
		return nil, &Error{Code: "invalid_type", Param: "session.tracing", Message: `tracing must be null, "auto" or a tracing configuration object`}
	}
	out := make(map[string]any, len(obj))
	for k, raw := range obj {
		switch k {
		case "workflow_name", "group_id":
			var s string
			if json.Unmarshal(raw, &s) != nil {
				return nil, &Error{Code: "invalid_type", Param: "session.tracing." + k, Message: k + " must be a string"}
			}
			out[k] = s
		case "metadata":
			var m map[string]any
			if json.Unmarshal(raw, &m) != nil {
				return nil, &Error{Code: "invalid_type", Param: "session.tracing.metadata", Message: "metadata must be an object"}
			}
			out[k] = m
		default:
			return nil, &Error{Code: "unknown_parameter", Param: "session.tracing." + k, Message: "unknown tracing field " + k}
		}
	}
	return out, nil
}
