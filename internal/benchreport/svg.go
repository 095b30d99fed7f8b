package benchreport

import (
	"cmp"
	"fmt"
	"math"
	"slices"
	"strconv"
	"strings"
)

// Bin is one bar of a figure's histogram: the samples in [Lo, Hi) (the last bin also holds Hi).
type Bin struct {
	Lo, Hi float64
	Count  int
}

// Bins is the histogram the report draws for samples: about √n bins (5 to 40) of a round width
// (1, 2 or 5 times a power of ten), the first starting at a multiple of the width. Nil for no
// samples. Empty bins in between are kept, so the bins tile the range.
func Bins(samples []float64) []Bin {
	if len(samples) == 0 {
		return nil
	}
	lo, hi := slices.Min(samples), slices.Max(samples)
	k := min(40, max(5, int(math.Ceil(math.Sqrt(float64(len(samples)))))))
	var w float64
	if hi > lo {
		w = niceStep((hi - lo) / float64(k))
	} else {
		// One value: a bin a tenth of its size around it (a round 1 for zero).
		w = niceStep(max(math.Abs(lo), 1) / 10)
	}
	start := math.Floor(lo/w) * w
	n := int(math.Floor((hi-start)/w)) + 1
	bins := make([]Bin, n)
	for i := range bins {
		bins[i] = Bin{Lo: start + float64(i)*w, Hi: start + float64(i+1)*w}
	}
	for _, v := range samples {
		i := min(n-1, max(0, int(math.Floor((v-start)/w))))
		bins[i].Count++
	}
	return bins
}

// niceStep is the smallest of 1, 2, 5 times a power of ten that is at least raw (> 0).
func niceStep(raw float64) float64 {
	e := math.Pow(10, math.Floor(math.Log10(raw)))
	for _, m := range []float64{1, 2, 5, 10} {
		if s := m * e; s >= raw*(1-1e-9) {
			return s
		}
	}
	return 10 * e
}

// ticks are round values from lo to hi, about n of them.
func ticks(lo, hi float64, n int) []float64 {
	if hi <= lo {
		return []float64{lo}
	}
	step := niceStep((hi - lo) / float64(n))
	var out []float64
	for i := math.Ceil(lo/step - 1e-9); ; i++ {
		v := i * step
		if v > hi+step*1e-9 {
			break
		}
		if math.Abs(v) < step*1e-9 {
			v = 0 // no "-0"
		}
		out = append(out, v)
	}
	return out
}

// formatNum prints a figure for people: a tenth above 100, three significant digits below,
// no trailing zeros.
func formatNum(v float64) string {
	var s string
	if a := math.Abs(v); a >= 100 || a == 0 {
		s = strconv.FormatFloat(v, 'f', 1, 64)
	} else {
		s = strconv.FormatFloat(v, 'g', 3, 64)
	}
	if strings.Contains(s, ".") && !strings.ContainsAny(s, "eE") {
		s = strings.TrimRight(strings.TrimRight(s, "0"), ".")
	}
	return s
}

// withUnit is formatNum and the unit, if any.
func withUnit(v float64, unit string) string {
	if unit == "" {
		return formatNum(v)
	}
	return formatNum(v) + " " + unit
}

// c is an SVG coordinate, printed with one decimal.
type c float64

func (v c) String() string { return strconv.FormatFloat(float64(v), 'f', 1, 64) }

type rect struct{ X, Y, W, H c }

type line struct{ X1, Y1, X2, Y2 c }

type tick struct {
	At    c // x, or y on a vertical axis
	Label string
}

// histView is one figure's histogram, laid out.
type histView struct {
	ID, Title, Desc string
	W, H            c
	Plot            rect
	Bars            []barView
	XTicks, YTicks  []tick
	Marks           []quantileMark
	XLabel, YLabel  string
	Empty           bool
}

type barView struct {
	rect
	Count int
	Tip   string
}

type quantileMark struct {
	line
	Name          string
	TextX, TextY  c
	Anchor, Label string
}

const (
	histW, histH                         = 640, 260
	histL, histR, histT, histB           = 56, 16, 16, 44
	timelineW                            = 960
	tlL, tlR, tlT, tlLane, tlAxis        = 150, 20, 8, 30, 44
	laneUser, laneVAD, laneAssist, laneB = 0, 1, 2, 3
)

func histogramView(id string, f Figure) histView {
	v := histView{
		ID:     id,
		Title:  fmt.Sprintf("Histogram of %s (%s)", f.Key, orNone(f.Unit)),
		W:      histW,
		H:      histH,
		Plot:   rect{histL, histT, histW - histL - histR, histH - histT - histB},
		XLabel: orNone(f.Unit),
		YLabel: "samples",
	}
	s := f.Summary
	if s == nil {
		s = Summarize(f.Samples)
	}
	if s == nil {
		v.Empty = true
		v.H = histT + 56 // room for the words, not for an empty plot
		v.Desc = "No samples were measured."
		return v
	}
	bins := Bins(f.Samples)
	lo, hi := bins[0].Lo, bins[len(bins)-1].Hi
	top := 0
	for _, b := range bins {
		top = max(top, b.Count)
	}
	// Counts are whole: the step is at least 1, and the axis ends on the tick above the top.
	step := max(1, niceStep(float64(top)/4))
	ymax := math.Ceil(float64(top)/step) * step
	yt := ticks(0, ymax, int(ymax/step))
	px := func(x float64) c { return v.Plot.X + c((x-lo)/(hi-lo))*v.Plot.W }
	py := func(y float64) c { return v.Plot.Y + v.Plot.H - c(y/ymax)*v.Plot.H }
	for _, b := range bins {
		if b.Count == 0 {
			continue
		}
		x0, x1 := px(b.Lo), px(b.Hi)
		bar := barView{rect: rect{x0 + 0.5, py(float64(b.Count)), max(1, x1-x0-1), py(0) - py(float64(b.Count))}}
		bar.Count = b.Count
		bar.Tip = fmt.Sprintf("%d samples in [%s, %s) %s", b.Count, formatNum(b.Lo), formatNum(b.Hi), f.Unit)
		v.Bars = append(v.Bars, bar)
	}
	for _, t := range ticks(lo, hi, 6) {
		v.XTicks = append(v.XTicks, tick{px(t), formatNum(t)})
	}
	for _, t := range yt {
		v.YTicks = append(v.YTicks, tick{py(t), formatNum(t)})
	}
	for i, q := range []struct {
		name string
		at   float64
	}{{"p50", s.P50}, {"p90", s.P90}, {"p99", s.P99}} {
		x := px(q.at)
		m := quantileMark{
			line:   line{x, v.Plot.Y, x, v.Plot.Y + v.Plot.H},
			Name:   q.name,
			TextX:  x + 3,
			TextY:  v.Plot.Y + 13 + c(15*i),
			Anchor: "start",
			Label:  q.name + " " + formatNum(q.at),
		}
		if x > v.Plot.X+v.Plot.W*0.75 { // keep the label inside the plot
			m.TextX, m.Anchor = x-3, "end"
		}
		v.Marks = append(v.Marks, m)
	}
	v.Desc = fmt.Sprintf("%d samples from %s to %s; p50 %s, p90 %s, p99 %s, mean %s.", s.Count,
		withUnit(s.Min, f.Unit), withUnit(s.Max, f.Unit), withUnit(s.P50, f.Unit), withUnit(s.P90, f.Unit),
		withUnit(s.P99, f.Unit), withUnit(s.Mean, f.Unit))
	return v
}

func orNone(unit string) string {
	if unit == "" {
		return "no unit"
	}
	return unit
}

// timelineView is one session's timeline, laid out.
type timelineView struct {
	ID, Title, Desc string
	W, H            c
	Plot            rect
	Lanes           []laneView
	Bands           []rect // VAD: speech_started to the next speech_stopped
	Marks           []markView
	Guides          []line // barge-ins, drawn across every lane
	Ticks           []tick
	AxisLabel       string
}

type laneView struct {
	rect
	Name  string
	TextY c
}

// markView is one span: a rect (interval) or a stem and a triangle (instant).
type markView struct {
	Kind   Kind
	Rect   *rect
	Stem   *line
	Points string
	Tip    string
}

var laneNames = []string{"user speech", "VAD decisions", "assistant audio", "barge-ins"}

func laneOf(k Kind) int {
	switch k {
	case UserSpeech:
		return laneUser
	case SpeechStarted, SpeechStopped:
		return laneVAD
	case AssistantAudio:
		return laneAssist
	default:
		return laneB
	}
}

func timelineViewOf(id string, s Session) timelineView {
	plotH := c(len(laneNames) * tlLane)
	v := timelineView{
		ID:   id,
		W:    timelineW,
		H:    tlT + plotH + tlAxis,
		Plot: rect{tlL, tlT, timelineW - tlL - tlR, plotH},
	}
	end := 0.0
	counts := map[Kind]int{}
	for _, sp := range s.Spans {
		end = max(end, sp.EndMs)
		counts[sp.Kind]++
	}
	tt := ticks(0, max(end, 1), 8)
	span := max(end, 1, tt[len(tt)-1])
	if last := tt[len(tt)-1]; last < span { // end the axis on a tick
		step := 1.0
		if len(tt) > 1 {
			step = tt[1] - tt[0]
		}
		span = last + step
		tt = append(tt, span)
	}
	unit, div := "ms", 1.0
	if span >= 2000 {
		unit, div = "s", 1000
	}
	px := func(ms float64) c { return v.Plot.X + c(ms/span)*v.Plot.W }
	for _, t := range tt {
		v.Ticks = append(v.Ticks, tick{px(t), formatNum(t / div)})
	}
	v.AxisLabel = "time from the session's start (" + unit + ")"
	for i, name := range laneNames {
		y := v.Plot.Y + c(i*tlLane)
		v.Lanes = append(v.Lanes, laneView{rect: rect{v.Plot.X, y, v.Plot.W, tlLane}, Name: name, TextY: y + tlLane/2 + 4})
	}
	at := func(ms float64) string { return formatNum(ms/div) + " " + unit }
	spans := slices.Clone(s.Spans)
	slices.SortStableFunc(spans, func(a, b Span) int { return cmp.Compare(a.StartMs, b.StartMs) })
	open := -1.0
	for _, sp := range spans {
		lane := v.Lanes[laneOf(sp.Kind)]
		m := markView{Kind: sp.Kind}
		name := strings.ReplaceAll(string(sp.Kind), "_", " ")
		if sp.Kind.Instant() {
			x := px(sp.StartMs)
			top, bot := lane.Y+4, lane.Y+lane.H-4
			m.Stem = &line{x, top, x, bot}
			switch sp.Kind {
			case SpeechStarted: // ▲ at the bottom
				m.Points = points(x-5, bot, x+5, bot, x, bot-9)
				open = sp.StartMs
			case SpeechStopped: // ▼ at the top
				m.Points = points(x-5, top, x+5, top, x, top+9)
				if open >= 0 {
					v.Bands = append(v.Bands, rect{px(open), lane.Y + 2, max(1, x-px(open)), lane.H - 4})
					open = -1
				}
			default: // ◆
				mid := lane.Y + lane.H/2
				m.Points = points(x, mid-8, x+6, mid, x, mid+8, x-6, mid)
				v.Guides = append(v.Guides, line{x, v.Plot.Y, x, v.Plot.Y + v.Plot.H})
			}
			m.Tip = name + " at " + at(sp.StartMs)
		} else {
			x0, x1 := px(sp.StartMs), px(sp.EndMs)
			m.Rect = &rect{x0, lane.Y + 6, max(1, x1-x0), lane.H - 12}
			m.Tip = fmt.Sprintf("%s %s to %s (%s)", name, at(sp.StartMs), at(sp.EndMs), at(sp.EndMs-sp.StartMs))
		}
		if sp.Label != "" {
			m.Tip += ": " + sp.Label
		}
		v.Marks = append(v.Marks, m)
	}
	label := s.Label
	if label == "" {
		label = strings.TrimPrefix(id, "session-")
	}
	v.Title = "Timeline of session " + label
	v.Desc = fmt.Sprintf("%s long: %d user speech spans, %d VAD speech_started and %d speech_stopped decisions, %d assistant audio spans, %d barge-ins.",
		at(end), counts[UserSpeech], counts[SpeechStarted], counts[SpeechStopped], counts[AssistantAudio], counts[BargeIn])
	return v
}

func points(xy ...c) string {
	var b strings.Builder
	for i := 0; i+1 < len(xy); i += 2 {
		if i > 0 {
			b.WriteByte(' ')
		}
		b.WriteString(xy[i].String() + "," + xy[i+1].String())
	}
	return b.String()
}

// Right, Bottom, Below, CenterX and NegCenterY place axes and labels around a plot area.
func (r rect) Right() c          { return r.X + r.W }
func (r rect) Bottom() c         { return r.Y + r.H }
func (r rect) Below(d float64) c { return r.Y + r.H + c(d) }
func (r rect) CenterX() c        { return r.X + r.W/2 }
func (r rect) NegCenterY() c     { return -(r.Y + r.H/2) } // y of a label rotated by -90°
