package benchreport

import (
	"bytes"
	"os"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/stretchr/testify/require"
)

// fakeClock is a clock the test moves.
type fakeClock struct {
	mu sync.Mutex
	t  time.Time
}

func (c *fakeClock) now() time.Time {
	c.mu.Lock()
	defer c.mu.Unlock()
	return c.t
}

func (c *fakeClock) advance(d time.Duration) {
	c.mu.Lock()
	defer c.mu.Unlock()
	c.t = c.t.Add(d)
}

func TestProgressPlainLines(t *testing.T) {
	t.Parallel()
	var buf bytes.Buffer
	clock := &fakeClock{t: time.Unix(0, 0)}
	p := NewProgress(&buf, "realtime", 40, "turns", &ProgressOptions{Now: clock.now})
	for range 40 {
		clock.advance(100 * time.Millisecond)
		p.Add(1)
	}
	p.Done()
	p.Done() // a second Done prints nothing
	p.Add(1) // nor does an Add after Done
	want := []string{
		"realtime: 4/40 turns", "realtime: 8/40 turns", "realtime: 12/40 turns", "realtime: 16/40 turns",
		"realtime: 20/40 turns", "realtime: 24/40 turns", "realtime: 28/40 turns", "realtime: 32/40 turns",
		"realtime: 36/40 turns", "realtime: 40/40 turns, done in 4s",
	}
	require.Equal(t, strings.Join(want, "\n")+"\n", buf.String())
	require.NotContains(t, buf.String(), "\r", "no carriage returns in a log")
}

func TestProgressPlainUnknownTotal(t *testing.T) {
	t.Parallel()
	var buf bytes.Buffer
	clock := &fakeClock{t: time.Unix(0, 0)}
	p := NewProgress(&buf, "soak", 0, "turns", &ProgressOptions{Now: clock.now, Every: 10 * time.Second})
	for range 6 {
		clock.advance(4 * time.Second)
		p.Add(2) // at 4, 8, 12 (a line), 16, 20, 24 s (a line)
	}
	clock.advance(time.Second)
	p.Done()
	require.Equal(t, "soak: 6 turns\nsoak: 12 turns\nsoak: 12 turns, done in 25s\n", buf.String())
}

func TestProgressTerminalRedrawsOneLine(t *testing.T) {
	t.Parallel()
	var buf bytes.Buffer
	tty := true
	clock := &fakeClock{t: time.Unix(0, 0)}
	p := NewProgress(&buf, "bench", 4, "runs", &ProgressOptions{TTY: &tty, Width: 8, Now: clock.now})
	for range 4 {
		clock.advance(30 * time.Second)
		p.Add(1)
	}
	p.Add(0)
	clock.advance(time.Millisecond) // within the redraw interval: no redraw
	p.Add(0)
	clock.advance(time.Second)
	p.Done()
	out := buf.String()
	require.Equal(t, 1, strings.Count(out, "\n"), "one line, ended by Done")
	require.True(t, strings.HasSuffix(out, "\n"))
	frames := strings.Split(strings.TrimSuffix(out, "\n"), "\r")[1:]
	require.Equal(t, []string{
		"bench [........] 0/4 runs   0%  0:00",
		"bench [##......] 1/4 runs  25%  0:30",
		"bench [####....] 2/4 runs  50%  1:00",
		"bench [######..] 3/4 runs  75%  1:30",
		"bench [########] 4/4 runs 100%  2:00",
		"bench [########] 4/4 runs 100%  2:01  done in 2m1s",
	}, frames)
}

func TestProgressTerminalBlanksAShorterLine(t *testing.T) {
	t.Parallel()
	var buf bytes.Buffer
	tty := true
	clock := &fakeClock{t: time.Unix(0, 0)}
	p := NewProgress(&buf, "x", 0, "", &ProgressOptions{TTY: &tty, Now: clock.now})
	clock.advance(time.Second)
	p.Add(1000)
	clock.advance(time.Second)
	p.Add(-999) // the count shrinks: the line gets shorter
	p.Done()
	frames := strings.Split(strings.TrimSuffix(buf.String(), "\n"), "\r")[1:]
	require.Equal(t, []string{"x 0  0:00", "x 1000  0:01", "x 1  0:02   ", "x 1  0:02  done in 2s"}, frames,
		"spaces cover what the longer line left")
}

func TestProgressConcurrentAdd(t *testing.T) {
	t.Parallel()
	var buf safeBuffer
	p := NewProgress(&buf, "chat", 800, "requests", nil)
	var wg sync.WaitGroup
	for range 8 {
		wg.Add(1)
		go func() {
			defer wg.Done()
			for range 100 {
				p.Add(1)
			}
		}()
	}
	wg.Wait()
	p.Done()
	lines := strings.Split(strings.TrimSuffix(buf.String(), "\n"), "\n")
	require.Len(t, lines, 10, "nine tenths and the end")
	require.Regexp(t, `^chat: 800/800 requests, done in \d`, lines[9])
}

func TestProgressDetectsNoTerminal(t *testing.T) {
	t.Parallel()
	f, err := os.CreateTemp(t.TempDir(), "progress")
	require.NoError(t, err)
	defer f.Close()
	require.False(t, isTerminal(f), "a regular file")
	require.False(t, isTerminal(&bytes.Buffer{}), "no file descriptor")
	p := NewProgress(f, "x", 1, "", nil)
	p.Add(1)
	p.Done()
	b, err := os.ReadFile(f.Name())
	require.NoError(t, err)
	require.Regexp(t, `^x: 1/1, done in .*\n$`, string(b))
}

// safeBuffer is a bytes.Buffer the race detector accepts being read after concurrent writes.
type safeBuffer struct {
	mu sync.Mutex
	b  bytes.Buffer
}

func (s *safeBuffer) Write(p []byte) (int, error) {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.b.Write(p)
}

func (s *safeBuffer) String() string {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.b.String()
}
