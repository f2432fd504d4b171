package main

import (
	"context"
	"fmt"
	"io"
	"os"
	"os/signal"
	"slices"
	"strings"
	"time"

	"github.com/spf13/cobra"
	"google.golang.org/protobuf/encoding/protojson"

	"github.com/borough-os/borough/internal/nodeapi"
	"github.com/borough-os/borough/proto/nodepb"
)

// The node API's commands verify the node like etcd's do: against the
// cluster CA pinned for that address (--fingerprint on first use). A node
// without a certificate of its cluster (waiting for a config or a backup)
// presents its own key, whose fingerprint it prints on its console:
// --node-key checks it. --unverified reads a node without checking, and
// sends it nothing secret.

// apiFlags are the flags of every node API command.
type apiFlags struct {
	fingerprint string
	nodeKey     string
	unverified  bool
}

func (f *apiFlags) add(c *cobra.Command) {
	c.Flags().StringVar(&f.fingerprint, "fingerprint", "", "the cluster CA's fingerprint; needed on first use")
	c.Flags().StringVar(&f.nodeKey, "node-key", "", "for a node without a cluster: the key it printed on its console (sha256:...)")
	c.Flags().BoolVar(&f.unverified, "unverified", false, "do not check who answers (a config or a backup is never sent so)")
}

// apiClient returns a client of the node API at node as the owner.
func apiClient(node string, f apiFlags) (*nodeapi.Client, error) {
	kp, err := ownerKeyPair()
	if err != nil {
		return nil, err
	}
	c := &nodeapi.Client{Addr: node, Owner: kp, Unverified: f.unverified}
	if f.nodeKey != "" {
		if err := nodeapi.CheckNodeKey(f.nodeKey); err != nil {
			return nil, fmt.Errorf("--node-key: %w", err)
		}
		c.NodeKey = f.nodeKey
		return c, nil
	}
	if f.unverified {
		return c, nil
	}
	ca, err := pinnedCA(node, f.fingerprint)
	if err != nil {
		return nil, fmt.Errorf("%w (a node without a cluster has no CA: --node-key, as it printed on its console)", err)
	}
	c.CA = ca
	return c, nil
}

func logsCommand() *cobra.Command {
	var f apiFlags
	var follow bool
	var since time.Duration
	var boot int32
	c := &cobra.Command{
		Use:   "logs NODE [SERVICE]",
		Short: "Print the log of the node whose API is at NODE (HOST:PORT, port 7835), as its owner",
		Long: `logs prints the node's log from memory: its own lines, its services' (storage,
network, consensus/etcd, unlock, ...) and the kernel's. SERVICE selects a
service, those under it and those whose name it ends ("etcd" selects
"consensus/etcd"). --boot -1 prints the previous boot's log, which the node keeps
on its data volume for its last 5 boots.`,
		Args: cobra.RangeArgs(1, 2),
		RunE: func(cmd *cobra.Command, args []string) error {
			req := &nodepb.LogsRequest{Follow: follow, Boot: boot}
			if len(args) == 2 {
				req.Service = args[1]
			}
			if since < 0 {
				return fmt.Errorf("--since %v: give how long ago, e.g. 10m", since)
			}
			if since > 0 {
				req.SinceUnixNano = time.Now().Add(-since).UnixNano()
			}
			return printLogs(cmd.OutOrStdout(), args[0], f, req)
		},
	}
	f.add(c)
	c.Flags().BoolVarP(&follow, "follow", "f", false, "keep printing new lines until interrupted")
	c.Flags().DurationVar(&since, "since", 0, "only lines from this long ago on (e.g. 10m)")
	c.Flags().Int32Var(&boot, "boot", 0, "0 for this boot, -1 for the previous one, and so on")
	return c
}

func printLogs(stdout io.Writer, node string, f apiFlags, req *nodepb.LogsRequest) error {
	c, err := apiClient(node, f)
	if err != nil {
		return err
	}
	ctx, stop := signal.NotifyContext(context.Background(), os.Interrupt)
	defer stop()
	err = c.Logs(ctx, req, func(e *nodepb.LogEntry) { fmt.Fprintln(stdout, nodeapi.LogLine(e)) })
	if ctx.Err() != nil {
		return nil
	}
	return err
}

// nodeAPICommands are `node info`, `node reboot` and `node poweroff`.
func nodeAPICommands() []*cobra.Command {
	var f apiFlags
	var timeline bool
	var output string
	info := &cobra.Command{
		Use:   "info NODE",
		Short: "Show what the node whose API is at NODE (HOST:PORT) is: version, state, hardware, TPM, Secure Boot",
		Args:  cobra.ExactArgs(1),
		RunE: func(cmd *cobra.Command, args []string) error {
			if err := checkOutput(output); err != nil {
				return err
			}
			return printInfo(cmd.OutOrStdout(), args[0], f, timeline, output)
		},
	}
	f.add(info)
	info.Flags().BoolVar(&timeline, "timeline", false, "also print the boot timeline")
	addOutput(info, &output)
	cmds := []*cobra.Command{info}
	for _, p := range []struct {
		use, short string
		action     nodepb.PowerRequest_Action
	}{
		{"reboot NODE", "Stop the node's services, unmount its storage and reboot it", nodepb.PowerRequest_ACTION_REBOOT},
		{"poweroff NODE", "Stop the node's services, unmount its storage and power it off", nodepb.PowerRequest_ACTION_POWEROFF},
	} {
		var pf apiFlags
		c := &cobra.Command{Use: p.use, Short: p.short, Args: cobra.ExactArgs(1),
			RunE: func(cmd *cobra.Command, args []string) error {
				c, err := apiClient(args[0], pf)
				if err != nil {
					return err
				}
				return c.Power(context.Background(), p.action)
			}}
		pf.add(c)
		cmds = append(cmds, c)
	}
	return cmds
}

func printInfo(stdout io.Writer, node string, f apiFlags, timeline bool, output string) error {
	c, err := apiClient(node, f)
	if err != nil {
		return err
	}
	info, err := c.Info(context.Background())
	if err != nil {
		return err
	}
	if output == outputJSON {
		_, err := fmt.Fprintln(stdout, protojson.MarshalOptions{Multiline: true, UseProtoNames: true, EmitUnpopulated: true}.Format(info))
		return err
	}
	row := func(k, v string) { fmt.Fprintf(stdout, "%-12s %s\n", k, v) }
	row("version", info.GetVersion())
	row("boot slot", info.GetBootSlot())
	if info.GetUpdate() != "" {
		row("update", info.GetUpdate())
	}
	row("state", info.GetState())
	if info.GetFailure() != "" {
		row("failure", info.GetFailure())
	}
	row("cluster", info.GetCluster())
	row("member", info.GetMember())
	row("uptime", time.Duration(info.GetUptimeNanos()).Round(time.Second).String())
	if sp := info.GetSpace(); sp != nil {
		row("database", spaceRow(sp))
	}
	if info.GetDataSize() > 0 {
		row("data volume", fmt.Sprintf("%s of %s in use", mib(int64(info.GetDataUsed())), mib(int64(info.GetDataSize()))))
	}
	row("tpm", map[bool]string{true: "yes", false: "no"}[info.GetTpm()])
	row("secure boot", info.GetSecureBoot())
	for _, d := range info.GetDisks() {
		row("disk", fmt.Sprintf("%s %s %s", d.GetName(), d.GetDriver(), d.GetDetail()))
	}
	for _, n := range info.GetNics() {
		row("nic", fmt.Sprintf("%s %s %s", n.GetName(), n.GetDriver(), n.GetDetail()))
	}
	if timeline {
		fmt.Fprintln(stdout, "boot timeline (seconds since the kernel started, +since the previous mark):")
		var prev time.Duration
		for _, p := range info.GetTimeline() {
			at := time.Duration(p.GetAtNanos())
			fmt.Fprintf(stdout, "  %-18s %7.2f  +%.2f\n", p.GetName(), at.Seconds(), (at - prev).Seconds())
			prev = at
		}
	}
	return nil
}

// spaceRow says how full the member's etcd database is, and which of
// etcd's alarms are raised on it.
func spaceRow(sp *nodepb.Space) string {
	s := fmt.Sprintf("%s (%s in use) of quota %s", mib(sp.GetDbSize()), mib(sp.GetDbInUse()), mib(sp.GetQuota()))
	if a := sp.GetAlarms(); len(a) > 0 {
		s += "; alarms: " + strings.Join(a, ",")
		if slices.Contains(a, "NOSPACE") {
			s += " (writes refused)"
		}
	}
	return s
}
