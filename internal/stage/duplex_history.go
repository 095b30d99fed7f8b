package stage

import "github.com/omniserve/omniserve/internal/gpu"

// trimHistory drops the oldest messages of the conversation while its text exceeds
// DuplexOptions.MaxHistoryBytes, keeping a leading system message (the instructions), the
// stream's tools declaration (part of the session's configuration too, duplex_tools.go) and
// the newest message. It runs on the sequence goroutine between jobs, so no job holds an index
// into the history while it moves. The engine sequence is not touched: it keeps its own token
// window; what is dropped here is what later renderings (and a remote thinker) no longer read.
func (d *DuplexStream) trimHistory() {
	limit := d.opts.MaxHistoryBytes
	if limit <= 0 {
		return
	}
	d.mu.Lock()
	defer d.mu.Unlock()
	total := 0
	for _, m := range d.history {
		total += len(m.Content)
	}
	if total <= limit {
		return
	}
	kept := make([]gpu.ChatMessage, 0, len(d.history))
	for i, m := range d.history {
		pinned := i == len(d.history)-1 ||
			(m.Role == "system" && (i == 0 || (d.decl.have != "" && m.Content == d.decl.have)))
		if !pinned && total > limit {
			total -= len(m.Content)
			continue
		}
		kept = append(kept, m)
	}
	d.history = kept
}
