package api

import (
	"context"
	"net/http"
	"net/http/httptest"
	"strings"
	"testing"
	"time"

	"github.com/stretchr/testify/require"
)

func TestSlotsTakeAllOrNone(t *testing.T) {
	tests := []struct {
		name     string
		capacity int
		held     int // taken before
		want     int
		ok       bool
	}{
		{"one of one", 1, 0, 1, true},
		{"all free", 4, 0, 4, true},
		{"exactly the rest", 4, 1, 3, true},
		{"one too many takes none", 4, 2, 3, false},
		{"full", 2, 2, 1, false},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			s := newSlots(tc.capacity)
			first, ok := s.take(tc.held)
			require.True(t, ok)
			release, ok := s.take(tc.want)
			require.Equal(t, tc.ok, ok)
			if !ok {
				require.Nil(t, release)
				require.Len(t, s, tc.held, "a refused take holds nothing")
			} else {
				require.Len(t, s, tc.held+tc.want)
				release()
				require.Len(t, s, tc.held)
			}
			first()
			require.Empty(t, s)
		})
	}
}

func TestOverloadedIs429WithRetryAfter(t *testing.T) {
	e := overloaded(2, "at the limit of 1 concurrent syntheses; retry later")
	require.Equal(t, http.StatusTooManyRequests, e.Status)
	require.Equal(t, "rate_limit_error", e.Type)
	require.Equal(t, "engine_overloaded", e.Code)
	require.Equal(t, 2, e.RetryAfter)
}

// blockingTTS holds every synthesis until release closes, so that a test can fill the slots.
type blockingTTS struct {
	started chan struct{}
	release chan struct{}
}

func (b blockingTTS) Synthesize(ctx context.Context, _ string) ([]float32, error) {
	b.started <- struct{}{}
	select {
	case <-b.release:
	case <-ctx.Done():
	}
	return make([]float32, 240), nil
}

func (blockingTTS) SpeechRate() int { return 24000 }

func TestSpeechBeyondMaxInFlightIs429(t *testing.T) {
	tts := blockingTTS{started: make(chan struct{}, 2), release: make(chan struct{})}
	h := NewSpeechHandler(AudioConfig{MaxInFlight: 1}, tts, nil)
	body := `{"model":"omni","input":"Hello there.","voice":"alloy"}`
	done := make(chan int, 1)
	go func() {
		rec := httptest.NewRecorder()
		h.ServeHTTP(rec, httptest.NewRequest(http.MethodPost, "/v1/audio/speech", strings.NewReader(body)))
		done <- rec.Code
	}()
	<-tts.started

	// Bounded, so that a second request wrongly admitted fails the test rather than hanging it.
	ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
	defer cancel()
	rec := httptest.NewRecorder()
	h.ServeHTTP(rec, httptest.NewRequestWithContext(ctx, http.MethodPost, "/v1/audio/speech", strings.NewReader(body)))
	require.Equal(t, http.StatusTooManyRequests, rec.Code)
	require.Equal(t, "1", rec.Header().Get("Retry-After"))
	require.Contains(t, rec.Body.String(), "at the limit of 1 concurrent syntheses")

	close(tts.release)
	require.Equal(t, http.StatusOK, <-done)
	// The slot came back: the next request is served.
	rec = httptest.NewRecorder()
	h.ServeHTTP(rec, httptest.NewRequest(http.MethodPost, "/v1/audio/speech", strings.NewReader(body)))
	require.Equal(t, http.StatusOK, rec.Code)
}
