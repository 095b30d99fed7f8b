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

// outputFrameMs is the length of a session's audio deltas in ms: Options.OutputFrame, else
// frameMs. A client that cannot flush (GPT-Live) holds between the lead and the lead plus one
// frame when a barge-in cuts the reply, so a small lead wants small frames.
func outputFrameMs(opts Options) int {
	if f := opts.OutputFrame; f >= 10*time.Millisecond && f < frameMs*time.Millisecond {
		return int(f / time.Millisecond)
	}
	return frameMs
}
