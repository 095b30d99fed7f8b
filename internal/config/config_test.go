package config

import (
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/stretchr/testify/require"
)

func writeFile(t *testing.T, body string) string {
	t.Helper()
	p := filepath.Join(t.TempDir(), "omni.yaml")
	require.NoError(t, os.WriteFile(p, []byte(body), 0o600))
	return p
}

func env(m map[string]string) func(string) (string, bool) {
	return func(k string) (string, bool) { v, ok := m[k]; return v, ok }
}

func TestResolvePrecedence(t *testing.T) {
	t.Parallel()
	yamlFile := writeFile(t, "server:\n  port: 9001\n  log_level: warn\n  shutdown_timeout: 5s\nengine:\n  model: dummy:tiny\n  threads: 2\n")
	tests := []struct {
		name    string
		env     map[string]string
		flags   []FlagValue
		port    int
		level   string
		model   string
		threads int
	}{
		{name: "yaml over defaults", port: 9001, level: "warn", model: "dummy:tiny", threads: 2},
		{name: "env over yaml", env: map[string]string{"OMNISERVE_PORT": "9002", "OMNISERVE_THREADS": "3"}, port: 9002, level: "warn", model: "dummy:tiny", threads: 3},
		{
			name:  "flag over env",
			env:   map[string]string{"OMNISERVE_PORT": "9002", "OMNISERVE_MODEL": "dummy:0.6b"},
			flags: []FlagValue{{"port", "9003"}, {"log-level", "debug"}},
			port:  9003, level: "debug", model: "dummy:0.6b", threads: 2,
		},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			t.Parallel()
			c, err := Resolve(Sources{ConfigFlag: yamlFile, ConfigFlagSet: true, Lookup: env(tt.env), Flags: tt.flags})
			require.NoError(t, err)
			require.Equal(t, tt.port, c.Server.Port)
			require.Equal(t, tt.level, c.Server.LogLevel)
			require.Equal(t, tt.model, c.Engine.Model)
			require.Equal(t, tt.threads, c.Engine.Threads)
			require.Equal(t, 5*time.Second, c.Server.ShutdownTimeout)
			require.Equal(t, yamlFile, c.Path)
		})
	}
}

func TestResolveDefaultsWithoutFile(t *testing.T) {
	t.Parallel()
	c, err := Resolve(Sources{ConfigFlagSet: true})
	require.NoError(t, err)
	d := Defaults()
	require.Equal(t, d.Server, c.Server)
	require.Equal(t, d.Engine, c.Engine)
	require.Equal(t, 8000, c.Server.Port)
	require.Equal(t, "dummy", c.Engine.Model)
	require.Empty(t, c.Path)
}

func TestResolveConfigPathFromEnv(t *testing.T) {
	t.Parallel()
	p := writeFile(t, "server:\n  port: 7001\n")
	c, err := Resolve(Sources{Lookup: env(map[string]string{"OMNISERVE_CONFIG": p})})
	require.NoError(t, err)
	require.Equal(t, 7001, c.Server.Port)
	// --config wins over OMNISERVE_CONFIG.
	c, err = Resolve(Sources{ConfigFlagSet: true, Lookup: env(map[string]string{"OMNISERVE_CONFIG": p})})
	require.NoError(t, err)
	require.Equal(t, 8000, c.Server.Port)
}

func TestPipelinePassedThrough(t *testing.T) {
	t.Parallel()
	p := writeFile(t, "server:\n  port: 7002\npipeline:\n  stages:\n    - name: thinker\n      anything: [1, 2]\n")
	c, err := Resolve(Sources{ConfigFlag: p, ConfigFlagSet: true})
	require.NoError(t, err)
	var got struct {
		Stages []struct {
			Name string `yaml:"name"`
		} `yaml:"stages"`
	}
	require.NoError(t, c.Pipeline.Decode(&got))
	require.Len(t, got.Stages, 1)
	require.Equal(t, "thinker", got.Stages[0].Name)
}

func TestResolveErrors(t *testing.T) {
	t.Parallel()
	tests := []struct {
		name  string
		yaml  string // "" with noFile: point at a missing file
		env   map[string]string
		flags []FlagValue
		want  []string // substrings of the one-line message
	}{
		{name: "missing file", want: []string{"does-not-exist.yaml", "config file not found"}},
		{name: "unknown top-level key", yaml: "serverr:\n  port: 1\n", want: []string{":1", `unknown key "serverr"`}},
		{name: "unknown server key", yaml: "server:\n  host: x\n  prot: 80\n", want: []string{":3", `unknown key "server.prot"`}},
		{name: "unknown engine key", yaml: "engine:\n  modle: x\n", want: []string{`unknown key "engine.modle"`}},
		{name: "bad int in yaml", yaml: "server:\n  port: eighty\n", want: []string{":2", `invalid value "eighty" for server.port`}},
		{name: "bad duration in yaml", yaml: "server:\n  shutdown_timeout: 30\n", want: []string{`invalid value "30" for server.shutdown_timeout`}},
		{name: "bad bool in yaml", yaml: "server:\n  log_stats: maybe\n", want: []string{`invalid value "maybe" for server.log_stats`}},
		{name: "mapping where value expected", yaml: "server:\n  port:\n    a: 1\n", want: []string{"server.port must be a single value"}},
		{name: "duplicate key", yaml: "server:\n  port: 1\n  port: 2\n", want: []string{`duplicate key "server.port"`}},
		{name: "invalid yaml", yaml: "server: [\n", want: []string{"invalid YAML"}},
		{name: "port out of range", yaml: "server:\n  port: 70000\n", want: []string{`invalid server.port "70000"`}},
		{name: "bad device", yaml: "engine:\n  device: tpu\n", want: []string{`invalid engine.device "tpu"`, "auto, cpu or cuda"}},
		{name: "bad log format", yaml: "server:\n  log_format: xml\n", want: []string{`invalid server.log_format "xml"`}},
		{name: "tls cert without key", yaml: "server:\n  tls_cert_file: c.pem\n", want: []string{"tls_cert_file and tls_key_file"}},
		{name: "bad env value", yaml: "\n", env: map[string]string{"OMNISERVE_MAX_SESSIONS": "lots"}, want: []string{"env OMNISERVE_MAX_SESSIONS", `invalid value "lots" for server.max_sessions`}},
		{name: "bad flag value", yaml: "\n", flags: []FlagValue{{"shutdown-timeout", "soon"}}, want: []string{"flag --shutdown-timeout", `"soon"`}},
		{name: "zero sessions", yaml: "\n", flags: []FlagValue{{"max-sessions", "0"}}, want: []string{`invalid server.max_sessions "0"`}},
		{name: "session length under a second", yaml: "realtime:\n  max_session_length: 500ms\n", want: []string{`invalid realtime.max_session_length "500ms"`, "at least 1s"}},
		{name: "session length from env", yaml: "\n", env: map[string]string{"OMNISERVE_MAX_SESSION_LENGTH": "0s"}, want: []string{`invalid realtime.max_session_length "0s"`}},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			t.Parallel()
			path := filepath.Join(t.TempDir(), "does-not-exist.yaml")
			if tt.yaml != "" {
				path = writeFile(t, tt.yaml)
			}
			_, err := Resolve(Sources{ConfigFlag: path, ConfigFlagSet: true, Lookup: env(tt.env), Flags: tt.flags})
			require.Error(t, err)
			require.True(t, IsError(err), "want a config.Error, got %T", err)
			msg := err.Error()
			require.NotContains(t, msg, "\n")
			for _, w := range tt.want {
				require.Contains(t, msg, w)
			}
		})
	}
}

func TestKeysComplete(t *testing.T) {
	t.Parallel()
	seenEnv := map[string]bool{}
	seenFlag := map[string]bool{}
	for _, k := range Keys() {
		require.True(t, strings.HasPrefix(k.Name, "server.") || strings.HasPrefix(k.Name, "engine.") || strings.HasPrefix(k.Name, "realtime."), k.Name)
		require.False(t, seenEnv[k.Env()], "duplicate env %s", k.Env())
		seenEnv[k.Env()] = true
		if k.Flag != "" {
			require.False(t, seenFlag[k.Flag], "duplicate flag %s", k.Flag)
			seenFlag[k.Flag] = true
		}
		d := Defaults()
		require.NotNil(t, k.Value(&d))
	}
	for _, f := range []string{"host", "port", "model", "device", "log-stats", "log-format", "log-level", "api-key",
		"max-sessions", "tls-cert-file", "tls-key-file", "shutdown-timeout", "cache-dir", "gpu-layers", "threads"} {
		require.True(t, seenFlag[f], "missing flag --%s", f)
	}
}

func TestDrainGrace(t *testing.T) {
	c := Defaults()
	require.Equal(t, 10*time.Second, c.Server.EffectiveDrainGrace())
	c.Server.ShutdownTimeout = 5 * time.Second
	require.Equal(t, 2500*time.Millisecond, c.Server.EffectiveDrainGrace(), "capped at half the timeout")
	c.Server.DrainGrace = -time.Second
	require.ErrorContains(t, c.Validate(), "server.drain_grace")
}

func TestResumeSettings(t *testing.T) {
	t.Parallel()
	d := Defaults()
	require.Equal(t, 30*time.Second, d.Realtime.ResumeGrace)
	path := writeFile(t, "realtime:\n  resume_grace: 0s\n  resume_journal_events: 64\n")
	c, err := Resolve(Sources{ConfigFlag: path, ConfigFlagSet: true, Lookup: env(map[string]string{"OMNISERVE_RESUME_JOURNAL_BYTES": "4096"})})
	require.NoError(t, err)
	require.Zero(t, c.Realtime.ResumeGrace, "0 disables resume")
	require.Equal(t, 64, c.Realtime.ResumeJournalEvents)
	require.Equal(t, 4096, c.Realtime.ResumeJournalBytes)
	_, err = Resolve(Sources{ConfigFlag: writeFile(t, "realtime:\n  resume_grace: -1s\n"), ConfigFlagSet: true, Lookup: env(nil)})
	require.ErrorContains(t, err, "realtime.resume_grace")
}

// TestEffectiveIdleTimeout: server.max_idle_timeout caps the server's own default idle timeout
// as it caps a client's idle_timeout_s; a lower cap is not an error.
func TestEffectiveIdleTimeout(t *testing.T) {
	tests := []struct{ idle, max, want time.Duration }{
		{5 * time.Minute, 30 * time.Minute, 5 * time.Minute},
		{5 * time.Minute, 2 * time.Second, 2 * time.Second},
	}
	for _, tc := range tests {
		c := Defaults()
		c.Realtime.IdleTimeout, c.Server.MaxIdleTimeout = tc.idle, tc.max
		require.NoError(t, c.Validate())
		require.Equal(t, tc.want, c.EffectiveIdleTimeout())
	}
}

// TestMCPAllowedURLs: empty by default (no MCP server reachable); env and flag set it; an entry
// that is not an absolute http(s) URL is refused at start-up, not at a session's first use.
func TestMCPAllowedURLs(t *testing.T) {
	t.Parallel()
	require.Empty(t, Defaults().Realtime.MCPAllowedURLs)
	c, err := Resolve(Sources{Lookup: env(map[string]string{"OMNISERVE_MCP_ALLOWED_URLS": "http://127.0.0.1:8931/mcp,https://tools.example.com/"})})
	require.NoError(t, err)
	require.Equal(t, "http://127.0.0.1:8931/mcp,https://tools.example.com/", c.Realtime.MCPAllowedURLs)
	for _, bad := range []string{"127.0.0.1:8931", "ftp://h/x", "http://u:p@h/x", "http:///x"} {
		_, err := Resolve(Sources{Lookup: env(map[string]string{"OMNISERVE_MCP_ALLOWED_URLS": bad})})
		require.ErrorContains(t, err, "realtime.mcp_allowed_urls", bad)
	}
}

// realtime.max_session_length is set by YAML, env and flag alike (flag over env over YAML).
func TestMaxSessionLengthSources(t *testing.T) {
	path := writeFile(t, "realtime:\n  max_session_length: 20m\n")
	for _, tc := range []struct {
		name  string
		env   map[string]string
		flags []FlagValue
		want  time.Duration
	}{
		{"yaml", nil, nil, 20 * time.Minute},
		{"env", map[string]string{"OMNISERVE_MAX_SESSION_LENGTH": "90s"}, nil, 90 * time.Second},
		{"flag", map[string]string{"OMNISERVE_MAX_SESSION_LENGTH": "90s"}, []FlagValue{{"max-session-length", "3s"}}, 3 * time.Second},
	} {
		t.Run(tc.name, func(t *testing.T) {
			c, err := Resolve(Sources{ConfigFlag: path, ConfigFlagSet: true, Lookup: env(tc.env), Flags: tc.flags})
			require.NoError(t, err)
			require.Equal(t, tc.want, c.Realtime.MaxSessionLength)
		})
	}
	require.Equal(t, time.Hour, Defaults().Realtime.MaxSessionLength)
}
