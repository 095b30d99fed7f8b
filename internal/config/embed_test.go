package config

import (
	"os"
	"path/filepath"
	"testing"

	"github.com/stretchr/testify/require"
	"gopkg.in/yaml.v3"

	"github.com/omniserve/omniserve/configs"
)

// TestResolveEmbeddedDefault: this package's directory has no configs/omni-cpu.yaml, as for a
// binary run outside the repository, so the default path resolves to the embedded copy; a path
// the user names explicitly must still exist.
func TestResolveEmbeddedDefault(t *testing.T) {
	t.Parallel()
	_, err := os.Stat(DefaultPath)
	require.ErrorIs(t, err, os.ErrNotExist, "the test needs a working directory without the default file")

	c, err := Resolve(Sources{})
	require.NoError(t, err)
	require.Equal(t, EmbeddedPath, c.Path)
	require.Equal(t, 8000, c.Server.Port)
	require.Equal(t, yaml.MappingNode, c.Pipeline.Kind, "the embedded file's pipeline section is used")

	_, err = Resolve(Sources{ConfigFlag: DefaultPath, ConfigFlagSet: true})
	require.Error(t, err, "an explicit --config that does not exist is an error, not the embedded copy")
	_, err = Resolve(Sources{Lookup: env(map[string]string{"OMNISERVE_CONFIG": DefaultPath})})
	require.Error(t, err)
}

// TestRenderRoundTrip: the printed configuration, read back as a file, is the same
// configuration; a set API key is never printed.
func TestRenderRoundTrip(t *testing.T) {
	t.Parallel()
	src := Defaults()
	require.NoError(t, parse("embedded", configs.Default(), &src))
	src.Server.APIKey = "sk-secret"
	src.Server.Port = 9123
	out, err := Render(src)
	require.NoError(t, err)
	require.NotContains(t, string(out), "sk-secret")

	p := filepath.Join(t.TempDir(), "printed.yaml")
	require.NoError(t, os.WriteFile(p, out, 0o600))
	got := Defaults()
	require.NoError(t, LoadFile(p, &got))
	want := Defaults()
	require.NoError(t, parse("embedded", configs.Default(), &want))
	want.Server.Port, want.Server.APIKey = 9123, "<redacted>"
	require.Equal(t, want.Server, got.Server)
	require.Equal(t, want.Engine, got.Engine)
	var a, b any
	require.NoError(t, want.Pipeline.Decode(&a))
	require.NoError(t, got.Pipeline.Decode(&b))
	require.Equal(t, a, b)
}
