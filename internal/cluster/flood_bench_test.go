package cluster

import (
	"bytes"
	"context"
	"crypto/tls"
	"encoding/json"
	"fmt"
	"net"
	"net/http"
	"os"
	"os/exec"
	"os/signal"
	"path/filepath"
	"slices"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	clientv3 "go.etcd.io/etcd/client/v3"
	"google.golang.org/protobuf/proto"

	"github.com/borough-os/borough/internal/admin"
	"github.com/borough-os/borough/internal/ticket"
	"github.com/borough-os/borough/proto/enrolmentpb"
	"github.com/borough-os/borough/proto/joinpb"
)

// floodSources is how many loopback addresses the flood comes from: more
// than the join endpoint's in-flight bound, each past its per-source rate.
const floodSources = 16

// BenchmarkJoinFlood measures, side by side on one in-process member with
// real etcd, the owner's put latency quiet and while floodSources clients
// flood the join endpoint with requests of a forged ticket (a known
// ticket ID, a claim with a wrong secret: the costliest refusal to reach).
// The join endpoint's bounds (package join: per-source connections and
// rate, in-flight bound) must keep the flood from etcd: p99 within noise
// of the quiet one. The flood runs in a process of its own at idle CPU
// priority (chrt --idle): an attacker's CPU is not the node's, and on a
// machine of two cores a flood at the node's priority measures how the
// cores are shared, not what the endpoint lets through.
func BenchmarkJoinFlood(b *testing.B) {
	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	ownerCert, owner := ownerIdentity(b)
	_, _, cl := firstMember(b, ctx, 1, "bench", ownerCert, owner)
	tk, err := admin.MintTicket(ctx, cl, admin.TicketParams{}, owner)
	if err != nil {
		b.Fatal(err)
	}
	forged := proto.Clone(tk).(*enrolmentpb.Ticket)
	forged.Secret[0] ^= 1
	claim := ticket.Prove(forged, "", nil)
	body, err := proto.Marshal(&joinpb.JoinRequest{TicketId: tk.GetId(), Claim: claim.Signature, ClusterName: tk.GetClusterName()})
	if err != nil {
		b.Fatal(err)
	}

	const puts = 2000
	quiet := putLatencies(ctx, b, cl, puts)
	f := startFloodProcess(b, "127.0.0.1:7834", body)
	loud := putLatencies(ctx, b, cl, puts)
	counts, rate := f.stop(b)
	b.ReportMetric(percentile(quiet, 0.99), "ms-p99-put-quiet")
	b.ReportMetric(percentile(loud, 0.99), "ms-p99-put-flood")
	b.ReportMetric(percentile(quiet, 0.5), "ms-p50-put-quiet")
	b.ReportMetric(percentile(loud, 0.5), "ms-p50-put-flood")
	b.ReportMetric(rate, "flood-req/s")
	b.Logf("join endpoint answers to the flood, by status: %v", counts)
}

// putLatencies puts n keys one after the other and returns each put's
// latency in milliseconds.
func putLatencies(ctx context.Context, b *testing.B, cl *clientv3.Client, n int) []float64 {
	b.Helper()
	out := make([]float64, 0, n)
	for i := range n {
		start := time.Now()
		if _, err := cl.Put(ctx, fmt.Sprintf("bench/%d", i), "x"); err != nil {
			b.Fatal(err)
		}
		out = append(out, float64(time.Since(start).Microseconds())/1000)
	}
	return out
}

// floodEnv names the join endpoint a test binary started by
// startFloodProcess floods, and floodBodyEnv the file of the request.
const (
	floodEnv     = "BOROUGH_TEST_FLOOD"
	floodBodyEnv = "BOROUGH_TEST_FLOOD_BODY"
)

// floodProcess is this test binary flooding at idle priority.
type floodProcess struct {
	cmd *exec.Cmd
	out bytes.Buffer
}

// startFloodProcess starts this test binary, at idle CPU priority,
// flooding endpoint with body until stopped.
func startFloodProcess(b *testing.B, endpoint string, body []byte) *floodProcess {
	b.Helper()
	file := filepath.Join(b.TempDir(), "request.pb")
	if err := os.WriteFile(file, body, 0o600); err != nil {
		b.Fatal(err)
	}
	p := &floodProcess{cmd: exec.Command("chrt", "--idle", "0", os.Args[0])}
	p.cmd.Env = append(os.Environ(), floodEnv+"="+endpoint, floodBodyEnv+"="+file)
	p.cmd.Stdout, p.cmd.Stderr = &p.out, &p.out
	if err := p.cmd.Start(); err != nil {
		b.Fatalf("starting the flood: %v", err)
	}
	time.Sleep(200 * time.Millisecond)
	return p
}

// stop stops the flood and returns its answers by status and its rate.
func (p *floodProcess) stop(b *testing.B) (map[string]int, float64) {
	b.Helper()
	if err := p.cmd.Process.Signal(os.Interrupt); err != nil {
		b.Fatal(err)
	}
	if err := p.cmd.Wait(); err != nil {
		b.Fatalf("the flood: %v\n%s", err, p.out.String())
	}
	var r floodReport
	if err := json.Unmarshal(p.out.Bytes(), &r); err != nil {
		b.Fatalf("the flood's report: %v\n%s", err, p.out.String())
	}
	return r.Counts, r.Rate
}

// floodReport is what a flood process prints when it stops.
type floodReport struct {
	Counts map[string]int
	Rate   float64
}

// runFlood floods the endpoint in floodEnv with the request in
// floodBodyEnv until interrupted, then prints its floodReport.
func runFlood(endpoint string) error {
	body, err := os.ReadFile(os.Getenv(floodBodyEnv))
	if err != nil {
		return err
	}
	ctx, stop := signal.NotifyContext(context.Background(), os.Interrupt)
	defer stop()
	f := startFlood(ctx, endpoint, body)
	<-ctx.Done()
	counts, rate := f.stop()
	return json.NewEncoder(os.Stdout).Encode(floodReport{Counts: counts, Rate: rate})
}

// flood is floodSources clients posting a bad join request as fast as
// the endpoint answers.
type flood struct {
	cancel context.CancelFunc
	wg     sync.WaitGroup
	start  time.Time
	total  atomic.Int64
	mu     sync.Mutex
	counts map[string]int
}

func startFlood(ctx context.Context, endpoint string, body []byte) *flood {
	ctx, cancel := context.WithCancel(ctx)
	f := &flood{cancel: cancel, start: time.Now(), counts: map[string]int{}}
	for i := range floodSources {
		src := &net.TCPAddr{IP: net.IPv4(127, 0, 1, byte(i+1))}
		client := &http.Client{Timeout: 10 * time.Second, Transport: &http.Transport{
			DialContext:     (&net.Dialer{LocalAddr: src}).DialContext,
			TLSClientConfig: &tls.Config{InsecureSkipVerify: true}, // an attacker checks nothing
		}}
		f.wg.Go(func() {
			for ctx.Err() == nil {
				f.record(post(ctx, client, "https://"+endpoint+"/v1/join", body))
			}
		})
	}
	return f
}

func post(ctx context.Context, c *http.Client, url string, body []byte) string {
	r, err := http.NewRequestWithContext(ctx, http.MethodPost, url, bytes.NewReader(body))
	if err != nil {
		return "request: " + err.Error()
	}
	resp, err := c.Do(r)
	if err != nil {
		return "error"
	}
	resp.Body.Close()
	return resp.Status
}

func (f *flood) record(status string) {
	f.total.Add(1)
	f.mu.Lock()
	defer f.mu.Unlock()
	f.counts[status]++
}

// stop ends the flood and returns its answers by status and its rate.
func (f *flood) stop() (map[string]int, float64) {
	f.cancel()
	f.wg.Wait()
	return f.counts, float64(f.total.Load()) / time.Since(f.start).Seconds()
}

// percentile returns the p-th percentile of values.
func percentile(values []float64, p float64) float64 {
	s := slices.Sorted(slices.Values(values))
	return s[int(p*float64(len(s)-1))]
}
