package main

import (
	"fmt"
	"runtime"
	"strings"

	"github.com/spf13/cobra"

	"github.com/omniserve/omniserve/internal/api"
)

func newVersionCmd(a *app) *cobra.Command {
	return &cobra.Command{
		Use:   "version",
		Short: "Print version, commit, Go version and the engine backends compiled in",
		Args:  cobra.NoArgs,
		RunE: func(*cobra.Command, []string) error {
			fmt.Fprintf(a.stdout, "omniserve %s\ncommit:   %s\ngo:       %s %s/%s\nbackends: %s\n",
				api.Version, api.Commit, runtime.Version(), runtime.GOOS, runtime.GOARCH,
				strings.Join(engineBackends(), ", "))
			return nil
		},
	}
}

// engineBackends lists the engine backends compiled into this binary. internal/gpu reports
// backends only for a loaded model (CUDA is a library found at run time, not compiled in),
// so the binary itself carries the CPU backend alone.
func engineBackends() []string { return []string{"cpu"} }
