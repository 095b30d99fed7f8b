package main

import (
	"errors"
	"fmt"
	"io"
	"os"
	"os/signal"
	"strings"
	"syscall"
	"time"

	"github.com/spf13/cobra"

	"github.com/omniserve/omniserve/internal/talkclient"
)

// newTalkCmd is `omniserve talk`: a terminal client of the realtime endpoint.
func newTalkCmd(a *app) *cobra.Command {
	cmd := &cobra.Command{
		Use:   "talk --in speech.wav [--out reply.wav]",
		Short: "Talk to a running server over the realtime WebSocket: stream speech in, print transcripts and per-turn timing",
		Long: "Talk streams a WAV file (16-bit PCM, any rate; or raw pcm16 on stdin with --in -) to the realtime " +
			"endpoint, prints both sides' transcripts as they stream and one timing line per assistant turn, " +
			"and saves the reply audio with --out. A connection dropped without a close frame is resumed on the same " +
			"session (omniserve's resume extension); only when the server answers session_not_found is a new session " +
			"started, and the conversation had again. Exit codes: 0 ok, 1 the server refused or failed, 2 usage.",
		Args: cobra.NoArgs,
	}
	fs := cmd.Flags()
	fs.SortFlags = false
	urlFlag := fs.String("url", "ws://localhost:8000/v1/realtime", "realtime endpoint (ws://, wss://, http:// or https://)")
	in := fs.String("in", "", `input: a WAV file, or "-" for raw 16-bit little-endian mono PCM on stdin (required)`)
	inRate := fs.Int("in-rate", talkclient.Rate, "sample rate of raw PCM on stdin")
	out := fs.String("out", "", "write the assistant's reply audio here as a 24 kHz WAV")
	pace := fs.String("pace", "realtime", "send the input at real-time pace (realtime) or as fast as possible (fast)")
	mode := fs.String("mode", talkclient.ModeManual, "turn taking: manual (commit + response.create) or vad (the server's VAD ends turns and barges in)")
	bargeAt := fs.Duration("barge-in-at", 0, "speak the input again this far into the first reply (e.g. 1.5s); 0 = never")
	apiKey := fs.String("api-key", "", "API key (default: $OMNISERVE_API_KEY)")
	maxTokens := fs.Int("max-tokens", 0, "bound each response to this many tokens (0 = the server's default)")
	timeout := fs.Duration("timeout", 2*time.Minute, "give up when the conversation takes longer")
	play := addPlayFlag(fs)

	cmd.RunE = func(cmd *cobra.Command, _ []string) error {
		usage := func(format string, args ...any) error {
			return withExitCode(exitUsage, fmt.Errorf(format, args...))
		}
		if *in == "" {
			return usage("talk: --in is required (a WAV file, or - for pcm16 on stdin)")
		}
		if *pace != "realtime" && *pace != "fast" {
			return usage("talk: --pace must be realtime or fast, got %q", *pace)
		}
		if *bargeAt < 0 || *maxTokens < 0 || *timeout <= 0 || *inRate <= 0 {
			return usage("talk: --barge-in-at, --max-tokens, --timeout and --in-rate must not be negative")
		}
		key := *apiKey
		if key == "" {
			key, _ = a.lookupEnv("OMNISERVE_API_KEY")
		}
		opts := talkclient.Options{URL: *urlFlag, APIKey: key, Mode: *mode, Fast: *pace == "fast",
			BargeInAt: *bargeAt, MaxOutputTokens: *maxTokens, Timeout: *timeout, Out: a.stdout}
		if err := talkclient.ValidateOptions(opts); err != nil {
			return withExitCode(exitUsage, fmt.Errorf("talk: %w", err))
		}
		input, err := readTalkInput(*in, *inRate, cmd.InOrStdin())
		if err != nil {
			return withExitCode(exitUsage, fmt.Errorf("talk: %w", err))
		}
		if len(input) == 0 {
			return usage("talk: %s holds no audio", *in)
		}
		var outFile *os.File
		if *out != "" {
			// Created before connecting, so a bad path is a usage error, not a wasted conversation.
			if outFile, err = os.Create(*out); err != nil {
				return withExitCode(exitUsage, fmt.Errorf("talk: %w", err))
			}
			defer outFile.Close()
		}
		if *play {
			p, err := newPlayer()
			if err != nil {
				return withExitCode(exitFailure, fmt.Errorf("talk: %w", err))
			}
			defer p.Close()
			opts.OnAudio = p.Play
		}

		ctx, stop := signal.NotifyContext(cmd.Context(), os.Interrupt, syscall.SIGTERM)
		defer stop()
		res, runErr := talkclient.Run(ctx, opts, input)
		if outFile != nil && res != nil {
			if err := talkclient.WriteWAV(outFile, res.Reply, talkclient.Rate); err != nil {
				return withExitCode(exitFailure, fmt.Errorf("talk: writing %s: %w", *out, err))
			}
			if err := outFile.Close(); err != nil {
				return withExitCode(exitFailure, fmt.Errorf("talk: writing %s: %w", *out, err))
			}
			fmt.Fprintf(a.stdout, "reply: %s (%.2f s)\n", *out, float64(len(res.Reply))/talkclient.Rate)
		}
		if runErr != nil {
			return withExitCode(exitFailure, fmt.Errorf("talk: %w", runErr))
		}
		if len(res.Turns) == 0 {
			return withExitCode(exitFailure, errors.New("talk: the server did not respond"))
		}
		return nil
	}
	return cmd
}

// readTalkInput returns the input as 24 kHz mono samples.
func readTalkInput(path string, rawRate int, stdin io.Reader) ([]int16, error) {
	if path == "-" {
		b, err := io.ReadAll(stdin)
		if err != nil {
			return nil, fmt.Errorf("reading stdin: %w", err)
		}
		return talkclient.Resample(talkclient.PCM16(b), rawRate, talkclient.Rate), nil
	}
	f, err := os.Open(path)
	if err != nil {
		return nil, err
	}
	defer f.Close()
	pcm, rate, err := talkclient.ReadWAV(f)
	if err != nil {
		if strings.HasSuffix(strings.ToLower(path), ".raw") || strings.HasSuffix(strings.ToLower(path), ".pcm") {
			return nil, fmt.Errorf("%s: %w (pipe raw PCM through stdin: --in - --in-rate N < %s)", path, err, path)
		}
		return nil, fmt.Errorf("%s: %w", path, err)
	}
	return talkclient.Resample(pcm, rate, talkclient.Rate), nil
}
