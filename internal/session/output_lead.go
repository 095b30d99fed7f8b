package session

import "time"

// outputLead is how far the session's audio may be sent ahead of real time: the server's bound
// (ManagerConfig.MaxOutputLead), or the session's own smaller one (Options.MaxOutputLead:
// GPT-Live's single paced track runs at most ~200 ms ahead, as api.openai.com's does).
func (s *Session) outputLead() time.Duration {
	if l := s.settings.opts.MaxOutputLead; l > 0 && l < s.m.cfg.MaxOutputLead {
		return l
	}
	return s.m.cfg.MaxOutputLead
}
