package clusterkey

import (
	"crypto/x509"
	"log/slog"
	"math/big"
	"net/netip"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/borough-os/borough/esp"
	"github.com/borough-os/borough/internal/consensus"
	"github.com/borough-os/borough/internal/espledger"
	"github.com/borough-os/borough/internal/pki"
)

func TestResponders(t *testing.T) {
	got := Responders(map[string][]string{
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
		{"member", `{"version":1,"phase":"member","cluster":"prod","node":"node-0a1b2c3d","cluster_id":"c1","member_id":"a1"}`, ""},
		{"bad node", `{"version":1,"phase":"joining","cluster":"prod","node":"../x"}`, `node "../x" is not a node name`},
		{"bad cluster", `{"version":1,"phase":"joining","cluster":"Prod X","node":"node-0a1b2c3d"}`, `cluster "Prod X" is not a cluster name`},
		{"torn", `{"cluster":"pr`, "unexpected end"},
		{"none", "", "file does not exist"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			root := t.TempDir()
			if tc.content != "" {
				write(t, root, esp.NodeState, []byte(tc.content))
			}
			r, err := readRecord(espledger.Unauthenticated(root))
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

// TestGetWithoutKey: a node with neither a sealed CUK nor an escrow says
// so.
func TestGetWithoutKey(t *testing.T) {
	root := t.TempDir()
	k := &Keeper{ESPRoot: root, Ledger: espledger.Unauthenticated(root)}
	if _, err := k.Get(t.Context()); err == nil || !strings.Contains(err.Error(), "neither sealed on the ESP") {
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

// TestCRLInForce: before the member runs, the responder checks peers
// against the ESP's copy of the CRL, and without a verified one it has
// none (a holder then refuses); once the member runs, against the
// member's CRL file as it is at that moment, not the copy Maintain last
// made. A CRL file that does not parse, or an older one put back, leaves
// the newest good one in force.
func TestCRLInForce(t *testing.T) {
	now := time.Now()
	ca, err := pki.NewCA("c", now)
	if err != nil {
		t.Fatal(err)
	}
	other, err := pki.NewCA("c", now)
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
	root := t.TempDir()
	k := &Keeper{ESPRoot: root, Ledger: espledger.Unauthenticated(root), Log: slog.New(slog.DiscardHandler)}
	if err := os.MkdirAll(filepath.Dir(esp.UnlockCRL.In(k.ESPRoot)), 0o755); err != nil {
		t.Fatal(err)
	}
	for _, step := range []struct {
		name string
		// esp, if set, is the ESP's copy, read as at boot; crl, if set,
		// the running member's file.
		esp, crl    []byte
		wantRevoked bool
		wantErr     bool
	}{
		{name: "the ESP's copy missing", wantErr: true},
		{name: "the ESP's copy of another CA", esp: mustCRL(t, other, 5, nil, now), wantErr: true},
		{name: "the ESP's copy damaged", esp: []byte("not a CRL"), wantErr: true},
		{name: "the ESP's copy", esp: mustCRL(t, ca, 1, nil, now)},
		{name: "the member's, the peer removed", crl: mustCRL(t, ca, 2, []*big.Int{peer.Cert.SerialNumber}, now), wantRevoked: true},
		{name: "the member's, garbage", crl: []byte("not a CRL"), wantRevoked: true},
		{name: "the member's, an older one put back", crl: mustCRL(t, ca, 1, nil, now), wantRevoked: true},
	} {
		switch {
		case step.crl != nil:
			k.memberPKI.Store(&files)
			if err := os.WriteFile(files.CRL(), step.crl, 0o600); err != nil {
				t.Fatal(err)
			}
		case step.esp != nil:
			if err := os.WriteFile(esp.UnlockCRL.In(k.ESPRoot), step.esp, 0o600); err != nil {
				t.Fatal(err)
			}
			k.espCRLErr = k.readESPCRL(ca.Cert)
		default:
			k.espCRLErr = k.readESPCRL(ca.Cert)
		}
		crl, err := k.crlInForce()
		if (err != nil) != step.wantErr {
			t.Errorf("%s: crlInForce = %v, %v; want an error: %v", step.name, crl, err, step.wantErr)
			continue
		}
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

// TestSayIfMoved: a node whose address is not the one its peers know
// says so, by name, with what to do; one at its address, or without an
// address of its own in the directory, says nothing.
func TestSayIfMoved(t *testing.T) {
	for _, tc := range []struct {
		name string
		ip   string
		want string
	}{
		{"moved", "10.0.0.9", "this node, node-0a1b2c3d, was at 10.0.0.1 and is now at 10.0.0.9"},
		{"where it was", "10.0.0.1", ""},
		{"not in the directory", "10.0.0.9", ""},
	} {
		t.Run(tc.name, func(t *testing.T) {
			root := t.TempDir()
			write(t, root, esp.NodeState, []byte(`{"version":1,"phase":"member","cluster":"prod","node":"node-0a1b2c3d","cluster_id":"c1","member_id":"a1"}`))
			var log strings.Builder
			k := &Keeper{ESPRoot: root, Ledger: espledger.Unauthenticated(root), Log: slog.New(slog.NewTextHandler(&log, nil)),
				IP: netip.MustParseAddr(tc.ip)}
			members := map[string][]string{"node-00000002": {"https://10.0.0.2:2380"}}
			if tc.name != "not in the directory" {
				members["node-0a1b2c3d"] = []string{"https://10.0.0.1:2380"}
			}
			k.sayIfMoved(Responders(members))
			switch {
			case tc.want == "" && log.Len() > 0:
				t.Errorf("said %q", log.String())
			case tc.want != "" && (!strings.Contains(log.String(), tc.want) || !strings.Contains(log.String(), "give each node its previous address back")):
				t.Errorf("said %q, want %q and what to do", log.String(), tc.want)
			}
		})
	}
}
