package session

// sessionCreated is session.created (transcription_session.created for a beta transcription
// session), with the resume token of a resumable session.
func (s *Session) sessionCreated() SessionCreated {
	return SessionCreated{View: s.sessionView(), ResumeToken: s.attachment.resumeToken,
		LegacyNames: s.settings.legacyTranscription(false)}
}

// sessionUpdated is session.updated (transcription_session.updated for a beta transcription
// session, or for an update the client sent as transcription_session.update: legacy).
func (s *Session) sessionUpdated(legacy bool) SessionUpdated {
	return SessionUpdated{View: s.sessionView(), LegacyNames: s.settings.legacyTranscription(legacy)}
}
