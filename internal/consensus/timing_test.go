package consensus

import (
	"context"
	"errors"
	"log/slog"
	"net"
	"net/netip"
	"path/filepath"
	"testing"
	"time"

	"github.com/borough-os/borough/internal/console"
	"github.com/borough-os/borough/internal/pki"
)

func TestTiming(t *testing.T) {
	for _, tc := range []struct {
		alone          bool
		tick, election uint
	}{{true, 10, 100}, {false, 100, 1000}} {
		ec := Config{Name: "n1", Cluster: "test", Mode: ModeNew, Alone: tc.alone, Log: slog.Default()}.embed()
		if ec.TickMs != tc.tick || ec.ElectionMs != tc.election {
			t.Errorf("alone %v: tick %d ms, election %d ms; want %d, %d", tc.alone, ec.TickMs, ec.ElectionMs, tc.tick, tc.election)
		}
	}
}

// TestRetime runs a real member started alone and gives its cluster a
// second voter: the member must stop with ErrRetime, since its timing
// would not do for two.
func TestRetime(t *testing.T) {
	dir := t.TempDir()
	now := time.Now()
	ca, err := pki.NewCA("test", now)
	if err != nil {
		t.Fatal(err)
	}
	crl, _ := ca.CRL(1, nil, now)
	owner, _ := pki.NewOwner("owner", now)
	logs := etcdLog(t)
	ctx, cancel := context.WithTimeout(context.Background(), 2*time.Minute)
	defer cancel()
	config := func(name, ip string, mode Mode, alone bool) Config {
		files := Files{Dir: filepath.Join(dir, name, "pki")}
		node, err := ca.Issue(name, []net.IP{net.ParseIP(ip)}, []string{"localhost"}, now)
		if err != nil {
			t.Fatal(err)
		}
		if err := files.Write(Bundle{CA: ca.Cert, Cert: node.Cert, Key: node.Key, Owner: owner.Cert, CRL: crl}); err != nil {
			t.Fatal(err)
		}
		// Their own loopback addresses, apart from other tests' etcd.
		addr := netip.MustParseAddr(ip)
		return Config{Name: name, Cluster: "test", DataDir: filepath.Join(dir, name, "etcd"), PKI: files,
			IP: addr, ListenIP: addr, Mode: mode, Alone: alone, Socket: filepath.Join(dir, name+".sock"),
			Log: slog.New(console.NewHandler(logs)).With("member", name)}
	}
	first, err := Start(ctx, config("n1", "127.0.0.11", ModeNew, true))
	if err != nil {
		t.Fatal(err)
	}
	done := make(chan error, 1)
	go func() { done <- first.Run(ctx) }()

	add, err := first.Client.MemberAddAsLearner(ctx, []string{"https://127.0.0.12:2380"})
	if err != nil {
		t.Fatal(err)
	}
	cfg := config("n2", "127.0.0.12", ModeJoin, false)
	for _, m := range add.Members {
		cfg.Peers = append(cfg.Peers, Peer{Name: m.Name, PeerURLs: m.PeerURLs})
	}
	second, err := Start(ctx, cfg)
	if err != nil {
		t.Fatal(err)
	}
	defer second.Close()
	// The member started alone does not promote the learner (a second
	// voter is not the policy's); the test does, as another node would.
	for {
		_, err := first.Client.MemberPromote(ctx, add.Member.ID)
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
