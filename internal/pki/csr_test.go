package pki

import (
	"crypto/ecdsa"
	"crypto/elliptic"
	"crypto/rand"
	"crypto/x509"
	"math/big"
	"net"
	"net/netip"
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

func TestSignCSR(t *testing.T) {
	now := time.Now()
	ca, _ := NewCA("prod", now)
	key, _ := ecdsa.GenerateKey(elliptic.P256(), rand.Reader)
	ip := []net.IP{net.IPv4(10, 77, 0, 2)}
	withLoopback := []net.IP{net.IPv4(10, 77, 0, 2), net.IPv4(127, 0, 0, 1), net.IPv6loopback}
	at := netip.MustParseAddr("10.77.0.2")
	for _, tc := range []struct {
		name, node string
		ips        []net.IP
		mangle     bool
		want       string
	}{
		{"good", "node-0a1b2c3d", ip, false, ""},
		{"good, with loopback", "node-0a1b2c3d", withLoopback, false, ""},
		{"bad name", "etcd-admin", ip, false, "not a node name"},
		{"no address", "node-0a1b2c3d", nil, false, "no IP address"},
		{"bad signature", "node-0a1b2c3d", ip, true, "signature"},
		{"another node's address too", "node-0a1b2c3d", []net.IP{net.IPv4(10, 77, 0, 2), net.IPv4(10, 77, 0, 3)}, false,
			"names 10.77.0.3, but the node is at 10.77.0.2"},
		{"not its own address", "node-0a1b2c3d", []net.IP{net.IPv4(10, 77, 0, 3), net.IPv4(127, 0, 0, 1)}, false,
			"names 10.77.0.3, but the node is at 10.77.0.2"},
		{"loopback only", "node-0a1b2c3d", []net.IP{net.IPv4(127, 0, 0, 1)}, false, "does not name 10.77.0.2"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			der, err := NewCSR(tc.node, tc.ips, key)
			if err != nil {
				t.Fatal(err)
			}
			if tc.mangle {
				der[len(der)-3] ^= 0xff
			}
			cert, err := ca.SignCSR(der, at, now)
			if tc.want != "" {
				if err == nil || !strings.Contains(err.Error(), tc.want) {
					t.Errorf("SignCSR = %v, want an error containing %q", err, tc.want)
				}
				return
			}
			if err != nil {
				t.Fatal(err)
			}
			if cert.Subject.CommonName != tc.node || !cert.IPAddresses[0].Equal(ip[0]) || cert.CheckSignatureFrom(ca.Cert) != nil {
				t.Errorf("certificate %v for %v, want %s at %v signed by the CA", cert.Subject, cert.IPAddresses, tc.node, ip)
			}
		})
	}
}

func TestCRLs(t *testing.T) {
	now := time.Now()
	ca, _ := NewCA("prod", now)
	other, _ := NewCA("prod", now)
	first, _ := ca.CRL(1, nil, now)
	current, err := ParseCRL(first, ca.Cert)
	if err != nil {
		t.Fatal(err)
	}
	serials := []*big.Int{big.NewInt(7), big.NewInt(9)}
	next, err := ca.Revoke(current, serials, now)
	if err != nil {
		t.Fatal(err)
	}
	parsed, _ := ParseCRL(next, ca.Cert)
	if parsed.Number.Int64() != 2 || len(parsed.RevokedCertificateEntries) != 2 {
		t.Errorf("revoked CRL: number %v, %d entries; want 2, 2", parsed.Number, len(parsed.RevokedCertificateEntries))
	}
	again, _ := ca.Revoke(parsed, serials[:1], now)
	if p, _ := ParseCRL(again, ca.Cert); len(p.RevokedCertificateEntries) != 2 {
		t.Errorf("revoking a serial twice listed it twice")
	}
	forged, _ := other.CRL(5, nil, now)
	sameNumber, _ := ca.CRL(2, []*big.Int{big.NewInt(1)}, now)
	for _, tc := range []struct {
		name    string
		der     []byte
		current *x509.RevocationList
		want    string
	}{
		{"newer", next, current, ""},
		{"the one in force", next, parsed, ""},
		{"garbage", []byte("garbage"), current, "not a DER revocation list"},
		{"another CA", forged, current, "does not verify"},
		{"older", first, parsed, "older than the one in force"},
		{"same number, other content", sameNumber, parsed, "differs"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			err := CheckCRL(tc.der, ca.Cert, tc.current)
			if (tc.want == "") != (err == nil) || (err != nil && !strings.Contains(err.Error(), tc.want)) {
				t.Errorf("CheckCRL = %v, want %q", err, tc.want)
			}
		})
	}
}

func TestNames(t *testing.T) {
	for _, tc := range []struct {
		name          string
		node, cluster bool
	}{
		{name: "node-0123abcd", node: true, cluster: true},
		{name: "node-0123ABCD", node: false, cluster: false},
		{name: "node-0123abc", node: false, cluster: true},
		{name: "prod", node: false, cluster: true},
		{name: "a" + strings.Repeat("-", 62), node: false, cluster: true},
		{name: "a" + strings.Repeat("-", 63), node: false, cluster: false},
		{name: "", node: false, cluster: false},
		{name: "1prod", node: false, cluster: false},
		{name: "prod\n", node: false, cluster: false},
	} {
		if got := IsNodeName(tc.name); got != tc.node {
			t.Errorf("IsNodeName(%q) = %v, want %v", tc.name, got, tc.node)
		}
		if got := IsClusterName(tc.name); got != tc.cluster {
			t.Errorf("IsClusterName(%q) = %v, want %v", tc.name, got, tc.cluster)
		}
	}
}
