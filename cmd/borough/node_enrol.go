package main

import (
	"context"
	"fmt"
	"io"
	"os"
	"time"

	"github.com/spf13/cobra"

	"github.com/borough-os/borough/internal/enrolment"
)

func nodeEnrolCommand() *cobra.Command {
	var f apiFlags
	c := &cobra.Command{
		Use:   "enrol NODE CONFIG",
		Short: "Send an enrolment config to the node whose API is at NODE (HOST:PORT), which has no data volume yet",
		Long: `enrol sends CONFIG (borough enrolment join or bootstrap) to a node that
waits for one: a node reset with 'borough node reset', or one that failed on
its first boot (a spent or expired ticket). The node checks it, keeps it on
its ESP and reboots into it; it comes before a config in the machine's
fw_cfg, which may still hold the one the node spent. A node waiting for a
config has no certificate of a cluster: it prints its own key on its
console ("node_key=sha256:..."), and the config, whose ticket makes a
member of whoever holds it, goes only to a node that presents that key
(--node-key).`,
		Args: cobra.ExactArgs(2),
		RunE: func(cmd *cobra.Command, args []string) error {
			return enrolNode(cmd.OutOrStdout(), args[0], args[1], f)
		},
	}
	f.add(c)
	return c
}

// enrolNode sends the config at path to the node whose API is at node,
// once it checks.
func enrolNode(stdout io.Writer, node, path string, f apiFlags) error {
	b, err := os.ReadFile(path)
	if err != nil {
		return err
	}
	e, err := enrolment.Parse(b, path, time.Now())
	if err != nil {
		return err
	}
	if e.Spent() {
		return fmt.Errorf("%s: %w", path, enrolment.ErrSpent)
	}
	if err := checkTicketLife(e, time.Now()); err != nil {
		return fmt.Errorf("%s: %w", path, err)
	}
	c, err := apiClient(node, f)
	if err != nil {
		return err
	}
	if err := c.Enrol(context.Background(), b); err != nil {
		return err
	}
	fmt.Fprintf(stdout, "%s reboots into its first boot with %s (cluster %s)\n", node, path, e.ClusterName)
	return nil
}
