package benchreport

import (
	"os"
	"path/filepath"
	"regexp"
	"strings"
	"testing"

	"github.com/stretchr/testify/require"
)

func writeHTML(t *testing.T, r Report) string {
	t.Helper()
	dir := t.TempDir()
	require.NoError(t, Write(dir, r))
	b, err := os.ReadFile(filepath.Join(dir, HTMLFile))
	require.NoError(t, err)
	return string(b)
}

func TestHTMLPlotsAndSelfContained(t *testing.T) {
	t.Parallel()
	r := fixedReport()
	r.Figures = append(r.Figures, Figure{Key: "never_measured", Unit: "ms", Definition: "a figure with no samples"})
	page := writeHTML(t, r)

	require.Equal(t, len(r.Figures)+len(r.Sessions), strings.Count(page, "<svg"), "one plot per figure and per session")
	require.Equal(t, len(r.Figures), strings.Count(page, `<svg class="histogram"`))
	require.Equal(t, len(r.Sessions), strings.Count(page, `<svg class="timeline"`))
	require.Equal(t, strings.Count(page, "<svg"), strings.Count(page, `role="img" aria-labelledby=`), "every plot is labelled")
	for _, id := range []string{"figure-0", "figure-1", "figure-2", "session-0"} {
		require.Contains(t, page, `<title id="`+id+`-title">`, id)
		require.Contains(t, page, `<desc id="`+id+`-desc">`, id)
	}
	require.Contains(t, page, "no samples")

	// Self-contained: no resource is fetched from anywhere, and the page's own policy says so.
	require.NotRegexp(t, `https?://`, page)
	require.NotRegexp(t, `(?i)<(script|link|img|iframe|object|embed)\b`, page)
	require.NotRegexp(t, `(?i)\bsrc=|url\(|@import`, page)
	require.Contains(t, page, `content="default-src 'none'; style-src 'unsafe-inline'"`)

	// One bar per non-empty bin, with the counts adding up to the samples.
	bars := regexp.MustCompile(`<rect class="bar"[^>]* data-count="(\d+)"`).FindAllStringSubmatch(page, -1)
	want := 0
	for _, f := range r.Figures {
		for _, b := range Bins(f.Samples) {
			if b.Count > 0 {
				want++
			}
		}
	}
	require.Len(t, bars, want)

	// One mark per span on the timeline, by kind.
	for _, k := range kinds {
		n := 0
		for _, sp := range r.Sessions[0].Spans {
			if sp.Kind == k {
				n++
			}
		}
		require.Equal(t, n, strings.Count(page, `data-kind="`+string(k)+`"`), k)
	}
	for _, s := range r.Scalars {
		require.Contains(t, page, "<code>"+s.Key+"</code>")
	}
	require.Contains(t, page, "<td class=\"n\">55.5</td>", "the p50 of the first figure is in its table")
}

func TestHTMLEscapes(t *testing.T) {
	t.Parallel()
	evil := `<script>alert("x")</script>&`
	r := fixedReport()
	r.Title = evil
	r.Command = append(r.Command, "--url", "http://127.0.0.1:8000/"+evil)
	r.Notes = []string{evil}
	r.Scalars[0].Definition = evil
	r.Figures[0].Key = `k"><svg onload=alert(1)>`
	r.Figures[0].Unit = evil
	r.Sessions[0].Label = evil
	r.Sessions[0].Spans[0].Label = evil
	page := writeHTML(t, r)

	require.NotContains(t, page, "<script")
	require.NotContains(t, page, "<svg onload")
	require.Equal(t, len(r.Figures)+len(r.Sessions), strings.Count(page, "<svg"))
	require.Contains(t, page, "&lt;script&gt;alert(&#34;x&#34;)&lt;/script&gt;&amp;")
	// A URL on the command line is text, not a resource.
	require.NotRegexp(t, `(?i)(src|href)="https?:`, page)
}

func TestBins(t *testing.T) {
	t.Parallel()
	tests := []struct {
		name      string
		v         []float64
		wantWidth float64
		wantLo    float64
		wantN     int
	}{
		{"one value", []float64{42}, 5, 40, 1},
		{"zero", []float64{0, 0}, 0.1, 0, 1},
		{"1..10 in 5 bins of 2", seq(10), 2, 0, 6},
		{"100 samples: 10 bins", seq(100), 10, 0, 11},
		{"wide spread", []float64{49.8, 51.6, 55.5, 61.9, 392}, 100, 0, 4},
		{"negative", []float64{-7, -1}, 2, -8, 4},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			t.Parallel()
			bins := Bins(tt.v)
			require.Len(t, bins, tt.wantN)
			require.InDelta(t, tt.wantLo, bins[0].Lo, 1e-9)
			total := 0
			for i, b := range bins {
				require.InDelta(t, tt.wantWidth, b.Hi-b.Lo, 1e-9, "bin %d", i)
				total += b.Count
			}
			require.Equal(t, len(tt.v), total, "every sample is in a bin")
			for _, v := range tt.v {
				require.GreaterOrEqual(t, v, bins[0].Lo)
				require.LessOrEqual(t, v, bins[len(bins)-1].Hi)
			}
		})
	}
	require.Nil(t, Bins(nil))
}

func TestFormatNum(t *testing.T) {
	t.Parallel()
	for in, want := range map[float64]string{
		0: "0", 1: "1", 0.088: "0.088", 0.0101: "0.0101", 3.55: "3.55", 51.6: "51.6", 392: "392",
		639.8: "639.8", 1171: "1171", 646.0333: "646", -2.5: "-2.5", 12345.67: "12345.7",
	} {
		require.Equal(t, want, formatNum(in), "%v", in)
	}
}

func TestShellJoin(t *testing.T) {
	t.Parallel()
	require.Equal(t, `omniserve bench --report out/ '' 'a b' 'it'\''s'`,
		shellJoin([]string{"omniserve", "bench", "--report", "out/", "", "a b", "it's"}))
}
