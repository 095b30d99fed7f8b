package latency

import (
	"fmt"

	"github.com/omniserve/omniserve/internal/bench"
)

// variant is one tool setting of a session: the tools it declares, the suffix of its figures'
// keys and a label for its timeline.
type variant struct {
	tools         int
	suffix, label string
}

type variants []variant

// variants are the tool settings each manual and server-VAD run measures: the options' tools,
// and with CompareTools none as well.
func (o Options) variants() variants {
	vs := variants{{tools: o.Tools}}
	if o.CompareTools {
		vs[0].label = fmt.Sprintf(" (%d tools)", o.Tools)
		vs = append(vs, variant{tools: 0, suffix: "_notools", label: " (no tools)"})
	}
	return vs
}

// order alternates which variant goes first from run to run, so that neither always meets the
// server warmer.
func (vs variants) order(run int) variants {
	if len(vs) < 2 || run%2 == 0 {
		return vs
	}
	return variants{vs[1], vs[0]}
}

// compareFigures are, with CompareTools, the no-tools figures next to the tools ones and the
// ratio of their medians (the overhead of declaring the tools).
func (o Options) compareFigures(res map[string][]float64, defs map[string]string) []bench.Figure {
	if !o.CompareTools {
		return nil
	}
	var figs []bench.Figure
	// The first turn apart too: it is the one a session's tools declaration could delay (it
	// is prefilled while the user speaks it).
	for _, k := range []string{"commit_to_audible", "commit_to_audible_first", "commit_to_audible_later", "speech_end_to_audible"} {
		none := bench.Figure{Name: "lat_" + k + "_notools_ms", Unit: "ms", Definition: defs[k] + ", sessions declaring no tools",
			Samples: res[k+"_notools"], Keys: []bench.Stat{bench.P50, bench.P90}, Digits: 1}
		with := bench.Figure{Samples: res[k], Keys: []bench.Stat{bench.P50}}
		figs = append(figs, none, bench.One("lat_"+k+"_tools_ratio", "ratio",
			fmt.Sprintf("p50 with %d declared tools / p50 with none (%s)", o.Tools, k), with.Summary(bench.P50)/none.Summary(bench.P50), 3))
	}
	return figs
}
