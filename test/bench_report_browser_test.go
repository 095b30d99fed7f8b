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
// The figures are synthetic (syntheticBenchReport): this tests the renderer, not a measurement;
// TestBenchReportBrowserLatency renders a measured one.
func TestBenchReportBrowser(t *testing.T) {
	ctx, cancel := context.WithTimeout(context.Background(), 2*time.Minute)
	defer cancel()
	node, dir := browserHarness(ctx, t)

	out := t.ArtifactDir()
	r := syntheticBenchReport()
	require.NoError(t, benchreport.Write(out, r))
	requireReportShown(t, r, renderReport(ctx, t, node, dir, out))
	back, err := benchreport.Load(filepath.Join(out, benchreport.JSONFile))
	require.NoError(t, err)
	require.Equal(t, r.Figures[0].Samples, back.Figures[0].Samples, "report.json next to the page holds the raw samples")
}

// TestBenchReportBrowserLatency runs the real `bin/omniserve bench latency --runs 1
// --cpu-sessions 0 --report` (a child `serve`, one session of each of its eight scenarios, the
// manual and server-VAD turns over both WebSocket and WebRTC, no CPU batches; about a minute) and renders the page
// it wrote in headless Chromium, with the same checks and screenshots as TestBenchReportBrowser.
// Before that it checks that the timelines hold what the client and the server did: a session
// per scenario, the user's speech, the server VAD's decisions placed around it, the replies,
// and one barge-in mark per reply the run counted as interrupted. Progress went to stderr as
// plain lines (not a terminal) and stdout is still the key=value block.
func TestBenchReportBrowserLatency(t *testing.T) {
	if testing.Short() {
		t.Skip("a real bench run of about a minute")
	}
	ctx, cancel := context.WithTimeout(context.Background(), 5*time.Minute)
	defer cancel()
	node, dir := browserHarness(ctx, t)
	bin := omniserveBin(t)

	out := t.ArtifactDir()
	bench := exec.CommandContext(ctx, bin, "bench", "latency", "--runs", "1", "--cpu-sessions", "0", "--report", out)
	var stdout, stderr bytes.Buffer
	bench.Stdout, bench.Stderr = &stdout, &stderr
	err := bench.Run()
	t.Logf("bench latency stdout:\n%s\nstderr (tail):\n%s", stdout.String(), tail(stderr.String(), 2000))
	require.NoError(t, err)
	require.Contains(t, stderr.String(), "latency: 10/10 sessions, done in")
	require.NotContains(t, stderr.String(), "\r", "no terminal redraws off a terminal")
	require.Regexp(t, `(?m)^cpus=\d+\nlat_commit_to_audible_ms_p50=`, stdout.String())
	require.NotContains(t, stdout.String(), "latency:", "progress stays off stdout")

	r, err := benchreport.Load(filepath.Join(out, benchreport.JSONFile))
	require.NoError(t, err)
	scalars := map[string]float64{}
	for _, s := range r.Scalars {
		scalars[s.Key] = s.Value
	}
	for _, f := range r.Figures {
		if f.Key == "lat_bargein_onset_to_silence_ms" || f.Key == "lat_bargein_onset_to_last_old_delta_ms" {
			continue // only when the speech barge-in was detected
		}
		require.NotEmpty(t, f.Samples, f.Key)
	}
	require.Len(t, r.Sessions, 10, "one session per scenario, GPT-Live's two included")
	require.Contains(t, r.Sessions[1].Label, "WebRTC manual turns")
	require.Contains(t, r.Sessions[3].Label, "WebRTC server VAD turn")
	require.Contains(t, scalars, "rtc_added_commit_to_audible_p50_ms", "WebRTC against WebSocket in the same run")
	interrupted := 0
	for _, k := range []string{"bargein_detected_speech", "bargein_over_echo_detected", "bargein_false_positive_noise", "bargein_false_positive_echo", "bargein_live_detected_speech"} {
		v, ok := scalars[k]
		require.True(t, ok, k)
		interrupted += int(v) // one run: each is 0 or 1
	}
	kinds := map[benchreport.Kind]int{}
	for _, s := range r.Sessions {
		replies := 0
		for _, sp := range s.Spans {
			kinds[sp.Kind]++
			if sp.Kind == benchreport.AssistantAudio {
				replies++
			}
		}
		require.Positive(t, replies, "%s: the reply was played", s.Label)
	}
	require.Equal(t, interrupted, kinds[benchreport.BargeIn], "a barge-in mark per reply the run counted as interrupted")
	require.Positive(t, kinds[benchreport.UserSpeech])
	require.Positive(t, kinds[benchreport.SpeechStarted])

	// The server VAD turn: speech_started before the end of the user's speech (its
	// audio_start_ms includes prefix_padding_ms), speech_stopped after it (audio_end_ms includes
	// the silence window).
	vad := r.Sessions[2]
	require.Contains(t, vad.Label, "server VAD")
	var speech benchreport.Span
	var started, stopped []float64
	for _, sp := range vad.Spans {
		switch sp.Kind {
		case benchreport.UserSpeech:
			speech = sp
		case benchreport.SpeechStarted:
			started = append(started, sp.StartMs)
		case benchreport.SpeechStopped:
			stopped = append(stopped, sp.StartMs)
		}
	}
	require.Greater(t, speech.EndMs, speech.StartMs+1000, "goforward.raw holds over a second of speech")
	require.Len(t, started, 1, vad.Spans)
	require.Len(t, stopped, 1, vad.Spans)
	require.Less(t, started[0], speech.EndMs)
	require.Greater(t, stopped[0], speech.EndMs)

	requireReportShown(t, r, renderReport(ctx, t, node, dir, out))
}

// reportPage is report.mjs's summary of what the page shows.
type reportPage struct {
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

// renderReport renders out/report.html with report.mjs in headless Chromium; the screenshots
// report.png and report-phone.png land in out.
func renderReport(ctx context.Context, t *testing.T, node, dir, out string) reportPage {
	t.Helper()
	run := exec.CommandContext(ctx, node, "report.mjs")
	run.Dir = dir
	run.Env = append(os.Environ(), "REPORT_HTML="+filepath.Join(out, benchreport.HTMLFile), "OUT_DIR="+out,
		"CHROMIUM="+chromiumPath)
	var stdout, stderr bytes.Buffer
	run.Stdout, run.Stderr = &stdout, &stderr
	runErr := run.Run()
	t.Logf("report.mjs:\n%s%s", stdout.String(), stderr.String())
	lines := strings.Split(strings.TrimSpace(stdout.String()), "\n")
	var got reportPage
	require.NoError(t, json.Unmarshal([]byte(lines[len(lines)-1]), &got), "last line is the JSON summary")
	require.NoError(t, runErr, "report.mjs failed: %s", got.Error)
	return got
}

// requireReportShown checks that the page shows r: a plot per figure and per session with a
// title and a real size, a visible bar per non-empty bin holding every sample, a mark per span,
// no request, no page error, a phone-wide layout, and real screenshots in out.
func requireReportShown(t *testing.T, r benchreport.Report, got reportPage) {
	t.Helper()
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
		st, err := os.Stat(filepath.Join(t.ArtifactDir(), f))
		require.NoError(t, err)
		require.Greater(t, st.Size(), int64(10_000), "%s is a real screenshot", f)
	}
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
