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

// profileTurn runs each load once more on each profiled side, and a turn
// with no load, sampling every member's virtual CPU (guestprof), and
// writes a report per side, load and member to dir: where each member's
// time goes, by kernel and Go function, Borough's beside the floor's, the
// leader's and the followers'. Sampling stops the VMs every few
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
	for _, s := range sides {
		if s.bins == nil {
			continue
		}
		for _, p := range etcdLoads {
			s.profile(b, kernel, dir, p.Name(), func() string {
				r, err := load.Run(context.Background(), s.dial, s.endpoints, p)
				if err != nil {
					b.Fatalf("%s: profiling %s: %v", s.name, p.Name(), err)
				}
				return fmt.Sprintf("%.0f requests/s, p50 %v, p99 %v", r.Throughput(),
					r.Percentile(0.5).Round(100*time.Microsecond), r.Percentile(0.99).Round(100*time.Microsecond))
			})
		}
		s.profile(b, kernel, dir, "idle", func() string {
			time.Sleep(etcdTurn)
			return fmt.Sprintf("no load for %v", etcdTurn)
		})
	}
}

// profile runs work on s, resumed for it, while sampling each member, and
// writes a report per member to dir, named for s, what and the member's
// role; work says what it did, for the reports' first line.
func (s *side) profile(b *testing.B, kernel *guestprof.KernelSymbols, dir, what string, work func() string) {
	s.resumed(b)
	defer s.pause(b)
	leader := s.leader(b)
	ctx, cancel := context.WithCancel(context.Background())
	// Stops the samplers should work fail the benchmark.
	defer cancel()
	type recorded struct {
		samples []guestprof.Sample
		err     error
	}
	done := make([]chan recorded, len(s.gdb))
	for i, sock := range s.gdb {
		done[i] = make(chan recorded, 1)
		go func() {
			samples, err := guestprof.Record(ctx, sock, profileSample)
			done[i] <- recorded{samples, err}
		}()
	}
	did := work()
	cancel()
	for i := range s.gdb {
		rec := <-done[i]
		if rec.err != nil {
			b.Fatalf("%s: profiling member %d under %s: %v", s.name, i+1, what, rec.err)
		}
		role := fmt.Sprintf("follower%d", i+1)
		if i == leader {
			role = "leader"
		}
		s.writeProfile(b, kernel, rec.samples, filepath.Join(dir, s.name+"-"+what+"-"+role+".txt"),
			fmt.Sprintf("%s, %s, sampled on member %d (%s): %s", s.name, what, i+1, role, did))
	}
	b.Logf("%s %s: every member's profile is in %s", s.name, what, dir)
}

// writeProfile writes the report of samples, headed by title, to path.
func (s *side) writeProfile(b *testing.B, kernel *guestprof.KernelSymbols, samples []guestprof.Sample, path, title string) {
	report, err := guestprof.Analyze(samples, kernel, s.bins)
	if err != nil {
		b.Fatalf("%s: %v", s.name, err)
	}
	out, err := os.Create(path)
	if err != nil {
		b.Fatal(err)
	}
	defer out.Close()
	fmt.Fprintln(out, title)
	if err := report.Write(out, 60); err != nil {
		b.Fatal(err)
	}
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
