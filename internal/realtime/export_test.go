package realtime

import "github.com/omniserve/omniserve/internal/session"

// JournalStats reports what a session's replay journal holds (tests of package realtime_test).
func JournalStats(sink session.Sink) (events, bytes int) {
	st, ok := sink.(*stream)
	if !ok {
		return 0, 0
	}
	return st.journalStats()
}
