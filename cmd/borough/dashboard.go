package main

import (
	"context"
	"fmt"
	"os"
	"os/signal"
	"strings"
	"time"

	tea "github.com/charmbracelet/bubbletea"
	"github.com/spf13/cobra"
	"golang.org/x/term"

	"github.com/borough-os/borough/internal/clusterhealth"
	"github.com/borough-os/borough/internal/dashboard"
)

func dashboardCommand() *cobra.Command {
	var fingerprint string
	var addrs []string
	var interval time.Duration
	var count int
	c := &cobra.Command{
		Use:   "dashboard ENDPOINTS",
		Short: "A live view of the cluster at ENDPOINTS (client ports): health, write rate and latency, leader changes and logs of every member",
		Long: `dashboard looks at the cluster every --interval and shows every member:
its health (as borough health), its write rate (puts and deletes a second),
its WAL fsync latency (the mean since the last sample), the leader changes it
has seen, and its last log lines. On a terminal it redraws in place (q
quits); otherwise it prints each sample as plain lines, --count looks in all
(0: until interrupted).`,
		Args: cobra.ExactArgs(1),
		RunE: func(cmd *cobra.Command, args []string) error {
			given, err := apiAddrs(addrs)
			if err != nil {
				return err
			}
			if interval < 100*time.Millisecond {
				return fmt.Errorf("--interval %v: sample at most ten times a second", interval)
			}
			s, err := openSession(strings.Split(args[0], ","), fingerprint, given)
			if err != nil {
				return err
			}
			defer s.Close()
			w := dashboard.NewWatcher(func(ctx context.Context) (*clusterhealth.Cluster, error) {
				return lookHealth(ctx, s, clusterhealth.DefaultClockOffset)
			}, s.Members)
			if f, ok := cmd.OutOrStdout().(*os.File); ok && term.IsTerminal(int(f.Fd())) && count == 0 {
				_, err := tea.NewProgram(dashboard.NewModel(w, interval), tea.WithAltScreen()).Run()
				return err
			}
			ctx, stop := signal.NotifyContext(context.Background(), os.Interrupt)
			defer stop()
			return w.Plain(ctx, cmd.OutOrStdout(), interval, count)
		},
	}
	c.Flags().StringVar(&fingerprint, "fingerprint", "", "the cluster CA's fingerprint; needed on first use")
	c.Flags().StringArrayVar(&addrs, "api", nil, "NAME=HOST:PORT: the node API of member NAME (repeat for each)")
	c.Flags().DurationVar(&interval, "interval", 2*time.Second, "how often to look")
	c.Flags().IntVar(&count, "count", 0, "how many looks to print, as plain lines (0: until interrupted, redrawn on a terminal)")
	return c
}
