package session

// detectDialect fixes the session's dialect at the client's first event. A connection without
// the OpenAI-Beta header or subprotocol is GA unless that first event is a session.update
// spelled in beta fields only (UpdateSession.BetaSpelling): then the client is a beta client,
// and from that event on it gets the beta session shape and beta event names. session.created,
// sent before the client spoke, keeps the GA shape.
func (s *Session) detectDialect(c Command) {
	if s.dialectFixed {
		return
	}
	s.dialectFixed = true
	if u, ok := c.(*UpdateSession); ok && u.BetaSpelling {
		s.opts.Beta = true
		s.log.Debug("beta client detected from its session.update fields")
	}
}
