package soak

import (
	"errors"
	"fmt"
	"slices"
	"strings"
	"time"

	dto "github.com/prometheus/client_model/go"
)

// A Metric is one thing the soak follows on every node, read from the
// node's metrics, with the bound its growth must keep.
type Metric struct {
	// Name is the table's; Family the metric family it reads (a gauge,
	// or a counter; the family's first sample).
	Name, Family string
	// MiB says the value is bytes, shown in MiB.
	MiB bool
	// Bound is how far any window's peak may rise over the first's.
	Bound Bound
	// Why is the reason for the bound, for the table's footer.
	Why string
}

// A Bound lets a window's peak be at most Ratio times the first window's
// peak plus Slack (in the metric's unit: bytes, not MiB). A leak or an
// unbounded growth crosses it within a few windows; the noise of a
// steady state does not.
type Bound struct {
	Ratio, Slack float64
}

func (b Bound) allows(first, v float64) bool { return v <= first*b.Ratio+b.Slack }

// Metrics are what the soak follows, with their bounds.
var Metrics = []Metric{
	{"memory", "process_resident_memory_bytes", true, Bound{1.25, 32 << 20},
		"the node's resident memory: the Go heap's target moves with the live heap, and etcd's caches fill in the first window"},
	{"goroutines", "go_goroutines", false, Bound{1.2, 30},
		"the node's goroutines: watches, leases and connections come and go; a forgotten one stays"},
	{"open files", "process_open_fds", false, Bound{1.2, 16},
		"the node's open files: WAL segments and snapshots rotate; a file not closed stays"},
	{"database", "etcd_mvcc_db_total_size_in_bytes", true, Bound{1.5, 16 << 20},
		"etcd's database file: compaction frees pages and defragmentation gives them back once a window"},
	{"volume use", "borough_data_used_bytes", true, Bound{1.25, 96 << 20},
		"the data volume's use: etcd keeps 5 WAL segments (8 MiB each on the image's volume) and Borough's journal up to 40 MiB; " +
			"both fill over the first windows, then old ones go"},
}

// Table holds every node's samples, by window.
type Table struct {
	Start  time.Time
	Window time.Duration
	// peaks[node][window][metric] is the window's highest sample.
	peaks map[string][]map[string]float64
	nodes []string
}

// NewTable starts a table whose windows of length window count from
// start.
func NewTable(start time.Time, window time.Duration) *Table {
	return &Table{Start: start, Window: window, peaks: map[string][]map[string]float64{}}
}

// Add records a node's metrics, scraped at at.
func (t *Table) Add(node string, at time.Time, families map[string]*dto.MetricFamily) {
	w := int(at.Sub(t.Start) / t.Window)
	if w < 0 {
		return
	}
	if _, ok := t.peaks[node]; !ok {
		t.nodes = append(t.nodes, node)
		slices.Sort(t.nodes)
	}
	for len(t.peaks[node]) <= w {
		t.peaks[node] = append(t.peaks[node], map[string]float64{})
	}
	for _, m := range Metrics {
		v, ok := value(families[m.Family])
		if !ok {
			continue
		}
		if old, seen := t.peaks[node][w][m.Name]; !seen || v > old {
			t.peaks[node][w][m.Name] = v
		}
	}
}

// value is a family's first sample, a gauge's or a counter's.
func value(f *dto.MetricFamily) (float64, bool) {
	if f == nil || len(f.Metric) == 0 {
		return 0, false
	}
	m := f.Metric[0]
	switch {
	case m.Gauge != nil:
		return m.Gauge.GetValue(), true
	case m.Counter != nil:
		return m.Counter.GetValue(), true
	case m.Untyped != nil:
		return m.Untyped.GetValue(), true
	}
	return 0, false
}

// Check says which node's metric rose past its bound in which window,
// and which node has a window with no sample of a metric (a node that
// could not be scraped for a whole window is no flat line either).
func (t *Table) Check(windows int) error {
	var errs []error
	for _, node := range t.nodes {
		ws := t.peaks[node]
		if len(ws) < windows {
			errs = append(errs, fmt.Errorf("%s: samples in %d windows of %d", node, len(ws), windows))
			continue
		}
		for _, m := range Metrics {
			first, ok := ws[0][m.Name]
			if !ok {
				errs = append(errs, fmt.Errorf("%s: no %s (%s) in the first window", node, m.Name, m.Family))
				continue
			}
			for i := 1; i < windows; i++ {
				v, ok := ws[i][m.Name]
				switch {
				case !ok:
					errs = append(errs, fmt.Errorf("%s: no %s in window %d", node, m.Name, i+1))
				case !m.Bound.allows(first, v):
					errs = append(errs, fmt.Errorf("%s: %s rose to %s in window %d, over its bound %s (first window %s)",
						node, m.Name, m.format(v), i+1, m.format(first*m.Bound.Ratio+m.Bound.Slack), m.format(first)))
				}
			}
		}
	}
	return errors.Join(errs...)
}

func (m Metric) format(v float64) string {
	if m.MiB {
		return fmt.Sprintf("%.1f", v/(1<<20))
	}
	return fmt.Sprintf("%.0f", v)
}

// String is the table: a row per window and node, a column per metric
// (its peak in the window), then each metric's bound and its reason.
func (t *Table) String() string {
	var b strings.Builder
	fmt.Fprintf(&b, "%-8s %-10s", "window", "node")
	for _, m := range Metrics {
		name := m.Name
		if m.MiB {
			name += " MiB"
		}
		fmt.Fprintf(&b, " %16s", name)
	}
	b.WriteString("\n")
	windows := 0
	for _, ws := range t.peaks {
		windows = max(windows, len(ws))
	}
	for w := range windows {
		for _, node := range t.nodes {
			if w >= len(t.peaks[node]) {
				continue
			}
			fmt.Fprintf(&b, "%-8s %-10s", fmt.Sprintf("%v", t.Window*time.Duration(w+1)), node)
			for _, m := range Metrics {
				cell := "-"
				if v, ok := t.peaks[node][w][m.Name]; ok {
					cell = m.format(v)
				}
				fmt.Fprintf(&b, " %16s", cell)
			}
			b.WriteString("\n")
		}
	}
	b.WriteString("bounds: a window's peak <= the first window's x ratio + slack\n")
	for _, m := range Metrics {
		fmt.Fprintf(&b, "  %-11s x%.2f + %s: %s\n", m.Name, m.Bound.Ratio, m.format(m.Bound.Slack), m.Why)
	}
	return b.String()
}
