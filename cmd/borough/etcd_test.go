package main

import (
	"crypto/tls"
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
	t.Setenv(ownerkey.PassphraseEnv, "a test owner's passphrase")
	var out strings.Builder
	if err := run([]string{"--config", configDir, "owner", "init"}, &out, &out); err != nil {
		t.Fatal(err)
	}
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

// TestPinPerCluster: a CA pinned for one address of a cluster's node is
// trusted, without --fingerprint, for another address that presents its
// chain (another name, another port), and pinned for it; an address of
// another cluster is refused without --fingerprint.
func TestPinPerCluster(t *testing.T) {
	configDir = t.TempDir()
	t.Setenv(ownerkey.PassphraseEnv, "a test owner's passphrase")
	var out strings.Builder
	if err := run([]string{"--config", configDir, "owner", "init"}, &out, &out); err != nil {
		t.Fatal(err)
	}
	prod, other := tlsNode(t, "prod"), tlsNode(t, "other")
	_, port, _ := net.SplitHostPort(prod.addr)
	for _, tc := range []struct {
		name, node, fingerprint, want, pinned string
	}{
		{"first use, with the fingerprint", prod.addr, prod.fingerprint, "", prod.fingerprint},
		{"another name of the same node", net.JoinHostPort("localhost", port), "", "", prod.fingerprint},
		{"a node of another cluster", other.addr, "", "a node of no cluster pinned here", ""},
		{"that node, with its fingerprint", other.addr, other.fingerprint, "", other.fingerprint},
	} {
		t.Run(tc.name, func(t *testing.T) {
			path, err := pinCA(tc.node, tc.fingerprint)
			if tc.want != "" {
				if err == nil || !strings.Contains(err.Error(), tc.want) {
					t.Errorf("pinCA(%s) = %v, want %q", tc.node, err, tc.want)
				}
				return
			}
			if err != nil {
				t.Fatal(err)
			}
			b, err := os.ReadFile(path)
			if err != nil {
				t.Fatal(err)
			}
			if ca, err := pki.ParseCertPEM(b); err != nil || pki.Fingerprint(ca) != tc.pinned {
				t.Errorf("%s pinned to %v (%v), want %s", tc.node, ca, err, tc.pinned)
			}
		})
	}
}

// pinTestNode is a TLS server that presents a node certificate of its
// own cluster's CA, as a node's client port does.
type pinTestNode struct{ addr, fingerprint string }

func tlsNode(t *testing.T, cluster string) pinTestNode {
	t.Helper()
	ca, err := pki.NewCA(cluster, time.Now())
	if err != nil {
		t.Fatal(err)
	}
	node, err := ca.Issue("node-0a1b2c3d", []net.IP{net.IPv4(127, 0, 0, 1)}, []string{"localhost"}, time.Now())
	if err != nil {
		t.Fatal(err)
	}
	l, err := tls.Listen("tcp", "127.0.0.1:0", &tls.Config{
		Certificates: []tls.Certificate{{Certificate: [][]byte{node.Cert.Raw, ca.Cert.Raw}, PrivateKey: node.Key}},
		ClientAuth:   tls.RequireAnyClientCert,
	})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { l.Close() })
	go func() {
		for {
			c, err := l.Accept()
			if err != nil {
				return
			}
			c.(*tls.Conn).Handshake()
			c.Close()
		}
	}()
	return pinTestNode{addr: l.Addr().String(), fingerprint: pki.Fingerprint(ca.Cert)}
}
