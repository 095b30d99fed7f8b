package main

import (
	"github.com/spf13/cobra"

	"github.com/omniserve/omniserve/internal/config"
)

func newConfigCmd(a *app) *cobra.Command {
	cmd := &cobra.Command{
		Use:   "config",
		Short: "Inspect the server configuration",
		Args:  cobra.NoArgs,
	}
	print := &cobra.Command{
		Use:   "print",
		Short: "Print the effective configuration that serve would run with, as YAML",
		Long: "Print the effective configuration: built-in defaults, then the YAML file (the embedded " +
			"default when configs/omni-cpu.yaml is not in the working directory), then OMNISERVE_* " +
			"environment variables, then the flags given here, which are serve's. The API key is redacted.",
		Args: cobra.NoArgs,
	}
	fs := print.Flags()
	addConfigFlags(fs)
	print.RunE = func(*cobra.Command, []string) error {
		cfg, err := resolveConfig(fs, a.lookupEnv)
		if err != nil {
			return err
		}
		out, err := config.Render(cfg)
		if err != nil {
			return withExitCode(exitFailure, err)
		}
		_, err = a.stdout.Write(out)
		return withExitCode(exitFailure, err)
	}
	cmd.AddCommand(print)
	return cmd
}
