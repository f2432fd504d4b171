package metrics

import (
	"crypto/rand"
	"crypto/x509"
	"crypto/x509/pkix"
	"math/big"
	"net/http/httptest"
	"strings"
	"testing"
	"time"

	dto "github.com/prometheus/client_model/go"
	"github.com/prometheus/common/expfmt"
	"github.com/prometheus/common/model"

	"github.com/borough-os/borough/internal/pki"
	"github.com/borough-os/borough/proto/nodepb"
)

func TestCheckCredential(t *testing.T) {
	now := time.Now()
	owner, err := pki.NewOwner("owner", now)
	if err != nil {
		t.Fatal(err)
	}
	other, err := pki.NewOwner("owner", now)
	if err != nil {
		t.Fatal(err)
	}
	mint := func(by *pki.Cert, ttl time.Duration, at time.Time) *x509.Certificate {
		c, err := Mint(by.Cert, by.Key, "prometheus", ttl, at)
		if err != nil {
			t.Fatal(err)
		}
		return c.Cert
	}
	// A certificate of the owner's that is no metrics credential.
	tmpl := &x509.Certificate{SerialNumber: big.NewInt(7), Subject: pkix.Name{CommonName: "app", Organization: []string{"Borough"}},
		NotBefore: now.Add(-time.Hour), NotAfter: now.Add(time.Hour)}
	der, err := x509.CreateCertificate(rand.Reader, tmpl, owner.Cert, owner.Cert.PublicKey, owner.Key)
	if err != nil {
		t.Fatal(err)
	}
	plain, _ := x509.ParseCertificate(der)
	tampered := *mint(owner, time.Hour, now)
	tampered.Signature = append([]byte(nil), tampered.Signature...)
	tampered.Signature[len(tampered.Signature)-1] ^= 1
	for _, tc := range []struct {
		name  string
		cert  *x509.Certificate
		owner *x509.Certificate
		err   string
	}{
		{"the owner's", mint(owner, time.Hour, now), owner.Cert, ""},
		{"another owner's", mint(other, time.Hour, now), owner.Cert, "not signed by the owner"},
		{"expired", mint(owner, time.Hour, now.Add(-2*time.Hour)), owner.Cert, "not now"},
		{"not yet valid", mint(owner, time.Hour, now.Add(time.Hour)), owner.Cert, "not now"},
		{"no credential", plain, owner.Cert, "is not a metrics credential"},
		{"signature changed", &tampered, owner.Cert, "not signed by the owner"},
		{"a node without owner", mint(owner, time.Hour, now), nil, "knows no owner"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			err := CheckCredential(tc.cert, tc.owner, now)
			if tc.err == "" && err != nil || tc.err != "" && (err == nil || !strings.Contains(err.Error(), tc.err)) {
				t.Fatalf("CheckCredential = %v, want %q", err, tc.err)
			}
		})
	}
	for _, bad := range []struct {
		name string
		ttl  time.Duration
	}{{"", time.Hour}, {"x", 0}} {
		if _, err := Mint(owner.Cert, owner.Key, bad.name, bad.ttl, now); err == nil {
			t.Errorf("Mint(%q, %v) made a credential", bad.name, bad.ttl)
		}
	}
}

func TestHandler(t *testing.T) {
	info := &nodepb.Info{
		Version: "1.2.0", State: "Running", Cluster: "c", Member: "node-1", BootSlot: "B", SecureBoot: "on", Tpm: true,
		UptimeNanos: int64(90 * time.Second), UnixNano: time.Date(2026, 12, 5, 0, 0, 0, 0, time.UTC).UnixNano(),
		Timeline: []*nodepb.Phase{{Name: "init started", AtNanos: int64(1500 * time.Millisecond)}},
		DataUsed: 1 << 20, DataSize: 1 << 30, Update: "trying 1.2.0 in slot B",
		Escrow: &nodepb.Escrow{Needed: 2, Holders: []string{"a", "b", "c"}, Epoch: 4},
		Space:  &nodepb.Space{DbSize: 80 << 20, DbInUse: 70 << 20, Quota: 74 << 20, Alarms: []string{"NOSPACE"}},
	}
	rec := httptest.NewRecorder()
	Handler(func() *nodepb.Info { return info }).ServeHTTP(rec, httptest.NewRequest("GET", Path, nil))
	parser := expfmt.NewTextParser(model.UTF8Validation)
	families, err := parser.TextToMetricFamilies(rec.Body)
	if err != nil {
		t.Fatal(err)
	}
	value := func(name string, labels ...string) float64 {
		t.Helper()
		f := families[name]
		if f == nil {
			t.Fatalf("no %s", name)
		}
		for _, m := range f.Metric {
			if hasLabels(m, labels) {
				return m.GetGauge().GetValue()
			}
		}
		t.Fatalf("no %s with %v", name, labels)
		return 0
	}
	for _, tc := range []struct {
		name   string
		labels []string
		want   float64
	}{
		{"borough_node_info", []string{"version", "1.2.0", "member", "node-1", "boot_slot", "B", "tpm", "yes"}, 1},
		{"borough_node_state", []string{"state", "Running"}, 1},
		{"borough_node_uptime_seconds", nil, 90},
		{"borough_node_time_seconds", nil, float64(time.Date(2026, 12, 5, 0, 0, 0, 0, time.UTC).Unix())},
		{"borough_boot_phase_seconds", []string{"phase", "init started"}, 1.5},
		{"borough_data_used_bytes", nil, 1 << 20},
		{"borough_data_size_bytes", nil, 1 << 30},
		{"borough_escrow_local", nil, 0},
		{"borough_escrow_needed", nil, 2},
		{"borough_escrow_holders", nil, 3},
		{"borough_escrow_epoch", nil, 4},
		{"borough_update_info", []string{"update", "trying 1.2.0 in slot B"}, 1},
		{"borough_etcd_alarm", []string{"alarm", "NOSPACE"}, 1},
	} {
		if got := value(tc.name, tc.labels...); got != tc.want {
			t.Errorf("%s%v = %v, want %v", tc.name, tc.labels, got, tc.want)
		}
	}
	if value("borough_memory_total_bytes") <= 0 || value("borough_memory_available_bytes") <= 0 {
		t.Error("no memory")
	}
	if families["go_goroutines"] == nil {
		t.Error("the default registry's metrics (Go's, and etcd's in a node) are not served")
	}
}

// hasLabels says whether m has every name, value pair of labels.
func hasLabels(m *dto.Metric, labels []string) bool {
	for i := 0; i+1 < len(labels); i += 2 {
		found := false
		for _, l := range m.GetLabel() {
			found = found || l.GetName() == labels[i] && l.GetValue() == labels[i+1]
		}
		if !found {
			return false
		}
	}
	return true
}
