// Package benchreport records what a benchmark run measured and writes it as report.json (every
// figure, raw samples included) and report.html (a self-contained page: tables, a latency
// histogram per sample figure and a timeline per duplex session, drawn as server-side SVG).
// It also has the progress bar the bench commands show while they run.
//
// It imports no other omniserve package: a bench command fills a [Report] from what its client
// saw and calls [Write].
package benchreport

import (
	"errors"
	"fmt"
	"math"
	"os"
	"runtime"
	"slices"
	"time"
)

// Schema names the JSON layout; it changes when a field changes meaning.
const Schema = "omniserve.benchreport/v1"

// QuantileDefinition states how [Quantile] picks a sample; the report repeats it next to every
// quantile so a reader never has to guess between interpolation methods.
const QuantileDefinition = "nearest rank: the p-th percentile is the smallest sample with at least p% of the samples at or below it (p50 of 1..10 is 5, p90 is 9, p99 is 10)"

// Report is everything one bench run measured.
type Report struct {
	// Schema is [Schema]; [Write] fills it in.
	Schema string `json:"schema"`
	// Title names the run, e.g. "omniserve bench latency".
	Title string `json:"title"`
	// Command is the command line as run (os.Args), so the run can be repeated.
	Command []string `json:"command"`
	Machine Machine  `json:"machine"`
	// Quantiles is [QuantileDefinition]; [Write] fills it in.
	Quantiles string `json:"quantiles"`
	// Notes are free-text remarks (load during the run, what was skipped).
	Notes    []string  `json:"notes,omitempty"`
	Scalars  []Scalar  `json:"scalars"`
	Figures  []Figure  `json:"figures"`
	Sessions []Session `json:"sessions"`
}

// Machine holds the facts about the machine that a figure depends on.
type Machine struct {
	CPUs       int    `json:"cpus"`
	GOMAXPROCS int    `json:"gomaxprocs"`
	GOOS       string `json:"goos"`
	GOARCH     string `json:"goarch"`
	// Hostname is empty unless the caller asked for it: reports get shared.
	Hostname  string    `json:"hostname,omitempty"`
	GoVersion string    `json:"go_version"`
	Time      time.Time `json:"time"`
}

// CurrentMachine describes this machine at now; the hostname only when withHostname.
func CurrentMachine(now time.Time, withHostname bool) Machine {
	m := Machine{
		CPUs:       runtime.NumCPU(),
		GOMAXPROCS: runtime.GOMAXPROCS(0),
		GOOS:       runtime.GOOS,
		GOARCH:     runtime.GOARCH,
		GoVersion:  runtime.Version(),
		Time:       now.UTC(),
	}
	if withHostname {
		// No hostname is not worth failing a report for: the field stays empty.
		m.Hostname, _ = os.Hostname()
	}
	return m
}

// Scalar is a figure with one value: a count, a ratio, a rate.
type Scalar struct {
	Key   string  `json:"key"`
	Value float64 `json:"value"`
	Unit  string  `json:"unit"`
	// Definition says what was measured, from where to where.
	Definition string `json:"definition"`
}

// Figure is a figure measured many times: the samples are kept, and summarized on [Write].
type Figure struct {
	Key        string `json:"key"`
	Unit       string `json:"unit"`
	Definition string `json:"definition"`
	// Summary is computed from Samples by [Write]; nil when there are no samples.
	Summary *Summary  `json:"summary,omitempty"`
	Samples []float64 `json:"samples"`
}

// Summary is a sample set reduced to the usual figures, quantiles by [Quantile].
type Summary struct {
	Count int     `json:"count"`
	Min   float64 `json:"min"`
	Mean  float64 `json:"mean"`
	P50   float64 `json:"p50"`
	P90   float64 `json:"p90"`
	P99   float64 `json:"p99"`
	Max   float64 `json:"max"`
}

// Quantile is the nearest-rank p-th percentile of v (see [QuantileDefinition]); p is clamped to
// [0, 100], p 0 gives the minimum. NaN for no samples. v is not modified.
func Quantile(v []float64, p float64) float64 {
	if len(v) == 0 {
		return math.NaN()
	}
	s := slices.Clone(v)
	slices.Sort(s)
	return nearestRank(s, p)
}

// nearestRank is [Quantile] on sorted, non-empty samples.
func nearestRank(sorted []float64, p float64) float64 {
	p = max(0, min(100, p))
	r := int(math.Ceil(p / 100 * float64(len(sorted))))
	return sorted[max(0, min(len(sorted)-1, r-1))]
}

// Summarize reduces v to a [Summary]; nil for no samples.
func Summarize(v []float64) *Summary {
	if len(v) == 0 {
		return nil
	}
	s := slices.Clone(v)
	slices.Sort(s)
	var sum float64
	for _, x := range s {
		sum += x
	}
	return &Summary{
		Count: len(s),
		Min:   s[0],
		Mean:  sum / float64(len(s)),
		P50:   nearestRank(s, 50),
		P90:   nearestRank(s, 90),
		P99:   nearestRank(s, 99),
		Max:   s[len(s)-1],
	}
}

// Session is the timeline of one duplex conversation, times in ms from the session's start.
type Session struct {
	// Label is free text: the scenario, the session id.
	Label string `json:"label"`
	Spans []Span `json:"spans"`
}

// Kind is what a [Span] shows; each kind has its lane in the timeline.
type Kind string

// The kinds of a duplex timeline. The VAD decisions and barge-ins are instants (EndMs ==
// StartMs); speech and audio are intervals.
const (
	UserSpeech     Kind = "user_speech"     // the user's audio as sent (voiced part)
	SpeechStarted  Kind = "speech_started"  // input_audio_buffer.speech_started, at its audio_start_ms
	SpeechStopped  Kind = "speech_stopped"  // input_audio_buffer.speech_stopped, at its audio_end_ms
	AssistantAudio Kind = "assistant_audio" // the reply as played
	BargeIn        Kind = "barge_in"        // the reply was cut by the user's speech
)

// kinds lists every [Kind], in lane order.
var kinds = []Kind{UserSpeech, SpeechStarted, SpeechStopped, AssistantAudio, BargeIn}

// Instant reports whether k marks a moment rather than an interval.
func (k Kind) Instant() bool {
	return k == SpeechStarted || k == SpeechStopped || k == BargeIn
}

// Span is one interval or instant on a session's timeline.
type Span struct {
	Kind    Kind    `json:"kind"`
	StartMs float64 `json:"start_ms"`
	EndMs   float64 `json:"end_ms"`
	// Label is free text shown on hover: a transcript, a turn number.
	Label string `json:"label,omitempty"`
}

// Interval is a span of an interval kind from start to end.
func Interval(k Kind, start, end time.Duration, label string) Span {
	return Span{Kind: k, StartMs: ms(start), EndMs: ms(end), Label: label}
}

// Instant is a span of an instant kind at at.
func Instant(k Kind, at time.Duration, label string) Span {
	return Span{Kind: k, StartMs: ms(at), EndMs: ms(at), Label: label}
}

func ms(d time.Duration) float64 { return float64(d) / float64(time.Millisecond) }

// Validate reports every figure a reader could not trust or JSON could not carry: NaN or
// infinite values, empty or repeated keys, unknown span kinds, spans that end before they start
// or before the session did, instants with a length.
func (r *Report) Validate() error {
	var errs []error
	seen := map[string]bool{}
	key := func(what, k string) {
		switch {
		case k == "":
			errs = append(errs, fmt.Errorf("%s has no key", what))
		case seen[k]:
			errs = append(errs, fmt.Errorf("%s %q: the key is used twice", what, k))
		}
		seen[k] = true
	}
	for i, s := range r.Scalars {
		key(fmt.Sprintf("scalar %d", i), s.Key)
		if !finite(s.Value) {
			errs = append(errs, fmt.Errorf("scalar %q: value %v is not a finite number", s.Key, s.Value))
		}
	}
	for i, f := range r.Figures {
		key(fmt.Sprintf("figure %d", i), f.Key)
		for j, v := range f.Samples {
			if !finite(v) {
				errs = append(errs, fmt.Errorf("figure %q: sample %d is %v, not a finite number", f.Key, j, v))
				break
			}
		}
	}
	for i, s := range r.Sessions {
		for j, sp := range s.Spans {
			where := fmt.Sprintf("session %d (%q) span %d", i, s.Label, j)
			switch {
			case !slices.Contains(kinds, sp.Kind):
				errs = append(errs, fmt.Errorf("%s: unknown kind %q", where, sp.Kind))
			case !finite(sp.StartMs) || !finite(sp.EndMs):
				errs = append(errs, fmt.Errorf("%s: times %v..%v are not finite", where, sp.StartMs, sp.EndMs))
			case sp.StartMs < 0:
				errs = append(errs, fmt.Errorf("%s: starts at %v ms, before the session", where, sp.StartMs))
			case sp.EndMs < sp.StartMs:
				errs = append(errs, fmt.Errorf("%s: ends at %v ms, before it starts at %v ms", where, sp.EndMs, sp.StartMs))
			case sp.Kind.Instant() && sp.EndMs != sp.StartMs:
				errs = append(errs, fmt.Errorf("%s: %s is an instant but lasts %v ms", where, sp.Kind, sp.EndMs-sp.StartMs))
			}
		}
	}
	return errors.Join(errs...)
}

func finite(v float64) bool { return !math.IsNaN(v) && !math.IsInf(v, 0) }
