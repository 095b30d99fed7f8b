package link

// Journal keeps the most recent server events of a session, as the exact frames written (or
// due to be written) to the client, so that a client that reconnects (session.resume) gets
// every event after the last one it received. It is bounded both in bytes and in events: the
// oldest events go first. Not safe for concurrent use; the session's stream guards it.
type Journal struct {
	maxBytes  int
	maxEvents int

	entries []journalEntry // ring: entries[head], entries[head+1], … in seq order
	head    int
	n       int
	bytes   int
	// last is the seq of the newest event ever appended (0 = none), also after it was evicted.
	last int64
}

type journalEntry struct {
	seq  int64
	data []byte
}

// NewJournal returns a journal bounded by maxBytes and maxEvents.
func NewJournal(maxBytes, maxEvents int) *Journal {
	return &Journal{maxBytes: maxBytes, maxEvents: maxEvents}
}

// add appends the frame of event seq; seqs must increase by one. An event larger than the byte
// bound empties the journal (only what it holds can be replayed, and a gap is never hidden).
func (j *Journal) add(seq int64, data []byte) {
	j.last = seq
	for j.n > 0 && (j.n >= j.maxEvents || j.bytes+len(data) > j.maxBytes) {
		j.evict()
	}
	if len(data) > j.maxBytes || j.maxEvents <= 0 {
		return
	}
	if j.n == len(j.entries) {
		j.grow()
	}
	j.entries[(j.head+j.n)%len(j.entries)] = journalEntry{seq: seq, data: data}
	j.n++
	j.bytes += len(data)
}

func (j *Journal) evict() {
	e := &j.entries[j.head]
	j.bytes -= len(e.data)
	*e = journalEntry{}
	j.head = (j.head + 1) % len(j.entries)
	j.n--
}

func (j *Journal) grow() {
	size := max(16, 2*len(j.entries))
	if j.maxEvents > 0 {
		size = min(size, j.maxEvents)
	}
	next := make([]journalEntry, size)
	for i := 0; i < j.n; i++ {
		next[i] = j.entries[(j.head+i)%len(j.entries)]
	}
	j.entries, j.head = next, 0
}

// trim drops the events up to seq upTo: the client acknowledged them (session.event_ack), so a
// resume never needs them again. The journal's bounds then hold only what is still unacked.
func (j *Journal) trim(upTo int64) {
	for j.n > 0 && j.entries[j.head].seq <= upTo {
		j.evict()
	}
}

// first is the oldest seq held, 0 when empty.
func (j *Journal) first() int64 {
	if j.n == 0 {
		return 0
	}
	return j.entries[j.head].seq
}

// since returns the frames of every event after seq after, oldest first. complete is false when
// some of them are no longer held (evicted), or when after is beyond the newest event (the
// client's state is not the server's): the client must resync instead.
func (j *Journal) since(after int64) (frames [][]byte, complete bool) {
	if after == j.last {
		return nil, true
	}
	if after > j.last {
		return nil, false
	}
	if j.n == 0 || j.first() > after+1 {
		return nil, false
	}
	for i := 0; i < j.n; i++ {
		e := j.entries[(j.head+i)%len(j.entries)]
		if e.seq > after {
			frames = append(frames, e.data)
		}
	}
	return frames, true
}

// len and size report what the journal holds (tests, logs).
func (j *Journal) len() int  { return j.n }
func (j *Journal) size() int { return j.bytes }
