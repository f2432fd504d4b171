package consensus

import (
	"context"
	"crypto/tls"
	"crypto/x509"
	"fmt"
	"net/http"
	"slices"
	"strings"
	"testing"
	"time"

	clientv3 "go.etcd.io/etcd/client/v3"

	"github.com/borough-os/borough/internal/keyspace"
)

// jsonTarget is the most the JSON API's median latency may be, as a
// multiple of gRPC's (issue 47).
const jsonTarget = 1.2

// BenchmarkClientPort measures put and range latency through the client
// port's two APIs, on one in-process member with real etcd and the
// owner's certificate: gRPC (clientv3) and HTTP/JSON as Patroni's
// urllib3 calls it (HTTP/1.1, a kept-alive connection), one request at a
// time, the two in alternating turns of 100 requests. It reports each
// median and p99 and the JSON API's median over gRPC's, against its
// target of 1.2.
func BenchmarkClientPort(b *testing.B) {
	tc := newTestCA(b)
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Minute)
	defer cancel()
	run(b, ctx, tc.member("n1", "127.0.0.16", ModeNew))
	grpc := ownerClient(b, tc, "127.0.0.16")
	json := jsonClient(tc, tc.owner)
	json.Transport.(*http.Transport).DisableKeepAlives = false
	value := strings.Repeat("v", 256)
	put := map[string]func(i int) error{
		"grpc": func(i int) error { _, err := grpc.Put(ctx, fmt.Sprintf("bench/%d", i), value); return err },
		"json": func(i int) error {
			return jsonCall(ctx, json, "https://127.0.0.16:2379/v3/kv/put", kv(fmt.Sprintf("bench/%d", i), value))
		},
	}
	get := map[string]func(i int) error{
		"grpc": func(i int) error { _, err := grpc.Get(ctx, fmt.Sprintf("bench/%d", i)); return err },
		"json": func(i int) error {
			return jsonCall(ctx, json, "https://127.0.0.16:2379/v3/kv/range", kv(fmt.Sprintf("bench/%d", i), ""))
		},
	}
	for range b.N {
		for _, op := range []struct {
			name  string
			calls map[string]func(int) error
		}{{"put", put}, {"range", get}} {
			lat := map[string][]time.Duration{}
			for turn := range 5 {
				for _, api := range []string{"grpc", "json"} {
					for i := range 100 {
						began := time.Now()
						if err := op.calls[api](turn*100 + i); err != nil {
							b.Fatalf("%s through %s: %v", op.name, api, err)
						}
						lat[api] = append(lat[api], time.Since(began))
					}
				}
			}
			g, j := quantile(lat["grpc"], 0.5), quantile(lat["json"], 0.5)
			b.ReportMetric(ms(g), op.name+"-grpc-p50-ms")
			b.ReportMetric(ms(j), op.name+"-json-p50-ms")
			b.ReportMetric(ms(quantile(lat["grpc"], 0.99)), op.name+"-grpc-p99-ms")
			b.ReportMetric(ms(quantile(lat["json"], 0.99)), op.name+"-json-p99-ms")
			ratio := float64(j) / float64(g)
			b.ReportMetric(ratio, op.name+"-json/grpc")
			b.Logf("%s: JSON p50 %.2f ms, gRPC p50 %.2f ms: %.2f x (target <= %.1f): %s",
				op.name, ms(j), ms(g), ratio, jsonTarget, verdict(ratio <= jsonTarget))
		}
	}
}

// BenchmarkDefrag measures one defragmentation of a database of about
// 100 MiB of which half is free, on one in-process member with real
// etcd: its database's size before and after, how long the
// defragmentation took, and how long the member stopped serving (the
// longest a serializable read through its client port waited meanwhile).
// The rollout's mark keeps the member's own keeper from defragmenting
// first.
func BenchmarkDefrag(b *testing.B) {
	tc := newTestCA(b)
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Minute)
	defer cancel()
	c, _, _ := run(b, ctx, tc.member("n1", "127.0.0.17", ModeNew))
	if _, err := c.Client.Put(ctx, keyspace.Rollout, "benchmark"); err != nil {
		b.Fatal(err)
	}
	probe := ownerClient(b, tc, "127.0.0.17")
	value := strings.Repeat("v", 1<<20)
	for range b.N {
		for i := range 100 {
			if _, err := c.Client.Put(ctx, fmt.Sprintf("defrag/%03d", i), value); err != nil {
				b.Fatal(err)
			}
		}
		for i := 0; i < 100; i += 2 {
			if _, err := c.Client.Delete(ctx, fmt.Sprintf("defrag/%03d", i)); err != nil {
				b.Fatal(err)
			}
		}
		st, err := c.Client.Status(ctx, "")
		if err != nil {
			b.Fatal(err)
		}
		if _, err := c.Client.Compact(ctx, st.Header.Revision, clientv3.WithCompactPhysical()); err != nil {
			b.Fatal(err)
		}
		before, err := c.Client.Status(ctx, "")
		if err != nil {
			b.Fatal(err)
		}
		stop := probeReads(ctx, probe)
		began := time.Now()
		if _, err := c.Client.Defragment(ctx, ""); err != nil {
			b.Fatal(err)
		}
		took := time.Since(began)
		pause := stop()
		after, err := c.Client.Status(ctx, "")
		if err != nil {
			b.Fatal(err)
		}
		b.ReportMetric(float64(before.DbSize)/(1<<20), "db-before-MiB")
		b.ReportMetric(float64(before.DbSizeInUse)/(1<<20), "in-use-MiB")
		b.ReportMetric(float64(after.DbSize)/(1<<20), "db-after-MiB")
		b.ReportMetric(took.Seconds(), "defrag-s")
		b.ReportMetric(pause.Seconds(), "pause-s")
		b.Logf("defragmented %d MiB (%d MiB in use) to %d MiB in %.2f s; reads waited at most %.2f s meanwhile",
			before.DbSize>>20, before.DbSizeInUse>>20, after.DbSize>>20, took.Seconds(), pause.Seconds())
		if _, err := c.Client.Delete(ctx, "defrag/", clientv3.WithPrefix()); err != nil {
			b.Fatal(err)
		}
	}
}

// probeReads reads through cl one serializable read after another until
// stop is called, which returns the longest a read took.
func probeReads(ctx context.Context, cl *clientv3.Client) (stop func() time.Duration) {
	var worst time.Duration
	done, finished := make(chan struct{}), make(chan struct{})
	go func() {
		defer close(finished)
		for {
			select {
			case <-done:
				return
			default:
			}
			began := time.Now()
			cl.Get(ctx, "probe", clientv3.WithSerializable())
			worst = max(worst, time.Since(began))
		}
	}()
	return func() time.Duration {
		close(done)
		<-finished
		return worst
	}
}

// ownerClient is a gRPC client of the member at ip's client port, as the
// owner.
func ownerClient(b *testing.B, tc *testCA, ip string) *clientv3.Client {
	roots := x509.NewCertPool()
	roots.AddCert(tc.ca.Cert)
	cfg := &tls.Config{RootCAs: roots, Certificates: []tls.Certificate{{Certificate: [][]byte{tc.owner.Cert.Raw}, PrivateKey: tc.owner.Key}}}
	cl, err := clientv3.New(clientv3.Config{Endpoints: []string{"https://" + ip + ":2379"}, TLS: cfg, DialTimeout: 5 * time.Second})
	if err != nil {
		b.Fatal(err)
	}
	b.Cleanup(func() { cl.Close() })
	return cl
}

// jsonCall POSTs body as JSON to url and fails unless the answer is 200.
func jsonCall(ctx context.Context, c *http.Client, url string, body any) error {
	status, out, err := post(ctx, c, url, body)
	if err == nil && status != http.StatusOK {
		err = fmt.Errorf("status %d: %s", status, out)
	}
	return err
}

// quantile is the q-quantile of ds.
func quantile(ds []time.Duration, q float64) time.Duration {
	s := slices.Clone(ds)
	slices.Sort(s)
	return s[min(len(s)-1, int(q*float64(len(s))))]
}

func ms(d time.Duration) float64 { return float64(d) / float64(time.Millisecond) }

func verdict(ok bool) string {
	if ok {
		return "met"
	}
	return "NOT met"
}
