package metrics

import (
	"encoding/json"
	"os"
	"regexp"
	"testing"

	"github.com/prometheus/client_golang/prometheus"
	"github.com/stretchr/testify/require"
)

// The shipped Grafana dashboard queries only families omniserve exports.
func TestGrafanaDashboardUsesExportedFamilies(t *testing.T) {
	t.Parallel()
	raw, err := os.ReadFile("../../deploy/grafana/omniserve.json")
	require.NoError(t, err)
	var dash struct {
		Panels []struct {
			Title   string `json:"title"`
			Targets []struct {
				Expr string `json:"expr"`
			} `json:"targets"`
		} `json:"panels"`
	}
	require.NoError(t, json.Unmarshal(raw, &dash))
	reg := prometheus.NewPedanticRegistry()
	NewCollectors(reg, "m").InitStages(2)
	mfs, err := reg.Gather()
	require.NoError(t, err)
	have := map[string]bool{}
	for _, mf := range mfs {
		have[mf.GetName()] = true
	}
	re := regexp.MustCompile(`omniserve_[a-z0-9_]+`)
	used := 0
	for _, p := range dash.Panels {
		require.NotEmpty(t, p.Targets, p.Title)
		for _, tg := range p.Targets {
			for _, name := range re.FindAllString(tg.Expr, -1) {
				base := regexp.MustCompile(`_(bucket|sum|count)$`).ReplaceAllString(name, "")
				require.True(t, have[base], "panel %q queries %s, which omniserve does not export", p.Title, name)
				used++
			}
		}
	}
	require.Positive(t, used)
}
