// Command borough is Borough's host tool: it builds and signs images, boots
// them in QEMU (one node or a cluster), writes enrolment configs and join
// tickets, talks to a cluster as its owner (status, node removal,
// recovery), and to one node through its node API (logs, info, reboot,
// update).
//
// Every subcommand lives in its own file. The whole CLI runs in-process
// through run, with arguments and output injected, so tests call it
// directly.
package main

import (
	"errors"
	"fmt"
	"io"
	"os"
	"time"

	"github.com/spf13/cobra"
)

func main() {
	if err := run(os.Args[1:], os.Stdout, os.Stderr); err != nil {
		fmt.Fprintln(os.Stderr, "borough:", err)
		code := 1
		var exit *exitError
		if errors.As(err, &exit) {
			code = exit.code
		}
		os.Exit(code)
	}
}

// exitError makes borough exit with code: a command it ran for the user
// (qemu --until -- COMMAND) failed with it.
type exitError struct {
	code int
	err  error
}

func (e *exitError) Error() string { return e.err.Error() }
func (e *exitError) Unwrap() error { return e.err }

// run executes the CLI with args, writing to stdout and stderr.
func run(args []string, stdout, stderr io.Writer) error {
	root := commandTree()
	root.SetArgs(args)
	root.SetOut(stdout)
	root.SetErr(stderr)
	return root.Execute()
}

// commandTree is the CLI's commands.
func commandTree() *cobra.Command {
	root := &cobra.Command{
		Use:   "borough",
		Short: "Build, boot and manage Borough nodes",
		Long: `Build, boot and manage Borough nodes.

A NODE is a node however it is given: its member name (from the members
'borough health' has seen), or HOST:PORT of its etcd client port (2379) or
its node API (7835); each command reaches the port it needs. A forwarded
port is taken as the kind the command asks for. ENDPOINTS and --cluster
are client ports, or names, comma-separated.`,
		SilenceUsage:  true,
		SilenceErrors: true,
		// NODE means a node, found by either port or its name; and the
		// user's expired owner sessions go (session.go).
		PersistentPreRunE: func(cmd *cobra.Command, args []string) error {
			removeExpiredSessions(sessionBase(), time.Now())
			return resolveNodes(cmd, args)
		},
	}
	root.PersistentFlags().StringVar(&configDir, "config", defaultConfigDir(), "directory of the owner's identity and pinned cluster CAs")
	root.AddCommand(imageCommand(), qemuCommand(), recoveryCommand(), ownerCommand(), enrolmentCommand(),
		etcdCommand(), statusCommand(), healthCommand(), supportCommand(), dashboardCommand(), clusterCommand(), nodeCommand(), logsCommand(), updateCommand(), secureBootCommand(), versionCommand())
	refuseUnknown(root)
	addCompletion(root)
	return root
}

// refuseUnknown makes every command that only groups others (c and those
// under it) fail on a word that names none of them: cobra prints such a
// command's help and exits 0, and a script's typo passes for success.
func refuseUnknown(c *cobra.Command) {
	for _, sub := range c.Commands() {
		refuseUnknown(sub)
	}
	if !c.HasSubCommands() || c.Runnable() || c == c.Root() {
		return
	}
	c.Args = cobra.ArbitraryArgs
	c.RunE = func(cmd *cobra.Command, args []string) error {
		if len(args) > 0 {
			return fmt.Errorf("%s has no command %q (%s --help lists them)", cmd.CommandPath(), args[0], cmd.CommandPath())
		}
		return cmd.Help()
	}
}
