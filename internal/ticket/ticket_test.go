package ticket

import (
	"crypto/sha256"
	"errors"
	"strings"
	"testing"
	"time"

	"google.golang.org/protobuf/proto"

	"github.com/borough-os/borough/proto/enrolmentpb"
	"github.com/borough-os/borough/proto/joinpb"
)

var now = time.Date(2026, 12, 1, 12, 0, 0, 0, time.UTC)

func mint(t *testing.T) (*enrolmentpb.Ticket, *joinpb.TicketRecord) {
	t.Helper()
	tk, rec, err := Mint(Params{
		Cluster: "prod", CAFingerprint: "sha256:" + strings.Repeat("0f", 32), Endpoints: []string{"10.77.0.1:7834"},
	}, now)
	if err != nil {
		t.Fatal(err)
	}
	return tk, rec
}

func TestMintParse(t *testing.T) {
	tk, rec := mint(t)
	b, err := proto.Marshal(tk)
	if err != nil {
		t.Fatal(err)
	}
	got, err := Parse(b)
	if err != nil || !proto.Equal(got, tk) {
		t.Fatalf("Parse(Mint) = %v, %v", got, err)
	}
	if got.GetExpires() != now.Add(DefaultTTL).Unix() || rec.GetExpires() != got.GetExpires() {
		t.Errorf("expiry %d, record %d, want %d", got.GetExpires(), rec.GetExpires(), now.Add(DefaultTTL).Unix())
	}
	if strings.Contains(string(mustMarshal(t, rec)), string(tk.GetSecret())) {
		t.Error("the cluster's record holds the secret")
	}
	other, _ := mint(t)
	if string(other.GetSecret()) == string(tk.GetSecret()) || string(other.GetId()) == string(tk.GetId()) {
		t.Error("two tickets share a secret or ID")
	}
}

func mustMarshal(t *testing.T, m proto.Message) []byte {
	b, err := proto.Marshal(m)
	if err != nil {
		t.Fatal(err)
	}
	return b
}

func TestParseRefuses(t *testing.T) {
	good, _ := mint(t)
	for _, tc := range []struct {
		name   string
		change func(*enrolmentpb.Ticket)
		want   string
	}{
		{"version", func(t *enrolmentpb.Ticket) { t.Version = 2 }, "version 2"},
		{"cluster", func(t *enrolmentpb.Ticket) { t.ClusterName = "Prod!" }, "cluster name"},
		{"fingerprint", func(t *enrolmentpb.Ticket) { t.CaFingerprint = "md5:00" }, "CA fingerprint"},
		{"short secret", func(t *enrolmentpb.Ticket) { t.Secret = t.Secret[:8] }, "secret has 8 bytes"},
		{"no ID", func(t *enrolmentpb.Ticket) { t.Id = nil }, "ID has 0 bytes"},
		{"no expiry", func(t *enrolmentpb.Ticket) { t.Expires = 0 }, "no expiry"},
		{"no endpoint", func(t *enrolmentpb.Ticket) { t.JoinEndpoints = nil }, "no join endpoint"},
		{"bad endpoint", func(t *enrolmentpb.Ticket) { t.JoinEndpoints = []string{"10.77.0.1"} }, "not host:port"},
		{"role", func(t *enrolmentpb.Ticket) { t.Role = 9 }, "role 9"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			bad := proto.Clone(good).(*enrolmentpb.Ticket)
			tc.change(bad)
			_, err := Parse(mustMarshal(t, bad))
			if err == nil || !strings.Contains(err.Error(), tc.want) {
				t.Errorf("Parse = %v, want an error containing %q", err, tc.want)
			}
		})
	}
	for name, b := range map[string][]byte{"empty": nil, "garbage": []byte("\xff\xff\xff")} {
		if _, err := Parse(b); err == nil {
			t.Errorf("Parse of %s bytes succeeded", name)
		}
	}
}

func TestAdmit(t *testing.T) {
	tk, rec := mint(t)
	key := sha256.Sum256([]byte("node key"))
	other := sha256.Sum256([]byte("another node's key"))
	claimed := proto.Clone(rec).(*joinpb.TicketRecord)
	claimed.ClaimedBy, claimed.Node = key[:], "node-00000001"
	forged := append([]byte{}, tk.GetSecret()...)
	forged[0] ^= 1
	late := now.Add(DefaultTTL + time.Second)
	for _, tc := range []struct {
		name    string
		rec     *joinpb.TicketRecord
		secret  []byte
		key     []byte
		at      time.Time
		want    Admission
		wantErr error
	}{
		{"fresh", rec, tk.GetSecret(), key[:], now, Claim, nil},
		{"preflight of a fresh ticket", rec, tk.GetSecret(), nil, now, Claim, nil},
		{"unknown", nil, tk.GetSecret(), key[:], now, 0, ErrUnknown},
		{"forged secret", rec, forged, key[:], now, 0, ErrWrongSecret},
		{"no secret", rec, nil, key[:], now, 0, ErrWrongSecret},
		{"expired", rec, tk.GetSecret(), key[:], late, 0, ErrExpired},
		{"same node again", claimed, tk.GetSecret(), key[:], now, Again, nil},
		{"same node again, after expiry", claimed, tk.GetSecret(), key[:], late, 0, ErrExpired},
		{"replayed by another node, after expiry", claimed, tk.GetSecret(), other[:], late, 0, ErrUsed},
		{"replayed by another node", claimed, tk.GetSecret(), other[:], now, 0, ErrUsed},
		{"preflight of a used ticket", claimed, tk.GetSecret(), nil, now, 0, ErrUsed},
		{"forged secret on a used ticket", claimed, forged, key[:], now, 0, ErrWrongSecret},
	} {
		t.Run(tc.name, func(t *testing.T) {
			got, err := Admit(tc.rec, tc.secret, tc.key, tc.at)
			if got != tc.want || !errors.Is(err, tc.wantErr) {
				t.Errorf("Admit = %v, %v; want %v, %v", got, err, tc.want, tc.wantErr)
			}
		})
	}
}
