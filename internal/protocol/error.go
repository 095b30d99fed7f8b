package protocol

// Error is a decoding or validation failure, sent to the client as a realtime error event:
// Code and Message, Param naming the offending parameter ("" when none) and EventID echoing the
// client's event_id.
type Error struct {
	Code, Message, Param, EventID string
}

func (e *Error) Error() string { return e.Code + ": " + e.Message }
