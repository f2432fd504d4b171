package pki

import (
	"crypto/x509"
	"math/big"
	"net"
	"strings"
	"testing"
	"time"
)

var now = time.Date(2026, 11, 29, 12, 0, 0, 0, time.UTC)

func TestIssueAndVerify(t *testing.T) {
	ca, err := NewCA("prod", now)
	if err != nil {
		t.Fatal(err)
	}
	other, err := NewCA("other", now)
	if err != nil {
		t.Fatal(err)
	}
	c, err := ca.Issue("node-1", []net.IP{net.ParseIP("10.0.2.15"), net.ParseIP("127.0.0.1")}, []string{"localhost"}, now)
	if err != nil {
		t.Fatal(err)
	}
	for _, tc := range []struct {
		name    string
		roots   *CA
		host    string
		usage   x509.ExtKeyUsage
		wantErr bool
	}{
		{"server by IP", ca, "10.0.2.15", x509.ExtKeyUsageServerAuth, false},
		{"server on loopback", ca, "127.0.0.1", x509.ExtKeyUsageServerAuth, false},
		{"server by name", ca, "localhost", x509.ExtKeyUsageServerAuth, false},
		{"client", ca, "", x509.ExtKeyUsageClientAuth, false},
		{"wrong IP", ca, "10.0.2.16", x509.ExtKeyUsageServerAuth, true},
		{"other CA", other, "10.0.2.15", x509.ExtKeyUsageServerAuth, true},
	} {
		t.Run(tc.name, func(t *testing.T) {
			roots := x509.NewCertPool()
			roots.AddCert(tc.roots.Cert)
			_, err := c.Cert.Verify(x509.VerifyOptions{Roots: roots, DNSName: tc.host, KeyUsages: []x509.ExtKeyUsage{tc.usage}, CurrentTime: now})
			if (err != nil) != tc.wantErr {
				t.Errorf("Verify = %v, want error %v", err, tc.wantErr)
			}
		})
	}
	if !ca.Cert.IsCA || c.Cert.IsCA {
		t.Error("CA bits wrong")
	}
	if got := c.Cert.NotAfter.Sub(now); got < 9*365*24*time.Hour {
		t.Errorf("node certificate valid for %v only", got)
	}
}

func TestCRL(t *testing.T) {
	ca, _ := NewCA("prod", now)
	der, err := ca.CRL(2, []*big.Int{big.NewInt(42)}, now)
	if err != nil {
		t.Fatal(err)
	}
	crl, err := x509.ParseRevocationList(der)
	if err != nil {
		t.Fatalf("CRL is not DER: %v", err)
	}
	if err := crl.CheckSignatureFrom(ca.Cert); err != nil {
		t.Errorf("CRL signature: %v", err)
	}
	if len(crl.RevokedCertificateEntries) != 1 || crl.RevokedCertificateEntries[0].SerialNumber.Int64() != 42 || crl.Number.Int64() != 2 {
		t.Errorf("CRL = %+v", crl)
	}
}

func TestPEMRoundTrip(t *testing.T) {
	ca, _ := NewCA("prod", now)
	c, err := ParseCertPEM(CertPEM(ca.Cert))
	if err != nil || !c.Equal(ca.Cert) {
		t.Errorf("ParseCertPEM = %v", err)
	}
	kp, err := KeyPEM(ca.Key)
	if err != nil {
		t.Fatal(err)
	}
	if _, err := ParseKeyPEM(kp); err != nil {
		t.Error(err)
	}
	if _, err := ParseCertPEM(kp); err == nil {
		t.Error("a key parsed as a certificate")
	}
	if fp := Fingerprint(ca.Cert); !strings.HasPrefix(fp, "sha256:") || len(fp) != 7+64 {
		t.Errorf("Fingerprint = %q", fp)
	}
}
