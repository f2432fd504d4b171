//go:build boot

package boottest

import (
	"context"
	"crypto/tls"
	"crypto/x509"
	"fmt"
	"net"
	"net/http"
	"sync"
	"testing"
	"time"

	"github.com/borough-os/borough/internal/admin"
	"github.com/borough-os/borough/internal/keyspace"
	"github.com/borough-os/borough/qemu/multinode"
)

// revocation holds a certificate of the cluster CA as a stolen node's
// identity would be: the client port refuses it (it trusts the owner
// alone), the peer port accepts it; once the owner removes its node, both
// ports refuse it within 10 s.
func (m *multi) revocation(t *testing.T) {
	cl := m.client(t, m.c.Nodes[0])
	ctx := timeout(t, 2*time.Minute)
	ca, err := keyspace.ReadCA(ctx, cl)
	if err != nil {
		t.Fatal(err)
	}
	const name = "node-5701e000"
	// The peer port checks the certificate's address against the
	// connection's: QEMU's user network makes the host 10.0.2.2.
	ips := []net.IP{net.IPv4(10, 0, 2, 2), net.IPv4(127, 0, 0, 1)}
	stolen, err := ca.Issue(name, ips, []string{name}, time.Now())
	if err != nil {
		t.Fatal(err)
	}
	rec, _ := keyspace.NodeRecord{Serials: []string{stolen.Cert.SerialNumber.Text(16)}}.Marshal()
	if _, err := cl.Put(ctx, keyspace.Nodes+name, string(rec)); err != nil {
		t.Fatal(err)
	}
	id := tls.Certificate{Certificate: [][]byte{stolen.Cert.Raw}, PrivateKey: stolen.Key}
	for _, n := range m.c.Nodes[:3] {
		if m.clientAccepts(n, id) {
			t.Errorf("node%d's client port accepts a node certificate", n.Index+1)
		}
		if !m.peerAccepts(n, id) {
			t.Fatalf("node%d's peer port refuses a certificate of its CA before any removal", n.Index+1)
		}
	}
	cli(t, "--config", m.config, "node", "remove", m.c.Nodes[0].Endpoint(), name, "--fingerprint", m.c.Fingerprint)
	removed := time.Now()
	var wg sync.WaitGroup
	for _, n := range m.c.Nodes[:3] {
		wg.Go(func() {
			for m.clientAccepts(n, id) || m.peerAccepts(n, id) {
				if time.Since(removed) > 10*time.Second {
					t.Errorf("node%d still accepts the revoked certificate %v after the removal", n.Index+1, time.Since(removed))
					return
				}
				time.Sleep(100 * time.Millisecond)
			}
			t.Logf("node%d refuses the revoked certificate on both ports %.1f s after the removal", n.Index+1, time.Since(removed).Seconds())
		})
	}
	wg.Wait()
}

// peerAccepts says whether n's peer port serves id its /version.
func (m *multi) peerAccepts(n *multinode.Node, id tls.Certificate) bool {
	roots := x509.NewCertPool()
	roots.AddCert(m.c.CA)
	hc := &http.Client{Timeout: 5 * time.Second, Transport: &http.Transport{
		TLSClientConfig: &tls.Config{RootCAs: roots, Certificates: []tls.Certificate{id}}}}
	defer hc.CloseIdleConnections()
	res, err := hc.Get(fmt.Sprintf("https://127.0.0.1:%d/version", n.PeerPort))
	if err != nil {
		return false
	}
	res.Body.Close()
	return res.StatusCode == http.StatusOK
}

// clientAccepts says whether n's client port serves id a read.
func (m *multi) clientAccepts(n *multinode.Node, id tls.Certificate) bool {
	cl, err := admin.Connect([]string{n.Endpoint()}, m.c.CA, id)
	if err != nil {
		return false
	}
	defer cl.Close()
	ctx, cancel := context.WithTimeout(context.Background(), 2*time.Second)
	defer cancel()
	_, err = cl.Get(ctx, "greeting")
	return err == nil
}
