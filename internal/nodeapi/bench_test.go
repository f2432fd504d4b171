package nodeapi

import (
	"context"
	"strings"
	"sync/atomic"
	"testing"
	"time"

	"github.com/borough-os/borough/internal/logtree"
	"github.com/borough-os/borough/proto/nodepb"
)

// BenchmarkFollow measures lines per second that an owner following the
// log over TLS on loopback receives, in rounds of 1000 lines: each round
// waits for the follower, so none is lost to lag.
func BenchmarkFollow(b *testing.B) {
	n := startNode(b, true)
	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	var got atomic.Int64
	go n.client(n.owner).Logs(ctx, &nodepb.LogsRequest{Follow: true}, func(*nodepb.LogEntry) { got.Add(1) })
	text := strings.Repeat("x", 120)
	sent := int64(0)
	send := func(lines int) {
		for range lines {
			n.tree.Append(logtree.Entry{Time: time.Now(), Service: "etcd", Text: text})
		}
		sent += int64(lines)
		for got.Load() < sent {
			time.Sleep(100 * time.Microsecond)
		}
	}
	send(1) // the follower is there
	const round = 1000
	b.ResetTimer()
	start := time.Now()
	for range b.N {
		send(round)
	}
	b.ReportMetric(float64(b.N*round)/time.Since(start).Seconds(), "lines/s")
}
