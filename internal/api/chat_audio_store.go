package api

import (
	"container/list"
	"sync"
	"time"
)

// chatAudioStore remembers the transcript of every audio response for chatAudioTTL, so that a
// follow-up request may name it as OpenAI's multi-turn audio does (an assistant message with
// audio: {id}). The engine's thinker reads text, so the transcript is all a later turn needs;
// the audio itself is not kept. The store is bounded by bytes: the least recently used entries
// go first when it is full, and expired entries are dropped as they are met. It is per process:
// behind a load balancer, a follow-up must reach the replica that answered (or resend text).
type chatAudioStore struct {
	maxBytes int64
	ttl      time.Duration
	now      func() time.Time

	mu    sync.Mutex
	bytes int64
	order *list.List // front = most recently used; values are *chatAudioEntry
	byID  map[string]*list.Element
}

type chatAudioEntry struct {
	id, transcript string
	expires        time.Time
}

// chatAudioEntryOverhead approximates the bookkeeping bytes of one entry beyond its strings.
const chatAudioEntryOverhead = 128

func newChatAudioStore(maxBytes int64, ttl time.Duration) *chatAudioStore {
	return &chatAudioStore{maxBytes: maxBytes, ttl: ttl, now: time.Now, order: list.New(), byID: map[string]*list.Element{}}
}

func (e *chatAudioEntry) size() int64 {
	return int64(len(e.id) + len(e.transcript) + chatAudioEntryOverhead)
}

// put stores transcript under id until expires; an entry larger than the whole store is not kept.
func (s *chatAudioStore) put(id, transcript string, expires time.Time) {
	e := &chatAudioEntry{id: id, transcript: transcript, expires: expires}
	if e.size() > s.maxBytes {
		return
	}
	s.mu.Lock()
	defer s.mu.Unlock()
	if old, ok := s.byID[id]; ok {
		s.removeLocked(old)
	}
	s.byID[id] = s.order.PushFront(e)
	s.bytes += e.size()
	for s.bytes > s.maxBytes {
		s.removeLocked(s.order.Back())
	}
}

// get returns the transcript of id; ok is false for an unknown or expired id.
func (s *chatAudioStore) get(id string) (string, bool) {
	s.mu.Lock()
	defer s.mu.Unlock()
	el, ok := s.byID[id]
	if !ok {
		return "", false
	}
	e := el.Value.(*chatAudioEntry)
	if !s.now().Before(e.expires) {
		s.removeLocked(el)
		return "", false
	}
	s.order.MoveToFront(el)
	return e.transcript, true
}

func (s *chatAudioStore) removeLocked(el *list.Element) {
	e := el.Value.(*chatAudioEntry)
	s.order.Remove(el)
	delete(s.byID, e.id)
	s.bytes -= e.size()
}

// usage reports the entries and bytes held (tests).
func (s *chatAudioStore) usage() (entries int, bytes int64) {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.order.Len(), s.bytes
}
