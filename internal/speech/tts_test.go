package speech

import (
	"context"
	"math"
	"strings"
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/omniserve/omniserve/internal/audio"
)

func newTestTTS(t testing.TB) *TTS {
	t.Helper()
	tts, err := NewTTS(TTSConfig{})
	require.NoError(t, err)
	t.Cleanup(tts.Close)
	return tts
}

// TestTTSASRRoundTrip speaks a fixed sentence, brings it back to 16 kHz and recognises it.
func TestTTSASRRoundTrip(t *testing.T) {
	tts := newTestTTS(t)
	a := newTestASR(t, 1)
	ctx := context.Background()
	const sentence = "the quick brown fox jumps over the lazy dog near the river bank"

	start := time.Now()
	pcm24, err := tts.Synthesize(ctx, sentence)
	require.NoError(t, err)
	elapsed := time.Since(start)
	require.Equal(t, 24000, tts.OutputRate())
	secs := float64(len(pcm24)) / 24000
	require.Greater(t, secs, 2.0, "a 13-word sentence lasts seconds")
	require.NoError(t, audio.CheckFinite(pcm24))
	t.Logf("synthesized %.2f s in %v (rtf %.4f)", secs, elapsed, elapsed.Seconds()/secs)

	pcm16, err := audio.Resample(pcm24, 24000, 16000)
	require.NoError(t, err)
	got, err := a.Transcribe(ctx, pcm16)
	require.NoError(t, err)
	want := strings.Fields(sentence)
	hit := wordHits(want, strings.Fields(got))
	t.Logf("recognised %q: %d/%d words", got, hit, len(want))
	require.GreaterOrEqual(t, float64(hit)/float64(len(want)), 0.8, "recognised %q", got)
}

// wordHits counts the words of want that appear in got in order (longest common subsequence).
func wordHits(want, got []string) int {
	dp := make([][]int, len(want)+1)
	for i := range dp {
		dp[i] = make([]int, len(got)+1)
	}
	for i := 1; i <= len(want); i++ {
		for j := 1; j <= len(got); j++ {
			switch {
			case want[i-1] == got[j-1]:
				dp[i][j] = dp[i-1][j-1] + 1
			default:
				dp[i][j] = max(dp[i-1][j], dp[i][j-1])
			}
		}
	}
	return dp[len(want)][len(got)]
}

func TestTTSBadInput(t *testing.T) {
	tts := newTestTTS(t)
	ctx := context.Background()
	for _, text := range []string{"", "   ", "\t\n \r", "\x00"} {
		_, err := tts.Synthesize(ctx, text)
		require.ErrorIs(t, err, audio.ErrEmptyText, "%q", text)
	}
	// Silence from flite for ASCII words is a synthesis failure, not "nothing to say".
	require.True(t, asciiSpeakable("ok, 日本"))
	require.False(t, asciiSpeakable("日本 — ¿?"))
	_, err := NewTTS(TTSConfig{OutputRate: 96000})
	require.ErrorIs(t, err, audio.ErrUnsupportedRate)
	_, err = NewTTS(TTSConfig{Voice: "nobody"})
	require.ErrorIs(t, err, ErrInvalidConfig)

	cancelled, cancel := context.WithCancel(ctx)
	cancel()
	fliteLock <- struct{}{} // hold flite so Synthesize has to wait and see the cancelled ctx
	_, err = tts.Synthesize(cancelled, "hello")
	<-fliteLock
	require.ErrorIs(t, err, context.Canceled)

	tts.Close()
	_, err = tts.Synthesize(ctx, "hello")
	require.ErrorIs(t, err, ErrClosed)
}

func TestTTSRates(t *testing.T) {
	ctx := context.Background()
	var base int
	for _, rate := range []int{16000, 24000, 48000, 8000} {
		tts, err := NewTTS(TTSConfig{OutputRate: rate})
		require.NoError(t, err)
		pcm, err := tts.Synthesize(ctx, "hello world")
		tts.Close()
		require.NoError(t, err)
		if rate == 16000 {
			base = len(pcm)
			continue
		}
		want := (base*rate + 15999) / 16000
		require.Equal(t, want, len(pcm), "rate %d", rate)
	}
}

// TestFliteLeadingSilenceTrimmed measures flite's own leading pause (the dead air a reply
// started with) and checks that trimming leaves the first audible sample within the kept lead.
func TestFliteLeadingSilenceTrimmed(t *testing.T) {
	tts, err := NewTTS(TTSConfig{})
	require.NoError(t, err)
	defer tts.Close()
	pcm, err := tts.Synthesize(context.Background(), "hello there")
	require.NoError(t, err)
	lead := func(s []float32) int {
		for i, v := range s {
			if math.Abs(float64(v)) >= 0.01 {
				return i
			}
		}
		return len(s)
	}
	rate := tts.OutputRate()
	before := lead(pcm) * 1000 / rate
	require.Greater(t, before, 50, "flite's leading pause (ms) is what this trims")
	trimmed := audio.TrimSilence(pcm, rate, -40, 10, 100)
	require.LessOrEqual(t, lead(trimmed)*1000/rate, 10)
	t.Logf("flite leading silence %d ms -> %d ms; %d -> %d samples", before, lead(trimmed)*1000/rate, len(pcm), len(trimmed))
}
