package clientsecret

import (
	"context"
	"encoding/json"
	"net/http/httptest"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/omniserve/omniserve/internal/auth"
)

type clock struct {
	mu sync.Mutex
	t  time.Time
}

func (c *clock) now() time.Time          { c.mu.Lock(); defer c.mu.Unlock(); return c.t }
func (c *clock) advance(d time.Duration) { c.mu.Lock(); c.t = c.t.Add(d); c.mu.Unlock() }

func TestMintLookupExpiry(t *testing.T) {
	t.Parallel()
	c := &clock{t: time.Unix(1_700_000_000, 0)}
	s := NewStore(2, c.now)
	a, err := s.Mint(10*time.Second, json.RawMessage(`{"instructions":"x"}`))
	require.NoError(t, err)
	require.True(t, strings.HasPrefix(a.Value, Prefix))
	require.Len(t, a.Value, len(Prefix)+32)
	require.Equal(t, c.now().Add(10*time.Second), a.ExpiresAt)
	got, ok := s.Lookup(a.Value)
	require.True(t, ok)
	require.JSONEq(t, `{"instructions":"x"}`, string(got.Session))

	b, err := s.Mint(time.Minute, nil)
	require.NoError(t, err)
	require.NotEqual(t, a.Value, b.Value)
	_, err = s.Mint(time.Minute, nil)
	require.ErrorIs(t, err, ErrFull, "two live keys fill a store of 2")

	c.advance(10 * time.Second)
	_, ok = s.Lookup(a.Value)
	require.False(t, ok, "a key is dead at its expires_at")
	_, err = s.Mint(time.Minute, nil)
	require.NoError(t, err, "the expired key's place is free again")
	_, ok = s.Lookup("ek_unknown")
	require.False(t, ok)
	var nilStore *Store
	_, ok = nilStore.Lookup(b.Value)
	require.False(t, ok)
}

func TestCheck(t *testing.T) {
	t.Parallel()
	c := &clock{t: time.Unix(1_700_000_000, 0)}
	s := NewStore(10, c.now)
	live, err := s.Mint(time.Minute, nil)
	require.NoError(t, err)
	stale, err := s.Mint(10*time.Second, nil)
	require.NoError(t, err)
	c.advance(30 * time.Second)
	tests := []struct {
		name       string
		key        string // the server's API key
		header     string
		want       auth.Result
		wantSecret bool
	}{
		{"live secret", "sk", "Bearer " + live.Value, auth.OK, true},
		{"live secret, no API key", "", "Bearer " + live.Value, auth.OK, true},
		{"expired secret", "sk", "Bearer " + stale.Value, auth.Invalid, false},
		{"expired secret, no API key", "", "Bearer " + stale.Value, auth.Invalid, false},
		{"made-up secret", "sk", "Bearer ek_0000", auth.Invalid, false},
		{"API key", "sk", "Bearer sk", auth.OK, false},
		{"wrong API key", "sk", "Bearer sx", auth.Invalid, false},
		{"no key", "sk", "", auth.Missing, false},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			r := httptest.NewRequest("GET", "/v1/realtime", nil)
			if tt.header != "" {
				r.Header.Set("Authorization", tt.header)
			}
			sec, res := s.Check(r, tt.key)
			require.Equal(t, tt.want, res)
			require.Equal(t, tt.wantSecret, sec != nil)
			if sec != nil {
				require.Equal(t, sec, FromContext(WithSecret(r.Context(), sec)))
			}
		})
	}
}

// Prune drops expired keys on its timer, with their sessions' bytes, and stops with its ctx.
func TestPruneAndByteBound(t *testing.T) {
	t.Parallel()
	c := &clock{t: time.Unix(1_700_000_000, 0)}
	s := NewStore(100, c.now).WithMaxBytes(10)
	_, err := s.Mint(10*time.Second, json.RawMessage(`"123456"`)) // 8 bytes
	require.NoError(t, err)
	_, err = s.Mint(time.Minute, json.RawMessage(`"abc"`)) // 5 more: past 10
	require.ErrorIs(t, err, ErrFull)
	long, err := s.Mint(time.Minute, json.RawMessage(`1`))
	require.NoError(t, err)
	require.Equal(t, int64(9), s.Bytes())

	ctx, cancel := context.WithCancel(context.Background())
	done := make(chan struct{})
	type pass struct {
		keys  int
		bytes int64
	}
	passes := make(chan pass, 1)
	go func() {
		defer close(done)
		s.Prune(ctx, time.Millisecond, func(n int, b int64) { passes <- pass{n, b} })
	}()
	c.advance(10 * time.Second)
	require.Equal(t, pass{1, 8}, <-passes, "the expired key is pruned without a mint or a lookup")
	require.Equal(t, 1, s.Live())
	require.Equal(t, int64(1), s.Bytes())
	_, ok := s.Lookup(long.Value)
	require.True(t, ok)
	cancel()
	<-done
}

// A key opens at most maxOpens sessions; its count goes with it when it expires.
func TestOpenBound(t *testing.T) {
	t.Parallel()
	c := &clock{t: time.Unix(1_700_000_000, 0)}
	s := NewStore(10, c.now).WithMaxOpens(2)
	a, err := s.Mint(10*time.Second, nil)
	require.NoError(t, err)
	b, err := s.Mint(time.Minute, nil)
	require.NoError(t, err)
	require.NoError(t, s.Open(a.Value))
	require.NoError(t, s.Open(a.Value))
	require.ErrorIs(t, s.Open(a.Value), ErrSessions)
	require.NoError(t, s.Open(b.Value), "the bound is per key")
	c.advance(10 * time.Second)
	_, ok := s.Lookup(a.Value)
	require.False(t, ok)
	s.mu.Lock()
	defer s.mu.Unlock()
	require.NotContains(t, s.opens, a.Value, "an expired key's count is dropped with it")
	require.Contains(t, s.opens, b.Value)
}
