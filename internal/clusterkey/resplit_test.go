package clusterkey

import (
	"bytes"
	"context"
	"crypto/tls"
	"crypto/x509"
	"encoding/json"
	"errors"
	"fmt"
	"log/slog"
	"net"
	"os"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/borough-os/borough/esp"
	"github.com/borough-os/borough/internal/escrow"
	"github.com/borough-os/borough/internal/espledger"
	"github.com/borough-os/borough/internal/keyfile"
	"github.com/borough-os/borough/internal/pki"
	"github.com/borough-os/borough/internal/ports"
	"github.com/borough-os/borough/internal/storage"
	"github.com/borough-os/borough/internal/unlock"
)

// peer is a cluster member at 127.0.0.20+i with its identity and escrow
// key; its responder listens on ports.Unlock there, as the member
// directory's peer URLs say.
type peer struct {
	name       string
	ip         net.IP
	id         unlock.Identity
	priv, pub  []byte
	stop       func()
	addrInFile string
}

func newPeers(t *testing.T, n int) []*peer {
	t.Helper()
	now := time.Now()
	ca, err := pki.NewCA("prod", now)
	if err != nil {
		t.Fatal(err)
	}
	crl, err := x509.ParseRevocationList(mustCRL(t, ca, 1, nil, now))
	if err != nil {
		t.Fatal(err)
	}
	inForce := func() (*x509.RevocationList, error) { return crl, nil }
	var peers []*peer
	for i := 1; i <= n; i++ {
		p := &peer{name: fmt.Sprintf("node-%08x", i), ip: net.IPv4(127, 0, 0, byte(20+i))}
		cert, err := ca.Issue(p.name, []net.IP{p.ip}, []string{p.name}, now)
		if err != nil {
			t.Fatal(err)
		}
		p.id = unlock.Identity{Cert: tls.Certificate{Certificate: [][]byte{cert.Cert.Raw}, PrivateKey: cert.Key}, CA: ca.Cert, CRL: inForce}
		if p.priv, p.pub, err = escrow.NewKey(); err != nil {
			t.Fatal(err)
		}
		p.addrInFile = "https://" + net.JoinHostPort(p.ip.String(), "2380")
		peers = append(peers, p)
	}
	return peers
}

// serve starts p's responder until stopped.
func (p *peer) serve(t *testing.T) {
	t.Helper()
	addr := net.JoinHostPort(p.ip.String(), fmt.Sprint(ports.Unlock))
	l, err := net.Listen("tcp", addr)
	if err != nil {
		t.Fatalf("the responder of %s: %v (this test needs 127.0.0.21-25 on loopback)", p.name, err)
	}
	s := &unlock.Server{Cluster: "prod", Node: p.name, EscrowKey: p.priv, Identity: p.id, Log: slog.New(slog.DiscardHandler)}
	ctx, cancel := context.WithCancel(context.Background())
	done := make(chan struct{})
	go func() { s.Serve(ctx, l); close(done) }()
	p.stop = func() { cancel(); <-done }
}

// serving runs the responders of peers until the returned func is called.
func serving(t *testing.T, peers []*peer) func() {
	for _, p := range peers {
		p.serve(t)
	}
	return func() {
		for _, p := range peers {
			p.stop()
		}
	}
}

// TestReconcile moves one node's CUK through a cluster's changes, with
// the crashes and failures that can come between the steps of a re-split,
// against real responders on loopback. After every step, whatever it
// did, a fresh boot of the node (a new Keeper reading only its ESP) gets
// the CUK back from the responders, or from the ESP where it is sealed
// locally.
func TestReconcile(t *testing.T) {
	peers := newPeers(t, 5)
	self, others := peers[0], peers[1:]
	pick := func(idx ...int) []*peer {
		var out []*peer
		for _, i := range idx {
			out = append(out, peers[i-1])
		}
		return out
	}
	root := t.TempDir()
	dir := map[string][]string{}
	for _, p := range peers {
		dir[p.name] = []string{p.addrInFile}
	}
	b, _ := json.Marshal(map[string]any{"cluster": "prod", "members": dir})
	write(t, root, esp.MemberDirectory, b)
	local := storage.LocalEscrow(root, keyfile.TPMBestEffort, nil)
	cuk, err := local.New()
	if err != nil {
		t.Fatal(err)
	}
	k := &Keeper{ESPRoot: root, Ledger: espledger.Unauthenticated(root), Local: local, Log: slog.New(slog.DiscardHandler), id: &self.id, cuk: cuk}

	steps := []struct {
		name string
		// crash is what a crash left on the ESP before this step.
		crash func(t *testing.T)
		// voters are the other voters; up those whose responders run.
		voters, up []int
		// timeout bounds the step.
		timeout time.Duration
		wantErr string
		// wantEpoch and wantHolders describe the escrow on the ESP
		// after the step (epoch 0: none); wantLocal says the CUK is
		// sealed on the ESP.
		wantEpoch   uint64
		wantHolders []int
		wantLocal   bool
	}{
		{name: "three voters: split, test unlocked, local CUK dropped",
			voters: []int{2, 3}, up: []int{2, 3}, wantEpoch: 1, wantHolders: []int{2, 3}},
		{name: "the same voters: nothing to do, no peer asked",
			voters: []int{2, 3}, timeout: 3 * time.Second, wantEpoch: 1, wantHolders: []int{2, 3}},
		{name: "voters changed, the new ones down: the re-split fails, the old escrow stays",
			voters: []int{4, 5}, timeout: 3 * time.Second, wantErr: "test unlock of a new split",
			wantEpoch: 1, wantHolders: []int{2, 3}},
		{name: "crash after writing an escrow, before dropping the local CUK",
			crash:  func(t *testing.T) { put(t, local, cuk) },
			voters: []int{2, 3}, up: []int{2, 3}, wantEpoch: 2, wantHolders: []int{2, 3}},
		{name: "crash while writing the escrow: a torn temporary file is ignored",
			crash:  func(t *testing.T) { write(t, root, esp.CUKEscrow+".tmp", []byte(`{"version":1,"bind`)) },
			voters: []int{2, 3, 4, 5}, up: []int{2, 3, 4, 5}, wantEpoch: 3, wantHolders: []int{2, 3, 4, 5}},
		{name: "a voter removed: split again without it",
			voters: []int{2, 3, 4}, up: []int{2, 3, 4}, wantEpoch: 4, wantHolders: []int{2, 3, 4}},
		{name: "down to one voter: sealed locally again, escrow dropped",
			wantLocal: true},
	}
	for _, st := range steps {
		t.Run(st.name, func(t *testing.T) {
			if st.crash != nil {
				st.crash(t)
			}
			stop := serving(t, pick(st.up...))
			timeout := st.timeout
			if timeout == 0 {
				timeout = 30 * time.Second
			}
			ctx, cancel := context.WithTimeout(context.Background(), timeout)
			defer cancel()
			var holders []escrow.Holder
			urls := map[string][]string{}
			for _, p := range pick(st.voters...) {
				holders = append(holders, escrow.Holder{Name: p.name, Key: p.pub})
				urls[p.name] = dir[p.name]
			}
			addrs := Responders(urls)
			err := k.reconcile(ctx, escrow.Binding{Cluster: "prod", Node: self.name}, escrow.Threshold(len(st.voters)+1), holders, addrs)
			stop()
			if st.wantErr == "" && err != nil || st.wantErr != "" && (err == nil || !strings.Contains(err.Error(), st.wantErr)) {
				t.Fatalf("reconcile = %v, want error %q", err, st.wantErr)
			}
			checkESP(t, root, st.wantEpoch, names(pick(st.wantHolders...)), st.wantLocal)
			got := bootGet(t, root, local, self, others)
			if !bytes.Equal(got, cuk) {
				t.Errorf("a fresh boot got %x, want the CUK", got)
			}
		})
	}
}

func put(t *testing.T, e storage.Escrow, cuk []byte) {
	t.Helper()
	if err := e.Put(cuk); err != nil {
		t.Fatal(err)
	}
}

func names(peers []*peer) []string {
	var out []string
	for _, p := range peers {
		out = append(out, p.name)
	}
	return out
}

// checkESP checks the escrow and the locally sealed CUK on the ESP.
func checkESP(t *testing.T, root string, epoch uint64, holders []string, local bool) {
	t.Helper()
	e, err := readEscrow(espledger.Unauthenticated(root))
	switch {
	case epoch == 0 && err == nil:
		t.Errorf("an escrow of epoch %d is on the ESP, want none", e.Binding.Epoch)
	case epoch != 0 && err != nil:
		t.Errorf("reading the escrow: %v", err)
	case epoch != 0:
		var got []string
		for _, env := range e.Envelopes {
			got = append(got, env.Holder)
		}
		slices.Sort(got)
		if e.Binding.Epoch != epoch || !slices.Equal(got, holders) {
			t.Errorf("escrow epoch %d held by %v, want epoch %d held by %v", e.Binding.Epoch, got, epoch, holders)
		}
	}
	_, err = os.Stat(esp.ClusterKeyEscrow.In(root))
	if sealed := !errors.Is(err, os.ErrNotExist); sealed != local {
		t.Errorf("CUK sealed on the ESP: %v, want %v", sealed, local)
	}
}

// bootGet gets the CUK as the node's next boot would, every peer up.
func bootGet(t *testing.T, root string, local storage.Escrow, self *peer, others []*peer) []byte {
	t.Helper()
	defer serving(t, others)()
	boot := &Keeper{ESPRoot: root, Ledger: espledger.Unauthenticated(root), Local: local, Log: slog.New(slog.DiscardHandler), id: &self.id}
	done := make(chan struct{})
	var got []byte
	var err error
	go func() { got, err = boot.Get(t.Context()); close(done) }()
	select {
	case <-done:
	case <-time.After(30 * time.Second):
		t.Fatal("a fresh boot did not get the CUK within 30 s")
	}
	if err != nil {
		t.Fatalf("a fresh boot: %v", err)
	}
	return got
}
