package main

import (
	"regexp"
	"strconv"
	"strings"
	"testing"

	"github.com/stretchr/testify/require"
)

func TestBenchHelp(t *testing.T) {
	t.Parallel()
	for _, sub := range []string{"engine", "speech", "chat", "realtime", "latency"} {
		t.Run(sub, func(t *testing.T) {
			t.Parallel()
			code, _, out, errOut := cliRun(t, nil, "bench", sub, "--help")
			require.Equal(t, exitOK, code, errOut)
			require.Contains(t, out, "omniserve bench "+sub+" [flags]")
			require.Contains(t, out, "nearest rank", "the quantile definition is stated")
		})
	}
	code, _, out, _ := cliRun(t, nil, "bench", "--help")
	require.Equal(t, exitOK, code)
	for _, sub := range []string{"engine", "speech", "chat", "realtime", "latency"} {
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
}

// TestBenchChatSmoke runs the cheapest benchmark for real, small: two servers built by
// internal/server, a few streamed completions each, and the machine-readable block at the end.
func TestBenchChatSmoke(t *testing.T) {
	if testing.Short() {
		t.Skip("builds two servers")
	}
	t.Parallel()
	code, _, out, errOut := cliRun(t, nil, "bench", "chat", "--cache-dir", t.TempDir(),
		"-c", "2", "-n", "4", "--rounds", "2", "--max-tokens", "2")
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
}
