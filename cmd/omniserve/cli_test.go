package main

import (
	"bytes"
	"context"
	"os"
	"path/filepath"
	"runtime"
	"strings"
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/omniserve/omniserve/internal/api"
	"github.com/omniserve/omniserve/internal/config"
)

// cliRun runs the CLI with a fake environment and a serve that records the configuration
// instead of starting a server.
func cliRun(t *testing.T, env map[string]string, args ...string) (code int, cfg *config.Config, stdout, stderr string) {
	t.Helper()
	var out, errb bytes.Buffer
	a := &app{
		stdout:    &out,
		stderr:    &errb,
		lookupEnv: func(k string) (string, bool) { v, ok := env[k]; return v, ok },
		serve: func(_ context.Context, _ *app, c config.Config) error {
			cfg = &c
			return nil
		},
	}
	code = execute(args, a)
	return code, cfg, out.String(), errb.String()
}

func writeYAML(t *testing.T, body string) string {
	t.Helper()
	p := filepath.Join(t.TempDir(), "omni.yaml")
	require.NoError(t, os.WriteFile(p, []byte(body), 0o600))
	return p
}

func TestServePrecedence(t *testing.T) {
	t.Parallel()
	y := writeYAML(t, "server:\n  port: 9100\n  api_key: from-yaml\n  log_format: json\n  shutdown_timeout: 7s\nengine:\n  model: dummy:tiny\n  threads: 1\n")
	tests := []struct {
		name    string
		env     map[string]string
		args    []string
		port    int
		key     string
		model   string
		threads int
		stats   bool
	}{
		{name: "defaults", args: []string{"serve", "--config", ""}, port: 8000, key: "", model: "dummy", threads: 0},
		{name: "yaml", args: []string{"serve", "--config", y}, port: 9100, key: "from-yaml", model: "dummy:tiny", threads: 1},
		{name: "config from env", env: map[string]string{"OMNISERVE_CONFIG": y}, args: []string{"serve"}, port: 9100, key: "from-yaml", model: "dummy:tiny", threads: 1},
		{
			name: "env over yaml", args: []string{"serve", "--config", y},
			env:  map[string]string{"OMNISERVE_PORT": "9200", "OMNISERVE_API_KEY": "from-env", "OMNISERVE_LOG_STATS": "true"},
			port: 9200, key: "from-env", model: "dummy:tiny", threads: 1, stats: true,
		},
		{
			name: "flags over env", args: []string{"serve", "--config", y, "--port", "9300", "--api-key", "from-flag", "--threads", "2", "--model", "dummy:0.6b", "--log-stats=false"},
			env:  map[string]string{"OMNISERVE_PORT": "9200", "OMNISERVE_API_KEY": "from-env", "OMNISERVE_LOG_STATS": "true"},
			port: 9300, key: "from-flag", model: "dummy:0.6b", threads: 2, stats: false,
		},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			t.Parallel()
			code, cfg, _, stderr := cliRun(t, tt.env, tt.args...)
			require.Equal(t, exitOK, code, stderr)
			require.NotNil(t, cfg)
			require.Equal(t, tt.port, cfg.Server.Port)
			require.Equal(t, tt.key, cfg.Server.APIKey)
			require.Equal(t, tt.model, cfg.Engine.Model)
			require.Equal(t, tt.threads, cfg.Engine.Threads)
			require.Equal(t, tt.stats, cfg.Server.LogStats)
		})
	}
}

func TestServeAllFlagsReachConfig(t *testing.T) {
	t.Parallel()
	code, cfg, _, stderr := cliRun(t, nil, "serve", "--config", "",
		"--host", "127.0.0.1", "--port", "1234", "--model", "/m.gguf", "--device", "cpu", "--gpu-layers", "3",
		"--threads", "4", "--cache-dir", "/tmp/c", "--log-stats", "--log-format", "json", "--log-level", "debug",
		"--api-key", "k", "--max-sessions", "5", "--shutdown-timeout", "2s")
	require.Equal(t, exitOK, code, stderr)
	want := config.Defaults()
	want.Server.Host, want.Server.Port = "127.0.0.1", 1234
	want.Server.LogStats, want.Server.LogFormat, want.Server.LogLevel = true, "json", "debug"
	want.Server.APIKey, want.Server.MaxSessions, want.Server.ShutdownTimeout = "k", 5, 2*time.Second
	want.Engine.Model, want.Engine.Device, want.Engine.GPULayers = "/m.gguf", "cpu", 3
	want.Engine.Threads, want.Engine.CacheDir = 4, "/tmp/c"
	require.Equal(t, want.Server, cfg.Server)
	require.Equal(t, want.Engine, cfg.Engine)
}

func TestServeBadConfigExits2(t *testing.T) {
	t.Parallel()
	missing := filepath.Join(t.TempDir(), "nope.yaml")
	unknown := writeYAML(t, "server:\n  portt: 1\n")
	badVal := writeYAML(t, "engine:\n  gpu_layers: many\n")
	tests := []struct {
		name string
		env  map[string]string
		args []string
		want []string
	}{
		{"missing config file", nil, []string{"serve", "--config", missing}, []string{"nope.yaml", "not found"}},
		{"unknown yaml key", nil, []string{"serve", "--config", unknown}, []string{`unknown key "server.portt"`}},
		{"bad yaml value", nil, []string{"serve", "--config", badVal}, []string{`"many"`, "engine.gpu_layers"}},
		{"bad env value", map[string]string{"OMNISERVE_PORT": "http"}, []string{"serve", "--config", ""}, []string{"OMNISERVE_PORT", `"http"`}},
		{"bad flag value", nil, []string{"serve", "--config", "", "--device", "tpu"}, []string{"engine.device", `"tpu"`}},
		{"flag type error", nil, []string{"serve", "--port", "eighty"}, []string{"eighty", "port"}},
		{"unknown flag", nil, []string{"serve", "--prot", "1"}, []string{"unknown flag: --prot"}},
		{"unknown command", nil, []string{"srve"}, []string{`unknown command "srve"`}},
		{"stray argument", nil, []string{"serve", "--config", "", "extra"}, []string{"extra"}},
		{"missing tls pair", nil, []string{"serve", "--config", "", "--tls-key-file", "k.pem"}, []string{"tls_cert_file and tls_key_file"}},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			t.Parallel()
			code, cfg, _, stderr := cliRun(t, tt.env, tt.args...)
			require.Equal(t, exitUsage, code)
			require.Nil(t, cfg, "serve must not run")
			require.Equal(t, 1, strings.Count(stderr, "\n"), "one error line, got %q", stderr)
			for _, w := range tt.want {
				require.Contains(t, stderr, w)
			}
		})
	}
}

func TestServeUnreadableTLSExits2(t *testing.T) {
	t.Parallel()
	dir := t.TempDir()
	var errb bytes.Buffer
	a := &app{stdout: &bytes.Buffer{}, stderr: &errb, lookupEnv: func(string) (string, bool) { return "", false }, serve: runServer}
	code := execute([]string{"serve", "--config", "", "--port", "0", "--host", "127.0.0.1",
		"--tls-cert-file", filepath.Join(dir, "c.pem"), "--tls-key-file", filepath.Join(dir, "k.pem")}, a)
	require.Equal(t, exitUsage, code)
	require.Contains(t, errb.String(), "c.pem")
}

func TestVersion(t *testing.T) {
	t.Parallel()
	code, _, out, stderr := cliRun(t, nil, "version")
	require.Equal(t, exitOK, code, stderr)
	require.Contains(t, out, "omniserve "+api.Version)
	require.Contains(t, out, "commit:   "+api.Commit)
	require.Contains(t, out, runtime.Version())
	require.Contains(t, out, "backends: ")
}
