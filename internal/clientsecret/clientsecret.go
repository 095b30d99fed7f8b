// Package clientsecret mints and checks the short-lived "ek_" keys of POST
// /v1/realtime/client_secrets: an app's backend, holding the server's API key, mints one for a
// browser, which may then open exactly one kind of thing with it, a realtime connection
// (WebSocket or WebRTC) with the session configuration the key was minted with, until it
// expires. A key may open several sessions until then, as OpenAI's do, up to a bound
// (WithMaxOpens); the store bounds the keys and the bytes of their sessions, and Prune drops
// expired keys on a timer.
package clientsecret

import (
	"bytes"
	"context"
	"crypto/rand"
	"encoding/hex"
	"encoding/json"
	"errors"
	"net/http"
	"strings"
	"sync"
	"time"

	"github.com/omniserve/omniserve/internal/auth"
)

// Prefix starts every minted key; OpenAI's browser SDK treats a key as a client key iff it
// starts with it.
const Prefix = "ek_"

// TTL bounds of expires_after.seconds (OpenAI's).
const (
	MinTTL     = 10 * time.Second
	MaxTTL     = 7200 * time.Second
	DefaultTTL = 600 * time.Second
)

// ErrSessions is Open's refusal when a key has opened its maxOpens sessions.
var ErrSessions = errors.New("this client secret has opened all the sessions it may open")

// ErrFull is Mint's refusal when maxLive unexpired keys exist, or their sessions hold maxBytes.
var ErrFull = errors.New("too many live client secrets")

// PruneInterval is how often Prune drops expired keys: a key outlives its expiry by at most
// this, so memory minted by keys nobody uses comes back on its own.
const PruneInterval = 10 * time.Second

// Secret is one minted key.
type Secret struct {
	Value     string
	ExpiresAt time.Time
	// Session is the session object the key was minted with (the request's "session", as sent;
	// nil when none): what a connection opened with the key starts from.
	Session json.RawMessage
}

// Store holds the live keys in memory: a restart revokes them all, which is what a short-lived
// key may cost. Safe for concurrent use; a nil *Store knows no keys.
type Store struct {
	mu       sync.Mutex
	keys     map[string]Secret
	bytes    int64          // the sessions' bytes held by keys
	opens    map[string]int // sessions opened, per key
	maxLive  int
	maxBytes int64
	maxOpens int
	now      func() time.Time
}

// NewStore returns a store holding at most maxLive unexpired keys (a bound on the memory a
// key holder can make the server keep); now is the clock (nil: time.Now).
func NewStore(maxLive int, now func() time.Time) *Store {
	if now == nil {
		now = time.Now
	}
	return &Store{keys: map[string]Secret{}, opens: map[string]int{}, maxLive: maxLive, now: now}
}

// WithMaxOpens bounds the realtime sessions (WebSocket connections and WebRTC calls, resumes
// included) one key may open in its life (0: no bound), so that one key handed to a page
// cannot take every admission slot. It returns s.
func (s *Store) WithMaxOpens(n int) *Store {
	s.maxOpens = n
	return s
}

// Open counts one session opened with the live key value; past maxOpens it returns
// ErrSessions and the session must not be opened.
func (s *Store) Open(value string) error {
	s.mu.Lock()
	defer s.mu.Unlock()
	if s.maxOpens > 0 && s.opens[value] >= s.maxOpens {
		return ErrSessions
	}
	s.opens[value]++
	return nil
}

// WithMaxBytes bounds the bytes the live keys' sessions hold together (0: no bound beyond
// maxLive); a mint past it gets ErrFull. It returns s.
func (s *Store) WithMaxBytes(n int64) *Store {
	s.maxBytes = n
	return s
}

// Mint makes a key valid for ttl (clamped by the caller to MinTTL..MaxTTL).
func (s *Store) Mint(ttl time.Duration, session json.RawMessage) (Secret, error) {
	var b [16]byte
	if _, err := rand.Read(b[:]); err != nil {
		return Secret{}, err
	}
	now := s.now()
	// A copy of exactly its length: the caller's slice may share a larger buffer (the body).
	sec := Secret{Value: Prefix + hex.EncodeToString(b[:]), ExpiresAt: now.Add(ttl), Session: bytes.Clone(session)}
	s.mu.Lock()
	defer s.mu.Unlock()
	if s.fullLocked(len(session)) {
		s.pruneLocked(now)
		if s.fullLocked(len(session)) {
			return Secret{}, ErrFull
		}
	}
	s.keys[sec.Value] = sec
	s.bytes += int64(len(sec.Session))
	return sec, nil
}

func (s *Store) fullLocked(add int) bool {
	return len(s.keys) >= s.maxLive || (s.maxBytes > 0 && s.bytes+int64(add) > s.maxBytes)
}

// Prune drops the expired keys every interval until ctx is done: without it an expired key
// nobody presents again would hold its session until the store fills. pruned, when not nil,
// is told after each pass that dropped keys how many and the sessions' bytes they held.
func (s *Store) Prune(ctx context.Context, interval time.Duration, pruned func(keys int, bytes int64)) {
	t := time.NewTicker(interval)
	defer t.Stop()
	for {
		select {
		case <-ctx.Done():
			return
		case <-t.C:
			s.mu.Lock()
			n, b := len(s.keys), s.bytes
			s.pruneLocked(s.now())
			n, b = n-len(s.keys), b-s.bytes
			s.mu.Unlock()
			if n > 0 && pruned != nil {
				pruned(n, b)
			}
		}
	}
}

// Lookup returns the key's secret while it is unexpired.
func (s *Store) Lookup(value string) (Secret, bool) {
	if s == nil {
		return Secret{}, false
	}
	now := s.now()
	s.mu.Lock()
	defer s.mu.Unlock()
	sec, ok := s.keys[value]
	if ok && !now.Before(sec.ExpiresAt) {
		delete(s.keys, value)
		delete(s.opens, value)
		s.bytes -= int64(len(sec.Session))
		return Secret{}, false
	}
	return sec, ok
}

// Live counts the keys held (expired ones not yet pruned included).
func (s *Store) Live() int {
	s.mu.Lock()
	defer s.mu.Unlock()
	return len(s.keys)
}

// Bytes is the sessions' bytes the keys hold.
func (s *Store) Bytes() int64 {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.bytes
}

// pruneLocked drops the expired keys into a new map: a Go map never shrinks, so deleting from
// the old one would keep the buckets of its largest size (10,000 keys) for the process's life.
func (s *Store) pruneLocked(now time.Time) {
	live := 0
	for _, sec := range s.keys {
		if now.Before(sec.ExpiresAt) {
			live++
		}
	}
	if live == len(s.keys) {
		return
	}
	keys := make(map[string]Secret, live)
	opens := make(map[string]int, len(s.opens))
	s.bytes = 0
	for k, sec := range s.keys {
		if now.Before(sec.ExpiresAt) {
			keys[k] = sec
			s.bytes += int64(len(sec.Session))
			if n, ok := s.opens[k]; ok {
				opens[k] = n
			}
		}
	}
	s.keys, s.opens = keys, opens
}

// Check authenticates r: an "ek_" key must be a live minted one (with or without a server API
// key: a stale client secret is refused either way, so a browser learns it must mint anew), and
// then its secret is returned; any other key goes through auth.Check against key.
func (s *Store) Check(r *http.Request, key string) (*Secret, auth.Result) {
	tok, ok := auth.Presented(r)
	if ok && strings.HasPrefix(tok, Prefix) {
		if sec, live := s.Lookup(tok); live {
			return &sec, auth.OK
		}
		return nil, auth.Invalid
	}
	return nil, auth.Check(r, key)
}

type ctxKey struct{}

// WithSecret records the client secret a request was authorised by.
func WithSecret(ctx context.Context, sec *Secret) context.Context {
	return context.WithValue(ctx, ctxKey{}, sec)
}

// FromContext is the client secret a request was authorised by, nil for the API key.
func FromContext(ctx context.Context) *Secret {
	sec, _ := ctx.Value(ctxKey{}).(*Secret)
	return sec
}
