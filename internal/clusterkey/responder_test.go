package clusterkey

import (
	"context"
	"crypto/tls"
	"log/slog"
	"net"
	"strconv"
	"testing"
	"time"

	"github.com/borough-os/borough/esp"
	"github.com/borough-os/borough/internal/escrow"
	"github.com/borough-os/borough/internal/espledger"
	"github.com/borough-os/borough/internal/pki"
	"github.com/borough-os/borough/internal/poll"
	"github.com/borough-os/borough/internal/ports"
	"github.com/borough-os/borough/internal/unlock"
)

// TestResponderOutlivesTheMember: on a node's first boot the responder
// gets what it needs only once the member runs (Maintain), but it runs
// for the rest of the boot (Boot's context), not for as long as the
// member's services: those restart whenever etcd does, and a responder
// that stopped with them left its node's peers one holder short.
func TestResponderOutlivesTheMember(t *testing.T) {
	now := time.Now()
	ca, err := pki.NewCA("prod", now)
	if err != nil {
		t.Fatal(err)
	}
	node, err := ca.Issue("node-0a1b2c3d", nil, []string{"node-0a1b2c3d"}, now)
	if err != nil {
		t.Fatal(err)
	}
	root := t.TempDir()
	k := &Keeper{ESPRoot: root, Ledger: espledger.Unauthenticated(root), Log: slog.New(slog.DiscardHandler)}
	boot, endBoot := context.WithCancel(context.Background())
	defer endBoot()
	k.Boot(boot)

	// What Maintain has once the member runs, under a context that then
	// ends as the member's services restart.
	member, endMember := context.WithCancel(boot)
	k.id = &unlock.Identity{Cert: tls.Certificate{Certificate: [][]byte{node.Cert.Raw}, PrivateKey: node.Key, Leaf: node.Cert}, CA: ca.Cert}
	if k.escrowKey, _, err = escrow.NewKey(); err != nil {
		t.Fatal(err)
	}
	write(t, root, esp.NodeState, []byte(`{"version":1,"phase":"member","cluster":"prod","node":"node-0a1b2c3d","cluster_id":"c1","member_id":"a1"}`))
	k.startResponder()
	endMember()
	<-member.Done()

	addr := net.JoinHostPort("127.0.0.1", strconv.Itoa(ports.Unlock))
	if name := handshake(t, addr, node, 10*time.Second); name != "node-0a1b2c3d" {
		t.Errorf("the responder presents %q, want node-0a1b2c3d", name)
	}
	endBoot()
	if poll.Until(t.Context(), 10*time.Second, 50*time.Millisecond, poll.True(func() bool {
		c, err := net.DialTimeout("tcp", addr, time.Second)
		if err == nil {
			c.Close()
		}
		return err != nil
	})) != nil {
		t.Fatal("the responder still listens 10 s after the boot's context ended")
	}
}

// handshake connects to the responder at addr as client, waiting up to
// timeout for it to listen, and returns the name its certificate gives.
func handshake(t *testing.T, addr string, client *pki.Cert, timeout time.Duration) string {
	t.Helper()
	cfg := &tls.Config{
		MinVersion:         tls.VersionTLS13,
		InsecureSkipVerify: true,
		Certificates:       []tls.Certificate{{Certificate: [][]byte{client.Cert.Raw}, PrivateKey: client.Key}},
	}
	var name string
	if err := poll.Until(t.Context(), timeout, 50*time.Millisecond, func() error {
		c, err := tls.DialWithDialer(&net.Dialer{Timeout: time.Second}, "tcp", addr, cfg)
		if err == nil {
			name = c.ConnectionState().PeerCertificates[0].Subject.CommonName
			c.Close()
		}
		return err
	}); err != nil {
		t.Fatalf("no responder at %s after its prerequisites: %v", addr, err)
	}
	return name
}
