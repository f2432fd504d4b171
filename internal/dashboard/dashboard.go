// Package dashboard is `borough dashboard`: `borough health` kept
// current, with what health cannot say from one look: each member's
// write rate and WAL fsync latency (differences of etcd's own counters
// between two looks), the leader changes it has seen, and the last lines
// of its log. On a terminal it is a full-screen view (bubbletea, Model)
// that redraws at each look; elsewhere (a pipe, a CI log) it prints each
// sample as plain lines (Watcher.Plain).
package dashboard

import (
	"context"
	"fmt"
	"io"
	"strings"
	"text/tabwriter"
	"time"

	tea "github.com/charmbracelet/bubbletea"
	dto "github.com/prometheus/client_model/go"

	"github.com/borough-os/borough/internal/clusterhealth"
	"github.com/borough-os/borough/internal/nodeapi"
	"github.com/borough-os/borough/internal/ownersession"
	"github.com/borough-os/borough/proto/nodepb"
)

// logLines is how many of each member's last log lines the dashboard shows.
const logLines = 3

// Sample is what the dashboard saw once.
type Sample struct {
	At     time.Time
	Health *clusterhealth.Cluster
	Err    error
	// Counters are each member's etcd counters, by member and name.
	Counters map[string]map[string]float64
	Logs     map[string][]string
}

// Watcher takes looks at a cluster, remembering each member's log.
type Watcher struct {
	health  func(context.Context) (*clusterhealth.Cluster, error)
	members ownersession.Members
	logs    map[string][]string
	since   map[string]int64
}

// NewWatcher watches the cluster whose health health reads, through its
// members' node APIs.
func NewWatcher(health func(context.Context) (*clusterhealth.Cluster, error), members ownersession.Members) *Watcher {
	return &Watcher{health: health, members: members, logs: map[string][]string{}, since: map[string]int64{}}
}

// Look takes one look, within timeout.
func (w *Watcher) Look(ctx context.Context, timeout time.Duration) Sample {
	ctx, cancel := context.WithTimeout(ctx, timeout)
	defer cancel()
	l := Sample{At: time.Now(), Counters: map[string]map[string]float64{}, Logs: map[string][]string{}}
	l.Health, l.Err = w.health(ctx)
	if l.Err != nil {
		return l
	}
	for _, m := range l.Health.Members {
		c, err := w.members.Client(m.Name, m.URLs)
		if err != nil {
			continue
		}
		if families, err := c.Metrics(ctx); err == nil {
			l.Counters[m.Name] = counters(families)
		}
		w.readLog(ctx, m.Name, c)
		l.Logs[m.Name] = w.logs[m.Name]
	}
	return l
}

// readLog adds member name's log lines since the last look, keeping the
// last logLines.
func (w *Watcher) readLog(ctx context.Context, name string, c *nodeapi.Client) {
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

// Render draws cur, with rates against prev (nil for the first sample).
func Render(out io.Writer, prev *Sample, cur Sample) {
	fmt.Fprintf(out, "borough dashboard, %s\n", cur.At.Format("15:04:05"))
	if cur.Err != nil {
		fmt.Fprintf(out, "the cluster does not answer: %v\n", cur.Err)
		return
	}
	h := cur.Health
	fmt.Fprintf(out, "cluster %s: %d members, %s\n", h.ClusterID, len(h.Members), map[bool]string{true: "healthy", false: "UNHEALTHY"}[h.Healthy])
	tw := tabwriter.NewWriter(out, 0, 4, 2, ' ', 0)
	fmt.Fprintln(tw, "MEMBER\tROLE\tRAFT (LAG)\tVERSION\tSTATE\tWRITES/S\tWAL FSYNC\tLEADER CHANGES\tPROBLEMS")
	for _, m := range h.Members {
		rate, fsync, changes := "-", "-", "-"
		now := cur.Counters[m.Name]
		if now != nil {
			changes = fmt.Sprintf("%.0f", now["etcd_server_leader_changes_seen_total"])
		}
		if prev != nil && now != nil && prev.Counters[m.Name] != nil {
			was, dt := prev.Counters[m.Name], cur.At.Sub(prev.At).Seconds()
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
		fmt.Fprintf(tw, "%s\t%s\t%d (%d)\t%s %s\t%s\t%s\t%s\t%s\t%s\n", m.Name, clusterhealth.RoleText(m.Learner, m.Leader), m.RaftIndex, m.Lag,
			m.Version, m.Slot, m.State, rate, fsync, changes, problems)
	}
	tw.Flush()
	for _, m := range h.Members {
		fmt.Fprintf(out, "\n%s:\n", m.Name)
		for _, line := range cur.Logs[m.Name] {
			fmt.Fprintf(out, "  %s\n", line)
		}
	}
}

// Plain prints count looks (0: until ctx ends), interval apart.
func (w *Watcher) Plain(ctx context.Context, out io.Writer, interval time.Duration, count int) error {
	var prev *Sample
	for i := 0; count == 0 || i < count; i++ {
		if i > 0 {
			select {
			case <-ctx.Done():
				return nil
			case <-time.After(interval):
			}
		}
		cur := w.Look(ctx, max(interval, 10*time.Second))
		if i > 0 {
			fmt.Fprintln(out)
		}
		Render(out, prev, cur)
		prev = &cur
	}
	return nil
}

// Model is the terminal view (bubbletea): a look every interval,
// redrawn at each; q quits.
type Model struct {
	w        *Watcher
	interval time.Duration
	prev     *Sample
	cur      *Sample
}

// NewModel is the terminal view of w's looks, interval apart.
func NewModel(w *Watcher, interval time.Duration) *Model { return &Model{w: w, interval: interval} }

type sampleMsg Sample

func (d *Model) take() tea.Cmd {
	return func() tea.Msg { return sampleMsg(d.w.Look(context.Background(), max(d.interval, 10*time.Second))) }
}

// Init takes the first look.
func (d *Model) Init() tea.Cmd { return d.take() }

// Update takes a look's sample, or a key.
func (d *Model) Update(msg tea.Msg) (tea.Model, tea.Cmd) {
	switch msg := msg.(type) {
	case tea.KeyMsg:
		if s := msg.String(); s == "q" || s == "ctrl+c" || s == "esc" {
			return d, tea.Quit
		}
	case sampleMsg:
		l := Sample(msg)
		d.prev, d.cur = d.cur, &l
		return d, tea.Tick(d.interval, func(time.Time) tea.Msg { return d.take()() })
	}
	return d, nil
}

// View draws the last look.
func (d *Model) View() string {
	if d.cur == nil {
		return "looking at the cluster...\n"
	}
	var b strings.Builder
	Render(&b, d.prev, *d.cur)
	b.WriteString("\nq quits\n")
	return b.String()
}
