//go:build boot

package boottest

import (
	"context"
	"fmt"
	"os"
	"path/filepath"
	"testing"
	"time"

	"github.com/borough-os/borough/bench/load"
	"github.com/borough-os/borough/qemu/guestprof"
)

// profileEnv names the directory profileTurn writes its reports to.
const profileEnv = "BOROUGH_BENCH_PROFILE"

// profileParams are the kernel parameters of profiled VMs: guestprof
// finds a randomized kernel offset from a boot's samples, which a load's
// do not give it.
var profileParams = []string{"nokaslr"}

// profileSample is the time between samples: a 10 s turn gives 2000.
const profileSample = 5 * time.Millisecond

// profileTurn runs each load once more on each profiled side, sampling
// its leader's virtual CPU (guestprof), and writes a report per side and
// load to dir: where the leader's time goes, by kernel and Go function,
// Borough's beside the floor's. Sampling stops the VM every few
// milliseconds, so these turns are not among those measured.
func profileTurn(b *testing.B, sides []*side, dir string) {
	f, err := os.Open(filepath.Join(outDir(b), "System.map"))
	if err != nil {
		b.Fatal(err)
	}
	kernel, err := guestprof.ReadSystemMap(f)
	f.Close()
	if err != nil {
		b.Fatal(err)
	}
	if err := os.MkdirAll(dir, 0o755); err != nil {
		b.Fatal(err)
	}
	for _, p := range etcdLoads {
		for _, s := range sides {
			if s.bins != nil {
				s.profile(b, p, kernel, filepath.Join(dir, s.name+"-"+p.Name()+".txt"))
			}
		}
	}
}

// profile runs p on s, resumed for it, while sampling its leader, and
// writes the report to path.
func (s *side) profile(b *testing.B, p load.Params, kernel *guestprof.KernelSymbols, path string) {
	s.resumed(b)
	defer s.pause(b)
	leader := s.leader(b)
	ctx, cancel := context.WithCancel(context.Background())
	type recorded struct {
		samples []guestprof.Sample
		err     error
	}
	done := make(chan recorded, 1)
	go func() {
		samples, err := guestprof.Record(ctx, s.gdb[leader], profileSample)
		done <- recorded{samples, err}
	}()
	r, err := load.Run(context.Background(), s.dial, s.endpoints, p)
	cancel()
	rec := <-done
	if err != nil || rec.err != nil {
		b.Fatalf("%s: profiling %s: %v %v", s.name, p.Name(), err, rec.err)
	}
	report, err := guestprof.Analyze(rec.samples, kernel, s.bins)
	if err != nil {
		b.Fatalf("%s: %v", s.name, err)
	}
	out, err := os.Create(path)
	if err != nil {
		b.Fatal(err)
	}
	defer out.Close()
	fmt.Fprintf(out, "%s, %s, sampled on its leader (member %d): %.0f requests/s, p50 %v, p99 %v\n", s.name, p.Name(), leader+1,
		r.Throughput(), r.Percentile(0.5).Round(100*time.Microsecond), r.Percentile(0.99).Round(100*time.Microsecond))
	if err := report.Write(out, 60); err != nil {
		b.Fatal(err)
	}
	b.Logf("%s %s: the leader's profile is in %s", s.name, p.Name(), path)
}

// leader is the index of the member that leads s: the one whose own ID
// is the leader its status names.
func (s *side) leader(b *testing.B) int {
	for i, ep := range s.endpoints {
		cl, err := s.dial(ep)
		if err != nil {
			b.Fatal(err)
		}
		ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
		st, err := cl.Status(ctx, ep)
		cancel()
		cl.Close()
		if err != nil {
			b.Fatalf("%s: %v", s.name, err)
		}
		if st.Header.MemberId == st.Leader {
			return i
		}
	}
	b.Fatalf("%s: no member leads", s.name)
	return 0
}

// goSymbols reads the symbols of the Go binary at path.
func goSymbols(b *testing.B, path string) *guestprof.GoSymbols {
	syms, err := guestprof.ReadGoBinary(path)
	if err != nil {
		b.Fatal(err)
	}
	return syms
}
