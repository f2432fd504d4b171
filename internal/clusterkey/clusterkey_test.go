package clusterkey

import (
	"bytes"
	"crypto/x509"
	"log/slog"
	"math/big"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/borough-os/borough/esp"
	"github.com/borough-os/borough/internal/consensus"
	"github.com/borough-os/borough/internal/pki"
)

func TestResponders(t *testing.T) {
	got := responders(map[string][]string{
		"node-00000001": {"https://10.77.0.1:2380"},
		"node-00000002": {"https://[fd00::2]:2380", "https://10.77.0.2:2380"},
		"node-00000003": {"not a URL\x7f"},
	})
	want := map[string]string{"node-00000001": "10.77.0.1:7836", "node-00000002": "[fd00::2]:7836"}
	if len(got) != len(want) {
		t.Fatalf("responders = %v, want %v", got, want)
	}
	for k, v := range want {
		if got[k] != v {
			t.Errorf("responders[%s] = %q, want %q", k, got[k], v)
		}
	}
}

func TestReadRecord(t *testing.T) {
	for _, tc := range []struct {
		name, content, want string
	}{
		{"member", `{"version":1,"phase":"member","cluster":"prod","node":"node-0a1b2c3d"}`, ""},
		{"bad node", `{"cluster":"prod","node":"../x"}`, "names cluster"},
		{"bad cluster", `{"cluster":"Prod X","node":"node-0a1b2c3d"}`, "names cluster"},
		{"torn", `{"cluster":"pr`, "unexpected end"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			root := t.TempDir()
			write(t, root, esp.NodeState, []byte(tc.content))
			r, err := readRecord(root)
			if tc.want == "" {
				if err != nil || r.Node != "node-0a1b2c3d" {
					t.Errorf("readRecord = %+v, %v", r, err)
				}
				return
			}
			if err == nil || !strings.Contains(err.Error(), tc.want) {
				t.Errorf("readRecord = %v, want an error containing %q", err, tc.want)
			}
		})
	}
}

// TestSealerClear: without a TPM, secrets are kept in clear key files.
func TestSealerClear(t *testing.T) {
	s := &Sealer{}
	secret := bytes.Repeat([]byte{7}, 32)
	b, err := s.Seal("key", secret)
	if err != nil {
		t.Fatal(err)
	}
	got, err := s.Unseal("key", b)
	if err != nil || !bytes.Equal(got, secret) {
		t.Errorf("Unseal(Seal) = %x, %v", got, err)
	}
	if _, err := s.Unseal("key", []byte(`{"version":1,"sealed":{"version":2}}`)); err == nil || !strings.Contains(err.Error(), "sealed to a TPM") {
		t.Errorf("Unseal of a sealed key without a TPM = %v", err)
	}
}

// TestGetWithoutKey: a node with neither a sealed CUK nor an escrow says
// so.
func TestGetWithoutKey(t *testing.T) {
	k := &Keeper{ESPRoot: t.TempDir()}
	if _, err := k.Get(); err == nil || !strings.Contains(err.Error(), "neither sealed on the ESP") {
		t.Errorf("Get = %v, want an error naming both places", err)
	}
}

func write(t *testing.T, root string, f esp.File, b []byte) {
	t.Helper()
	if err := os.MkdirAll(filepath.Dir(f.In(root)), 0o755); err != nil {
		t.Fatal(err)
	}
	if err := os.WriteFile(f.In(root), b, 0o600); err != nil {
		t.Fatal(err)
	}
}

// TestCRLInForce: once the member runs, the responder checks peers
// against the member's CRL file as it is at that moment, not the copy
// Maintain last made; a CRL file that does not parse leaves the last good
// one in force.
func TestCRLInForce(t *testing.T) {
	now := time.Now()
	ca, err := pki.NewCA("c", now)
	if err != nil {
		t.Fatal(err)
	}
	peer, err := ca.Issue("node-peer", nil, nil, now)
	if err != nil {
		t.Fatal(err)
	}
	files := consensus.Files{Dir: t.TempDir()}
	if err := os.WriteFile(files.CA(), pki.CertPEM(ca.Cert), 0o600); err != nil {
		t.Fatal(err)
	}
	k := &Keeper{ESPRoot: t.TempDir(), Log: slog.New(slog.DiscardHandler)}
	k.memberPKI.Store(&files)
	for _, step := range []struct {
		name        string
		crl         func() []byte
		wantRevoked bool
	}{
		{"empty CRL", func() []byte { return mustCRL(t, ca, 1, nil, now) }, false},
		{"the peer removed", func() []byte { return mustCRL(t, ca, 2, []*big.Int{peer.Cert.SerialNumber}, now) }, true},
		{"garbage", func() []byte { return []byte("not a CRL") }, true},
	} {
		if err := os.WriteFile(files.CRL(), step.crl(), 0o600); err != nil {
			t.Fatal(err)
		}
		crl := k.crlInForce()
		revoked := crl != nil && slices.ContainsFunc(crl.RevokedCertificateEntries, func(e x509.RevocationListEntry) bool {
			return e.SerialNumber.Cmp(peer.Cert.SerialNumber) == 0
		})
		if revoked != step.wantRevoked {
			t.Errorf("%s: the peer revoked = %v, want %v", step.name, revoked, step.wantRevoked)
		}
	}
}

func mustCRL(t *testing.T, ca *pki.CA, number int64, revoked []*big.Int, now time.Time) []byte {
	t.Helper()
	der, err := ca.CRL(number, revoked, now)
	if err != nil {
		t.Fatal(err)
	}
	return der
}
