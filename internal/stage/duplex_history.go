package stage

// trimHistory drops the oldest messages of the conversation (after a leading system message,
// the instructions) while its text exceeds DuplexOptions.MaxHistoryBytes, keeping the newest
// message. It runs on the sequence goroutine between jobs, so no job holds an index into the
// history while it moves. The engine sequence is not touched: it keeps its own token window;
// what is dropped here is what later renderings (and a remote thinker) no longer read.
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
	first := 0
	if len(d.history) > 0 && d.history[0].Role == "system" {
		first = 1
	}
	drop := 0
	for i := first; i < len(d.history)-1 && total > limit; i++ {
		total -= len(d.history[i].Content)
		drop++
	}
	if drop > 0 {
		d.history = append(d.history[:first], d.history[first+drop:]...)
	}
}
