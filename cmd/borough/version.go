package main

import (
	"context"
	"fmt"
	"io"
	"runtime"

	"github.com/spf13/cobra"
)

// version is this CLI's version: the image's (git describe), which
// build.sh sets; "dev" for a CLI built otherwise.
var version = "dev"

func versionCommand() *cobra.Command {
	var f apiFlags
	c := &cobra.Command{
		Use:   "version [NODE]",
		Short: "Print this CLI's version, and with NODE (HOST:PORT of its API) the node's, its boot slot and any update",
		Args:  cobra.MaximumNArgs(1),
		RunE: func(cmd *cobra.Command, args []string) error {
			fmt.Fprintf(cmd.OutOrStdout(), "borough %s (%s)\n", version, runtime.Version())
			if len(args) == 0 {
				return nil
			}
			return printNodeVersion(cmd.OutOrStdout(), args[0], f)
		},
	}
	f.add(c)
	return c
}

// printNodeVersion prints the version the node whose API is at node runs.
func printNodeVersion(stdout io.Writer, node string, f apiFlags) error {
	c, err := apiClient(node, f)
	if err != nil {
		return err
	}
	info, err := c.Info(context.Background())
	if err != nil {
		return err
	}
	fmt.Fprintf(stdout, "node %s: %s (boot slot %s)", node, info.GetVersion(), info.GetBootSlot())
	if u := info.GetUpdate(); u != "" {
		fmt.Fprintf(stdout, "; update: %s", u)
	}
	fmt.Fprintln(stdout)
	return nil
}
