// Package chat is `omniserve bench chat`: streaming /v1/chat/completions at a fixed concurrency
// over loopback HTTP against two servers built as `omniserve serve` builds them, one plain and
// one with --log-stats, in alternating rounds so that drift (thermal, other load) hits both
// alike. It is a pure HTTP client; the caller builds and serves the two servers.
package chat

import (
	"bufio"
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"net/http"
	"os"
	"strings"
	"sync"
	"time"

	"github.com/omniserve/omniserve/internal/bench"
)

// Options are the load's shape.
type Options struct {
	Model       string // the "model" of each request
	Concurrency int    // concurrent requests (workers)
	Requests    int    // requests per round and server
	Rounds      int    // rounds per server
	MaxTokens   int    // max_tokens of each request
}

// Target is one server under test.
type Target struct {
	URL string // the /v1 base
}

// Run measures plain and logStats (whose log-stats tables go to logFile) and returns the
// figures. Progress lines go to out.
func Run(ctx context.Context, o Options, plain, logStats Target, logFile string, out io.Writer) ([]bench.Figure, error) {
	// Warm-up of both servers: the first requests pay for lazy allocations in the engine, the
	// HTTP stack and the log file.
	warm := 4 * o.Concurrency
	for _, s := range []Target{plain, logStats} {
		if _, err := round(ctx, s.URL, o, warm); err != nil {
			return nil, fmt.Errorf("warm-up: %w", err)
		}
	}
	var offRes, onRes result
	for r := range o.Rounds {
		first, second := plain, logStats
		if r%2 == 1 { // neither server always runs first
			first, second = logStats, plain
		}
		for _, s := range []Target{first, second} {
			res, err := round(ctx, s.URL, o, o.Requests)
			if err != nil {
				return nil, err
			}
			on := s == logStats
			if on {
				onRes.add(res)
			} else {
				offRes.add(res)
			}
			fmt.Fprintf(out, "round %d log_stats=%t requests=%d seconds=%.3f rps=%.2f\n", r, on, res.n, res.wall.Seconds(), res.rps())
		}
	}
	fi, err := os.Stat(logFile)
	if err != nil {
		return nil, fmt.Errorf("log file: %w", err)
	}
	tables, err := countTables(logFile)
	if err != nil {
		return nil, err
	}
	if tables != onRes.n+warm {
		return nil, fmt.Errorf("log-stats printed %d OmniTiming lines for %d requests", tables, onRes.n+warm)
	}
	fmt.Fprintf(out, "model=%s concurrency=%d max_tokens=%d requests_per_server=%d log_stats_bytes=%d omnitiming_lines=%d\n",
		o.Model, o.Concurrency, o.MaxTokens, offRes.n, fi.Size(), tables)
	c := o.Concurrency
	return []bench.Figure{
		bench.One(fmt.Sprintf("chat_rps_logstats_c%d", c), "req/s", "--log-stats server: all rounds' requests over their summed wall time", onRes.rps(), 2),
		bench.One(fmt.Sprintf("chat_rps_c%d", c), "req/s", "plain server: all rounds' requests over their summed wall time", offRes.rps(), 2),
		{Name: "chat_round_rps", Unit: "req/s", Samples: offRes.roundRPS, Definition: "plain server: requests per second of each round"},
		{Name: "chat_round_rps_logstats", Unit: "req/s", Samples: onRes.roundRPS, Definition: "--log-stats server: requests per second of each round"},
		{Name: "chat_ttft_ms", Unit: "ms", Samples: offRes.ttftMs, Keys: []bench.Stat{bench.P50, bench.P99}, Digits: 2,
			Definition: "plain server, client side: POST to the first non-empty content delta of a streamed completion"},
		bench.One("logstats_overhead_pct", "%", "(rps plain − rps --log-stats) / rps plain × 100 over all rounds",
			(offRes.rps()-onRes.rps())/offRes.rps()*100, 2),
	}, nil
}

type result struct {
	n        int
	wall     time.Duration
	ttftMs   []float64
	roundRPS []float64
}

func (r *result) add(o result) {
	r.n += o.n
	r.wall += o.wall
	r.ttftMs = append(r.ttftMs, o.ttftMs...)
	r.roundRPS = append(r.roundRPS, o.rps())
}

func (r result) rps() float64 {
	if r.wall <= 0 {
		return 0
	}
	return float64(r.n) / r.wall.Seconds()
}

// round sends n streaming requests with o.Concurrency workers and measures the wall time of all.
func round(ctx context.Context, base string, o Options, n int) (result, error) {
	jobs := make(chan int)
	var mu sync.Mutex
	var res result
	var firstErr error
	var wg sync.WaitGroup
	start := time.Now()
	for range o.Concurrency {
		wg.Go(func() {
			for i := range jobs {
				ttft, err := streamOne(ctx, base, o, i)
				mu.Lock()
				if err != nil && firstErr == nil {
					firstErr = err
				}
				res.ttftMs = append(res.ttftMs, ttft)
				mu.Unlock()
			}
		})
	}
	for i := range n {
		jobs <- i
	}
	close(jobs)
	wg.Wait()
	res.wall = time.Since(start)
	res.n = n
	return res, firstErr
}

// streamOne runs one streaming completion to [DONE]; it returns the time to the first content delta.
func streamOne(ctx context.Context, base string, o Options, i int) (float64, error) {
	body, _ := json.Marshal(map[string]any{"model": o.Model, "stream": true, "max_tokens": o.MaxTokens, "seed": i,
		"messages": []map[string]any{{"role": "user", "content": fmt.Sprintf("Tell me about request number %d.", i)}}})
	req, err := http.NewRequestWithContext(ctx, http.MethodPost, base+"/chat/completions", bytes.NewReader(body))
	if err != nil {
		return 0, fmt.Errorf("request: %w", err)
	}
	req.Header.Set("Content-Type", "application/json")
	start := time.Now()
	resp, err := http.DefaultClient.Do(req)
	if err != nil {
		return 0, fmt.Errorf("post: %w", err)
	}
	defer resp.Body.Close()
	if resp.StatusCode != http.StatusOK {
		b, _ := io.ReadAll(resp.Body)
		return 0, fmt.Errorf("status %d: %s", resp.StatusCode, b)
	}
	var ttft float64
	sc := bufio.NewScanner(resp.Body)
	for sc.Scan() {
		d, ok := strings.CutPrefix(sc.Text(), "data: ")
		if !ok {
			continue
		}
		if d == "[DONE]" {
			if ttft == 0 {
				return 0, errors.New("stream ended without content")
			}
			return ttft, nil
		}
		if ttft == 0 && strings.Contains(d, `"content":"`) && !strings.Contains(d, `"content":""`) {
			ttft = float64(time.Since(start).Microseconds()) / 1000
		}
	}
	if err := sc.Err(); err != nil {
		return 0, fmt.Errorf("reading stream: %w", err)
	}
	return 0, errors.New("stream ended without [DONE]")
}

// countTables counts the [OmniTiming] lines: one per finalized request, proof that the log-stats
// server really printed every request's tables.
func countTables(path string) (int, error) {
	b, err := os.ReadFile(path)
	if err != nil {
		return 0, fmt.Errorf("reading %s: %w", path, err)
	}
	return bytes.Count(b, []byte("[OmniTiming] req=")), nil
}
