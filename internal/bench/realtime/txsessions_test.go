package realtime

import (
	"context"
	"fmt"
	"net/http/httptest"
	"os"
	"strings"
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/omniserve/omniserve/internal/bench"
	"github.com/omniserve/omniserve/internal/config"
	"github.com/omniserve/omniserve/internal/server"
)

const goForwardRaw = "/usr/share/pocketsphinx/test/data/goforward.raw" // 16 kHz PCM16, pocketsphinx-testdata

func TestTxSteps(t *testing.T) {
	t.Parallel()
	for _, tt := range []struct {
		maxN int
		want []int
	}{
		{0, nil},
		{1, []int{1}},
		{2, []int{1, 2}},
		{3, []int{1, 2, 3}},
		{16, []int{1, 2, 4, 6, 8, 12, 16}},
		{40, []int{1, 2, 4, 6, 8, 12, 16, 24, 32, 40}},
	} {
		require.Equal(t, tt.want, txSteps(tt.maxN), "maxN %d", tt.maxN)
	}
}

func TestTxStepKeepsUp(t *testing.T) {
	t.Parallel()
	ok := txStep{n: 1, expected: 2, done: []float64{520, 1000}, lags: []float64{1, 399}}
	for _, tt := range []struct {
		name string
		edit func(*txStep)
		want bool
	}{
		{"every item in time, every append in time", func(*txStep) {}, true},
		{"an item later than 1 s after its speech end", func(s *txStep) { s.done[1] = 1000.1 }, false},
		{"an append 400 ms behind the audio clock", func(s *txStep) { s.lags[0] = 400 }, false},
		{"a wrong transcript", func(s *txStep) { s.wrong = 1 }, false},
		{"an error event", func(s *txStep) { s.errEvs = 1 }, false},
		{"a failed item", func(s *txStep) { s.failed = 1 }, false},
		{"a missing item", func(s *txStep) { s.missing, s.done = 1, s.done[:1] }, false},
		{"an item completed without a speech end", func(s *txStep) { s.done = s.done[:1] }, false},
	} {
		t.Run(tt.name, func(t *testing.T) {
			s := ok
			s.done, s.lags = append([]float64(nil), ok.done...), append([]float64(nil), ok.lags...)
			tt.edit(&s)
			require.Equal(t, tt.want, s.keepsUp())
		})
	}
}

func TestWrongTranscripts(t *testing.T) {
	t.Parallel()
	ref := []string{"go forward ten meters", "go forward ten meters"}
	for _, tt := range []struct {
		got  []string
		want int
	}{
		{ref, 0},
		{[]string{"go forward ten meters"}, 0}, // the second is missing, not wrong
		{[]string{"go forward ten meters", "go forward"}, 1},
		{[]string{"go forward", "ten meters", "go forward ten meters"}, 3}, // split: everything after shifts
		{nil, 0},
	} {
		require.Equal(t, tt.want, wrongTranscripts(tt.got, ref), "%q", tt.got)
	}
}

// TestTxSessionsOnRealServer runs the transcription ramp up to 2 sessions of 2 utterances on a
// server built as `serve` builds it (dummy:tiny, pocketsphinx): the reference transcripts are
// the speech's, every measured step transcribed every item exactly as the reference, with a
// speech end and no error, and the figures say what was measured. Whether a step keeps up is a
// matter of the machine's load; only its consistency with the figures is checked.
func TestTxSessionsOnRealServer(t *testing.T) {
	if testing.Short() {
		t.Skip("builds a server and streams 2 × 8.6 s of speech in real time")
	}
	pcm, err := os.ReadFile(goForwardRaw)
	require.NoError(t, err, "install pocketsphinx-testdata")
	ctx := t.Context()
	cfg, err := config.Resolve(config.Sources{Flags: []config.FlagValue{
		{Name: "model", Value: "dummy:tiny"}, {Name: "device", Value: "cpu"},
		{Name: "cache-dir", Value: t.TempDir()}, {Name: "resume-grace", Value: "0s"},
	}})
	require.NoError(t, err)
	srv := server.New(cfg, server.Options{})
	defer func() {
		cctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
		defer cancel()
		srv.Close(cctx)
	}()
	require.NoError(t, srv.Build(ctx))
	<-srv.Warmed()
	hs := httptest.NewServer(srv.Handler())
	defer hs.Close()
	url := "ws" + strings.TrimPrefix(hs.URL, "http") + "/v1/realtime"

	const utterances = 2
	var out strings.Builder
	steps, best, err := benchTxSessions(ctx, url, srv.Sessions(), pcm, 2, utterances, &out, bench.Meter(nil).Start("", 0, ""))
	require.NoError(t, err)
	t.Log(out.String())
	require.Regexp(t, `tx reference transcripts: \["[^"]*forward[^"]*" "[^"]*forward[^"]*"\]`, out.String(), "pocketsphinx heard the speech")
	require.NotEmpty(t, steps)
	chunks := (len(pcm) + txTailBytes + chunkBytes - 1) / chunkBytes * utterances
	for i, st := range steps {
		require.Equal(t, []int{1, 2}[i], st.n)
		require.Equal(t, st.n*utterances, st.expected)
		require.Zero(t, st.wrong, "n=%d: the same audio gives the same transcript, concurrent or not", st.n)
		require.Zero(t, st.errors(), "n=%d: %+v", st.n, st)
		require.Len(t, st.done, st.expected, "n=%d: every item completed, with a speech end", st.n)
		require.Len(t, st.lags, st.n*chunks, "n=%d: one lag per append", st.n)
		for _, d := range st.done {
			// Causality, not speed: the item cannot complete before the append that carried
			// the end of its silence window was written, and no append is written before its
			// last sample's time on the audio clock.
			require.GreaterOrEqual(t, d, float64(txSilenceMs), "n=%d", st.n)
		}
		require.Equal(t, st.keepsUp(), best >= st.n, "n=%d: the verdict is the step's", st.n)
		require.Contains(t, out.String(), fmt.Sprintf("tx_sessions=%d items=%d/%d ", st.n, st.expected, st.expected))
	}

	figs := txFigures(steps, best, utterances)
	require.Equal(t, "rt_tx_sessions_realtime", figs[0].Name)
	require.Equal(t, []float64{float64(best)}, figs[0].Samples)
	require.Len(t, figs, 1+4*len(steps))
	for _, f := range figs {
		require.NotEmpty(t, f.Definition, f.Name)
		require.NotEmpty(t, f.Unit, f.Name)
		require.NotEmpty(t, f.Keys, f.Name)
	}
	r := bench.NewResult("realtime")
	r.Add(figs...)
	var printed strings.Builder
	require.NoError(t, r.Print(&printed))
	require.Contains(t, printed.String(), fmt.Sprintf("\nrt_tx_sessions_realtime=%d\n", best))
	require.Regexp(t, `(?m)^rt_tx_done_ms_n1_p50=[0-9.]+\nrt_tx_done_ms_n1_p90=[0-9.]+\nrt_tx_append_lag_ms_n1=[0-9.]+\nrt_tx_wrong_n1=0\nrt_tx_errors_n1=0$`, printed.String())
}
