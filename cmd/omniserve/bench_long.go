package main

import (
	"context"
	"fmt"
	"io"
	"os"

	"github.com/spf13/cobra"

	"github.com/omniserve/omniserve/internal/bench"
	"github.com/omniserve/omniserve/internal/bench/latency"
)

func newBenchLongCmd(a *app) *cobra.Command {
	var o latency.LongOptions
	cmd := &cobra.Command{
		Use:   "long",
		Short: "One long conversation: does turn 500 answer as fast as turn 5, in as much memory",
		Long: "Long starts this binary's `serve --model <model>` as a child process (or uses --addr) and holds one realtime " +
			"session (GA WebSocket, the independent client of `bench latency`) for --turns turns: each turn appends a real " +
			"utterance faster than real time (or, with --text, adds a text item), commits, asks for a response and reads it " +
			"to response.done. With session.truncation (--truncation) the conversation stays within the engine's window " +
			"(--seq-context) and its oldest turns are deleted (conversation.item.deleted). It prints " +
			"long_turn_latency_ratio_<turns> (the median commit → first audio of the last 10 turns divided by that of the " +
			"first 10), long_rss_growth_mib (the started server's RSS after the last turn minus after turn <turns>/10, " +
			"/proc/<pid>/status), the latency quantiles, and the turns failed and items deleted. " + bench.QuantileDefinition,
		Args: cobra.NoArgs,
		RunE: func(cmd *cobra.Command, _ []string) error {
			if err := latency.CheckLong(o); err != nil {
				return withExitCode(exitUsage, err)
			}
			if o.Bin == "" && o.Addr == "" {
				exe, err := os.Executable()
				if err != nil {
					return withExitCode(exitFailure, fmt.Errorf("finding this binary: %w", err))
				}
				o.Bin = exe
			}
			return runBench(cmd, a, "long", func(ctx context.Context, res *bench.Result, out io.Writer, meter bench.Meter) error {
				o.Meter = meter
				figs, err := latency.RunLong(ctx, o, out)
				res.Add(figs...)
				return err
			})
		},
	}
	fs := cmd.Flags()
	fs.SortFlags = false
	fs.StringVar(&o.Bin, "bin", "", "server binary started as a child process (default: this binary)")
	fs.StringVar(&o.Addr, "addr", "", "host:port of a running server instead of starting one (no RSS figures)")
	fs.StringVar(&o.Model, "model", "dummy", "model of the started server")
	fs.IntVar(&o.Turns, "turns", 500, "turns in the session (at least 20)")
	fs.StringVar(&o.Speech, "speech", goForwardClip, "16 kHz PCM16 speech: the user's turn")
	fs.StringVar(&o.Text, "text", "", "a text turn instead of speech (conversation.item.create with this text)")
	fs.IntVar(&o.MaxOutputTokens, "max-output-tokens", 8, "max_output_tokens of each reply (its audio is paced at real time, so it sets the length of a turn)")
	fs.StringVar(&o.Truncation, "truncation", "auto", `session.truncation: auto, disabled, or a JSON object such as {"type":"retention_ratio","retention_ratio":0.5}`)
	fs.IntVar(&o.SeqContext, "seq-context", 0, "engine.seq_context of the started server in tokens (0 = its default, 2048)")
	addReportFlag(fs)
	return cmd
}
