// Command bench-chat measures /v1/chat/completions on a real in-process server: streaming requests
// at a fixed concurrency over loopback HTTP, against one engine served twice (plain and with
// --log-stats, whose tables go to a real log file), both with Prometheus collectors as
// cmd/omniserve always wires them. Rounds alternate between the two servers so that drift
// (thermal, other load) hits both alike. The last lines are machine-readable:
//
//	chat_rps_c16=<requests/s without log-stats>
//	chat_ttft_ms_p50=<client-side time to first content delta>
//	chat_ttft_ms_p99=
//	logstats_overhead_pct=<(rps_off - rps_on) / rps_off * 100>
package main

import (
	"bufio"
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"flag"
	"fmt"
	"io"
	"net"
	"net/http"
	"os"
	"path/filepath"
	"runtime/pprof"
	"slices"
	"strings"
	"sync"
	"time"

	"github.com/prometheus/client_golang/prometheus"
	"go.uber.org/zap"
	"go.uber.org/zap/zapcore"

	"github.com/omniserve/omniserve/internal/api"
	"github.com/omniserve/omniserve/internal/gpu"
	"github.com/omniserve/omniserve/internal/metrics"
	"github.com/omniserve/omniserve/internal/requestclient"
	"github.com/omniserve/omniserve/internal/speech"
	"github.com/omniserve/omniserve/internal/stage"
)

type options struct {
	model       string
	config      string
	cacheDir    string
	concurrency int
	requests    int
	rounds      int
	maxTokens   int
	logFile     string
}

func main() {
	var o options
	flag.StringVar(&o.model, "model", "dummy:tiny", "model (dummy:tiny, dummy:0.6b or a .gguf path)")
	flag.StringVar(&o.config, "config", "configs/omni-cpu.yaml", "pipeline config")
	flag.StringVar(&o.cacheDir, "cache-dir", "", "dummy model cache (default: a temporary directory)")
	flag.IntVar(&o.concurrency, "c", 16, "concurrent requests")
	flag.IntVar(&o.requests, "n", 400, "requests per round and server")
	flag.IntVar(&o.rounds, "rounds", 6, "rounds per server (alternating plain / log-stats)")
	flag.IntVar(&o.maxTokens, "max-tokens", 32, "max_tokens of each request")
	flag.StringVar(&o.logFile, "log-file", "", "where the log-stats server writes its tables (default: a temporary file)")
	cpuProfile := flag.String("cpuprofile", "", "write a CPU profile of the whole run here")
	flag.Parse()
	if *cpuProfile != "" {
		f, err := os.Create(*cpuProfile)
		if err == nil {
			_ = pprof.StartCPUProfile(f)
			defer func() { pprof.StopCPUProfile(); _ = f.Close() }()
		}
	}
	if err := run(context.Background(), o, os.Stdout); err != nil {
		fmt.Fprintln(os.Stderr, "bench-chat:", err)
		pprof.StopCPUProfile()
		os.Exit(1)
	}
}

// server is one HTTP server over the shared pipeline.
type server struct {
	url    string
	client *requestclient.Client
	srv    *http.Server
	done   chan error
}

func run(ctx context.Context, o options, out io.Writer) error {
	tmp, err := os.MkdirTemp("", "bench-chat-")
	if err != nil {
		return fmt.Errorf("temp dir: %w", err)
	}
	defer os.RemoveAll(tmp)
	if o.cacheDir == "" {
		o.cacheDir = filepath.Join(tmp, "models")
	}
	if o.logFile == "" {
		o.logFile = filepath.Join(tmp, "log-stats.log")
	}
	p, cleanup, err := buildPipeline(ctx, o)
	if err != nil {
		return err
	}
	defer cleanup()

	lf, err := os.Create(o.logFile)
	if err != nil {
		return fmt.Errorf("log file: %w", err)
	}
	defer lf.Close()
	// The production console encoder into a real file: the overhead includes formatting and I/O.
	enc := zapcore.NewConsoleEncoder(zap.NewProductionEncoderConfig())
	statsLog := zap.New(zapcore.NewCore(enc, zapcore.AddSync(lf), zapcore.InfoLevel))

	// Both servers mirror cmd/omniserve's wiring, which always passes Collectors (so every
	// request has an aggregator feeding Prometheus); each has its own registry. The difference
	// between them is exactly what --log-stats adds: building, rendering and writing the tables.
	plain, err := startServer(requestclient.New(p, requestclient.Options{ModelName: o.model,
		Collectors: metrics.NewCollectors(prometheus.NewRegistry(), o.model)}, zap.NewNop()), o)
	if err != nil {
		return err
	}
	defer plain.stop()
	stats, err := startServer(requestclient.New(p, requestclient.Options{ModelName: o.model, LogStats: true,
		Collectors: metrics.NewCollectors(prometheus.NewRegistry(), o.model)}, statsLog), o)
	if err != nil {
		return err
	}
	defer stats.stop()

	// Warm-up of both servers: the first requests pay for lazy allocations in the engine, the
	// HTTP stack and the log file.
	for _, s := range []*server{plain, stats} {
		if _, err := round(ctx, s.url, o, 4*o.concurrency); err != nil {
			return fmt.Errorf("warm-up: %w", err)
		}
	}
	var offRes, onRes result
	for r := range o.rounds {
		for _, s := range order(r, plain, stats) {
			res, err := round(ctx, s.url, o, o.requests)
			if err != nil {
				return err
			}
			if s == plain {
				offRes.add(res)
			} else {
				onRes.add(res)
			}
			fmt.Fprintf(out, "round %d log_stats=%t requests=%d seconds=%.3f rps=%.2f\n", r, s == stats, res.n, res.wall.Seconds(), res.rps())
		}
	}
	_ = statsLog.Sync()
	fi, err := lf.Stat()
	if err != nil {
		return fmt.Errorf("log file: %w", err)
	}
	tables, err := countTables(o.logFile)
	if err != nil {
		return err
	}
	if tables != onRes.n+4*o.concurrency {
		return fmt.Errorf("log-stats printed %d OmniTiming lines for %d requests", tables, onRes.n)
	}
	fmt.Fprintf(out, "model=%s concurrency=%d max_tokens=%d requests_per_server=%d log_stats_bytes=%d omnitiming_lines=%d\n",
		o.model, o.concurrency, o.maxTokens, offRes.n, fi.Size(), tables)
	fmt.Fprintf(out, "chat_rps_logstats_c%d=%.2f\n", o.concurrency, onRes.rps())
	fmt.Fprintf(out, "chat_rps_c%d=%.2f\n", o.concurrency, offRes.rps())
	fmt.Fprintf(out, "chat_ttft_ms_p50=%.2f\n", percentile(offRes.ttftMs, 50))
	fmt.Fprintf(out, "chat_ttft_ms_p99=%.2f\n", percentile(offRes.ttftMs, 99))
	fmt.Fprintf(out, "logstats_overhead_pct=%.2f\n", (offRes.rps()-onRes.rps())/offRes.rps()*100)
	return nil
}

// order alternates which server goes first, so neither always runs on a warmer engine.
func order(r int, a, b *server) []*server {
	if r%2 == 0 {
		return []*server{a, b}
	}
	return []*server{b, a}
}

func buildPipeline(ctx context.Context, o options) (*stage.Pipeline, func(), error) {
	log := zap.NewNop()
	runner, err := gpu.Load(ctx, gpu.Config{Model: o.model, CacheDir: o.cacheDir}, log)
	if err != nil {
		return nil, nil, fmt.Errorf("loading %s: %w", o.model, err)
	}
	asr, err := speech.NewASR(speech.ASRConfig{}, log)
	if err != nil {
		_ = runner.Close()
		return nil, nil, fmt.Errorf("asr: %w", err)
	}
	tts, err := speech.NewTTS(speech.TTSConfig{Voice: "cmu_us_slt", OutputRate: 24000})
	if err != nil {
		asr.Close()
		_ = runner.Close()
		return nil, nil, fmt.Errorf("tts: %w", err)
	}
	cfg, err := stage.LoadPipelineConfig(o.config)
	if err != nil {
		asr.Close()
		_ = runner.Close()
		return nil, nil, err
	}
	p, err := stage.New(cfg, stage.Deps{Engine: runner, ASR: asr, TTS: tts}, log)
	if err != nil {
		asr.Close()
		_ = runner.Close()
		return nil, nil, fmt.Errorf("pipeline: %w", err)
	}
	return p, func() { p.Close(); asr.Close(); _ = runner.Close() }, nil
}

func startServer(c *requestclient.Client, o options) (*server, error) {
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		return nil, fmt.Errorf("listen: %w", err)
	}
	h := api.NewRouter(api.RouterDeps{Models: []string{o.model}, Ready: func() bool { return true },
		Chat: api.NewChatHandler(api.ChatConfig{Models: []string{o.model}, MaxInFlight: 4 * o.concurrency}, c, zap.NewNop())})
	s := &server{url: "http://" + ln.Addr().String() + "/v1", client: c, srv: &http.Server{Handler: h, ReadHeaderTimeout: 10 * time.Second},
		done: make(chan error, 1)}
	go func() { s.done <- s.srv.Serve(ln) }()
	return s, nil
}

func (s *server) stop() {
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	_ = s.srv.Shutdown(ctx)
	<-s.done
}

type result struct {
	n      int
	wall   time.Duration
	ttftMs []float64
}

func (r *result) add(o result) {
	r.n += o.n
	r.wall += o.wall
	r.ttftMs = append(r.ttftMs, o.ttftMs...)
}

func (r result) rps() float64 {
	if r.wall <= 0 {
		return 0
	}
	return float64(r.n) / r.wall.Seconds()
}

// round sends n streaming requests with o.concurrency workers and measures the wall time of all.
func round(ctx context.Context, base string, o options, n int) (result, error) {
	jobs := make(chan int)
	var mu sync.Mutex
	var res result
	var firstErr error
	var wg sync.WaitGroup
	start := time.Now()
	for range o.concurrency {
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
func streamOne(ctx context.Context, base string, o options, i int) (float64, error) {
	body, _ := json.Marshal(map[string]any{"model": o.model, "stream": true, "max_tokens": o.maxTokens, "seed": i,
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

func percentile(v []float64, p float64) float64 {
	if len(v) == 0 {
		return 0
	}
	s := slices.Sorted(slices.Values(v))
	i := int(p/100*float64(len(s)) + 0.5)
	return s[min(max(i-1, 0), len(s)-1)]
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
