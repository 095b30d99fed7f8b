package benchreport

import (
	"fmt"
	"io"
	"strings"
	"sync"
	"time"

	"golang.org/x/term"
)

// ProgressOptions tune a [Progress]; nil or zero fields take the defaults given per field.
type ProgressOptions struct {
	// TTY forces terminal output (true) or plain lines (false). Nil detects a terminal behind
	// the writer (an *os.File, or anything with an Fd method).
	TTY *bool
	// Width is the bar's width in cells; default 30.
	Width int
	// Redraw is the least time between two redraws on a terminal; default 100 ms. The last
	// count is always drawn by Done.
	Redraw time.Duration
	// Every is the least time between two plain lines when the total is unknown; default 10 s.
	Every time.Duration
	// Now is the clock; default time.Now.
	Now func() time.Time
}

// Progress shows how far a long run is. On a terminal it redraws one line in place
// ("realtime [#####.....] 12/40 turns  30%  0:12"); elsewhere (a log, CI) it prints a plain
// line at each tenth of the total ("realtime: 12/40 turns"), or every ProgressOptions.Every
// when the total is unknown, and one line when done. Add may be called from any goroutine.
//
// Output errors are ignored: a progress display that cannot be written must not fail the run
// it describes.
type Progress struct {
	w            io.Writer
	label, unit  string
	total, width int
	tty          bool
	redraw       time.Duration
	every        time.Duration
	now          func() time.Time
	start        time.Time

	mu         sync.Mutex
	done       int
	ended      bool
	lastDraw   time.Time // tty: the last redraw; plain, unknown total: the last line
	lastTenth  int       // plain, known total: the last tenth printed
	drawn      int       // tty: the width of the line on screen, to blank a shorter one
	drawnCount int       // tty: the count on screen
}

// NewProgress starts a progress display on w for total units (0 or less: unknown) named unit
// ("turns"), labelled label ("realtime").
func NewProgress(w io.Writer, label string, total int, unit string, o *ProgressOptions) *Progress {
	if o == nil {
		o = &ProgressOptions{}
	}
	p := &Progress{w: w, label: label, unit: unit, total: max(total, 0), width: o.Width,
		redraw: o.Redraw, every: o.Every, now: o.Now}
	if p.width <= 0 {
		p.width = 30
	}
	if p.redraw <= 0 {
		p.redraw = 100 * time.Millisecond
	}
	if p.every <= 0 {
		p.every = 10 * time.Second
	}
	if p.now == nil {
		p.now = time.Now
	}
	if o.TTY != nil {
		p.tty = *o.TTY
	} else {
		p.tty = isTerminal(w)
	}
	p.start = p.now()
	p.lastDraw = p.start
	if p.tty {
		p.draw(p.start)
	}
	return p
}

// isTerminal reports whether w writes to a terminal.
func isTerminal(w io.Writer) bool {
	f, ok := w.(interface{ Fd() uintptr })
	return ok && term.IsTerminal(int(f.Fd()))
}

// Add counts n more units done.
func (p *Progress) Add(n int) {
	p.mu.Lock()
	defer p.mu.Unlock()
	p.done += n
	if p.ended {
		return
	}
	now := p.now()
	switch {
	case p.tty:
		// Reaching the total is drawn at once: the run may pause there (writing the report).
		if now.Sub(p.lastDraw) >= p.redraw || (p.done == p.total && p.drawnCount != p.done) {
			p.lastDraw = now
			p.draw(now)
		}
	case p.total > 0:
		if tenth := min(p.done, p.total) * 10 / p.total; tenth > p.lastTenth && p.done < p.total {
			p.lastTenth = tenth
			fmt.Fprintf(p.w, "%s: %s\n", p.label, p.count())
		}
	default:
		if now.Sub(p.lastDraw) >= p.every {
			p.lastDraw = now
			fmt.Fprintf(p.w, "%s: %s\n", p.label, p.count())
		}
	}
}

// Done ends the display: the final count and the time taken, then a newline. Later calls do
// nothing.
func (p *Progress) Done() {
	p.mu.Lock()
	defer p.mu.Unlock()
	if p.ended {
		return
	}
	p.ended = true
	now := p.now()
	took := now.Sub(p.start).Round(100 * time.Millisecond)
	if p.tty {
		p.draw(now)
		fmt.Fprintf(p.w, "  done in %s\n", took)
		return
	}
	fmt.Fprintf(p.w, "%s: %s, done in %s\n", p.label, p.count(), took)
}

// count is "12/40 turns", or "12 turns" for an unknown total.
func (p *Progress) count() string {
	s := fmt.Sprint(p.done)
	if p.total > 0 {
		s += fmt.Sprintf("/%d", p.total)
	}
	if p.unit != "" {
		s += " " + p.unit
	}
	return s
}

// draw redraws the terminal line in place: a carriage return, the line, and spaces over the
// rest of a longer previous line. Called with mu held.
func (p *Progress) draw(now time.Time) {
	var b strings.Builder
	b.WriteString(p.label)
	if p.total > 0 {
		fill := min(p.done, p.total) * p.width / p.total
		fmt.Fprintf(&b, " [%s%s] %s %3d%%", strings.Repeat("#", fill), strings.Repeat(".", p.width-fill),
			p.count(), min(p.done, p.total)*100/p.total)
	} else {
		b.WriteString(" " + p.count())
	}
	el := now.Sub(p.start)
	fmt.Fprintf(&b, "  %d:%02d", int(el.Minutes()), int(el.Seconds())%60)
	line := b.String()
	pad := max(0, p.drawn-len(line))
	p.drawn, p.drawnCount = len(line), p.done
	fmt.Fprint(p.w, "\r"+line+strings.Repeat(" ", pad))
}
