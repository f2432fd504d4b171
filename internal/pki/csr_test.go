package pki

import (
	"crypto/x509"
	"net"
	"strings"
	"testing"
	"time"
)

func TestVerifyPinned(t *testing.T) {
	now := time.Now()
	ca, _ := NewCA("prod", now)
	other, _ := NewCA("other", now)
	node, _ := ca.Issue("n1", []net.IP{net.IPv4(127, 0, 0, 1)}, nil, now)
	impostor, _ := other.Issue("n1", []net.IP{net.IPv4(127, 0, 0, 1)}, nil, now)
	fp := Fingerprint(ca.Cert)
	for _, tc := range []struct {
		name    string
		chain   []*x509.Certificate
		host    string
		fp      string
		wantErr string
	}{
		{"genuine", []*x509.Certificate{node.Cert, ca.Cert}, "127.0.0.1", fp, ""},
		{"mistyped fingerprint", []*x509.Certificate{node.Cert, ca.Cert}, "127.0.0.1", "sha256:00", "does not present the CA"},
		{"impostor with the real CA attached", []*x509.Certificate{impostor.Cert, ca.Cert}, "127.0.0.1", fp, "does not verify"},
		{"impostor with its own CA", []*x509.Certificate{impostor.Cert, other.Cert}, "127.0.0.1", fp, "does not present the CA"},
		{"wrong address", []*x509.Certificate{node.Cert, ca.Cert}, "127.0.0.2", fp, "does not verify"},
		{"leaf only", []*x509.Certificate{node.Cert}, "127.0.0.1", fp, "does not present the CA"},
		{"nothing", nil, "127.0.0.1", fp, "no certificate"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			got, err := VerifyPinned(tc.chain, tc.fp, tc.host)
			if tc.wantErr == "" {
				if err != nil || !got.Equal(ca.Cert) {
					t.Errorf("VerifyPinned = %v, %v; want the CA", got, err)
				}
				return
			}
			if err == nil || !strings.Contains(err.Error(), tc.wantErr) {
				t.Errorf("VerifyPinned = %v, want an error containing %q", err, tc.wantErr)
			}
		})
	}
}
