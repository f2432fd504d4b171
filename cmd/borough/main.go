// Command borough is Borough's host tool: it builds and signs images, boots
// them in QEMU (one node or a cluster), writes enrolment configs and join
// tickets, and talks to a cluster as its owner (status, node removal,
// recovery).
//
// Every subcommand lives in its own file. The whole CLI runs in-process
// through run, with arguments and output injected, so tests call it
// directly.
package main

import (
	"fmt"
	"io"
	"os"

	"github.com/spf13/cobra"
)

func main() {
	if err := run(os.Args[1:], os.Stdout, os.Stderr); err != nil {
		fmt.Fprintln(os.Stderr, "borough:", err)
		os.Exit(1)
	}
}

// run executes the CLI with args, writing to stdout and stderr.
func run(args []string, stdout, stderr io.Writer) error {
	root := &cobra.Command{
		Use:           "borough",
		Short:         "Build, boot and manage Borough nodes",
		SilenceUsage:  true,
		SilenceErrors: true,
	}
	root.SetArgs(args)
	root.SetOut(stdout)
	root.SetErr(stderr)
	root.PersistentFlags().StringVar(&configDir, "config", defaultConfigDir(), "directory of the owner's identity and pinned cluster CAs")
	root.AddCommand(imageCommand(), qemuCommand(), recoveryCommand(), ownerCommand(), enrolmentCommand(),
		etcdCommand(), statusCommand(), clusterCommand(), nodeCommand(), secureBootCommand())
	return root.Execute()
}
