package test

import (
	"bytes"
	"context"
	"encoding/json"
	"math"
	"math/rand/v2"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/omniserve/omniserve/internal/benchreport"
)

// TestBenchReportBrowser renders a bench report.html in headless Chromium and checks, through
// test/browser/report.mjs, that the page shows what the report holds: one plot per figure and
// per session, each with its accessible title and a real size, a visible bar per non-empty
// histogram bin, a visible mark per timeline span, and no request besides the file itself.
// report.json, report.html and the screenshots land in the test's artifact directory
// (go test ./test -run TestBenchReportBrowser -artifacts -outputdir DIR keeps them).
//
// The figures are synthetic (syntheticBenchReport): this tests the renderer, not a measurement.
func TestBenchReportBrowser(t *testing.T) {
	ctx, cancel := context.WithTimeout(context.Background(), 2*time.Minute)
	defer cancel()
	node, dir := browserHarness(ctx, t)

	out := t.ArtifactDir()
	r := syntheticBenchReport()
	require.NoError(t, benchreport.Write(out, r))

	run := exec.CommandContext(ctx, node, "report.mjs")
	run.Dir = dir
	run.Env = append(os.Environ(), "REPORT_HTML="+filepath.Join(out, benchreport.HTMLFile), "OUT_DIR="+out,
		"CHROMIUM="+chromiumPath)
	var stdout, stderr bytes.Buffer
	run.Stdout, run.Stderr = &stdout, &stderr
	runErr := run.Run()
	t.Logf("report.mjs:\n%s%s", stdout.String(), stderr.String())
	lines := strings.Split(strings.TrimSpace(stdout.String()), "\n")
	var got struct {
		OK            bool     `json:"ok"`
		Error         string   `json:"error"`
		Title         string   `json:"title"`
		Blocked       []string `json:"blocked"`
		PageErrors    []string `json:"pageErrors"`
		PhoneOverflow bool     `json:"phoneOverflow"`
		SVGs          []struct {
			Class        string         `json:"class"`
			Figure       string         `json:"figure"`
			Role         string         `json:"role"`
			Title        string         `json:"title"`
			Desc         string         `json:"desc"`
			Width        float64        `json:"width"`
			Height       float64        `json:"height"`
			Bars         int            `json:"bars"`
			VisibleBars  int            `json:"visibleBars"`
			BarCounts    int            `json:"barCounts"`
			BarsInside   bool           `json:"barsInside"`
			TallestCount int            `json:"tallestCount"`
			Marks        int            `json:"marks"`
			VisibleMarks map[string]int `json:"visibleMarks"`
			Texts        int            `json:"texts"`
		} `json:"svgs"`
	}
	require.NoError(t, json.Unmarshal([]byte(lines[len(lines)-1]), &got), "last line is the JSON summary")
	require.NoError(t, runErr, "report.mjs failed: %s", got.Error)
	require.True(t, got.OK, got.Error)
	require.Empty(t, got.PageErrors)
	require.Empty(t, got.Blocked, "the page fetches nothing: no CDN, no font, no image")
	require.Equal(t, r.Title, got.Title)
	require.False(t, got.PhoneOverflow, "the page fits a phone's width")

	require.Len(t, got.SVGs, len(r.Figures)+len(r.Sessions), "one plot per figure and per session")
	for i, f := range r.Figures {
		s := got.SVGs[i]
		require.Equal(t, "histogram", s.Class)
		require.Equal(t, f.Key, s.Figure)
		require.Equal(t, "img", s.Role)
		require.Contains(t, s.Title, f.Key)
		require.Greater(t, s.Width, 300.0, f.Key)
		if len(f.Samples) == 0 {
			require.Greater(t, s.Height, 20.0, f.Key)
			require.Zero(t, s.Bars, f.Key)
			require.Contains(t, s.Desc, "No samples")
			continue
		}
		nonEmpty, tallest := 0, 0
		for _, b := range benchreport.Bins(f.Samples) {
			if b.Count > 0 {
				nonEmpty++
			}
			tallest = max(tallest, b.Count)
		}
		require.Greater(t, s.Height, 100.0, f.Key)
		require.Equal(t, nonEmpty, s.Bars, "%s: a bar per non-empty bin", f.Key)
		require.Equal(t, nonEmpty, s.VisibleBars, "%s: every bar is drawn", f.Key)
		require.Equal(t, len(f.Samples), s.BarCounts, "%s: the bars hold every sample", f.Key)
		require.True(t, s.BarsInside, "%s: bars inside the plot", f.Key)
		require.Equal(t, tallest, s.TallestCount, "%s: the tallest bar is the fullest bin", f.Key)
		require.Contains(t, s.Desc, "p99", f.Key)
		require.Greater(t, s.Texts, 5, "%s has axis labels", f.Key)
	}
	for i, sess := range r.Sessions {
		s := got.SVGs[len(r.Figures)+i]
		require.Equal(t, "timeline", s.Class)
		require.Contains(t, s.Title, sess.Label)
		require.Greater(t, s.Width, 300.0, sess.Label)
		want := map[string]int{}
		for _, sp := range sess.Spans {
			want[string(sp.Kind)]++
		}
		require.Equal(t, len(sess.Spans), s.Marks, sess.Label)
		require.Equal(t, want, s.VisibleMarks, "%s: every span is drawn, by kind", sess.Label)
	}
	for _, f := range []string{"report.png", "report-phone.png"} {
		st, err := os.Stat(filepath.Join(out, f))
		require.NoError(t, err)
		require.Greater(t, st.Size(), int64(10_000), "%s is a real screenshot", f)
	}
	back, err := benchreport.Load(filepath.Join(out, benchreport.JSONFile))
	require.NoError(t, err)
	require.Equal(t, r.Figures[0].Samples, back.Figures[0].Samples, "report.json next to the page holds the raw samples")
}

// syntheticBenchReport is a bench-latency-shaped report built from fixed synthetic samples (a
// seeded log-normal around the medians docs/BENCHMARKS.md reports) and two made-up duplex
// sessions. None of it was measured.
func syntheticBenchReport() benchreport.Report {
	rng := rand.New(rand.NewPCG(15, 6))
	logNormal := func(n int, median, spread float64) []float64 {
		v := make([]float64, n)
		for i := range v {
			v[i] = math.Round(median*math.Exp(spread*rng.NormFloat64())*10) / 10
		}
		return v
	}
	ms := func(v int) time.Duration { return time.Duration(v) * time.Millisecond }
	iv := func(k benchreport.Kind, from, to int, label string) benchreport.Span {
		return benchreport.Interval(k, ms(from), ms(to), label)
	}
	at := func(k benchreport.Kind, when int, label string) benchreport.Span {
		return benchreport.Instant(k, ms(when), label)
	}
	const (
		user   = benchreport.UserSpeech
		start  = benchreport.SpeechStarted
		stop   = benchreport.SpeechStopped
		assist = benchreport.AssistantAudio
		barge  = benchreport.BargeIn
	)
	return benchreport.Report{
		Title:   "omniserve bench latency (synthetic figures for the renderer test)",
		Command: []string{"omniserve", "bench", "latency", "--runs", "40", "--report", "out/"},
		Machine: benchreport.CurrentMachine(time.Date(2026, 12, 2, 19, 10, 0, 0, time.UTC), false),
		Notes:   []string{"Synthetic: seeded log-normal samples and made-up sessions, drawn to test the page, not measured."},
		Scalars: []benchreport.Scalar{
			{Key: "bargein_detected_speech", Value: 1, Unit: "ratio", Definition: "replies interrupted by real speech / replies"},
			{Key: "bargein_false_positive_noise", Value: 0, Unit: "count", Definition: "replies interrupted by 100 ms white-noise bursts"},
			{Key: "bargein_false_positive_echo", Value: 0, Unit: "count", Definition: "replies interrupted by their own echo"},
		},
		Figures: []benchreport.Figure{
			{Key: "lat_commit_to_audible_ms", Unit: "ms", Definition: "Manual turn: commit + response.create sent to the first audible sample.",
				Samples: logNormal(120, 52, 0.25)},
			{Key: "lat_vad_end_to_audible_ms", Unit: "ms", Definition: "Server VAD: last voiced sample sent to the first audible sample.",
				Samples: logNormal(40, 640, 0.05)},
			{Key: "lat_bargein_onset_to_silence_ms", Unit: "ms", Definition: "Barge-in: speech onset sent to the last audible sample of the cut reply.",
				Samples: logNormal(15, 392, 0.1)},
			{Key: "lat_first_turn_ms", Unit: "ms", Definition: "A figure this run did not measure.", Samples: nil},
		},
		Sessions: []benchreport.Session{
			{Label: "server VAD, three turns, the second cut by a barge-in", Spans: []benchreport.Span{
				iv(user, 500, 3290, "go forward ten meters"), at(start, 560, ""), at(stop, 3300, ""),
				iv(assist, 3930, 6200, "turn 1"),
				iv(user, 7000, 9790, "go forward ten meters"), at(start, 7060, ""), at(stop, 9800, ""),
				iv(assist, 10440, 11890, "turn 2, cut"),
				iv(user, 11500, 14290, "go forward ten meters"), at(start, 11560, ""), at(barge, 11890, "turn 2 cut"),
				at(stop, 14300, ""), iv(assist, 14940, 17000, "turn 3"),
			}},
			{Label: "manual commits, two turns", Spans: []benchreport.Span{
				iv(user, 0, 2790, "turn 1"), iv(assist, 3180, 5400, "turn 1"),
				iv(user, 6000, 8790, "turn 2"), iv(assist, 8842, 11000, "turn 2"),
			}},
		},
	}
}
