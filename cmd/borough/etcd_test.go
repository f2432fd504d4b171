package main

import (
	"crypto/x509"
	"net"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/borough-os/borough/internal/pki"
)

func TestCheckChain(t *testing.T) {
	now := time.Now()
	ca, _ := pki.NewCA("prod", now)
	other, _ := pki.NewCA("other", now)
	node, _ := ca.Issue("n1", []net.IP{net.IPv4(127, 0, 0, 1)}, nil, now)
	impostor, _ := other.Issue("n1", []net.IP{net.IPv4(127, 0, 0, 1)}, nil, now)
	fp := pki.Fingerprint(ca.Cert)
	for _, tc := range []struct {
		name    string
		chain   []*x509.Certificate
		node    string
		fp      string
		wantErr string
	}{
		{"genuine", []*x509.Certificate{node.Cert, ca.Cert}, "127.0.0.1:2379", fp, ""},
		{"mistyped fingerprint", []*x509.Certificate{node.Cert, ca.Cert}, "127.0.0.1:2379", "sha256:00", "does not present a CA"},
		{"impostor with the real CA attached", []*x509.Certificate{impostor.Cert, ca.Cert}, "127.0.0.1:2379", fp, "does not verify"},
		{"impostor with its own CA", []*x509.Certificate{impostor.Cert, other.Cert}, "127.0.0.1:2379", fp, "does not present a CA"},
		{"wrong address", []*x509.Certificate{node.Cert, ca.Cert}, "127.0.0.2:2379", fp, "does not verify"},
		{"leaf only", []*x509.Certificate{node.Cert}, "127.0.0.1:2379", fp, "does not present a CA"},
		{"nothing", nil, "127.0.0.1:2379", fp, "no certificate"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			got, err := checkChain(tc.chain, tc.node, tc.fp)
			if tc.wantErr == "" {
				if err != nil || !got.Equal(ca.Cert) {
					t.Errorf("checkChain = %v, %v; want the CA", got, err)
				}
				return
			}
			if err == nil || !strings.Contains(err.Error(), tc.wantErr) {
				t.Errorf("checkChain = %v, want an error containing %q", err, tc.wantErr)
			}
		})
	}
}

func TestPinnedCAMismatch(t *testing.T) {
	configDir = t.TempDir()
	ca, _ := pki.NewCA("prod", time.Now())
	path := caPath("127.0.0.1:2379")
	os.MkdirAll(filepath.Dir(path), 0o700)
	os.WriteFile(path, pki.CertPEM(ca.Cert), 0o644)
	if got, err := pinCA("127.0.0.1:2379", ""); err != nil || got != path {
		t.Errorf("pinCA with a pinned CA = %q, %v", got, err)
	}
	if _, err := pinCA("127.0.0.1:2379", "sha256:00"); err == nil || !strings.Contains(err.Error(), "pinned CA") {
		t.Errorf("pinCA with another fingerprint = %v, want a refusal", err)
	}
	if _, err := pinCA("127.0.0.1:9999", ""); err == nil || !strings.Contains(err.Error(), "first use") {
		t.Errorf("pinCA on first use without a fingerprint = %v", err)
	}
}

func TestOwnerInitAndBootstrap(t *testing.T) {
	configDir = t.TempDir()
	var out strings.Builder
	if err := run([]string{"--config", configDir, "owner", "init"}, &out, &out); err != nil {
		t.Fatal(err)
	}
	if err := run([]string{"--config", configDir, "owner", "init"}, &out, &out); err == nil {
		t.Error("a second owner init replaced the identity without --force")
	}
	cfg := filepath.Join(t.TempDir(), "e.pb")
	for _, tc := range []struct {
		args    []string
		wantErr string
	}{
		{[]string{"--cluster", "prod"}, ""},
		{[]string{"--cluster", "Prod"}, "bootstrap.cluster_name"},
		{[]string{"--cluster", "prod", "--storage-policy", "maybe"}, "--storage-policy"},
		{[]string{"--cluster", "prod", "--address", "10.0.0.5"}, "network.static.addresses[0]"},
		{[]string{"--cluster", "prod", "--address", "10.0.0.5/24", "--gateway6", "fe80::1"}, "contradicts itself"},
	} {
		args := append([]string{"--config", configDir, "enrolment", "bootstrap", "--out", cfg}, tc.args...)
		err := run(args, &out, &out)
		if tc.wantErr == "" && err != nil || tc.wantErr != "" && (err == nil || !strings.Contains(err.Error(), tc.wantErr)) {
			t.Errorf("bootstrap %v = %v, want error %q", tc.args, err, tc.wantErr)
		}
	}
	out.Reset()
	err := run([]string{"enrolment", "show", cfg}, &out, &out)
	if err != nil || !strings.Contains(out.String(), `"prod"`) || !strings.Contains(out.String(), "# owner: owner sha256:") {
		t.Errorf("show = %v:\n%s", err, out.String())
	}
}
