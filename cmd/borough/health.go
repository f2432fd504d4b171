package main

import (
	"context"
	"fmt"
	"io"
	"strings"
	"text/tabwriter"
	"time"

	"github.com/spf13/cobra"

	"github.com/borough-os/borough/internal/clusterhealth"
	"github.com/borough-os/borough/internal/ownersession"
	"github.com/borough-os/borough/proto/nodepb"
)

func healthCommand() *cobra.Command {
	var fingerprint, output string
	var addrs []string
	var timeout, maxClock time.Duration
	c := &cobra.Command{
		Use:   "health ENDPOINTS",
		Short: "Show every member of the cluster at ENDPOINTS (client ports, comma-separated) in one table; exit 1 if one is unhealthy",
		Long: `health asks the cluster for its members and each member for its state: on its
client port (one of ENDPOINTS), its raft index and how far it lags its
leader, its database's size and alarms; on its node API (its client URL's
host, port 7835, or --api NAME=HOST:PORT), its version and boot slot, its
state, its last update, its clock against yours, its data volume's use and
where its unlock key is. A member is unhealthy if either port does not
answer, it has an alarm, it lags by more than 1000 entries, it is not
Running, or its clock is off by more than --max-clock-offset (a second:
etcd's own warning between peers); health then exits with status 1,
naming each and why.`,
		Args: cobra.ExactArgs(1),
		RunE: func(cmd *cobra.Command, args []string) error {
			if err := checkOutput(output); err != nil {
				return err
			}
			given, err := apiAddrs(addrs)
			if err != nil {
				return err
			}
			return health(cmd.OutOrStdout(), strings.Split(args[0], ","), fingerprint, given, timeout, maxClock, output)
		},
	}
	c.Flags().StringVar(&fingerprint, "fingerprint", "", "the cluster CA's fingerprint; needed on first use")
	c.Flags().StringArrayVar(&addrs, "api", nil, "NAME=HOST:PORT: the node API of member NAME (repeat for each)")
	c.Flags().DurationVar(&timeout, "timeout", 10*time.Second, "how long to wait for the cluster and each member")
	c.Flags().DurationVar(&maxClock, "max-clock-offset", clusterhealth.DefaultClockOffset, "how far a member's clock may be from yours")
	addOutput(c, &output)
	return c
}

func health(stdout io.Writer, endpoints []string, fingerprint string, given map[string]string, timeout, maxClock time.Duration, output string) error {
	s, err := openSession(endpoints, fingerprint, given)
	if err != nil {
		return err
	}
	defer s.Close()
	ctx, cancel := context.WithTimeout(context.Background(), timeout)
	defer cancel()
	h, err := lookHealth(ctx, s, maxClock)
	if err != nil {
		return err
	}
	if output == outputJSON {
		err = printJSON(stdout, h)
	} else {
		printHealth(stdout, h)
	}
	if err != nil || h.Healthy {
		return err
	}
	return h.Unhealthy()
}

// openSession connects to the cluster at endpoints as the owner,
// verifying it against the CA pinned for the first.
func openSession(endpoints []string, fingerprint string, given map[string]string) (*ownersession.Session, error) {
	ca, err := pinnedCA(endpoints[0], fingerprint)
	if err != nil {
		return nil, err
	}
	kp, err := ownerKeyPair()
	if err != nil {
		return nil, err
	}
	return ownersession.Open(endpoints, ca, kp, given)
}

// lookHealth reads every member's health (ownersession.Session.Health) and
// remembers the members it saw, for completion and the next command.
func lookHealth(ctx context.Context, s *ownersession.Session, maxClock time.Duration) (*clusterhealth.Cluster, error) {
	h, err := s.Health(ctx, maxClock)
	if err != nil {
		return nil, err
	}
	seen := map[string]entry{}
	for _, m := range h.Members {
		seen[m.Name] = entry{Client: m.Endpoint, API: m.API, URLs: m.URLs}
	}
	rememberMembers(seen)
	return h, nil
}

// printHealth prints h as a table.
func printHealth(stdout io.Writer, h *clusterhealth.Cluster) {
	fmt.Fprintf(stdout, "cluster %s: %d members\n", h.ClusterID, len(h.Members))
	w := tabwriter.NewWriter(stdout, 0, 4, 2, ' ', 0)
	fmt.Fprintln(w, "MEMBER\tROLE\tRAFT (LAG)\tDB (IN USE) OF QUOTA\tVERSION\tSTATE\tCLOCK\tDATA\tUNLOCK KEY\tPROBLEMS")
	for _, m := range h.Members {
		role := clusterhealth.RoleText(m.Learner, m.Leader)
		problems := "-"
		if len(m.Problems) > 0 {
			problems = strings.Join(m.Problems, "; ")
		}
		fmt.Fprintf(w, "%s\t%s\t%d (%d)\t%s (%s) of %s\t%s %s\t%s\t%+.3f s\t%s of %s\t%s\t%s\n", m.Name, role, m.RaftIndex, m.Lag,
			mib(m.DBSize), mib(m.DBInUse), mib(m.Quota), m.Version, m.Slot, m.State, m.ClockOffset, mib(int64(m.DataUsed)), mib(int64(m.DataSize)),
			escrowText(m.Escrow, m.HoldersUp), problems)
	}
	w.Flush()
}

// escrowText says where a member's unlock key is, and how many of its
// holders run.
func escrowText(e *nodepb.Escrow, up int) string {
	switch {
	case e == nil:
		return "?"
	case e.GetLocal():
		return "sealed on its ESP"
	}
	return fmt.Sprintf("%d of %d holders up, %d needed (epoch %d)", up, len(e.GetHolders()), e.GetNeeded(), e.GetEpoch())
}
