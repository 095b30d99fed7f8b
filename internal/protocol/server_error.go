package protocol

// ErrorEvent is the server's error event.
type ErrorEvent struct {
	Error ErrorDetail `json:"error"`
}

// EventType implements ServerEvent.
func (ErrorEvent) EventType() string { return "error" }

// ErrorDetail is an error object: Type is its class (invalid_request_error, server_error,
// rate_limit_error), EventID the client event it answers and Param the offending parameter
// (null when none).
type ErrorDetail struct {
	Code    string  `json:"code"`
	EventID *string `json:"event_id"`
	Message string  `json:"message"`
	Param   *string `json:"param"`
	Type    string  `json:"type"`
}

// NewErrorEvent is an error event; empty eventID and param are null.
func NewErrorEvent(typ, code, message, eventID, param string) ErrorEvent {
	return ErrorEvent{Error: ErrorDetail{Type: typ, Code: code, Message: message,
		EventID: nullString(eventID), Param: nullString(param)}}
}

func nullString(s string) *string {
	if s == "" {
		return nil
	}
	return &s
}
