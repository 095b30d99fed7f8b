// Package bench holds what every `omniserve bench` subcommand shares: measured figures kept as
// data (name, unit, definition, samples), the one quantile definition, and the machine-readable
// key=value lines printed from them. It imports no other internal package, so the outsider
// client of `bench latency` can use it too.
package bench

import (
	"fmt"
	"io"
	"math"
	"runtime"
	"slices"
	"strconv"
	"strings"
)

// QuantileDefinition is the one quantile definition of every benchmark, for --help and the docs.
const QuantileDefinition = "Quantiles are nearest rank: the p-th percentile of n samples is the " +
	"ceil(p/100 × n)-th smallest sample, always a measured value (so p99 of fewer than 100 samples " +
	"is the largest, and p50 of an even count is the lower middle one)."

// Quantile is the nearest-rank p-th percentile of v (0 < p ≤ 100): the smallest sample with at
// least p% of the samples at or below it. NaN for no samples.
func Quantile(v []float64, p float64) float64 {
	if len(v) == 0 {
		return math.NaN()
	}
	s := slices.Clone(v)
	slices.Sort(s)
	r := int(math.Ceil(p / 100 * float64(len(s))))
	return s[max(0, min(len(s)-1, r-1))]
}

// Stat is one printed summary of a figure.
type Stat string

// The summaries. P50, P90 and P99 print as <name>_p50=...; Max, Min and Value print as <name>=...
const (
	P50   Stat = "p50"
	P90   Stat = "p90"
	P99   Stat = "p99"
	Max   Stat = "max"   // the largest sample, e.g. the best of several rounds
	Min   Stat = "min"   // the smallest sample, e.g. the best time of several tries
	Value Stat = "value" // the last sample: a figure computed once (a ratio, a count)
)

// Figure is one measured quantity: its samples and what one sample is. A report can plot the
// samples; the printed keys are summaries of them.
type Figure struct {
	Name       string    // key stem, e.g. "rt_ttfp_ms"
	Unit       string    // "ms", "us", "tok/s", "req/s", "%", "sessions", ...
	Definition string    // what one sample measures, from where to where
	Samples    []float64 // in measurement order
	Keys       []Stat    // the summaries printed as key=value lines; none: data for a report only
	Digits     int       // decimals printed
	// Bare prints the figure's one summary as <name>= without a suffix: keys whose names
	// predate this package (pipeline_first_audio_ms is a p50) keep working.
	Bare bool
}

// Summary returns the figure's value for st.
func (f Figure) Summary(st Stat) float64 {
	if len(f.Samples) == 0 {
		return math.NaN()
	}
	switch st {
	case P50:
		return Quantile(f.Samples, 50)
	case P90:
		return Quantile(f.Samples, 90)
	case P99:
		return Quantile(f.Samples, 99)
	case Max:
		return slices.Max(f.Samples)
	case Min:
		return slices.Min(f.Samples)
	}
	return f.Samples[len(f.Samples)-1]
}

// Key is the printed name of the summary st.
func (f Figure) Key(st Stat) string {
	if f.Bare {
		return f.Name
	}
	switch st {
	case P50, P90, P99:
		return f.Name + "_" + string(st)
	}
	return f.Name
}

// One is a figure of a single computed value.
func One(name, unit, definition string, v float64, digits int) Figure {
	return Figure{Name: name, Unit: unit, Definition: definition, Samples: []float64{v}, Keys: []Stat{Value}, Digits: digits}
}

// Result is what one subcommand measured.
type Result struct {
	Bench   string // the subcommand: engine, speech, chat, realtime, latency
	CPUs    int
	Figures []Figure
}

// NewResult starts the result of bench on this machine.
func NewResult(bench string) *Result { return &Result{Bench: bench, CPUs: runtime.NumCPU()} }

// Add appends figures.
func (r *Result) Add(f ...Figure) { r.Figures = append(r.Figures, f...) }

// Print writes the machine-readable block: cpus=N, then one key=value line per summary of every
// figure, in the order they were added.
func (r *Result) Print(w io.Writer) error {
	var b strings.Builder
	fmt.Fprintf(&b, "cpus=%d\n", r.CPUs)
	for _, f := range r.Figures {
		for _, st := range f.Keys {
			fmt.Fprintf(&b, "%s=%s\n", f.Key(st), strconv.FormatFloat(f.Summary(st), 'f', f.Digits, 64))
		}
	}
	_, err := io.WriteString(w, b.String())
	return err
}
