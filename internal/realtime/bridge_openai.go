package realtime

import (
	"github.com/omniserve/omniserve/internal/realtime/openai"
	"github.com/omniserve/omniserve/internal/session"
)

// bridge until the effects translator lands (issue 37): the session's events still carry a
// protocol payload, so the session asks the OpenAI translator for its session.created /
// session.updated (session.SetSessionEncoder). This file goes at the merge.
func init() { session.SetSessionEncoder(openai.EncodeSession) }
