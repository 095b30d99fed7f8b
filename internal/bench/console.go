package bench

import (
	"io"
	"sync"

	"github.com/omniserve/omniserve/internal/benchreport"
)

// Console is a bench command's two streams: what it prints goes to stdout, progress bars to
// stderr. On a terminal both usually land on the same screen, where a bar is redrawn in place;
// so every write to the console first blanks the bars' line, and the bars come back under the
// printed line. Off a terminal the bars are plain lines and nothing is blanked.
type Console struct {
	stdout, stderr io.Writer
	opts           *benchreport.ProgressOptions // nil: detect a terminal (tests force one)

	mu     sync.Mutex
	active map[*benchreport.Progress]struct{}
}

// NewConsole is a console printing to stdout with progress on stderr.
func NewConsole(stdout, stderr io.Writer) *Console {
	return &Console{stdout: stdout, stderr: stderr, active: map[*benchreport.Progress]struct{}{}}
}

// Write prints b on stdout, clear of any bar. Safe from any goroutine.
func (c *Console) Write(b []byte) (int, error) {
	c.mu.Lock()
	defer c.mu.Unlock()
	for p := range c.active {
		p.Clear()
	}
	n, err := c.stdout.Write(b)
	for p := range c.active {
		p.Add(0) // redraws at once after a Clear
	}
	return n, err
}

// Meter starts bars on stderr ([benchreport.NewProgress]: a bar redrawn in place on a terminal,
// a plain line per tenth elsewhere) that Write keeps clear of.
func (c *Console) Meter() Meter {
	return func(label string, total int, unit string) Progress {
		p := benchreport.NewProgress(c.stderr, label, total, unit, c.opts)
		c.mu.Lock()
		c.active[p] = struct{}{}
		c.mu.Unlock()
		return &consoleProgress{Progress: p, c: c}
	}
}

// consoleProgress leaves the console's care when done.
type consoleProgress struct {
	*benchreport.Progress
	c *Console
}

func (p *consoleProgress) Done() {
	p.c.mu.Lock()
	delete(p.c.active, p.Progress)
	p.c.mu.Unlock()
	p.Progress.Done()
}
