package load

import (
	"context"
	"strings"
	"testing"
	"time"

	clientv3 "go.etcd.io/etcd/client/v3"

	"github.com/borough-os/borough/internal/etcdtest"
)

func dial(endpoint string) (*clientv3.Client, error) {
	return clientv3.New(clientv3.Config{Endpoints: []string{endpoint}, DialTimeout: 5 * time.Second})
}

func TestRun(t *testing.T) {
	endpoint := etcdtest.Start(t)
	for _, tc := range []struct {
		p    Params
		keys int // keys the load leaves: puts fill at most their key space
	}{
		{Params{Kind: Put, Clients: 1, Conns: 1, For: 300 * time.Millisecond, KeySize: 8, ValueSize: 256, KeySpace: 5}, 5},
		{Params{Kind: Put, Clients: 8, Conns: 3, For: 300 * time.Millisecond, KeySize: 8, ValueSize: 256, KeySpace: 100000}, 100000},
		{Params{Kind: Range, Clients: 4, Conns: 2, For: 300 * time.Millisecond, KeySize: 8, ValueSize: 256, KeySpace: 1}, 1},
		{Params{Kind: Range, Clients: 4, Conns: 2, For: 300 * time.Millisecond, KeySize: 8, ValueSize: 256, KeySpace: 1, Serializable: true}, 1},
	} {
		t.Run(tc.p.Name(), func(t *testing.T) {
			c, err := dial(endpoint)
			if err != nil {
				t.Fatal(err)
			}
			defer c.Close()
			if _, err := c.Delete(t.Context(), "", clientv3.WithPrefix()); err != nil {
				t.Fatal(err)
			}
			r, err := Run(t.Context(), dial, []string{endpoint}, tc.p)
			if err != nil {
				t.Fatal(err)
			}
			if len(r.Latencies) < tc.p.Clients || r.Took < tc.p.For {
				t.Fatalf("%d requests in %v: want at least one per client, over at least %v", len(r.Latencies), r.Took, tc.p.For)
			}
			if p50, p99 := r.Percentile(0.5), r.Percentile(0.99); p50 <= 0 || p99 < p50 || r.Throughput() <= 0 {
				t.Fatalf("p50 %v, p99 %v, %.0f/s", p50, p99, r.Throughput())
			}
			got, err := c.Get(t.Context(), "", clientv3.WithPrefix())
			if err != nil {
				t.Fatal(err)
			}
			if n := len(got.Kvs); n == 0 || n > tc.keys || n > len(r.Latencies) {
				t.Fatalf("%d keys after %d requests (key space %d)", n, len(r.Latencies), tc.keys)
			}
			for _, kv := range got.Kvs {
				if len(kv.Value) != tc.p.ValueSize || (tc.p.Kind == Put && len(kv.Key) != tc.p.KeySize) {
					t.Fatalf("key %q of %d bytes, value of %d: want %d and %d", kv.Key, len(kv.Key), len(kv.Value), tc.p.KeySize, tc.p.ValueSize)
				}
			}
		})
	}
}

func TestRunRefuses(t *testing.T) {
	good := Params{Kind: Put, Clients: 2, Conns: 1, For: time.Second, KeySize: 8, KeySpace: 10}
	for _, tc := range []struct {
		name   string
		change func(*Params)
		want   string
	}{
		{"kind", func(p *Params) { p.Kind = "delete" }, "neither put nor range"},
		{"connections", func(p *Params) { p.Conns = 3 }, "2 clients over 3 connections"},
		{"duration", func(p *Params) { p.For = 0 }, "duration 0s"},
		{"key space", func(p *Params) { p.KeySpace = 0 }, "space of 0"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			p := good
			tc.change(&p)
			_, err := Run(context.Background(), dial, []string{"127.0.0.1:1"}, p)
			if err == nil || !strings.Contains(err.Error(), tc.want) {
				t.Fatalf("got %v, want an error naming %q", err, tc.want)
			}
		})
	}
}

func TestRunFailsOnAFailedRequest(t *testing.T) {
	endpoint := etcdtest.Start(t)
	ctx, cancel := context.WithTimeout(t.Context(), 200*time.Millisecond)
	defer cancel()
	_, err := Run(ctx, dial, []string{endpoint}, Params{Kind: Put, Clients: 2, Conns: 1, For: time.Minute, KeySize: 8, KeySpace: 10})
	if err == nil || !strings.Contains(err.Error(), "load put-2") {
		t.Fatalf("a load cut off by its context: got %v, want its failure", err)
	}
}

func TestPercentile(t *testing.T) {
	ms := func(xs ...int) []time.Duration {
		var out []time.Duration
		for _, x := range xs {
			out = append(out, time.Duration(x)*time.Millisecond)
		}
		return out
	}
	for _, tc := range []struct {
		lat  []time.Duration
		p    float64
		want time.Duration
	}{
		{nil, 0.5, 0},
		{ms(7), 0.99, 7 * time.Millisecond},
		{ms(4, 1, 3, 2), 0.5, 2 * time.Millisecond},
		{ms(4, 1, 3, 2), 1, 4 * time.Millisecond},
		{ms(1, 2, 3, 4, 5, 6, 7, 8, 9, 10), 0.99, 10 * time.Millisecond},
		{ms(1, 2, 3, 4, 5, 6, 7, 8, 9, 10), 0.9, 9 * time.Millisecond},
	} {
		if got := (Result{Latencies: tc.lat}).Percentile(tc.p); got != tc.want {
			t.Errorf("p%.0f of %v: %v, want %v", tc.p*100, tc.lat, got, tc.want)
		}
	}
}
