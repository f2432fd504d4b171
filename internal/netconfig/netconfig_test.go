package netconfig

import (
	"context"
	"encoding/json"
	"errors"
	"log/slog"
	"os"
	"path/filepath"
	"strings"
	"testing"

	"google.golang.org/protobuf/proto"

	"github.com/borough-os/borough/esp"
	"github.com/borough-os/borough/internal/enrolment"
	"github.com/borough-os/borough/internal/espledger"
	"github.com/borough-os/borough/internal/seals"
	"github.com/borough-os/borough/internal/tpm"
	"github.com/borough-os/borough/internal/tpmtest"
	"github.com/borough-os/borough/proto/enrolmentpb"
)

// moved is the owner's change: a static address on eth0.
func moved() *enrolmentpb.Network {
	return &enrolmentpb.Network{Config: &enrolmentpb.Network_Static{Static: &enrolmentpb.Static{
		Interface: "eth0", Addresses: []string{"10.77.0.33/24"}}}, NtpServers: []string{"10.77.0.1"}}
}

// node boots a node's network settings again and again from one ESP, with
// an authenticated ledger on a simulated TPM, as each boot opens it.
type node struct {
	t    *testing.T
	root string
	tpm  *tpm.TPM
	e    *enrolment.Enrolment
}

func (n *node) boot() *Settings {
	n.t.Helper()
	epoch, err := n.tpm.Epoch()
	if err != nil {
		n.t.Fatal(err)
	}
	l, err := espledger.Open(n.root, &seals.Book{TPM: n.tpm, Epoch: epoch}, slog.New(slog.DiscardHandler))
	if err != nil {
		n.t.Fatal(err)
	}
	s, err := Load(slog.New(slog.DiscardHandler), l, n.e)
	if err != nil {
		n.t.Fatal(err)
	}
	return s
}

// address is the first static address the settings give, "" for DHCP.
func address(s *Settings) string {
	if len(s.Interfaces) == 0 || s.Interfaces[0].Static == nil {
		return ""
	}
	return s.Interfaces[0].Static.Addresses[0].String()
}

// TestTrial walks the owner's change through a node's boots: tried at the
// next boot and kept once the node is healthy; a change the node is not
// healthy with within the window goes back at the boot after, as does one
// whose trial boot lost power; a trial or kept network written by someone
// else than the node is refused; bad settings are refused at once.
func TestTrial(t *testing.T) {
	healthy := func(context.Context) error { return nil }
	cut := func(context.Context) error { return errors.New("no quorum") }
	n := &node{t: t, root: t.TempDir(), tpm: tpmtest.New(t, 5), e: &enrolment.Enrolment{}}
	if err := os.MkdirAll(filepath.Dir(esp.Network.In(n.root)), 0o700); err != nil {
		t.Fatal(err)
	}

	s := n.boot()
	if s.From != FromEnrolment || s.Trial {
		t.Fatalf("first boot: from %s, trial %v", s.From, s.Trial)
	}
	bad := moved()
	bad.GetStatic().Addresses = []string{"10.77.0.33"}
	if err := s.Propose(bad); err == nil || !strings.Contains(err.Error(), "network.static") {
		t.Errorf("Propose(an address without a prefix) = %v, want an error naming the field", err)
	}
	if err := s.Propose(moved()); err != nil {
		t.Fatal(err)
	}

	s = n.boot()
	if !s.Trial || address(s) != "10.77.0.33/24" || s.NTPServers[0] != "10.77.0.1" {
		t.Fatalf("trial boot: trial %v, address %q, NTP %v", s.Trial, address(s), s.NTPServers)
	}
	if err := s.Propose(moved()); err == nil {
		t.Error("a trial boot took another change")
	}
	s.Watch(context.Background(), slog.New(slog.DiscardHandler), Window, healthy, func() { t.Error("rolled back a healthy trial") })
	s = n.boot()
	if s.Trial || address(s) != "10.77.0.33/24" || s.From != "the owner's change" {
		t.Fatalf("after a kept trial: trial %v, address %q, from %s", s.Trial, address(s), s.From)
	}

	// A change the node is not healthy with.
	back := moved()
	back.GetStatic().Addresses = []string{"10.77.0.44/24"}
	if err := s.Propose(back); err != nil {
		t.Fatal(err)
	}
	s = n.boot()
	rolledBack := false
	s.Watch(context.Background(), slog.New(slog.DiscardHandler), 0, cut, func() { rolledBack = true })
	select {
	case <-s.Expired():
	default:
		t.Error("Expired is open after the window")
	}
	if !rolledBack {
		t.Error("no roll back after the window")
	}
	if s = n.boot(); s.Trial || address(s) != "10.77.0.33/24" {
		t.Errorf("after a trial that did not reach the cluster: trial %v, address %q; want the kept one", s.Trial, address(s))
	}

	// A trial boot that loses power: its next boot goes back too.
	if err := s.Propose(back); err != nil {
		t.Fatal(err)
	}
	if s = n.boot(); !s.Trial {
		t.Fatal("no trial boot")
	}
	if s = n.boot(); s.Trial || address(s) != "10.77.0.33/24" {
		t.Errorf("after a power cut in the trial: trial %v, address %q; want the kept one", s.Trial, address(s))
	}

	// Someone with the disk writes a network: refused.
	elsewhere := moved()
	elsewhere.GetStatic().Addresses = []string{"10.0.0.99/24"}
	raw, err := proto.Marshal(elsewhere)
	if err != nil {
		t.Fatal(err)
	}
	planted, err := json.Marshal(record{Network: raw})
	if err != nil {
		t.Fatal(err)
	}
	for _, f := range []esp.File{esp.NetworkTrial, esp.Network} {
		if err := os.WriteFile(f.In(n.root), planted, 0o600); err != nil {
			t.Fatal(err)
		}
		if s = n.boot(); s.Trial || address(s) == "10.0.0.99/24" {
			t.Errorf("a planted %s: trial %v, address %q", f, s.Trial, address(s))
		}
	}
}

// TestConfirmed: once the data volume confirmed its enrolment config, a
// node's later boots bring up that config's network, whatever the ESP's
// copy of the config says (someone with the disk naming an NTP server of
// theirs), and from an older ESP put back too; a record planted by
// someone else gives DHCP.
func TestConfirmed(t *testing.T) {
	genuine := moved()
	n := &node{t: t, root: t.TempDir(), tpm: tpmtest.New(t, 6), e: enrolled(t, genuine)}
	s := n.boot()
	if s.From != FromEnrolment || address(s) != "10.77.0.33/24" {
		t.Fatalf("first boot: from %s, address %q", s.From, address(s))
	}
	if err := Confirm(s.ledger, n.e); err != nil {
		t.Fatal(err)
	}
	edited := moved()
	edited.NtpServers = []string{"10.0.2.2"}
	n.e = enrolled(t, edited)
	s = n.boot()
	if s.From != "the enrolment config the data volume confirmed" || address(s) != "10.77.0.33/24" || len(s.NTPServers) != 1 || s.NTPServers[0] != "10.77.0.1" {
		t.Fatalf("a boot with the ESP's config edited: from %s, address %q, NTP %v", s.From, address(s), s.NTPServers)
	}
	// An older ESP put back (its ledger with its files): the node's own
	// older record still brings its network up, for it to reach its peers.
	saved := map[esp.File][]byte{}
	for _, f := range []esp.File{esp.Ledger, esp.NetworkConfirmed} {
		saved[f] = readFile(t, f.In(n.root))
	}
	later := moved()
	later.GetStatic().Addresses = []string{"10.77.0.55/24"}
	if err := Confirm(s.ledger, enrolled(t, later)); err != nil {
		t.Fatal(err)
	}
	for f, b := range saved {
		if err := os.WriteFile(f.In(n.root), b, 0o600); err != nil {
			t.Fatal(err)
		}
	}
	if s = n.boot(); address(s) != "10.77.0.33/24" {
		t.Errorf("a boot with an older ESP put back: from %s, address %q; want its older record's", s.From, address(s))
	}
	raw, err := proto.Marshal(edited)
	if err != nil {
		t.Fatal(err)
	}
	planted, err := json.Marshal(record{Network: raw})
	if err != nil {
		t.Fatal(err)
	}
	if err := os.WriteFile(esp.NetworkConfirmed.In(n.root), planted, 0o600); err != nil {
		t.Fatal(err)
	}
	if s = n.boot(); len(s.Interfaces) != 0 || len(s.NTPServers) != 0 {
		t.Errorf("a planted record: interfaces %v, NTP %v; want DHCP", s.Interfaces, s.NTPServers)
	}
}

func readFile(t *testing.T, path string) []byte {
	t.Helper()
	b, err := os.ReadFile(path)
	if err != nil {
		t.Fatal(err)
	}
	return b
}

// enrolled is the enrolment config with network n, as a node's first
// boot loads it.
func enrolled(t *testing.T, n *enrolmentpb.Network) *enrolment.Enrolment {
	t.Helper()
	root := t.TempDir()
	b, err := proto.Marshal(&enrolmentpb.Config{Version: 1, Network: n,
		Mode: &enrolmentpb.Config_Bootstrap{Bootstrap: &enrolmentpb.Bootstrap{ClusterName: "prod"}}})
	if err != nil {
		t.Fatal(err)
	}
	if err := os.MkdirAll(filepath.Dir(esp.EnrolmentConfig.In(root)), 0o700); err != nil {
		t.Fatal(err)
	}
	if err := os.WriteFile(esp.EnrolmentConfig.In(root), b, 0o600); err != nil {
		t.Fatal(err)
	}
	e, err := enrolment.Load(slog.New(slog.DiscardHandler), root, true)
	if err != nil {
		t.Fatal(err)
	}
	return e
}
