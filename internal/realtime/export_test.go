package realtime

import "github.com/omniserve/omniserve/internal/session"

// JournalStats reports what a session's replay journal holds (tests of package realtime_test).
func JournalStats(sink session.Sink) (events, bytes int) {
	st := streamOf(sink)
	if st == nil {
		return 0, 0
	}
	return st.JournalStats()
}

// Sidebands is the number of sidebands joined to the live call id (tests).
func (c *Calls) Sidebands(id string) int {
	c.mu.Lock()
	cl := c.calls[id]
	c.mu.Unlock()
	if cl == nil {
		return 0
	}
	cl.sbs.mu.Lock()
	defer cl.sbs.mu.Unlock()
	return len(cl.sbs.set)
}
