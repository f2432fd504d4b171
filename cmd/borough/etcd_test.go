package main

import (
	"net"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/borough-os/borough/internal/ownerkey"
	"github.com/borough-os/borough/internal/pki"
)

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
	t.Setenv(ownerkey.PassphraseEnv, "a test owner's passphrase")
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
		{[]string{"--no-owner"}, "--cluster is required"},
		{[]string{"--cluster", "prod", "--no-owner", "--owner", "owner.pem"}, "--no-owner and --owner owner.pem contradict each other"},
		{[]string{"--cluster", "prod", "--gateway4", "10.0.0.1", "--interface", "eth0"}, "sets the static network, which needs --address"},
		{[]string{"--cluster", "prod", "--dns", "notanip"}, "--dns sets the static network, which needs --address"},
		{[]string{"--cluster", "prod", "--address", "10.0.0.5/24", "--dns", "notanip"}, "network.static.dns[0]"},
		{[]string{"--cluster", "prod", "--link", "name=eth0,dhcp,address=10.0.0.5/24,advertise"}, "dhcp and a static address"},
		{[]string{"--cluster", "prod", "--link", "name=eth0,address=10.0.0.5/24,dhcp,advertise"}, "dhcp and a static address"},
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

// TestStatusOfADownNode: status against a pinned node that does not
// answer fails once --timeout passes, saying so.
func TestStatusOfADownNode(t *testing.T) {
	configDir = t.TempDir()
	t.Setenv(ownerkey.PassphraseEnv, "a test owner's passphrase")
	var out strings.Builder
	if err := run([]string{"--config", configDir, "owner", "init"}, &out, &out); err != nil {
		t.Fatal(err)
	}
	l, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	node := l.Addr().String()
	l.Close()
	ca, err := pki.NewCA("down", time.Now())
	if err != nil {
		t.Fatal(err)
	}
	if err := os.MkdirAll(filepath.Dir(caPath(node)), 0o700); err != nil {
		t.Fatal(err)
	}
	if err := os.WriteFile(caPath(node), pki.CertPEM(ca.Cert), 0o600); err != nil {
		t.Fatal(err)
	}
	began := time.Now()
	err = run([]string{"--config", configDir, "status", node, "--timeout", "1s"}, &out, &out)
	if err == nil || !strings.Contains(err.Error(), node+" did not answer within 1s") || time.Since(began) > 10*time.Second {
		t.Errorf("status of a down node = %v after %v", err, time.Since(began))
	}
}
