package config

import (
	"fmt"
	"os"
	"regexp"
	"strings"
	"testing"
	"time"

	"github.com/stretchr/testify/require"
)

// TestConfigDocComplete: docs/CONFIG.md has a row for every key, in its section, naming the
// key's flag or environment variable and its real default, and no row for a key that does not
// exist. A knob that is documented but not settable, or settable but undocumented, fails here.
func TestConfigDocComplete(t *testing.T) {
	data, err := os.ReadFile("../../docs/CONFIG.md")
	require.NoError(t, err)
	section := ""
	rows := map[string]string{} // section.key → the row
	sectionRe := regexp.MustCompile("^## `([a-z]+):`")
	rowRe := regexp.MustCompile("^\\| `([a-z_]+)`(?:, `([a-z_]+)`)? \\|")
	for _, line := range strings.Split(string(data), "\n") {
		if m := sectionRe.FindStringSubmatch(line); m != nil {
			section = m[1]
			continue
		}
		if strings.HasPrefix(line, "## ") {
			section = ""
		}
		m := rowRe.FindStringSubmatch(line)
		if section == "" || m == nil || section == "pipeline" {
			continue
		}
		for _, k := range m[1:] {
			if k != "" {
				rows[section+"."+k] = line
			}
		}
	}
	defaults := Defaults()
	for _, k := range Keys() {
		row, ok := rows[k.Name]
		if !assertTrue(t, ok, "docs/CONFIG.md has no row for %s", k.Name) {
			continue
		}
		delete(rows, k.Name)
		if k.Flag != "" {
			require.Contains(t, row, "`--"+k.Flag+"`", "%s: its flag", k.Name)
		} else {
			require.Contains(t, row, "`"+k.Env()+"`", "%s: its environment variable", k.Name)
		}
		want := fmt.Sprint(k.Value(&defaults))
		if d, ok := k.Value(&defaults).(time.Duration); ok {
			want = d.String()
		}
		switch {
		case want == "" || k.Name == "engine.model" || k.Name == "engine.cache_dir":
			// empty defaults are described in words; the model row lists the choices
		default:
			if !strings.Contains(row, "`"+want+"`") && !strings.Contains(row, durationWords(k.Value(&defaults))) {
				t.Errorf("%s: the row does not give the default `%s`:\n%s", k.Name, want, row)
			}
		}
	}
	for name := range rows {
		t.Errorf("docs/CONFIG.md documents %s, which is not a setting", name)
	}
}

func assertTrue(t *testing.T, ok bool, format string, args ...any) bool {
	t.Helper()
	if !ok {
		t.Errorf(format, args...)
	}
	return ok
}

// durationWords is the short spelling a doc may use for a round duration: 30s, 5m, 30m.
func durationWords(v any) string {
	d, ok := v.(time.Duration)
	if !ok {
		return "\x00"
	}
	switch {
	case d%time.Minute == 0:
		return fmt.Sprintf("`%dm`", int(d/time.Minute))
	case d%time.Second == 0:
		return fmt.Sprintf("`%ds`", int(d/time.Second))
	}
	return "\x00"
}
