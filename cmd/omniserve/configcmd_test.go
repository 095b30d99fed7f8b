package main

import (
	"testing"

	"github.com/stretchr/testify/require"
)

// TestConfigPrint: `config print` shows the configuration serve would run with, from the
// embedded default file when the working directory has none (this package's directory), with
// flags and environment applied and the API key redacted.
func TestConfigPrint(t *testing.T) {
	t.Parallel()
	code, _, out, errOut := cliRun(t, map[string]string{"OMNISERVE_API_KEY": "sk-env-secret"}, "config", "print", "--port", "9444", "--model", "dummy:tiny")
	require.Equal(t, exitOK, code, errOut)
	require.Contains(t, out, "# effective configuration; file: embedded:configs/omni-cpu.yaml")
	require.Contains(t, out, "port: 9444")
	require.Contains(t, out, `model: "dummy:tiny"`)
	require.Contains(t, out, `api_key: "<redacted>"`)
	require.NotContains(t, out, "sk-env-secret")
	require.Contains(t, out, "pipeline:")

	code, _, _, errOut = cliRun(t, nil, "config", "print", "--port", "x")
	require.Equal(t, exitUsage, code, errOut)
}

// TestServeRunsWithoutConfigFile: serve started outside the repository resolves the embedded
// default instead of failing with "config file not found".
func TestServeRunsWithoutConfigFile(t *testing.T) {
	t.Parallel()
	code, cfg, _, errOut := cliRun(t, nil, "serve")
	require.Equal(t, exitOK, code, errOut)
	require.Equal(t, "embedded:configs/omni-cpu.yaml", cfg.Path)
}
