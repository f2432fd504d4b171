package cluster

import (
	"bytes"
	"context"
	"crypto/tls"
	"crypto/x509"
	"os"
	"slices"
	"testing"
	"time"

	clientv3 "go.etcd.io/etcd/client/v3"

	"github.com/borough-os/borough/internal/admin"
	"github.com/borough-os/borough/internal/authority"
	"github.com/borough-os/borough/internal/enrolment"
	"github.com/borough-os/borough/internal/keyspace"
	"github.com/borough-os/borough/internal/pki"
	"github.com/borough-os/borough/internal/poll"
	"github.com/borough-os/borough/internal/ticket"
)

// handOver hands a's cluster over from owner to a new owner
// (TestJoinInProcess, once the owner has removed nodes): a hand-over a
// member forged first is passed over; the owner's is taken, a restarts
// etcd and its client port takes the new owner and refuses the old, its
// admission and the revocations in force are the new owner's, and a node
// the new owner mints a ticket for joins. remembered is the last CRL the
// owner's tool made.
func handOver(t *testing.T, ctx context.Context, a *member, ca *x509.Certificate, cl *clientv3.Client, owner tls.Certificate, remembered []byte) {
	t.Helper()
	mallory, err := pki.NewOwner("mallory", time.Now())
	if err != nil {
		t.Fatal(err)
	}
	forged, err := authority.SignSuccession(mallory.Cert, mallory.Key, "unit", 1, mallory.Cert)
	if err != nil {
		t.Fatal(err)
	}
	if _, err := cl.Put(ctx, keyspace.SuccessionKey(1), string(forged)); err != nil {
		t.Fatal(err)
	}
	nextID, err := pki.NewOwner("owner-2", time.Now())
	if err != nil {
		t.Fatal(err)
	}
	next := tls.Certificate{Certificate: [][]byte{nextID.Cert.Raw}, PrivateKey: nextID.Key, Leaf: nextID.Cert}
	h, err := admin.HandOver(ctx, cl, owner, next, remembered)
	if err != nil {
		t.Fatal(err)
	}
	name := a.mgr.nodeName(t)
	if h.Number != 2 || !slices.Contains(h.Admitted, name) || h.CRL == nil {
		t.Errorf("hand-over %d admitted %v (not %v), CRL %d bytes; want number 2, %s among them, a CRL", h.Number, h.Admitted, h.NotAdmitted, len(h.CRL), name)
	}
	a.wait(t, "the cluster has a new owner succession=2")
	a.wait(t, "restarting etcd to trust the new owner")
	nc := awaitClient(t, ca, next)
	f := a.mgr.pkiFiles()
	if got, err := f.LoadOwner(); err != nil || !got.Equal(next.Leaf) {
		t.Errorf("the node's owner after the hand-over: %v, %v", got, err)
	}
	a.admitted(t, ctx, nc, next.Leaf)
	if b, err := os.ReadFile(f.Admission()); err != nil || ticket.CheckAdmission(b, next.Leaf, "unit", name, keyHashOf(t, f.Cert())) != nil {
		t.Errorf("the node's own admission is not the new owner's (%v)", err)
	}
	if poll.Until(ctx, 30*time.Second, 100*time.Millisecond, poll.True(func() bool {
		crl, err := os.ReadFile(f.CRL())
		return err == nil && bytes.Equal(crl, h.CRL)
	})) != nil {
		t.Fatal("the CRL in force is not the one with the new owner's revocations 30 s after etcd restarted")
	}
	if oc, err := admin.Connect([]string{"127.0.0.1:2379"}, ca, owner); err == nil {
		gctx, cancel := context.WithTimeout(ctx, 5*time.Second)
		if _, err := oc.Get(gctx, "k"); err == nil {
			t.Error("the old owner still reads the cluster after the hand-over")
		}
		cancel()
		oc.Close()
	}
	tk, err := admin.MintTicket(ctx, nc, admin.TicketParams{}, next)
	if err != nil {
		t.Fatal(err)
	}
	e := start(t, ctx, 5, &enrolment.Enrolment{ClusterName: "unit", Ticket: tk, Owner: next.Leaf}, "")
	e.wait(t, "node running cluster=unit")
	e.stop()
	<-e.done
}

// awaitClient connects as owner to the member at 127.0.0.1 once it reads
// for them, within a minute.
func awaitClient(t *testing.T, ca *x509.Certificate, owner tls.Certificate) *clientv3.Client {
	t.Helper()
	c, err := admin.Connect([]string{"127.0.0.1:2379"}, ca, owner)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { c.Close() })
	for deadline := time.Now().Add(time.Minute); ; time.Sleep(time.Second) {
		ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
		_, err := c.Get(ctx, "k")
		cancel()
		if err == nil {
			return c
		}
		if time.Now().After(deadline) {
			t.Fatalf("the new owner cannot read the cluster a minute after the hand-over: %v", err)
		}
	}
}

// keyHashOf is the SHA-256 of the key of the certificate in the PEM file
// at path.
func keyHashOf(t *testing.T, path string) []byte {
	t.Helper()
	b, err := os.ReadFile(path)
	if err != nil {
		t.Fatal(err)
	}
	cert, err := pki.ParseCertPEM(b)
	if err != nil {
		t.Fatal(err)
	}
	return pki.KeyHash(cert)
}
