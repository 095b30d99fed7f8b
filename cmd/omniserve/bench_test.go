package main

import (
	"os"
	"path/filepath"
	"regexp"
	"strconv"
	"strings"
	"testing"

	"github.com/stretchr/testify/require"

	"github.com/omniserve/omniserve/internal/benchreport"
)

func TestBenchHelp(t *testing.T) {
	t.Parallel()
	for _, sub := range []string{"engine", "speech", "chat", "realtime", "latency", "long"} {
		t.Run(sub, func(t *testing.T) {
			t.Parallel()
			code, _, out, errOut := cliRun(t, nil, "bench", sub, "--help")
			require.Equal(t, exitOK, code, errOut)
			require.Contains(t, out, "omniserve bench "+sub+" [flags]")
			require.Contains(t, out, "nearest rank", "the quantile definition is stated")
			require.Contains(t, out, "--report", "every subcommand writes a report")
		})
	}
	code, _, out, _ := cliRun(t, nil, "bench", "--help")
	require.Equal(t, exitOK, code)
	for _, sub := range []string{"engine", "speech", "chat", "realtime", "latency", "long"} {
		require.Regexp(t, `(?m)^  `+sub+` `, out)
	}
}

func TestBenchUsageErrors(t *testing.T) {
	t.Parallel()
	code, _, _, errOut := cliRun(t, nil, "bench", "chat", "--no-such-flag")
	require.Equal(t, exitUsage, code)
	require.Contains(t, errOut, "no-such-flag")
	code, _, _, errOut = cliRun(t, nil, "bench", "speech", "--part", "nothing")
	require.Equal(t, exitUsage, code)
	require.Contains(t, errOut, `--part "nothing"`)
	code, _, _, errOut = cliRun(t, nil, "bench", "realtime", "--tx-sessions", "-1")
	require.Equal(t, exitUsage, code)
	require.Contains(t, errOut, "--tx-sessions -1")
	code, _, _, errOut = cliRun(t, nil, "bench", "realtime", "--tx-utterances", "0")
	require.Equal(t, exitUsage, code)
	require.Contains(t, errOut, "--tx-utterances 0")
	code, _, _, errOut = cliRun(t, nil, "bench", "long", "--turns", "5")
	require.Equal(t, exitUsage, code)
	require.Contains(t, errOut, "--turns 5")
	code, _, _, errOut = cliRun(t, nil, "bench", "long", "--truncation", "sometimes")
	require.Equal(t, exitUsage, code)
	require.Contains(t, errOut, "--truncation")
	code, _, _, errOut = cliRun(t, nil, "bench", "conversations", "--webrtc-share", "1.5")
	require.Equal(t, exitUsage, code)
	require.Contains(t, errOut, "--webrtc-share 1.5: want a share from 0 to 1")
	code, _, _, errOut = cliRun(t, nil, "bench", "conversations", "--webrtc-share", "0.5", "--dialect", "live")
	require.Equal(t, exitUsage, code)
	require.Contains(t, errOut, `speak the realtime dialect, not "live"`)
	// A report directory that cannot be made fails before the run, not after it.
	file := filepath.Join(t.TempDir(), "a-file")
	require.NoError(t, os.WriteFile(file, nil, 0o600))
	code, _, out, errOut := cliRun(t, nil, "bench", "chat", "--report", filepath.Join(file, "out"))
	require.Equal(t, exitFailure, code)
	require.Contains(t, errOut, "--report")
	require.Empty(t, out, "nothing was measured")
}

// TestBenchChatSmoke runs the cheapest benchmark for real, small: two servers built by
// internal/server, a few streamed completions each, and the machine-readable block at the end;
// with --report, report.json holds every figure (the printed ones' samples among them) and
// report.html is written next to it. Progress goes to stderr as plain lines (not a terminal).
func TestBenchChatSmoke(t *testing.T) {
	if testing.Short() {
		t.Skip("builds two servers")
	}
	t.Parallel()
	dir := filepath.Join(t.TempDir(), "out")
	code, _, out, errOut := cliRun(t, nil, "bench", "chat", "--cache-dir", t.TempDir(),
		"-c", "2", "-n", "4", "--rounds", "2", "--max-tokens", "2", "--report", dir)
	require.Equal(t, exitOK, code, "stdout:\n%s\nstderr:\n%s", out, errOut)
	keys := map[string]float64{}
	for _, m := range regexp.MustCompile(`(?m)^([a-z0-9_]+)=(\S+)$`).FindAllStringSubmatch(out, -1) {
		v, err := strconv.ParseFloat(m[2], 64)
		require.NoError(t, err, m[0])
		keys[m[1]] = v
	}
	require.Positive(t, keys["cpus"])
	require.Positive(t, keys["chat_rps_c2"])
	require.Positive(t, keys["chat_rps_logstats_c2"])
	require.Positive(t, keys["chat_ttft_ms_p50"])
	require.GreaterOrEqual(t, keys["chat_ttft_ms_p99"], keys["chat_ttft_ms_p50"])
	require.Contains(t, keys, "logstats_overhead_pct")
	require.Equal(t, 2, strings.Count(out, "log_stats=true"), "one log-stats round per round")
	require.Contains(t, out, "omnitiming_lines=16", "8 warm-up and 8 measured requests on the log-stats server")
	require.NotContains(t, out, "chat:", "progress stays off stdout")
	require.NotContains(t, out, "report", "the report's paths go to stderr")
	require.Contains(t, errOut, "chat: 32/32 requests, done in", "(8 warm-up + 2 rounds × 4) × 2 servers")
	require.NotContains(t, errOut, "\r", "no terminal redraws off a terminal")

	rep, err := benchreport.Load(filepath.Join(dir, benchreport.JSONFile))
	require.NoError(t, err)
	require.Equal(t, "omniserve bench chat", rep.Title)
	require.Equal(t, []string{"omniserve", "bench", "chat"}, rep.Command[:3])
	require.Contains(t, strings.Join(rep.Command, " "), "--report "+dir)
	figs := map[string]benchreport.Figure{}
	for _, f := range rep.Figures {
		require.NotEmpty(t, f.Definition, f.Key)
		require.NotEmpty(t, f.Unit, f.Key)
		figs[f.Key] = f
	}
	ttft := figs["chat_ttft_ms"]
	require.Len(t, ttft.Samples, 8, "2 rounds × 4 requests on the plain server")
	require.NotNil(t, ttft.Summary)
	require.InDelta(t, keys["chat_ttft_ms_p50"], ttft.Summary.P50, 0.0051, "the printed p50 is the report's")
	require.Len(t, figs["chat_round_rps"].Samples, 2, "a report-only figure: one sample per round")
	require.Len(t, figs["chat_round_rps_logstats"].Samples, 2)
	scalars := map[string]float64{}
	for _, s := range rep.Scalars {
		require.NotEmpty(t, s.Definition, s.Key)
		scalars[s.Key] = s.Value
	}
	require.InDelta(t, keys["chat_rps_c2"], scalars["chat_rps_c2"], 0.0051)
	require.Contains(t, scalars, "chat_rps_logstats_c2")
	require.Contains(t, scalars, "logstats_overhead_pct")
	require.Empty(t, rep.Sessions, "chat holds no duplex conversation")
	page, err := os.ReadFile(filepath.Join(dir, benchreport.HTMLFile))
	require.NoError(t, err)
	require.Equal(t, len(rep.Figures), strings.Count(string(page), `class="histogram"`), "a histogram per figure")
	require.Contains(t, errOut, filepath.Join(dir, benchreport.HTMLFile))
}

func TestParseSteps(t *testing.T) {
	t.Parallel()
	for _, tc := range []struct {
		in   string
		want []int
	}{{"1,2,4", []int{1, 2, 4}}, {" 8 , 16", []int{8, 16}}, {"4,2", nil}, {"0,1", nil}, {"1,x", nil}, {"2,2", nil}} {
		got, err := parseSteps(tc.in)
		if tc.want == nil {
			require.Error(t, err, tc.in)
			continue
		}
		require.NoError(t, err, tc.in)
		require.Equal(t, tc.want, got)
	}
}
