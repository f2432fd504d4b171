package main

import (
	"bytes"
	"context"
	"crypto/ecdsa"
	"crypto/tls"
	"crypto/x509"
	"encoding/json"
	"log/slog"
	"net"
	"strings"
	"testing"
	"time"

	"github.com/borough-os/borough/internal/escrow"
	"github.com/borough-os/borough/internal/nodeapi"
	"github.com/borough-os/borough/internal/pki"
)

// TestNodeUnlock runs `borough node unlock` against node APIs on loopback
// that wait for their key: the node whose key the record was sealed for
// gets its CUK, sealed to its wait's key; a machine presenting another
// key under the node's name (a member with the CA's key, or a copy of the
// disk elsewhere) with the node's genuine record gets nothing, nor does a
// node whose record is sealed to another owner. A node whose cluster was
// handed over to the owner since its config takes the owner its record
// is sealed to.
func TestNodeUnlock(t *testing.T) {
	var out strings.Builder
	pair, other, ca := twoOwners(t)
	owner := pair.Leaf
	node := issue(t, ca, "node-00000001")
	posing := issue(t, ca, "node-00000001")
	cuk := bytes.Repeat([]byte{0xc5}, 32)
	for _, tc := range []struct {
		name     string
		presents tls.Certificate
		sealedTo *x509.Certificate
		// config is the owner of the node's enrolment config.
		config  *x509.Certificate
		wantErr string
	}{
		{"the node", node, owner, owner, ""},
		{"another key under its name", posing, owner, owner, "refusing to unlock"},
		{"a record of another owner", node, other.Cert, owner, "not sealed to this owner key"},
		// The cluster was handed over to this owner: the node's config
		// names the one before, its record the one it resealed to.
		{"the owner its record is sealed to", node, owner, other.Cert, ""},
	} {
		t.Run(tc.name, func(t *testing.T) {
			r, err := escrow.SealForOwner(tc.sealedTo.PublicKey.(*ecdsa.PublicKey), pki.Fingerprint(tc.sealedTo), "prod",
				"node-00000001", pki.KeyHash(node.Leaf), nil, cuk)
			if err != nil {
				t.Fatal(err)
			}
			got := lockedNode(t, tc.config, tc.presents, r)
			err = run([]string{"--config", configDir, "node", "unlock", got.addr, "--fingerprint", pki.Fingerprint(ca.Cert)}, &out, &out)
			switch {
			case tc.wantErr == "" && err != nil:
				t.Fatal(err)
			case tc.wantErr != "" && (err == nil || !strings.Contains(err.Error(), tc.wantErr)):
				t.Errorf("node unlock = %v, want an error saying %q", err, tc.wantErr)
			}
			if sent := got.cuk(); (tc.wantErr == "") != bytes.Equal(sent, cuk) {
				t.Errorf("the node got %x", sent)
			}
		})
	}
}

// unlocking is a node API on loopback that waits for its key.
type unlocking struct {
	addr string
	cuk  func() []byte
}

// lockedNode serves a node API that presents cert, gives r and a wait's
// key, and keeps what the owner sends sealed to that key.
func lockedNode(t *testing.T, owner *x509.Certificate, cert tls.Certificate, r *escrow.OwnerRecovery) unlocking {
	t.Helper()
	priv, pub, err := escrow.NewKey()
	if err != nil {
		t.Fatal(err)
	}
	raw, err := json.Marshal(r)
	if err != nil {
		t.Fatal(err)
	}
	got := make(chan []byte, 1)
	s := &nodeapi.Server{
		Owner:       func() *x509.Certificate { return owner },
		Identity:    func() (*tls.Certificate, error) { return &cert, nil },
		Locked:      func() ([]byte, []byte, error) { return raw, pub, nil },
		SealedOwner: func() string { return r.Owner },
		Unlock: func(sealed []byte) error {
			cuk, err := escrow.OpenOwnerUnlock(priv, r, sealed)
			if err == nil {
				got <- cuk
			}
			return err
		},
		Log: slog.New(slog.DiscardHandler),
	}
	l, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	ctx, cancel := context.WithCancel(context.Background())
	t.Cleanup(cancel)
	go s.Serve(ctx, l)
	return unlocking{addr: l.Addr().String(), cuk: func() []byte {
		select {
		case c := <-got:
			return c
		default:
			return nil
		}
	}}
}

// issue returns a certificate of ca for name at 127.0.0.1, with its key
// and ca after it, as a node presents it.
func issue(t *testing.T, ca *pki.CA, name string) tls.Certificate {
	t.Helper()
	c, err := ca.Issue(name, []net.IP{net.IPv4(127, 0, 0, 1)}, []string{name}, time.Now())
	if err != nil {
		t.Fatal(err)
	}
	return tls.Certificate{Certificate: [][]byte{c.Cert.Raw, ca.Cert.Raw}, PrivateKey: c.Key, Leaf: c.Cert}
}
