package main

import (
	"context"
	"fmt"
	"io"
	"os"
	"os/signal"
	"strings"
	"text/tabwriter"
	"time"

	tea "github.com/charmbracelet/bubbletea"
	dto "github.com/prometheus/client_model/go"
	"github.com/spf13/cobra"
	"golang.org/x/term"

	"github.com/borough-os/borough/internal/clusterhealth"
	"github.com/borough-os/borough/internal/nodeapi"
	"github.com/borough-os/borough/internal/ownersession"
	"github.com/borough-os/borough/proto/nodepb"
)

// The dashboard is `borough health` kept current, with what health cannot
// say from one look: each member's write rate and WAL fsync latency
// (differences of etcd's own counters between two looks), the leader
// changes it has seen, and the last lines of its log. On a terminal it is
// a full-screen view (bubbletea) that redraws at each look; elsewhere
// (a pipe, a CI log) it prints each sample as plain lines.

// logLines is how many of each member's last log lines the dashboard shows.
const logLines = 3

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
			w := &watcher{s: s, logs: map[string][]string{}, since: map[string]int64{}}
			if f, ok := cmd.OutOrStdout().(*os.File); ok && term.IsTerminal(int(f.Fd())) && count == 0 {
				_, err := tea.NewProgram(&dashboard{w: w, interval: interval}, tea.WithAltScreen()).Run()
				return err
			}
			return w.plain(cmd.OutOrStdout(), interval, count)
		},
	}
	c.Flags().StringVar(&fingerprint, "fingerprint", "", "the cluster CA's fingerprint; needed on first use")
	c.Flags().StringArrayVar(&addrs, "api", nil, "NAME=HOST:PORT: the node API of member NAME (repeat for each)")
	c.Flags().DurationVar(&interval, "interval", 2*time.Second, "how often to look")
	c.Flags().IntVar(&count, "count", 0, "how many looks to print, as plain lines (0: until interrupted, redrawn on a terminal)")
	return c
}

// sample is what the dashboard saw once.
type sample struct {
	at     time.Time
	health *clusterhealth.Cluster
	err    error
	// counters are each member's etcd counters, by member and name.
	counters map[string]map[string]float64
	logs     map[string][]string
}

// watcher takes looks at a cluster, remembering each member's log.
type watcher struct {
	s     *ownersession.Session
	logs  map[string][]string
	since map[string]int64
}

func (w *watcher) look(ctx context.Context, timeout time.Duration) sample {
	ctx, cancel := context.WithTimeout(ctx, timeout)
	defer cancel()
	l := sample{at: time.Now(), counters: map[string]map[string]float64{}, logs: map[string][]string{}}
	l.health, l.err = lookHealth(ctx, w.s, clusterhealth.DefaultClockOffset)
	if l.err != nil {
		return l
	}
	for _, m := range l.health.Members {
		c, err := w.s.Members.Client(m.Name, m.URLs)
		if err != nil {
			continue
		}
		if families, err := c.Metrics(ctx); err == nil {
			l.counters[m.Name] = counters(families)
		}
		w.readLog(ctx, m.Name, c)
		l.logs[m.Name] = w.logs[m.Name]
	}
	return l
}

// readLog adds member name's log lines since the last look, keeping the
// last logLines.
func (w *watcher) readLog(ctx context.Context, name string, c *nodeapi.Client) {
	_ = c.Logs(ctx, &nodepb.LogsRequest{SinceUnixNano: w.since[name] + 1}, func(e *nodepb.LogEntry) {
		w.since[name] = max(w.since[name], e.GetUnixNano())
		w.logs[name] = append(w.logs[name], nodeapi.LogLine(e))
	})
	if n := len(w.logs[name]); n > logLines {
		w.logs[name] = w.logs[name][n-logLines:]
	}
}

// counters reads the counters of families, and each histogram's sum and
// count under their own names.
func counters(families map[string]*dto.MetricFamily) map[string]float64 {
	out := map[string]float64{}
	for name, f := range families {
		for _, m := range f.GetMetric() {
			switch {
			case m.GetCounter() != nil:
				out[name] += m.GetCounter().GetValue()
			case m.GetHistogram() != nil:
				out[name+"_sum"] += m.GetHistogram().GetSampleSum()
				out[name+"_count"] += float64(m.GetHistogram().GetSampleCount())
			}
		}
	}
	return out
}

// render draws cur, with rates against prev (nil for the first sample).
func render(out io.Writer, prev *sample, cur sample) {
	fmt.Fprintf(out, "borough dashboard, %s\n", cur.at.Format("15:04:05"))
	if cur.err != nil {
		fmt.Fprintf(out, "the cluster does not answer: %v\n", cur.err)
		return
	}
	h := cur.health
	fmt.Fprintf(out, "cluster %s: %d members, %s\n", h.ClusterID, len(h.Members), map[bool]string{true: "healthy", false: "UNHEALTHY"}[h.Healthy])
	tw := tabwriter.NewWriter(out, 0, 4, 2, ' ', 0)
	fmt.Fprintln(tw, "MEMBER\tROLE\tRAFT (LAG)\tVERSION\tSTATE\tWRITES/S\tWAL FSYNC\tLEADER CHANGES\tPROBLEMS")
	for _, m := range h.Members {
		rate, fsync, changes := "-", "-", "-"
		now := cur.counters[m.Name]
		if now != nil {
			changes = fmt.Sprintf("%.0f", now["etcd_server_leader_changes_seen_total"])
		}
		if prev != nil && now != nil && prev.counters[m.Name] != nil {
			was, dt := prev.counters[m.Name], cur.at.Sub(prev.at).Seconds()
			d := func(k string) float64 { return now[k] - was[k] }
			rate = fmt.Sprintf("%.1f", (d("etcd_mvcc_put_total")+d("etcd_mvcc_delete_total"))/dt)
			if n := d("etcd_disk_wal_fsync_duration_seconds_count"); n > 0 {
				fsync = fmt.Sprintf("%.1f ms", 1000*d("etcd_disk_wal_fsync_duration_seconds_sum")/n)
			}
		}
		problems := "-"
		if len(m.Problems) > 0 {
			problems = strings.Join(m.Problems, "; ")
		}
		fmt.Fprintf(tw, "%s\t%s\t%d (%d)\t%s %s\t%s\t%s\t%s\t%s\t%s\n", m.Name, roleText(m.Learner, m.Leader), m.RaftIndex, m.Lag,
			m.Version, m.Slot, m.State, rate, fsync, changes, problems)
	}
	tw.Flush()
	for _, m := range h.Members {
		fmt.Fprintf(out, "\n%s:\n", m.Name)
		for _, line := range cur.logs[m.Name] {
			fmt.Fprintf(out, "  %s\n", line)
		}
	}
}

// plain prints count looks (0: until interrupted), interval apart.
func (w *watcher) plain(out io.Writer, interval time.Duration, count int) error {
	ctx, stop := signal.NotifyContext(context.Background(), os.Interrupt)
	defer stop()
	var prev *sample
	for i := 0; count == 0 || i < count; i++ {
		if i > 0 {
			select {
			case <-ctx.Done():
				return nil
			case <-time.After(interval):
			}
		}
		cur := w.look(ctx, max(interval, 10*time.Second))
		if i > 0 {
			fmt.Fprintln(out)
		}
		render(out, prev, cur)
		prev = &cur
	}
	return nil
}

// dashboard is the terminal view: a look, redrawn at each.
type dashboard struct {
	w        *watcher
	interval time.Duration
	prev     *sample
	cur      *sample
}

type sampleMsg sample

func (d *dashboard) take() tea.Cmd {
	return func() tea.Msg { return sampleMsg(d.w.look(context.Background(), max(d.interval, 10*time.Second))) }
}

func (d *dashboard) Init() tea.Cmd { return d.take() }

func (d *dashboard) Update(msg tea.Msg) (tea.Model, tea.Cmd) {
	switch msg := msg.(type) {
	case tea.KeyMsg:
		if s := msg.String(); s == "q" || s == "ctrl+c" || s == "esc" {
			return d, tea.Quit
		}
	case sampleMsg:
		l := sample(msg)
		d.prev, d.cur = d.cur, &l
		return d, tea.Tick(d.interval, func(time.Time) tea.Msg { return d.take()() })
	}
	return d, nil
}

func (d *dashboard) View() string {
	if d.cur == nil {
		return "looking at the cluster...\n"
	}
	var b strings.Builder
	render(&b, d.prev, *d.cur)
	b.WriteString("\nq quits\n")
	return b.String()
}
