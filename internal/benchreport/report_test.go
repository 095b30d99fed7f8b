package benchreport

import (
	"encoding/json"
	"flag"
	"math"
	"os"
	"path/filepath"
	"testing"
	"time"

	"github.com/stretchr/testify/require"
)

var update = flag.Bool("update", false, "rewrite the golden files in testdata/")

func TestQuantileNearestRank(t *testing.T) {
	t.Parallel()
	oneToTen := []float64{10, 9, 8, 7, 6, 5, 4, 3, 2, 1} // unsorted on purpose
	tests := []struct {
		name string
		v    []float64
		p    float64
		want float64
	}{
		{"p50 of 1..10", oneToTen, 50, 5},
		{"p90 of 1..10", oneToTen, 90, 9},
		{"p99 of 1..10", oneToTen, 99, 10},
		{"p100 of 1..10", oneToTen, 100, 10},
		{"p0 is the minimum", oneToTen, 0, 1},
		{"p10 of 1..10", oneToTen, 10, 1},
		{"p11 of 1..10 rounds the rank up", oneToTen, 11, 2},
		{"p below 0 is clamped", oneToTen, -5, 1},
		{"p above 100 is clamped", oneToTen, 150, 10},
		{"one sample", []float64{42}, 99, 42},
		{"two samples p50", []float64{3, 1}, 50, 1},
		{"two samples p51", []float64{3, 1}, 51, 3},
		{"repeated values", []float64{5, 5, 5, 7}, 75, 5},
		{"p99 of 200 samples is the 198th", seq(200), 99, 198},
		{"negative values", []float64{-3, -1, -2}, 50, -2},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			t.Parallel()
			before := append([]float64(nil), tt.v...)
			require.Equal(t, tt.want, Quantile(tt.v, tt.p))
			require.Equal(t, before, tt.v, "the samples are not reordered")
		})
	}
	require.True(t, math.IsNaN(Quantile(nil, 50)))
}

func seq(n int) []float64 {
	v := make([]float64, n)
	for i := range v {
		v[i] = float64(i + 1)
	}
	return v
}

func TestSummarize(t *testing.T) {
	t.Parallel()
	require.Nil(t, Summarize(nil))
	require.Equal(t, &Summary{Count: 10, Min: 1, Mean: 5.5, P50: 5, P90: 9, P99: 10, Max: 10},
		Summarize([]float64{10, 9, 8, 7, 6, 5, 4, 3, 2, 1}))
	require.Equal(t, &Summary{Count: 1, Min: 7, Mean: 7, P50: 7, P90: 7, P99: 7, Max: 7}, Summarize([]float64{7}))
}

func TestValidate(t *testing.T) {
	t.Parallel()
	tests := []struct {
		name   string
		change func(r *Report)
		want   string // "" = valid
	}{
		{"the fixed report is valid", func(*Report) {}, ""},
		{"NaN scalar", func(r *Report) { r.Scalars[0].Value = math.NaN() }, "not a finite number"},
		{"infinite sample", func(r *Report) { r.Figures[0].Samples[2] = math.Inf(1) }, "sample 2 is +Inf"},
		{"empty key", func(r *Report) { r.Scalars[0].Key = "" }, "scalar 0 has no key"},
		{"key used twice", func(r *Report) { r.Figures[1].Key = r.Scalars[0].Key }, "the key is used twice"},
		{"unknown kind", func(r *Report) { r.Sessions[0].Spans[0].Kind = "music" }, `unknown kind "music"`},
		{"ends before it starts", func(r *Report) { r.Sessions[0].Spans[0].EndMs = -1 }, "before it starts"},
		{"before the session", func(r *Report) { r.Sessions[0].Spans[0].StartMs = -5 }, "before the session"},
		{"instant with a length", func(r *Report) { r.Sessions[0].Spans[1].EndMs += 3 }, "is an instant but lasts 3 ms"},
		{"no samples is valid", func(r *Report) { r.Figures[0].Samples = nil }, ""},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			t.Parallel()
			r := fixedReport()
			tt.change(&r)
			err := r.Validate()
			if tt.want == "" {
				require.NoError(t, err)
				return
			}
			require.ErrorContains(t, err, tt.want)
			require.ErrorContains(t, Write(t.TempDir(), r), tt.want, "Write refuses it too")
		})
	}
}

// fixedReport is a small report of made-up figures, the same on every call.
func fixedReport() Report {
	return Report{
		Title:   "omniserve bench latency",
		Command: []string{"omniserve", "bench", "latency", "--runs", "3", "--report", "out/"},
		Machine: Machine{CPUs: 2, GOMAXPROCS: 2, GOOS: "linux", GOARCH: "amd64", GoVersion: "go1.26.8",
			Time: time.Date(2026, 12, 2, 19, 10, 0, 0, time.UTC)},
		Notes: []string{"synthetic figures for a test"},
		Scalars: []Scalar{
			{Key: "bargein_detected_speech", Value: 1, Unit: "ratio", Definition: "replies interrupted by real speech / replies"},
			{Key: "bargein_false_positive_echo", Value: 0, Unit: "count", Definition: "echoed replies that were interrupted"},
		},
		Figures: []Figure{
			{Key: "lat_commit_to_audible_ms", Unit: "ms", Definition: "commit + response.create sent to the first audible sample",
				Samples: []float64{51.6, 392, 49.8, 61.9, 55.5}},
			{Key: "lat_vad_end_to_audible_ms", Unit: "ms", Definition: "last voiced sample sent to the first audible sample",
				Samples: []float64{639.8, 657.1, 641.2}},
		},
		Sessions: []Session{{
			Label: "barge-in over a reply",
			Spans: []Span{
				Interval(UserSpeech, 0, 2790*time.Millisecond, "go forward ten meters"),
				Instant(SpeechStarted, 310*time.Millisecond, ""),
				Instant(SpeechStopped, 2650*time.Millisecond, ""),
				Interval(AssistantAudio, 3290*time.Millisecond, 5100*time.Millisecond, "turn 1"),
				Interval(UserSpeech, 4000*time.Millisecond, 6790*time.Millisecond, ""),
				Instant(SpeechStarted, 4240*time.Millisecond, ""),
				Instant(BargeIn, 4392*time.Millisecond, "turn 1 cut"),
			},
		}},
	}
}

func TestWriteJSONGolden(t *testing.T) {
	t.Parallel()
	dir := t.TempDir()
	require.NoError(t, Write(dir, fixedReport()))
	got, err := os.ReadFile(filepath.Join(dir, JSONFile))
	require.NoError(t, err)
	golden := filepath.Join("testdata", "report.json.golden")
	if *update {
		require.NoError(t, os.WriteFile(golden, got, 0o644))
	}
	want, err := os.ReadFile(golden)
	require.NoError(t, err, "go test -run TestWriteJSONGolden -update writes it")
	require.Equal(t, string(want), string(got))
}

func TestJSONRoundTrip(t *testing.T) {
	t.Parallel()
	dir := t.TempDir()
	in := fixedReport()
	require.NoError(t, Write(dir, in))
	got, err := Load(filepath.Join(dir, JSONFile))
	require.NoError(t, err)

	want := prepared(in)
	require.Equal(t, want, got)
	require.Equal(t, Schema, got.Schema)
	require.Equal(t, QuantileDefinition, got.Quantiles)
	require.Equal(t, in.Figures[0].Samples, got.Figures[0].Samples, "raw samples are kept, in order")
	require.Equal(t, 55.5, got.Figures[0].Summary.P50)
	require.Nil(t, in.Figures[0].Summary, "Write does not change its argument")

	// Empty lists are [] in the file, and come back as empty (not nil) slices.
	require.NoError(t, Write(dir, Report{Title: "empty", Figures: []Figure{{Key: "none"}}}))
	b, err := os.ReadFile(filepath.Join(dir, JSONFile))
	require.NoError(t, err)
	var raw map[string]any
	require.NoError(t, json.Unmarshal(b, &raw))
	for _, k := range []string{"command", "scalars", "figures", "sessions"} {
		require.IsType(t, []any{}, raw[k], k)
	}
	require.Equal(t, []any{}, raw["figures"].([]any)[0].(map[string]any)["samples"])
	require.NotContains(t, raw["figures"].([]any)[0], "summary", "no summary without samples")
}

func TestLoadRefuses(t *testing.T) {
	t.Parallel()
	dir := t.TempDir()
	tests := []struct {
		name, body, want string
	}{
		{"not JSON", "{", "unexpected end of JSON input"},
		{"another schema", `{"schema":"other/v9"}`, `schema "other/v9"`},
		{"an invalid figure", `{"schema":"` + Schema + `","scalars":[{"key":""}]}`, "has no key"},
	}
	for i, tt := range tests {
		p := filepath.Join(dir, string(rune('a'+i))+".json")
		require.NoError(t, os.WriteFile(p, []byte(tt.body), 0o644))
		_, err := Load(p)
		require.ErrorContains(t, err, tt.want, tt.name)
	}
	_, err := Load(filepath.Join(dir, "missing.json"))
	require.ErrorIs(t, err, os.ErrNotExist)
}

func TestCurrentMachine(t *testing.T) {
	t.Parallel()
	now := time.Date(2026, 1, 2, 3, 4, 5, 0, time.FixedZone("x", 3600))
	m := CurrentMachine(now, false)
	require.Positive(t, m.CPUs)
	require.Positive(t, m.GOMAXPROCS)
	require.NotEmpty(t, m.GOOS)
	require.NotEmpty(t, m.GoVersion)
	require.Empty(t, m.Hostname, "no hostname unless asked")
	require.Equal(t, time.UTC, m.Time.Location())
	require.True(t, now.Equal(m.Time))
	host, err := os.Hostname()
	if err == nil {
		require.Equal(t, host, CurrentMachine(now, true).Hostname)
	}
}
