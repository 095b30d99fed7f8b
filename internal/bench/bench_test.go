package bench

import (
	"fmt"
	"math"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/omniserve/omniserve/internal/benchreport"
)

// TestFigureSummary checks that the printed summaries use benchreport's nearest-rank quantile
// (its table test is there) and leave the samples in measurement order.
func TestFigureSummary(t *testing.T) {
	t.Parallel()
	ten := []float64{10, 9, 8, 7, 6, 5, 4, 3, 2, 1}
	f := Figure{Samples: ten}
	for st, want := range map[Stat]float64{P50: 5, P90: 9, P99: 10, Max: 10, Min: 1, Value: 1} {
		require.Equal(t, want, f.Summary(st), st)
	}
	require.True(t, math.IsNaN(Figure{}.Summary(P50)))
	require.Equal(t, []float64{10, 9, 8, 7, 6, 5, 4, 3, 2, 1}, ten, "the samples are not reordered")
}

func TestResultPrint(t *testing.T) {
	t.Parallel()
	r := &Result{Bench: "x", CPUs: 2}
	r.Add(Figure{Name: "lat_ms", Samples: []float64{3, 1, 2, 4}, Keys: []Stat{P50, P99}, Digits: 1},
		Figure{Name: "best_tok_s", Samples: []float64{20.5, 22.25}, Keys: []Stat{Max}, Digits: 2},
		One("sessions", "sessions", "", 16, 0),
		Figure{Name: "first_audio_ms", Samples: []float64{30, 10, 20}, Keys: []Stat{P50}, Bare: true, Digits: 0},
		Figure{Name: "data_only", Samples: []float64{1}})
	var b strings.Builder
	require.NoError(t, r.Print(&b))
	require.Equal(t, "cpus=2\nlat_ms_p50=2.0\nlat_ms_p99=4.0\nbest_tok_s=22.25\nsessions=16\nfirst_audio_ms=20\n", b.String())
}

// TestResultReport checks the report built from a result: computed values become scalars, any
// other figure keeps every sample (printed or report-only), non-finite values become notes, the
// sessions pass through, and benchreport accepts and writes the whole.
func TestResultReport(t *testing.T) {
	t.Parallel()
	r := &Result{Bench: "chat", CPUs: 2}
	r.Add(Figure{Name: "ttft_ms", Unit: "ms", Definition: "POST → first delta", Samples: []float64{3, 1, 2}, Keys: []Stat{P50}},
		Figure{Name: "round_rps", Unit: "req/s", Definition: "per round", Samples: []float64{20, 21}},
		Figure{Name: "one_run_ms", Unit: "ms", Definition: "a quantile figure of one run", Samples: []float64{7}, Keys: []Stat{P50}},
		Figure{Name: "not_measured_ms", Unit: "ms", Definition: "nothing ran"},
		One("rps", "req/s", "requests / wall time", 22.5, 2),
		One("overhead_pct", "%", "over nothing", math.NaN(), 2),
		Figure{Name: "lag_ms", Unit: "ms", Definition: "lags", Samples: []float64{1, math.Inf(1), 2}, Keys: []Stat{P99}})
	r.Sessions = []benchreport.Session{{Label: "s", Spans: []benchreport.Span{benchreport.Instant(benchreport.BargeIn, time.Second, "")}}}
	now := time.Date(2026, 12, 2, 20, 0, 0, 0, time.UTC)
	rep := r.Report([]string{"omniserve", "bench", "chat"}, now)

	require.Equal(t, "omniserve bench chat", rep.Title)
	require.Equal(t, []string{"omniserve", "bench", "chat"}, rep.Command)
	require.Equal(t, now, rep.Machine.Time)
	require.Equal(t, []benchreport.Scalar{{Key: "rps", Value: 22.5, Unit: "req/s", Definition: "requests / wall time"}}, rep.Scalars)
	require.Equal(t, []benchreport.Figure{
		{Key: "ttft_ms", Unit: "ms", Definition: "POST → first delta", Samples: []float64{3, 1, 2}},
		{Key: "round_rps", Unit: "req/s", Definition: "per round", Samples: []float64{20, 21}},
		{Key: "one_run_ms", Unit: "ms", Definition: "a quantile figure of one run", Samples: []float64{7}},
		{Key: "not_measured_ms", Unit: "ms", Definition: "nothing ran"},
		{Key: "lag_ms", Unit: "ms", Definition: "lags", Samples: []float64{1, 2}},
	}, rep.Figures)
	require.Len(t, rep.Notes, 2)
	require.Contains(t, rep.Notes[0], "overhead_pct was NaN")
	require.Contains(t, rep.Notes[1], "lag_ms: 1 of 3 samples")
	require.Equal(t, r.Sessions, rep.Sessions)
	require.Equal(t, []float64{1, math.Inf(1), 2}, r.Figures[6].Samples, "the result's samples are untouched")

	dir := t.TempDir()
	require.NoError(t, benchreport.Write(dir, rep))
	back, err := benchreport.Load(filepath.Join(dir, benchreport.JSONFile))
	require.NoError(t, err)
	require.Equal(t, 3.0, back.Figures[0].Summary.Max)
}

func TestMeter(t *testing.T) {
	t.Parallel()
	Meter(nil).Start("x", 3, "turns").Add(1) // a nil meter shows nothing and does not panic
	var out, errb strings.Builder
	c := NewConsole(&out, &errb)
	p := c.Meter().Start("chat", 4, "requests")
	for i := range 4 {
		p.Add(1)
		fmt.Fprintf(c, "line %d\n", i)
	}
	p.Done()
	require.Equal(t, "line 0\nline 1\nline 2\nline 3\n", out.String(), "stdout holds the printed lines only")
	require.Contains(t, errb.String(), "chat: 4/4 requests, done in", "plain lines off a terminal")
	require.NotContains(t, errb.String(), "\r")
}

// TestConsoleOnATerminal checks that a line printed while a bar is drawn on the same terminal
// gets a line of its own: the bar is blanked first and redrawn under it.
func TestConsoleOnATerminal(t *testing.T) {
	t.Parallel()
	var screen strings.Builder // stdout and stderr on one terminal
	tty := true
	c := NewConsole(&screen, &screen)
	c.opts = &benchreport.ProgressOptions{TTY: &tty, Width: 4}
	p := c.Meter().Start("chat", 2, "requests")
	p.Add(1)
	fmt.Fprint(c, "round 0 rps=1\n")
	p.Add(1)
	p.Done()
	// What the terminal shows: each \r returns to the line's start, so keep what follows the
	// last \r of each line.
	var shown []string
	for _, l := range strings.Split(strings.TrimSuffix(screen.String(), "\n"), "\n") {
		shown = append(shown, strings.TrimSpace(l[strings.LastIndex(l, "\r")+1:]))
	}
	require.Equal(t, "round 0 rps=1", shown[0], "the printed line does not share the bar's line: %q", screen.String())
	require.Len(t, shown, 2)
	require.Contains(t, shown[1], "chat [####] 2/2 requests 100%")
	require.Contains(t, shown[1], "done in")
}
