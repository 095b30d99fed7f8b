package stage

import "github.com/omniserve/omniserve/internal/gpu"

// trimHistory drops the oldest messages of the conversation while its text exceeds
// DuplexOptions.MaxHistoryBytes, keeping a leading system message (the instructions), the
// stream's tools declaration (part of the session's configuration too, duplex_tools.go) and
// the newest message. It runs on the sequence goroutine between jobs, so no job holds an index
// into the history while it moves. The engine sequence is not touched: it keeps its own token
// window; what is dropped here is what later renderings (and a remote thinker) no longer read.
func (c *conversation) trimHistory() {
	limit := c.opts.MaxHistoryBytes
	if limit <= 0 {
		return
	}
	c.mu.Lock()
	defer c.mu.Unlock()
	total := 0
	for _, m := range c.history {
		total += len(m.Content)
	}
	if total <= limit {
		return
	}
	kept := make([]gpu.ChatMessage, 0, len(c.history))
	for i, m := range c.history {
		pinned := i == len(c.history)-1 ||
			(m.Role == "system" && (i == 0 || (c.decl.have != "" && m.Content == c.decl.have)))
		if !pinned && total > limit {
			total -= len(m.Content)
			continue
		}
		kept = append(kept, m)
	}
	c.history = kept
}
