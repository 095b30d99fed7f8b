package session_test

import (
	"github.com/omniserve/omniserve/internal/realtime/openai"
	"github.com/omniserve/omniserve/internal/session"
)

// bridge until the effects translator lands (issue 37): the session's tests read its
// session.created / session.updated as the OpenAI translator writes them, as the server does
// (internal/realtime registers the same encoder). This file goes at the merge.
func init() { session.SetSessionEncoder(openai.EncodeSession) }
