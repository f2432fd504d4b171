package main

import (
	"context"
	"errors"
	"fmt"
	"io"

	"github.com/spf13/cobra"
)

func nodeNetworkCommand() *cobra.Command {
	var f apiFlags
	var n networkFlags
	c := &cobra.Command{
		Use:   "network NODE",
		Short: "Change the network settings of the node whose API is at NODE (HOST:PORT), kept only if it reaches its cluster with them",
		Long: `network sends the node new network settings, given with the flags of
'borough enrolment bootstrap' (--link, or --address with --interface,
--gateway4, --gateway6 and --dns; --ntp). The node checks them, reboots,
and brings its network up with them, all at once: a node at a new address
gives itself a certificate for it and tells its peers. Once it runs in its
cluster again they stand, over its enrolment config's, at every boot. If
it has not reached its cluster within the window it names, or loses power
trying, it goes back to the settings it had, by itself.`,
		Args: cobra.ExactArgs(1),
		RunE: func(cmd *cobra.Command, args []string) error {
			return changeNetwork(cmd.OutOrStdout(), args[0], f, n)
		},
	}
	f.add(c)
	n.add(c)
	return c
}

// changeNetwork sends the node whose API is at node the network the flags
// give.
func changeNetwork(stdout io.Writer, node string, f apiFlags, flags networkFlags) error {
	n, err := flags.network()
	if err != nil {
		return err
	}
	if n == nil {
		return errors.New("no network settings: give --link, --address or --ntp")
	}
	c, err := apiClient(node, f)
	if err != nil {
		return err
	}
	window, err := c.Network(context.Background(), n)
	if err != nil {
		return err
	}
	fmt.Fprintf(stdout, "%s reboots to try the new network; it keeps it once it runs in its cluster, "+
		"and goes back to the one it had if it does not within %v\n", node, window)
	return nil
}
