package benchreport

import (
	"bytes"
	"encoding/json"
	"fmt"
	"os"
	"path/filepath"
	"slices"
)

// The files [Write] creates in its directory.
const (
	JSONFile = "report.json"
	HTMLFile = "report.html"
)

// Write validates r, summarizes its figures and writes dir/report.json and dir/report.html,
// creating dir. r itself is not modified.
func Write(dir string, r Report) error {
	if err := r.Validate(); err != nil {
		return fmt.Errorf("benchreport: invalid report: %w", err)
	}
	r = prepared(r)
	js, err := marshalJSON(r)
	if err != nil {
		return fmt.Errorf("benchreport: encoding %s: %w", JSONFile, err)
	}
	var page bytes.Buffer
	if err := renderHTML(&page, r); err != nil {
		return fmt.Errorf("benchreport: rendering %s: %w", HTMLFile, err)
	}
	if err := os.MkdirAll(dir, 0o755); err != nil {
		return fmt.Errorf("benchreport: %w", err)
	}
	for name, b := range map[string][]byte{JSONFile: js, HTMLFile: page.Bytes()} {
		if err := os.WriteFile(filepath.Join(dir, name), b, 0o644); err != nil {
			return fmt.Errorf("benchreport: %w", err)
		}
	}
	return nil
}

// Load reads a report.json written by [Write].
func Load(path string) (Report, error) {
	b, err := os.ReadFile(path)
	if err != nil {
		return Report{}, fmt.Errorf("benchreport: %w", err)
	}
	var r Report
	if err := json.Unmarshal(b, &r); err != nil {
		return Report{}, fmt.Errorf("benchreport: reading %s: %w", path, err)
	}
	if r.Schema != Schema {
		return Report{}, fmt.Errorf("benchreport: %s has schema %q, want %q", path, r.Schema, Schema)
	}
	if err := r.Validate(); err != nil {
		return Report{}, fmt.Errorf("benchreport: %s: %w", path, err)
	}
	return r, nil
}

// prepared is r with the schema, the quantile definition and every figure's summary filled in,
// sharing no slice that Write changes with the caller's.
func prepared(r Report) Report {
	r.Schema = Schema
	r.Quantiles = QuantileDefinition
	r.Figures = slices.Clone(r.Figures)
	for i := range r.Figures {
		r.Figures[i].Summary = Summarize(r.Figures[i].Samples)
	}
	return r
}

// marshalJSON is the report.json encoding: indented, empty lists as [] rather than null, so
// that a reader can index them without a nil check.
func marshalJSON(r Report) ([]byte, error) {
	if r.Command == nil {
		r.Command = []string{}
	}
	if r.Scalars == nil {
		r.Scalars = []Scalar{}
	}
	r.Figures = slices.Clone(r.Figures)
	if r.Figures == nil {
		r.Figures = []Figure{}
	}
	for i := range r.Figures {
		if r.Figures[i].Samples == nil {
			r.Figures[i].Samples = []float64{}
		}
	}
	r.Sessions = slices.Clone(r.Sessions)
	if r.Sessions == nil {
		r.Sessions = []Session{}
	}
	for i := range r.Sessions {
		if r.Sessions[i].Spans == nil {
			r.Sessions[i].Spans = []Span{}
		}
	}
	b, err := json.MarshalIndent(r, "", "  ")
	if err != nil {
		return nil, err
	}
	return append(b, '\n'), nil
}
