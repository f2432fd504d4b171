package logtree

import (
	"fmt"
	"runtime"
	"strings"
	"testing"
	"time"
)

// BenchmarkFollow measures lines per second from Append to a follower.
func BenchmarkFollow(b *testing.B) {
	tr := New(2048, 256<<10)
	sub := tr.Follow(Filter{})
	defer sub.Close()
	text := strings.Repeat("x", 120)
	done := make(chan int)
	go func() {
		n := 0
		for range sub.C {
			if n++; n == b.N {
				break
			}
		}
		done <- n
	}()
	start := time.Now()
	for i := range b.N {
		tr.Append(Entry{Service: "etcd", Text: text, Seq: uint64(i)})
	}
	<-done
	b.ReportMetric(float64(b.N)/time.Since(start).Seconds(), "lines/s")
}

// BenchmarkMemoryAtBound measures the tree's heap with every ring full
// (the node's bounds: 2048 lines or 256 KiB a service), for ten services,
// with lines of a typical and of the largest length.
func BenchmarkMemoryAtBound(b *testing.B) {
	for _, size := range []int{200, MaxText} {
		b.Run(fmt.Sprintf("%d-byte lines", size), func(b *testing.B) {
			var heap uint64
			for range b.N {
				heap = treeHeap(2048, 256<<10, 10, size)
			}
			b.ReportMetric(float64(heap)/(1<<20), "MiB")
		})
	}
}

func treeHeap(perService, maxBytes, services, size int) uint64 {
	var before, after runtime.MemStats
	runtime.GC()
	runtime.ReadMemStats(&before)
	tr := New(perService, maxBytes)
	for s := range services {
		for i := range perService + 10 {
			tr.Append(Entry{Service: fmt.Sprint("service-", s), Text: strings.Repeat("y", size-1) + fmt.Sprint(i%10)})
		}
	}
	runtime.GC()
	runtime.ReadMemStats(&after)
	runtime.KeepAlive(tr)
	return after.HeapAlloc - before.HeapAlloc
}
