package main

import (
	"context"
	"fmt"
	"io"
	"net/http/httptest"
	"os"
	"os/signal"
	"path/filepath"
	"strconv"
	"strings"
	"syscall"
	"time"

	"github.com/spf13/cobra"
	"github.com/spf13/pflag"

	"github.com/omniserve/omniserve/internal/bench"
	"github.com/omniserve/omniserve/internal/bench/latency"
	"github.com/omniserve/omniserve/internal/benchreport"
	"github.com/omniserve/omniserve/internal/config"
	"github.com/omniserve/omniserve/internal/server"
)

const goForwardClip = "/usr/share/pocketsphinx/test/data/goforward.raw"

func newBenchCmd(a *app) *cobra.Command {
	cmd := &cobra.Command{
		Use:   "bench",
		Short: "Measure the server: engine, speech, chat, realtime or latency as heard",
		Long: "Bench measures the server users run: engine, speech, chat and realtime build it in this process " +
			"with the same constructor as `serve` (internal/server) and drive it over loopback; latency starts " +
			"this binary's `serve` as a child process and measures as an independent client. Each subcommand " +
			"shows its progress on stderr (a bar redrawn in place on a terminal, a plain line per tenth elsewhere), " +
			"prints what it sees on stdout, then machine-readable key=value lines, starting with cpus=<logical CPUs>. " +
			"With --report DIR it also writes DIR/report.json (every figure with its samples, unit and definition) and " +
			"DIR/report.html (a self-contained page: a histogram per figure; for latency, a timeline per session). " +
			"docs/BENCHMARKS.md defines every key. " + bench.QuantileDefinition,
		Args: cobra.NoArgs,
	}
	cmd.AddCommand(newBenchEngineCmd(a), newBenchSpeechCmd(a), newBenchChatCmd(a), newBenchRealtimeCmd(a), newBenchLatencyCmd(a), newBenchConversationsCmd(a), newBenchLongCmd(a))
	return cmd
}

// runBench runs one subcommand's measurement until SIGINT/SIGTERM, prints its figures and, with
// --report DIR, writes DIR/report.json and DIR/report.html from them. Every subcommand ends here,
// so the figures (samples and definitions, not only the printed keys) are in one place for the
// report. measure prints what it sees to out (stdout) and shows progress through meter (bars
// on stderr that out keeps clear of on a terminal); the key=value block follows on stdout.
func runBench(cmd *cobra.Command, a *app, name string, measure func(ctx context.Context, res *bench.Result, out io.Writer, meter bench.Meter) error) error {
	reportDir, _ := cmd.Flags().GetString("report")
	if reportDir != "" {
		// Before the run, not after it: a typo in the path must not cost a long measurement.
		if err := os.MkdirAll(reportDir, 0o755); err != nil {
			return withExitCode(exitFailure, fmt.Errorf("--report: %w", err))
		}
	}
	ctx, stop := signal.NotifyContext(cmd.Context(), os.Interrupt, syscall.SIGTERM)
	defer stop()
	res := bench.NewResult(name)
	console := bench.NewConsole(a.stdout, a.stderr)
	if err := measure(ctx, res, console, console.Meter()); err != nil {
		return withExitCode(exitFailure, fmt.Errorf("bench %s: %w", name, err))
	}
	if err := res.Print(a.stdout); err != nil {
		return err
	}
	if reportDir == "" {
		return nil
	}
	if err := benchreport.Write(reportDir, res.Report(commandLine(cmd), time.Now())); err != nil {
		return withExitCode(exitFailure, fmt.Errorf("bench %s: %w", name, err))
	}
	fmt.Fprintf(a.stderr, "report: %s, %s\n", filepath.Join(reportDir, benchreport.JSONFile), filepath.Join(reportDir, benchreport.HTMLFile))
	return nil
}

// addReportFlag adds --report to a bench subcommand; runBench reads it.
func addReportFlag(fs *pflag.FlagSet) {
	fs.String("report", "", "also write DIR/report.json (every figure: samples, unit, definition; timelines) and "+
		"DIR/report.html (a self-contained page of histograms and timelines), creating DIR")
}

// commandLine is the command as run, rebuilt from the flags that were set: what a report needs
// to repeat the run (os.Args would name a test binary under go test).
func commandLine(cmd *cobra.Command) []string {
	argv := strings.Fields(cmd.CommandPath())
	cmd.Flags().Visit(func(f *pflag.Flag) {
		argv = append(argv, "--"+f.Name, f.Value.String())
	})
	return argv
}

// serverFlags are the server settings every in-process benchmark takes; the rest of the
// configuration comes from --config as for `serve` (the embedded default when the file is
// absent). The environment is not read: a benchmark is reproduced from its command line.
type serverFlags struct {
	config   string
	model    string
	cacheDir string
	device   string
	threads  int
}

func addServerFlags(fs *pflag.FlagSet, model string, threads int) *serverFlags {
	f := &serverFlags{}
	fs.SortFlags = false
	fs.StringVar(&f.config, "config", config.DefaultPath, "YAML config file of the server under test (its pipeline: section included)")
	fs.StringVar(&f.model, "model", model, `model: "dummy:tiny", "dummy:0.6b" or a .gguf path`)
	fs.StringVar(&f.cacheDir, "cache-dir", "", "directory for generated dummy models (default $XDG_CACHE_HOME/omniserve)")
	fs.StringVar(&f.device, "device", "cpu", "engine device: auto, cpu or cuda")
	fs.IntVar(&f.threads, "threads", threads, "engine CPU threads (0 = all cores but one, as serve)")
	return f
}

// resolve builds the server configuration from the flags, plus extra settings by flag name.
func (f *serverFlags) resolve(fs *pflag.FlagSet, extra ...config.FlagValue) (config.Config, error) {
	flags := append([]config.FlagValue{
		{Name: "model", Value: f.model},
		{Name: "device", Value: f.device},
		{Name: "threads", Value: strconv.Itoa(f.threads)},
	}, extra...)
	if f.cacheDir != "" {
		flags = append(flags, config.FlagValue{Name: "cache-dir", Value: f.cacheDir})
	}
	return config.Resolve(config.Sources{ConfigFlag: f.config, ConfigFlagSet: fs.Changed("config"), Flags: flags})
}

// benchServer is a server built by internal/server and served on a loopback listener.
type benchServer struct {
	srv *server.Server
	url string // http://127.0.0.1:port
	hs  *httptest.Server
}

// startServer builds the server, waits for its start-up work (the ASR warm-up) to end so that
// the measurement sees the steady state, and serves it on loopback.
func startServer(ctx context.Context, cfg config.Config, opts server.Options) (*benchServer, error) {
	srv := server.New(cfg, opts)
	if err := srv.Build(ctx); err != nil {
		closeServer(srv)
		return nil, err
	}
	select {
	case <-srv.Warmed():
	case <-ctx.Done():
		closeServer(srv)
		return nil, ctx.Err()
	}
	hs := httptest.NewServer(srv.Handler())
	return &benchServer{srv: srv, url: hs.URL, hs: hs}, nil
}

// stop closes the listener, then the server (its sessions first).
func (b *benchServer) stop() {
	b.hs.Close()
	closeServer(b.srv)
}

func closeServer(srv *server.Server) {
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	srv.Close(ctx)
}

func newBenchConversationsCmd(a *app) *cobra.Command {
	o := latency.ConversationOptions{Seed: 1}
	var steps string
	cmd := &cobra.Command{
		Use:   "conversations",
		Short: "How many live conversations one server holds: steps of N real-time conversations at once until one fails to keep up",
		Long: "Conversations starts this binary's `serve --model <model>` as a child process (or uses --addr) and, for each step " +
			"of --steps, holds that many conversations at once for --step-time, each a user talking at real time as a " +
			"microphone would (100 ms appends that never stop): an utterance of real speech, the server VAD ends the turn, " +
			"the reply is played on receipt, a pause of 0.5–1 s after it has played, the next utterance; every fifth turn " +
			"the user speaks over the reply (a barge-in, which is also the next turn). A step keeps up when speech end → " +
			"first audible p99 ≤ the silence window + 300 ms, barge-in onset → the old audio stops p99 ≤ 300 ms, no append " +
			"went more than 400 ms behind the microphone's clock, every transcript equals the reference (each clip's first " +
			"transcript in the run) and no error came. It prints conversations_<dialect> (the largest step that kept up), " +
			"each step's p50/p99 and, for a started server, its CPU seconds per conversation-minute and RSS growth per " +
			"conversation (/proc/<pid>). --dialect realtime speaks OpenAI Realtime on /v1/realtime, vllm the same events on " +
			"vllm-omni's duplex endpoint /v1/realtime?duplex=1, live GPT-Live on /v1/live/sessions. --webrtc-share makes that " +
			"share of each step's conversations (rounded, at least one) the same user over WebRTC calls (POST " +
			"/v1/realtime/calls): the speech as paced 20 ms Opus frames, the reply's RTP decoded and played on receipt, first " +
			"audible and the old audio's stop heard on the client's playback clock; their turns count in the step's rules, " +
			"and the step also reports each transport's figures (rtc_ and ws_ keys). " + bench.QuantileDefinition,
		Args: cobra.NoArgs,
		RunE: func(cmd *cobra.Command, _ []string) error {
			if o.Bin == "" && o.Addr == "" {
				exe, err := os.Executable()
				if err != nil {
					return withExitCode(exitFailure, fmt.Errorf("finding this binary: %w", err))
				}
				o.Bin = exe
			}
			var err error
			if o.Steps, err = parseSteps(steps); err != nil {
				return withExitCode(exitUsage, err)
			}
			if err := o.Check(); err != nil {
				return withExitCode(exitUsage, err)
			}
			return runBench(cmd, a, "conversations", func(ctx context.Context, res *bench.Result, out io.Writer, meter bench.Meter) error {
				o.Meter = meter
				figs, err := latency.RunConversations(ctx, o, out)
				res.Add(figs...)
				return err
			})
		},
	}
	fs := cmd.Flags()
	fs.SortFlags = false
	fs.StringVar(&o.Bin, "bin", "", "server binary started as a child process (default: this binary)")
	fs.StringVar(&o.Addr, "addr", "", "host:port of a running server instead of starting one")
	fs.StringVar(&o.Model, "model", "dummy:tiny", "model of the started server")
	fs.StringVar(&o.APIKey, "api-key", "", "bearer key of the server at --addr (the started server has none)")
	fs.StringVar(&o.Dialect, "dialect", "realtime", "realtime (/v1/realtime), vllm (/v1/realtime?duplex=1) or live (/v1/live/sessions)")
	fs.StringVar(&steps, "steps", "1,2,4,8,16,24,32,48,64", "conversations at once per step, ascending: the run stops at the first step that does not keep up")
	fs.DurationVar(&o.StepTime, "step-time", time.Minute, "how long each step holds its conversations")
	fs.StringSliceVar(&o.Utterances, "utterances", []string{goForwardClip, "/usr/share/pocketsphinx/test/data/something.raw"}, "16 kHz PCM16 clips (2–3 s) the user says in turn")
	fs.StringVar(&o.Interrupt, "interrupt", "/usr/share/pocketsphinx/test/data/numbers.raw", "16 kHz PCM16 speech said over every fifth reply (its first 2.5 s)")
	fs.IntVar(&o.SilenceMs, "silence-ms", 500, "server VAD silence_duration_ms (live: the server's default is used)")
	fs.IntVar(&o.ReplyTokens, "reply-tokens", 8, "max_output_tokens of each reply (realtime, vllm)")
	fs.Float64Var(&o.WebRTCShare, "webrtc-share", 0, "share of each step's conversations made over WebRTC calls (POST /v1/realtime/calls; rounded, at least one when > 0; realtime only)")
	fs.DurationVar(&o.Window, "window", 0, "also report each step by windows of this length (at most half of --step-time): each window's speech end → audible p50/p99 and the started server's RSS at its end, the last window's p99 over the first's, and the RSS growth after the first (a soak: make bench-soak)")
	addReportFlag(fs)
	return cmd
}

// parseSteps reads --steps: ascending positive counts.
func parseSteps(s string) ([]int, error) {
	var out []int
	for _, f := range strings.Split(s, ",") {
		n, err := strconv.Atoi(strings.TrimSpace(f))
		if err != nil || n <= 0 || (len(out) > 0 && n <= out[len(out)-1]) {
			return nil, fmt.Errorf("--steps %q: want ascending positive counts, e.g. 1,2,4,8", s)
		}
		out = append(out, n)
	}
	return out, nil
}

func newBenchLatencyCmd(a *app) *cobra.Command {
	var o latency.Options
	cmd := &cobra.Command{
		Use:   "latency",
		Short: "Latency as a user hears it: an independent client against `serve` started as a child process",
		Long: "Latency starts this binary's `serve --model <model>` as a child process (or uses --addr) and connects as an " +
			"independent WebSocket client written from OpenAI's Realtime documents (it imports nothing of the server). " +
			"It streams real speech at real-time pace in 100 ms appends and times the first audible sample of each reply " +
			"(first sample above −40 dBFS on the playback clock of a client that plays on receipt): manual turns, " +
			"server-VAD turns, barge-in by speech, and false barge-ins by noise and by the reply's own echo. " +
			"The manual and server-VAD turns also run on WebRTC calls (POST /v1/realtime/calls, the speech as paced Opus RTP, " +
			"the reply's RTP decoded on receipt) interleaved with the WebSocket ones, so that WebRTC's added latency is " +
			"measured in one run (rtc_added_*); --cpu-sessions N measures the started server's CPU time per session " +
			"(/proc/<pid>/stat) over N sessions at once, WebSocket against WebRTC. " +
			"--report draws each session as a timeline: the user's speech as sent, the server VAD's speech_started / " +
			"speech_stopped at their audio_start_ms / audio_end_ms, the reply on the client's playback clock, barge-ins. " +
			bench.QuantileDefinition,
		Args: cobra.NoArgs,
		RunE: func(cmd *cobra.Command, _ []string) error {
			if o.Bin == "" && o.Addr == "" {
				exe, err := os.Executable()
				if err != nil {
					return withExitCode(exitFailure, fmt.Errorf("finding this binary: %w", err))
				}
				o.Bin = exe
			}
			return runBench(cmd, a, "latency", func(ctx context.Context, res *bench.Result, out io.Writer, meter bench.Meter) error {
				o.Meter = meter
				figs, sessions, err := latency.Run(ctx, o, out)
				res.Add(figs...)
				res.Sessions = sessions
				return err
			})
		},
	}
	fs := cmd.Flags()
	fs.SortFlags = false
	fs.StringVar(&o.Bin, "bin", "", "server binary started as a child process (default: this binary)")
	fs.StringVar(&o.Addr, "addr", "", "host:port of a running server instead of starting one")
	fs.StringVar(&o.Model, "model", "dummy:tiny", "model of the started server")
	fs.StringVar(&o.Speech, "speech", goForwardClip, "16 kHz PCM16 speech: the user's turn")
	fs.StringVar(&o.Interrupt, "interrupt", "/usr/share/pocketsphinx/test/data/numbers.raw", "16 kHz PCM16 speech used to interrupt")
	fs.IntVar(&o.Runs, "runs", 10, "sessions per scenario")
	fs.IntVar(&o.SilenceMs, "silence-ms", 500, "server VAD silence_duration_ms")
	fs.IntVar(&o.Tools, "tools", 0, "function tools each session declares, with tool_choice auto (the overhead of declaring tools; 0 = none)")
	fs.StringVar(&o.APIKey, "api-key", "", "bearer key of the server at --addr (the started server has none)")
	fs.IntVar(&o.CPUSessions, "cpu-sessions", 4, "sessions at once in the CPU batches, WebSocket against WebRTC (0 = skip; only with a started server)")
	fs.BoolVar(&o.Live, "live", true, "also run the server VAD turn and the barge-in by speech over GPT-Live (/v1/live/sessions) and report them next to Realtime ?duplex=1's (a server without GPT-Live is skipped)")
	fs.BoolVar(&o.CompareTools, "compare-tools", false, "run each manual and server-VAD session twice, with --tools tools and with none (alternating which goes first), and report both and the ratio of their medians: the overhead of declaring tools, measured under one load")
	addReportFlag(fs)
	return cmd
}
