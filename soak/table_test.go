package soak

import (
	"strings"
	"testing"
	"time"

	dto "github.com/prometheus/client_model/go"
	"google.golang.org/protobuf/proto"
)

// families is a node's metrics with every metric the soak follows at its
// steady value, and those given in over at theirs.
func families(over map[string]float64) map[string]*dto.MetricFamily {
	steady := map[string]float64{
		"process_resident_memory_bytes":    200 << 20,
		"go_goroutines":                    400,
		"process_open_fds":                 60,
		"etcd_mvcc_db_total_size_in_bytes": 40 << 20,
		"borough_data_used_bytes":          300 << 20,
	}
	out := map[string]*dto.MetricFamily{}
	for name, v := range steady {
		if o, ok := over[name]; ok {
			v = o
		}
		out[name] = &dto.MetricFamily{Name: proto.String(name), Metric: []*dto.Metric{{Gauge: &dto.Gauge{Value: proto.Float64(v)}}}}
	}
	return out
}

func TestTableCheck(t *testing.T) {
	start := time.Unix(1_000_000, 0)
	const window = 10 * time.Minute
	for _, tc := range []struct {
		name string
		// sample is node1's metrics in window w (node2's are steady).
		sample func(w int) map[string]float64
		// gap is a window in which node1 could not be scraped (-1: none).
		gap  int
		want string
	}{
		{"steady", func(int) map[string]float64 { return nil }, -1, ""},
		{"noise within bounds", func(w int) map[string]float64 {
			return map[string]float64{"go_goroutines": float64(400 + 10*(w%2))}
		}, -1, ""},
		{"a memory leak", func(w int) map[string]float64 {
			return map[string]float64{"process_resident_memory_bytes": float64((200 + 20*w) << 20)}
		}, -1, "node1: memory rose to 300.0 in window 6, over its bound 282.0"},
		{"a file leak", func(w int) map[string]float64 {
			return map[string]float64{"process_open_fds": float64(60 + 10*w)}
		}, -1, "node1: open files rose to 90 in window 4"},
		{"a window without samples", func(w int) map[string]float64 { return nil }, 3, "node1: no memory in window 4"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			tab := NewTable(start, window)
			for w := range 6 {
				for _, at := range []time.Duration{time.Minute, 5 * time.Minute, 9 * time.Minute} {
					when := start.Add(time.Duration(w)*window + at)
					if w != tc.gap {
						tab.Add("node1", when, families(tc.sample(w)))
					}
					tab.Add("node2", when, families(nil))
				}
			}
			err := tab.Check(6)
			switch {
			case tc.want == "" && err != nil:
				t.Errorf("Check: %v, want nothing wrong\n%s", err, tab)
			case tc.want != "" && (err == nil || !strings.Contains(err.Error(), tc.want)):
				t.Errorf("Check: %v, want %q\n%s", err, tc.want, tab)
			case err != nil && strings.Contains(err.Error(), "node2"):
				t.Errorf("Check blames node2, whose metrics were steady: %v", err)
			}
		})
	}
}

func TestTableString(t *testing.T) {
	start := time.Unix(1_000_000, 0)
	tab := NewTable(start, 10*time.Minute)
	tab.Add("node1", start.Add(time.Minute), families(nil))
	tab.Add("node1", start.Add(2*time.Minute), families(map[string]float64{"go_goroutines": 420}))
	s := tab.String()
	for _, want := range []string{"memory MiB", "10m0s", "node1", "200.0", "420", "bounds:"} {
		if !strings.Contains(s, want) {
			t.Errorf("the table has no %q:\n%s", want, s)
		}
	}
}
