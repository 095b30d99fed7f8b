package main

import (
	"context"
	"errors"
	"fmt"
	"io"
	"os"
	"path/filepath"
	"runtime/pprof"
	"strconv"
	"strings"
	"time"

	"github.com/spf13/cobra"
	"go.uber.org/zap"
	"go.uber.org/zap/zapcore"

	"github.com/omniserve/omniserve/internal/bench"
	benchchat "github.com/omniserve/omniserve/internal/bench/chat"
	benchengine "github.com/omniserve/omniserve/internal/bench/engine"
	"github.com/omniserve/omniserve/internal/bench/frontend"
	benchrt "github.com/omniserve/omniserve/internal/bench/realtime"
	"github.com/omniserve/omniserve/internal/config"
	"github.com/omniserve/omniserve/internal/otlpreceiver"
	"github.com/omniserve/omniserve/internal/server"
	"github.com/omniserve/omniserve/internal/tracing"
)

func newBenchEngineCmd(a *app) *cobra.Command {
	var o benchengine.Options
	cmd := &cobra.Command{
		Use:   "engine",
		Short: "The server's engine against a bare llama.cpp loop: decode rates, batching, bridge overhead, TTFT, TPOT",
		Long: "Engine builds the server (engine context 4096 cells, 8 sequences of 512, batch 512) and measures its engine " +
			"(Open/Append/Generate through the scheduler) against a bare llama.cpp loop on the same model and settings in " +
			"this process: 1- and 8-sequence decode rates (tokens decoded while all sequences decode / that interval; " +
			"best of --rounds), batching speedup and efficiency, bridge overhead, TTFT (128-token prompt) and TPOT " +
			"(64 tokens) over --ttft-reps fresh sequences. " + bench.QuantileDefinition,
		Args: cobra.NoArgs,
	}
	fs := cmd.Flags()
	sf := addServerFlags(fs, "dummy:0.6b", 2)
	fs.IntVar(&o.Tokens, "tokens", 64, "decode steps per measurement")
	fs.IntVar(&o.Prompt, "prompt", 32, "prompt tokens per sequence for the decode measurements")
	fs.IntVar(&o.Rounds, "rounds", 2, "measurement rounds (the best is kept: the CPU may be shared)")
	fs.IntVar(&o.TTFTReps, "ttft-reps", 5, "TTFT/TPOT repetitions (128-token prompt, 64 tokens)")
	addReportFlag(fs)
	cmd.RunE = func(cmd *cobra.Command, _ []string) error {
		cfg, err := sf.resolve(fs)
		if err != nil {
			return err
		}
		cfg.Engine.ContextSize, cfg.Engine.MaxSequences, cfg.Engine.SeqContext, cfg.Engine.BatchSize = 4096, 8, 512, 512
		if err := cfg.Validate(); err != nil {
			return err
		}
		return runBench(cmd, a, "engine", func(ctx context.Context, res *bench.Result, out io.Writer, meter bench.Meter) error {
			o.Meter = meter
			bs, err := startServer(ctx, cfg, server.Options{})
			if err != nil {
				return err
			}
			defer bs.stop()
			eng := bs.srv.Parts().Engine
			info := eng.Info()
			fmt.Fprintf(out, "model=%s arch=%s devices=%v threads=%d\n", info.Name, info.Arch, info.Devices, cfg.Engine.Threads)
			figs, err := benchengine.Run(ctx, eng, server.EngineConfig(cfg.Engine), o, out)
			res.Add(figs...)
			return err
		})
	}
	return cmd
}

func newBenchSpeechCmd(a *app) *cobra.Command {
	var (
		fo   frontend.FrontOptions
		po   frontend.PipelineOptions
		clip string
		part string
	)
	cmd := &cobra.Command{
		Use:   "speech",
		Short: "The server's speech front end (ASR, TTS, VAD, real-time streams) and its pipeline's endpoint → first audio",
		Long: "Speech builds the server and measures, with its ASR decoder pool and TTS voice: ASR and TTS real-time " +
			"factors (best of 3), VAD cost per 30 ms frame, and the largest number of concurrent real-time streams " +
			"(VAD + streaming ASR per 100 ms chunk) where no chunk finishes later than --max-lag after it arrived " +
			"(part front). Then, on its pipeline (part pipeline): one auto-response duplex stream per run fed the clip " +
			"and 1 s of silence in 100 ms units; pipeline_first_audio_ms is the p50 of VAD endpoint (the arrival of " +
			"the unit that completed the silence window) → the first talker PCM chunk. " + bench.QuantileDefinition,
		Args: cobra.NoArgs,
	}
	fs := cmd.Flags()
	sf := addServerFlags(fs, "dummy:tiny", 0)
	fs.StringVar(&part, "part", "all", "what to measure: all, front or pipeline")
	fs.StringVar(&clip, "clip", goForwardClip, "16 kHz s16le mono speech clip")
	fs.IntVar(&fo.MaxStreams, "max-streams", 16, "largest stream count to try")
	fs.DurationVar(&fo.Trial, "trial", 8*time.Second, "length of each real-time stream trial")
	fs.DurationVar(&fo.MaxLag, "max-lag", 400*time.Millisecond, "a stream keeps up if no 100 ms chunk finishes later than this after it arrived")
	fs.IntVar(&po.Runs, "runs", 7, "measured pipeline runs (after one warm-up run)")
	fs.IntVar(&po.MaxTokens, "max-tokens", 32, "pipeline reply length")
	fs.BoolVar(&po.Realtime, "realtime", true, "pace the pipeline's 100 ms units in real time")
	addReportFlag(fs)
	cmd.RunE = func(cmd *cobra.Command, _ []string) error {
		front, pipe := part == "all" || part == "front", part == "all" || part == "pipeline"
		if !front && !pipe {
			return withExitCode(exitUsage, fmt.Errorf("--part %q: want all, front or pipeline", part))
		}
		cfg, err := sf.resolve(fs)
		if err != nil {
			return err
		}
		return runBench(cmd, a, "speech", func(ctx context.Context, res *bench.Result, out io.Writer, meter bench.Meter) error {
			fo.Meter, po.Meter = meter, meter
			pcm, err := frontend.ReadClip(clip)
			if err != nil {
				return err
			}
			bs, err := startServer(ctx, cfg, server.Options{})
			if err != nil {
				return err
			}
			defer bs.stop()
			p := bs.srv.Parts()
			if front {
				if p.TTS == nil {
					return errors.New("the pipeline has no talker stage: no TTS to measure")
				}
				figs, err := frontend.Front(ctx, p.ASR, p.TTS, pcm, fo, out)
				res.Add(figs...)
				if err != nil {
					return err
				}
			}
			if pipe {
				figs, err := frontend.Pipeline(ctx, p.Pipeline, pcm, po, out)
				res.Add(figs...)
				return err
			}
			return nil
		})
	}
	return cmd
}

func newBenchChatCmd(a *app) *cobra.Command {
	var (
		o          benchchat.Options
		logFile    string
		cpuProfile string
	)
	cmd := &cobra.Command{
		Use:   "chat",
		Short: "Streaming /v1/chat/completions throughput and TTFT, and the cost of --log-stats",
		Long: "Chat builds two servers (plain, and with --log-stats writing its tables through the console encoder to " +
			"a real file) and sends streaming text completions over loopback HTTP at a fixed concurrency, in rounds " +
			"that alternate between them (order swapped every round) after a warm-up of 4 × concurrency requests each. " +
			"TTFT is client side, POST → first non-empty content delta. The run checks that the log-stats server " +
			"printed one [OmniTiming] line per request. Concurrency above the server's in-flight bound (64) gets 429s. " +
			bench.QuantileDefinition,
		Args: cobra.NoArgs,
	}
	fs := cmd.Flags()
	sf := addServerFlags(fs, "dummy:tiny", 0)
	fs.IntVarP(&o.Concurrency, "concurrency", "c", 16, "concurrent requests")
	fs.IntVarP(&o.Requests, "requests", "n", 400, "requests per round and server")
	fs.IntVar(&o.Rounds, "rounds", 6, "rounds per server (alternating plain / log-stats)")
	fs.IntVar(&o.MaxTokens, "max-tokens", 32, "max_tokens of each request")
	fs.StringVar(&logFile, "log-file", "", "where the log-stats server writes its log (default: a temporary file)")
	fs.StringVar(&cpuProfile, "cpuprofile", "", "write a CPU profile of the measurement here")
	addReportFlag(fs)
	cmd.RunE = func(cmd *cobra.Command, _ []string) error {
		cfg, err := sf.resolve(fs)
		if err != nil {
			return err
		}
		statsCfg, err := sf.resolve(fs, config.FlagValue{Name: "log-stats", Value: "true"}, config.FlagValue{Name: "log-format", Value: "console"})
		if err != nil {
			return err
		}
		o.Model = server.ModelID(cfg.Engine.Model)
		return runBench(cmd, a, "chat", func(ctx context.Context, res *bench.Result, out io.Writer, meter bench.Meter) error {
			o.Meter = meter
			if logFile == "" {
				dir, err := os.MkdirTemp("", "omniserve-bench-chat-")
				if err != nil {
					return err
				}
				defer os.RemoveAll(dir)
				logFile = filepath.Join(dir, "log-stats.log")
			}
			lf, err := os.Create(logFile)
			if err != nil {
				return fmt.Errorf("log file: %w", err)
			}
			defer lf.Close()
			// The production console encoder into a real file: the overhead includes formatting
			// and I/O.
			statsLog := zap.New(zapcore.NewCore(zapcore.NewConsoleEncoder(zap.NewProductionEncoderConfig()), zapcore.AddSync(lf), zapcore.InfoLevel))
			plain, err := startServer(ctx, cfg, server.Options{})
			if err != nil {
				return err
			}
			defer plain.stop()
			stats, err := startServer(ctx, statsCfg, server.Options{Log: statsLog})
			if err != nil {
				return err
			}
			defer stats.stop()
			if cpuProfile != "" {
				f, err := os.Create(cpuProfile)
				if err != nil {
					return fmt.Errorf("cpu profile: %w", err)
				}
				defer f.Close()
				if err := pprof.StartCPUProfile(f); err != nil {
					return fmt.Errorf("cpu profile: %w", err)
				}
				defer pprof.StopCPUProfile()
			}
			figs, err := benchchat.Run(ctx, o, benchchat.Target{URL: plain.url + "/v1"}, benchchat.Target{URL: stats.url + "/v1"}, logFile, out)
			res.Add(figs...)
			return err
		})
	}
	return cmd
}

func newBenchRealtimeCmd(a *app) *cobra.Command {
	var (
		o          benchrt.Options
		speechFile string
	)
	cmd := &cobra.Command{
		Use:   "realtime",
		Short: "The realtime WebSocket endpoint: event overhead, TTFP, barge-in, real-time sessions, transcription sessions, --log-stats and tracing cost",
		Long: "Realtime builds servers (plain, whose session backend is timed; one with --log-stats --log-format " +
			"json whose log is discarded; with --tracing-n, twins that differ only in tracing over OTLP/HTTP to a " +
			"receiver the bench runs on loopback) and " +
			"drives their /v1/realtime with real WebSocket clients over loopback and real speech (16 kHz, stated in the " +
			"session, in 100 ms appends). The OTEL_* exporter environment must be unset (only the " +
			"traced twin may trace). docs/BENCHMARKS.md defines each figure. " + bench.QuantileDefinition,
		Args: cobra.NoArgs,
	}
	fs := cmd.Flags()
	sf := addServerFlags(fs, "dummy:tiny", 0)
	fs.StringVar(&speechFile, "speech", goForwardClip, "16 kHz PCM16 speech")
	fs.IntVar(&o.OverheadN, "overhead-n", 300, "append events timed for the event overhead")
	fs.IntVar(&o.TTFPN, "ttfp-n", 10, "turns timed for TTFP, a fresh session each")
	fs.IntVar(&o.PacedTurns, "paced-turns", 7, "turns of the paced TTFP session (the first is dropped)")
	fs.IntVar(&o.BargeN, "barge-n", 20, "barge-ins timed")
	fs.IntVar(&o.LogStatsN, "logstats-n", 40, "turns per side timed with and without --log-stats")
	fs.IntVar(&o.TracingN, "tracing-n", 40, "turns per side timed with and without tracing (0: skip)")
	fs.IntVar(&o.MaxSessions, "max-sessions", 16, "largest concurrency tried for real time")
	fs.DurationVar(&o.Ramp, "ramp", 8*time.Second, "audio streamed per concurrency step")
	fs.IntSliceVar(&o.RSSSessions, "rss-sessions", []int{8, 32}, "live-session counts at which rss_per_session_mib is measured (0: skip the step)")
	fs.IntVar(&o.TxSessions, "tx-sessions", 16, "largest concurrency of the transcription-session ramp (1, 2, 4, 6, 8, 12, 16, …; 0: skip it)")
	fs.IntVar(&o.TxUtterances, "tx-utterances", 3, "utterances (the speech + 1.5 s silence) each transcription session streams")
	addReportFlag(fs)
	cmd.RunE = func(cmd *cobra.Command, _ []string) error {
		if o.TxSessions < 0 {
			return withExitCode(exitUsage, fmt.Errorf("--tx-sessions %d: want 0 (skip) or more", o.TxSessions))
		}
		if o.TxUtterances < 1 {
			return withExitCode(exitUsage, fmt.Errorf("--tx-utterances %d: want at least 1", o.TxUtterances))
		}
		most := max(o.MaxSessions, o.TxSessions)
		for _, n := range o.RSSSessions {
			most = max(most, n)
		}
		// The bench clients drop their connections without a close frame; with resume on, each
		// dropped session would keep its slot (and its ASR decoder) for the resume grace, so the
		// 4-slot --log-stats server refused its 5th session and the RSS steps saw the previous
		// step's sessions. Resume is not what this bench measures.
		noResume := config.FlagValue{Name: "resume-grace", Value: "0s"}
		cfg, err := sf.resolve(fs, config.FlagValue{Name: "max-sessions", Value: strconv.Itoa(max(64, 4*most))}, noResume)
		if err != nil {
			return err
		}
		statsCfg, err := sf.resolve(fs, config.FlagValue{Name: "max-sessions", Value: "4"}, noResume,
			config.FlagValue{Name: "log-stats", Value: "true"}, config.FlagValue{Name: "log-format", Value: "json"})
		if err != nil {
			return err
		}
		if cfg.Server.OTLPEndpoint != "" {
			return errors.New("bench realtime: --otlp-endpoint is not for the bench: it runs its own OTLP receiver for the traced server")
		}
		// With the exporter environment set every server would trace, and the plain side of
		// each comparison would not be plain.
		for _, k := range []string{"OTEL_EXPORTER_OTLP_ENDPOINT", "OTEL_EXPORTER_OTLP_TRACES_ENDPOINT", "OTEL_EXPORTER_OTLP_PROTOCOL",
			"OTEL_EXPORTER_OTLP_TRACES_PROTOCOL", "OTEL_SDK_DISABLED"} {
			if os.Getenv(k) != "" {
				return fmt.Errorf("bench realtime: unset %s: the bench compares a server without tracing with one tracing to its own receiver", k)
			}
		}
		return runBench(cmd, a, "realtime", func(ctx context.Context, res *bench.Result, out io.Writer, meter bench.Meter) error {
			o.Meter = meter
			pcm, err := os.ReadFile(speechFile)
			if err != nil {
				return fmt.Errorf("reading speech (Debian package pocketsphinx-testdata): %w", err)
			}
			timer := benchrt.NewTimer()
			plain, err := startServer(ctx, cfg, server.Options{WrapBackend: timer.Wrap})
			if err != nil {
				return err
			}
			defer plain.stop()
			// The tables are rendered and JSON-encoded as with --log-format json, then discarded.
			statsLog := zap.New(zapcore.NewCore(zapcore.NewJSONEncoder(zap.NewProductionEncoderConfig()), zapcore.AddSync(io.Discard), zapcore.InfoLevel))
			stats, err := startServer(ctx, statsCfg, server.Options{Log: statsLog})
			if err != nil {
				return err
			}
			defer stats.stop()
			ws := func(b *benchServer) benchrt.Target {
				p := b.srv.Parts()
				t := benchrt.Target{URL: "ws" + strings.TrimPrefix(b.url, "http") + "/v1/realtime", Client: p.Client, Sessions: p.Sessions}
				if p.ASR != nil {
					t.ASR = p.ASR
				}
				return t
			}
			ts := benchrt.Targets{Plain: ws(plain), LogStats: ws(stats)}
			if o.TracingN > 0 {
				rcv, err := otlpreceiver.Start(0) // counts only: nothing kept
				if err != nil {
					return err
				}
				defer rcv.Close()
				// Twins: the same config but for the OTLP endpoint (the plain server differs in
				// its timed backend and session bound, and was measurably slower).
				untracedCfg, err := sf.resolve(fs, config.FlagValue{Name: "max-sessions", Value: "4"}, noResume)
				if err != nil {
					return err
				}
				tracedCfg, err := sf.resolve(fs, config.FlagValue{Name: "max-sessions", Value: "4"}, noResume,
					config.FlagValue{Name: "otlp-endpoint", Value: rcv.Endpoint()})
				if err != nil {
					return err
				}
				ub, err := startServer(ctx, untracedCfg, server.Options{})
				if err != nil {
					return err
				}
				defer ub.stop()
				tb, err := startServer(ctx, tracedCfg, server.Options{})
				if err != nil {
					return err
				}
				defer tb.stop() // before rcv.Close: the last spans are flushed at close
				ts.Untraced, ts.Traced = ws(ub), ws(tb)
				ts.Traced.TurnSpans = func() int { return rcv.CountNamed(tracing.TurnSpanName) }
			}
			figs, err := benchrt.Run(ctx, o, ts, timer, pcm, out)
			res.Add(figs...)
			return err
		})
	}
	return cmd
}
