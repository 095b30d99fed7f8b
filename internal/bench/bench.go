// Package bench holds what every `omniserve bench` subcommand shares: measured figures kept as
// data (name, unit, definition, samples), the machine-readable key=value lines printed from them,
// and the report (internal/benchreport) built from them. Its only internal import is benchreport
// (no server code), so the outsider client of `bench latency` can use it too; the quantile
// definition is benchreport's, one for the printed keys and the report.
package bench

import (
	"fmt"
	"io"
	"math"
	"runtime"
	"slices"
	"strconv"
	"strings"
	"time"

	"github.com/omniserve/omniserve/internal/benchreport"
)

// QuantileDefinition is the quantile definition of every benchmark as a sentence, for --help.
const QuantileDefinition = "Quantiles are " + benchreport.QuantileDefinition + "."

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
		return benchreport.Quantile(f.Samples, 50)
	case P90:
		return benchreport.Quantile(f.Samples, 90)
	case P99:
		return benchreport.Quantile(f.Samples, 99)
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

// Scalar reports whether f is one computed value (made by [One]): a report lists it among the
// scalars rather than drawing a histogram of one sample.
func (f Figure) Scalar() bool {
	return len(f.Samples) == 1 && slices.Equal(f.Keys, []Stat{Value})
}

// Result is what one subcommand measured.
type Result struct {
	Bench    string // the subcommand: engine, speech, chat, realtime, latency
	CPUs     int
	Figures  []Figure
	Sessions []benchreport.Session // duplex timelines, from the benches that hold conversations
}

// NewResult starts the result of bench on this machine.
func NewResult(bench string) *Result { return &Result{Bench: bench, CPUs: runtime.NumCPU()} }

// Add appends figures.
func (r *Result) Add(f ...Figure) { r.Figures = append(r.Figures, f...) }

// Report is the result as a bench report run by command (argv) at now: every figure, in the
// order added, a [Figure.Scalar] as a scalar and any other as a figure with all its samples
// (printed or not), each with its unit and definition; the sessions' timelines. A value that is
// not a finite number (a ratio over nothing measured) cannot be carried by JSON: it is left out
// and a note says so, rather than the whole report being refused.
func (r *Result) Report(command []string, now time.Time) benchreport.Report {
	rep := benchreport.Report{
		Title:    "omniserve bench " + r.Bench,
		Command:  command,
		Machine:  benchreport.CurrentMachine(now, false),
		Sessions: r.Sessions,
	}
	for _, f := range r.Figures {
		if f.Scalar() {
			if v := f.Samples[0]; finite(v) {
				rep.Scalars = append(rep.Scalars, benchreport.Scalar{Key: f.Name, Value: v, Unit: f.Unit, Definition: f.Definition})
			} else {
				rep.Notes = append(rep.Notes, fmt.Sprintf("%s was %v, not a finite number: left out (%s)", f.Name, v, f.Definition))
			}
			continue
		}
		samples := slices.DeleteFunc(slices.Clone(f.Samples), func(v float64) bool { return !finite(v) })
		if n := len(f.Samples) - len(samples); n > 0 {
			rep.Notes = append(rep.Notes, fmt.Sprintf("%s: %d of %d samples were not finite numbers: left out", f.Name, n, len(f.Samples)))
		}
		rep.Figures = append(rep.Figures, benchreport.Figure{Key: f.Name, Unit: f.Unit, Definition: f.Definition, Samples: samples})
	}
	return rep
}

func finite(v float64) bool { return !math.IsNaN(v) && !math.IsInf(v, 0) }

// Progress is the display of one long loop's progress; *benchreport.Progress is one.
type Progress interface {
	Add(n int)
	Done()
}

// Meter starts the progress display of a loop of total units (0 or less: unknown) named unit,
// labelled label. A nil Meter shows nothing, so a measurement can always call Start.
type Meter func(label string, total int, unit string) Progress

// Start starts a display; see [Meter].
func (m Meter) Start(label string, total int, unit string) Progress {
	if m == nil {
		return noProgress{}
	}
	return m(label, total, unit)
}

type noProgress struct{}

func (noProgress) Add(int) {}
func (noProgress) Done()   {}

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
