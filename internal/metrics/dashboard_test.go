package metrics

import (
	"encoding/json"
	"os"
	"regexp"
	"testing"

	"github.com/prometheus/client_golang/prometheus"
	"github.com/stretchr/testify/require"
)

// Every dashboard query of a histogram whose observations carry trace-id exemplars shows them
// (Grafana's "exemplar": true), so a slow bucket links to its trace; no other query asks.
func TestGrafanaDashboardShowsExemplars(t *testing.T) {
	t.Parallel()
	raw, err := os.ReadFile("../../deploy/grafana/omniserve.json")
	require.NoError(t, err)
	var dash struct {
		Panels []struct {
			Title   string `json:"title"`
			Targets []struct {
				Expr     string `json:"expr"`
				Exemplar bool   `json:"exemplar"`
			} `json:"targets"`
		} `json:"panels"`
	}
	require.NoError(t, json.Unmarshal(raw, &dash))
	// The families with exemplars: those a traced record's observations mark.
	reg := prometheus.NewPedanticRegistry()
	c := NewCollectors(reg, "m")
	turn := toolCallsExample(t) // with calls: the tool call histograms carry exemplars too
	require.True(t, turn.Finalize(ReasonStop, nil, false))
	rec, ok := turn.Record()
	require.True(t, ok)
	rec.TraceID = "0af7651916cd43dd8448eb211c80319c"
	rec.E2E.InputEndToFirstAudioMs, rec.E2E.InputEndToFirstTextMs = 300, 200
	c.ObserveFinalized(rec)
	mfs, err := reg.Gather()
	require.NoError(t, err)
	withExemplars := map[string]bool{}
	for _, mf := range mfs {
		for _, m := range mf.GetMetric() {
			for _, b := range m.GetHistogram().GetBucket() {
				if b.GetExemplar() != nil {
					withExemplars[mf.GetName()+"_bucket"] = true
				}
			}
		}
	}
	require.Len(t, withExemplars, 7, "%v", withExemplars)
	shown := 0
	re := regexp.MustCompile(`omniserve_[a-z0-9_]+`)
	for _, p := range dash.Panels {
		for _, tg := range p.Targets {
			want := false
			for _, name := range re.FindAllString(tg.Expr, -1) {
				want = want || withExemplars[name]
			}
			require.Equal(t, want, tg.Exemplar, "panel %q: %s", p.Title, tg.Expr)
			if want {
				shown++
			}
		}
	}
	require.Positive(t, shown)
}
