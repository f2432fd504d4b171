package consensus

import (
	"bytes"
	"context"
	"errors"
	"log/slog"
	"os"
	"testing"
	"time"

	"github.com/borough-os/borough/internal/space"

	"github.com/borough-os/borough/internal/keyspace"
)

func TestTiming(t *testing.T) {
	for _, tc := range []struct {
		alone          bool
		tick, election uint
	}{{true, 10, 50}, {false, 100, 1000}} {
		ec := Config{Name: "n1", Cluster: "test", Mode: ModeNew, Alone: tc.alone, Log: slog.Default()}.embed(space.Budget{}, nil)
		if ec.TickMs != tc.tick || ec.ElectionMs != tc.election {
			t.Errorf("alone %v: tick %d ms, election %d ms; want %d, %d", tc.alone, ec.TickMs, ec.ElectionMs, tc.tick, tc.election)
		}
	}
}

// TestRetime runs a real member started alone and gives its cluster a
// second voter: the member must stop with ErrRetime, since its timing
// would not do for two. On the way, the second member, still a learner,
// must write a CRL put in etcd to its CRL file.
func TestRetime(t *testing.T) {
	tc := newTestCA(t)
	ctx, cancel := context.WithTimeout(context.Background(), 2*time.Minute)
	defer cancel()
	alone := tc.member("n1", "127.0.0.11", ModeNew)
	alone.Alone = true
	first, done, _ := run(t, ctx, alone)
	cfg, id := tc.learner(ctx, first, "n2", "127.0.0.12")
	second, _, _ := run(t, ctx, cfg)
	newCRL, err := tc.ca.CRL(2, nil, tc.now)
	if err != nil {
		t.Fatal(err)
	}
	if _, err := first.Client.Put(ctx, keyspace.CRL, string(newCRL)); err != nil {
		t.Fatal(err)
	}
	for {
		if b, _ := os.ReadFile(cfg.PKI.CRL()); bytes.Equal(b, newCRL) {
			break
		}
		if !second.IsLearner() {
			t.Fatal("the second member is a voter before the test promoted it")
		}
		select {
		case <-ctx.Done():
			t.Fatal("the learner did not write the new CRL")
		case <-time.After(50 * time.Millisecond):
		}
	}
	// The member started alone does not promote the learner (a second
	// voter is not the policy's); the test does, as another node would.
	for {
		_, err := first.Client.MemberPromote(ctx, id)
		if err == nil {
			break
		}
		if !errors.Is(err, errLearnerNotReady) {
			t.Fatalf("promoting the second member: %v", err)
		}
		time.Sleep(100 * time.Millisecond)
	}
	select {
	case err := <-done:
		if !errors.Is(err, ErrRetime) {
			t.Fatalf("the member started alone ended with %v, want ErrRetime", err)
		}
	case <-time.After(30 * time.Second):
		t.Fatal("the member started alone runs on beside a second voter")
	}
}
