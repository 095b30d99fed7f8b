package realtime

import (
	"context"
	"errors"
	"fmt"
	"io"
	"os"
	"runtime/debug"
	"strconv"
	"strings"
	"sync"
	"time"

	"github.com/omniserve/omniserve/internal/bench"
	"github.com/omniserve/omniserve/internal/session"
)

// rssPerSession measures what one more live session costs in resident memory, its ASR decoder
// included (issue 12, item 10). For each n it opens n auto_response sessions at once, sends the
// speech into each as a burst, waits until every session's stage 0 has decided on all of it
// (the decoders have searched real speech), reads the process's RSS with the n sessions live,
// and closes them. The figure is (RSS then − RSS before the first step) / (n − decoders that
// existed before the first step): the pool reuses idle decoders, so the warm ones the server
// built at start are not counted as new. Both servers of the bench live in this process; only
// the plain one gets sessions. It runs first, before other steps have grown the pool.
func rssPerSession(ctx context.Context, url string, tb *Timer, m *session.Manager, asr ASRPool, pcm []byte, steps []int, out io.Writer, prog bench.Progress) ([]float64, error) {
	baseKiB, err := rssKiB()
	if err != nil {
		return nil, err
	}
	baseDec := asr.Decoders()
	var per []float64
	for _, n := range steps {
		if n <= baseDec {
			return nil, fmt.Errorf("rss per session: %d sessions do not exceed the %d decoders already built", n, baseDec)
		}
		kib, err := rssWithSessions(ctx, url, tb, pcm, n)
		if err != nil {
			return nil, fmt.Errorf("rss with %d sessions: %w", n, err)
		}
		v := float64(kib-baseKiB) / 1024 / float64(n-baseDec)
		fmt.Fprintf(out, "rss: sessions=%d decoders=%d (before: %d) rss_mib=%.0f (before: %.0f) per_session_mib=%.1f\n",
			n, asr.Decoders(), baseDec, float64(kib)/1024, float64(baseKiB)/1024, v)
		per = append(per, v)
		// The next step (and the other measurements) must find the decoders and engine sequences
		// back: a closed session's duplex stream lets go of them after the manager forgets it.
		deadline := time.Now().Add(time.Minute)
		for m.Active() > 0 || asr.InUse() > 0 {
			if time.Now().After(deadline) {
				return nil, fmt.Errorf("rss per session: %d sessions and %d decoders still held a minute after closing", m.Active(), asr.InUse())
			}
			time.Sleep(20 * time.Millisecond)
		}
		prog.Add(1)
	}
	return per, nil
}

func rssWithSessions(ctx context.Context, url string, tb *Timer, pcm []byte, n int) (int, error) {
	ctx, cancel := context.WithCancel(ctx)
	defer cancel()
	var wg sync.WaitGroup
	errs := make([]error, n)
	decided := make(chan struct{}, n)
	measured := make(chan struct{})
	for i := range n {
		wg.Add(1)
		go func() {
			defer wg.Done()
			errs[i] = holdSession(ctx, url, tb, pcm, decided, measured)
		}()
	}
	var kib int
	var err error
	for range n {
		select {
		case <-decided:
		case <-ctx.Done():
		}
	}
	if ctx.Err() == nil {
		debug.FreeOSMemory() // Go's free heap is not what a session holds
		kib, err = rssKiB()
	}
	close(measured)
	wg.Wait()
	if err != nil {
		return 0, err
	}
	return kib, errors.Join(errs...)
}

// holdSession opens one session, sends pcm, reports on decided once stage 0 has decided on all
// of it (or fails), and keeps the session open until measured is closed.
func holdSession(ctx context.Context, url string, tb *Timer, pcm []byte, decided chan<- struct{}, measured <-chan struct{}) error {
	signalled := false
	defer func() {
		if !signalled {
			decided <- struct{}{}
		}
	}()
	c, err := dial(ctx, url+"?duplex=1")
	if err != nil {
		return err
	}
	defer c.ws.CloseNow()
	if err := c.send(map[string]any{"type": "session.update", "session": speech16k(map[string]any{
		"extra_body": map[string]any{"auto_response": true}, "max_response_output_tokens": 4})}); err != nil {
		return err
	}
	created, err := c.until("session.created", 30*time.Second)
	if err != nil {
		return err
	}
	sid := sessionID(created)
	counter := tb.counter(sid)
	readDone := make(chan struct{})
	go func() { // drain the replies
		defer close(readDone)
		for {
			if _, _, err := c.ws.Read(ctx); err != nil {
				return
			}
		}
	}()
	defer func() { _ = c.ws.CloseNow(); <-readDone }()
	sent := 0
	for off := 0; off < len(pcm); off += 3200 {
		if err := c.send(appendEv(pcm[off:min(off+3200, len(pcm))])); err != nil {
			return err
		}
		sent++
	}
	for deadline := time.Now().Add(2 * time.Minute); counter.Load() < int64(sent-1); {
		if time.Now().After(deadline) {
			return fmt.Errorf("session %s: stage 0 decided %d of %d units in 2 minutes", sid, counter.Load(), sent)
		}
		time.Sleep(20 * time.Millisecond)
	}
	signalled = true
	decided <- struct{}{}
	select {
	case <-measured:
	case <-ctx.Done():
	}
	return nil
}

// rssKiB reads this process's resident set size.
func rssKiB() (int, error) {
	b, err := os.ReadFile("/proc/self/status")
	if err != nil {
		return 0, fmt.Errorf("reading RSS: %w", err)
	}
	for line := range strings.Lines(string(b)) {
		if v, ok := strings.CutPrefix(line, "VmRSS:"); ok {
			kib, err := strconv.Atoi(strings.TrimSpace(strings.TrimSuffix(strings.TrimSpace(v), "kB")))
			if err != nil {
				return 0, fmt.Errorf("reading RSS: %w", err)
			}
			return kib, nil
		}
	}
	return 0, errors.New("reading RSS: no VmRSS line")
}
