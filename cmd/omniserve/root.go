package main

import (
	"context"
	"errors"
	"fmt"
	"io"
	"net"
	"os"
	"strings"

	"github.com/spf13/cobra"

	"github.com/omniserve/omniserve/internal/config"
)

// Exit codes. Usage and configuration errors are 2, as for most Unix tools, so that scripts
// can tell "fix your command line" from "the server failed".
const (
	exitOK      = 0
	exitFailure = 1
	exitUsage   = 2
)

// exitError carries the process exit code of a failed command.
type exitError struct {
	code int
	err  error
}

func (e *exitError) Error() string { return e.err.Error() }
func (e *exitError) Unwrap() error { return e.err }

func withExitCode(code int, err error) error {
	if err == nil {
		return nil
	}
	return &exitError{code: code, err: err}
}

// exitCodeOf maps an error to the exit code. Configuration errors are usage errors wherever they
// come from; errors that carry no code come from cobra's own argument parsing, so usage too.
func exitCodeOf(err error) int {
	if err == nil {
		return exitOK
	}
	if config.IsError(err) {
		return exitUsage
	}
	var ee *exitError
	if errors.As(err, &ee) {
		return ee.code
	}
	return exitUsage
}

// app is the process environment a command runs in. Tests build their own instead of touching
// the real one.
type app struct {
	stdout, stderr io.Writer
	lookupEnv      func(string) (string, bool)
	// serve runs the server with a resolved configuration until ctx ends. newApp sets it to
	// runServer; the CLI tests replace it to observe the configuration alone.
	serve func(ctx context.Context, a *app, cfg config.Config) error
	// listening, when set, is told the bound address (tests serve on port 0).
	listening func(net.Addr)
}

func newApp() *app {
	return &app{stdout: os.Stdout, stderr: os.Stderr, lookupEnv: os.LookupEnv, serve: runServer}
}

// newRootCmd builds the command tree. It is a function, not package state, so that every test
// gets a fresh tree.
func newRootCmd(a *app) *cobra.Command {
	root := &cobra.Command{
		Use:           "omniserve",
		Short:         "Serve omni speech models over OpenAI-compatible HTTP and a full-duplex realtime WebSocket",
		SilenceUsage:  true, // a failing server should not print the flag list
		SilenceErrors: true, // execute prints the one error line itself
	}
	root.SetOut(a.stdout)
	root.SetErr(a.stderr)
	root.SetFlagErrorFunc(func(_ *cobra.Command, err error) error {
		return withExitCode(exitUsage, err)
	})
	root.AddCommand(newServeCmd(a), newConfigCmd(a), newTalkCmd(a), newBenchCmd(a), newVersionCmd(a))
	return root
}

// execute runs the CLI with args and returns the process exit code.
func execute(args []string, a *app) int {
	root := newRootCmd(a)
	root.SetArgs(args)
	err := root.ExecuteContext(context.Background())
	if err == nil {
		return exitOK
	}
	fmt.Fprintf(a.stderr, "omniserve: error: %s\n", singleLine(err.Error()))
	return exitCodeOf(err)
}

// singleLine joins a multi-line message (cobra's "Did you mean this?" hints) into the one line
// that scripts and log collectors expect.
func singleLine(s string) string {
	var parts []string
	for _, l := range strings.Split(s, "\n") {
		if l = strings.TrimSpace(l); l != "" {
			parts = append(parts, l)
		}
	}
	return strings.Join(parts, " ")
}
