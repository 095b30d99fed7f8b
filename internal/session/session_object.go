package session

// sessionCreated is session.created (transcription_session.created for a beta transcription
// session) of a session configured as st and seen as view, with the resume token of a
// resumable session.
func sessionCreated(view SessionView, st *settings, resumeToken string) SessionCreated {
	return SessionCreated{View: view, ResumeToken: resumeToken, LegacyNames: st.legacyTranscription(false)}
}

// sessionUpdated is session.updated (transcription_session.updated for a beta transcription
// session, or for an update the client sent as transcription_session.update: legacy).
func sessionUpdated(view SessionView, st *settings, legacy bool) SessionUpdated {
	return SessionUpdated{View: view, LegacyNames: st.legacyTranscription(legacy)}
}
