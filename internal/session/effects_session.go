package session

// The effects on the session itself: closing, closed, resumed, the heartbeat's answer.

// SessionClosing: the server drains; the session ends after GraceMs.
type SessionClosing struct {
	SessionID, Reason string
	GraceMs           int64
}

// SessionClosed: the session ended for Reason.
type SessionClosed struct{ SessionID, Reason string }

// SessionResumed: a new connection took the session over. Session is the session object, as
// session.updated carries it. Without ResyncRequired the connection replays what the client
// missed; with it, Items and Response (when one is active) are the state to resync to. The
// connection fills in the event numbers it knows.
type SessionResumed struct {
	SessionID, ResumeToken string
	ResyncRequired         bool
	Session                Effect
	Items                  *[]Item
	Response               *ResponseInfo
}

// HeartbeatAck answers the client's heartbeat.
type HeartbeatAck struct{ SessionID string }

// TurnSignaled answers a SignalTurn: the signal's event, the conversation's turn state and the
// epoch.
type TurnSignaled struct {
	SessionID, Event, TurnState string
	Epoch                       int
}

func (SessionClosing) effect() {}
func (SessionClosed) effect()  {}
func (SessionResumed) effect() {}
func (HeartbeatAck) effect()   {}
func (TurnSignaled) effect()   {}
