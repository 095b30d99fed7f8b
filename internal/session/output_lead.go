package session

import "time"

// outputLead is how far a session with opts may send its audio ahead of real time: the server's
// bound, or the session's own smaller one (Options.MaxOutputLead: GPT-Live's single paced track
// runs at most ~200 ms ahead, as api.openai.com's does).
func outputLead(opts Options, server time.Duration) time.Duration {
	if l := opts.MaxOutputLead; l > 0 && l < server {
		return l
	}
	return server
}
