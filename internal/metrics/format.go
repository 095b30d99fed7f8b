package metrics

import (
	"math"
	"strconv"
	"strings"
	"unicode/utf8"
)

// cell is one rendered table value plus whether vllm-omni's zero filter treats it as zero
// (value in {0, 0.0, None, ""}). Keeping both lets the filter run on typed values, not on text.
type cell struct {
	text string
	zero bool
}

// fieldDef is one row of a table whose columns are values of C (edges, kinds of call): its
// field name and its cell in a column.
type fieldDef[C any] struct {
	name string
	get  func(C) cell
}

// fieldRows renders defs over cols, one row per def; a row zero in every column is dropped, as
// in every table.
func fieldRows[C any](defs []fieldDef[C], cols []C) [][]string {
	var rows [][]string
	for _, d := range defs {
		row := []string{d.name}
		keep := false
		for _, c := range cols {
			v := d.get(c)
			keep = keep || !v.zero
			row = append(row, v.text)
		}
		if keep {
			rows = append(rows, row)
		}
	}
	return rows
}

func intCell(v int64) cell { return cell{text: formatInt(v), zero: v == 0} }

func floatCell(v float64) cell { return cell{text: formatFloat(v), zero: v == 0} }

// optStringCell renders an optional string: "" is vllm-omni's None.
func optStringCell(v string) cell {
	if v == "" {
		return cell{text: "None", zero: true}
	}
	return cell{text: v}
}

// listCell renders a numeric list as "<mean 3dp> (n=k)", nil as None and an empty list as "".
// An empty list counts as zero here. vllm-omni's filter does not treat [] as zero, which
// prints rows of blank cells for collapsed duplex turns; such a row says nothing,
// so omniserve drops it like any other all-zero row.
func listCell(v []float64) cell {
	switch {
	case v == nil:
		return cell{text: "None", zero: true}
	case len(v) == 0:
		return cell{text: "", zero: true}
	}
	return cell{text: formatFloat(mean(v)) + " (n=" + strconv.Itoa(len(v)) + ")"}
}

// emptyCell is what row.get(field, "") yields for a column that lacks the field.
var emptyCell = cell{text: "", zero: true}

// formatInt renders an int like Python's f"{v:,}".
func formatInt(v int64) string {
	return groupThousands(strconv.FormatInt(v, 10))
}

// formatFloat renders a float like Python's f"{v:,.3f}".
func formatFloat(v float64) string {
	switch {
	case math.IsNaN(v):
		return "nan"
	case math.IsInf(v, 1):
		return "inf"
	case math.IsInf(v, -1):
		return "-inf"
	}
	s := strconv.FormatFloat(v, 'f', 3, 64)
	dot := strings.IndexByte(s, '.')
	return groupThousands(s[:dot]) + s[dot:]
}

// groupThousands inserts commas into a run of decimal digits with an optional leading minus.
func groupThousands(digits string) string {
	sign := ""
	if strings.HasPrefix(digits, "-") {
		sign, digits = "-", digits[1:]
	}
	if len(digits) <= 3 {
		return sign + digits
	}
	var b strings.Builder
	b.Grow(len(sign) + len(digits) + len(digits)/3)
	b.WriteString(sign)
	head := len(digits) % 3
	if head > 0 {
		b.WriteString(digits[:head])
	}
	for i := head; i < len(digits); i += 3 {
		if b.Len() > len(sign) {
			b.WriteByte(',')
		}
		b.WriteString(digits[i : i+3])
	}
	return b.String()
}

func boolText(v bool) string {
	if v {
		return "True"
	}
	return "False"
}

// renderTable draws a PrettyTable default-style ASCII table: `+---+` borders, one space of
// padding, the first column left-aligned and every other column right-aligned (headers follow
// their column's alignment). The output is "[<title>]\n<table>" with no trailing newline, or
// "[<title>] <empty>" when there are no rows.
func renderTable(title string, headers []string, rows [][]string) string {
	if len(rows) == 0 {
		return "[" + title + "] <empty>"
	}
	widths := make([]int, len(headers))
	for i, h := range headers {
		widths[i] = utf8.RuneCountInString(h)
	}
	for _, r := range rows {
		for i, c := range r {
			widths[i] = max(widths[i], utf8.RuneCountInString(c))
		}
	}
	var b strings.Builder
	b.WriteString("[" + title + "]\n")
	hline := func() {
		b.WriteByte('+')
		for _, w := range widths {
			b.WriteString(strings.Repeat("-", w+2))
			b.WriteByte('+')
		}
	}
	line := func(cells []string) {
		b.WriteByte('|')
		for i, c := range cells {
			pad := strings.Repeat(" ", widths[i]-utf8.RuneCountInString(c))
			b.WriteByte(' ')
			if i == 0 {
				b.WriteString(c + pad)
			} else {
				b.WriteString(pad + c)
			}
			b.WriteString(" |")
		}
	}
	hline()
	b.WriteByte('\n')
	line(headers)
	b.WriteByte('\n')
	hline()
	for _, r := range rows {
		b.WriteByte('\n')
		line(r)
	}
	b.WriteByte('\n')
	hline()
	return b.String()
}

// kv is one row of a single-column (Field | Value) table.
type kv struct {
	key string
	val cell
	num float64 // the raw value, for Summary
}

// renderKV renders a single-column table, dropping rows whose value is zero.
func renderKV(title string, rows []kv) string {
	out := make([][]string, 0, len(rows))
	for _, r := range rows {
		if !r.val.zero {
			out = append(out, []string{r.key, r.val.text})
		}
	}
	return renderTable(title, []string{"Field", "Value"}, out)
}

// uniqueHeaders gives repeated column headers `_2`, `_3`, ... suffixes, as vllm-omni does for
// several events of one stage.
func uniqueHeaders(hs []string) []string {
	seen := make(map[string]int, len(hs))
	out := make([]string, len(hs))
	for i, h := range hs {
		seen[h]++
		if n := seen[h]; n > 1 {
			out[i] = h + "_" + strconv.Itoa(n)
		} else {
			out[i] = h
		}
	}
	return out
}
