package ticket

import (
	"crypto/sha256"
	"errors"
	"strings"
	"testing"
	"time"

	"google.golang.org/protobuf/proto"

	"github.com/borough-os/borough/internal/authority"
	"github.com/borough-os/borough/internal/pki"
	"github.com/borough-os/borough/proto/authoritypb"
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
	if string(rec.GetClaimKey()) != string(ClaimKey(got)) {
		t.Error("the record's claim key is not the parsed ticket's")
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
	forged := proto.Clone(tk).(*enrolmentpb.Ticket)
	forged.Secret[0] ^= 1
	good := Prove(tk, "node-00000001", key[:])
	replayed := good
	replayed.KeyHash = other[:]
	unsigned := good
	unsigned.Signature = nil
	late := now.Add(DefaultTTL + time.Second)
	for _, tc := range []struct {
		name    string
		rec     *joinpb.TicketRecord
		proof   Proof
		at      time.Time
		want    Admission
		wantErr error
	}{
		{"fresh", rec, good, now, Claim, nil},
		{"preflight of a fresh ticket", rec, Prove(tk, "", nil), now, Claim, nil},
		{"unknown", nil, good, now, 0, ErrUnknown},
		{"forged secret", rec, Prove(forged, "node-00000001", key[:]), now, 0, ErrWrongSecret},
		{"no signature", rec, unsigned, now, 0, ErrWrongSecret},
		{"a claim replayed for another key", rec, replayed, now, 0, ErrWrongSecret},
		{"expired", rec, good, late, 0, ErrExpired},
		{"same node again", claimed, good, now, Again, nil},
		{"same node again, after expiry", claimed, good, late, 0, ErrExpired},
		{"replayed by another node, after expiry", claimed, Prove(tk, "node-00000002", other[:]), late, 0, ErrUsed},
		{"replayed by another node", claimed, Prove(tk, "node-00000002", other[:]), now, 0, ErrUsed},
		{"preflight of a used ticket", claimed, Prove(tk, "", nil), now, 0, ErrUsed},
		{"forged secret on a used ticket", claimed, Prove(forged, "node-00000001", key[:]), now, 0, ErrWrongSecret},
	} {
		t.Run(tc.name, func(t *testing.T) {
			got, err := Admit(tc.rec, tc.proof, tc.at)
			if got != tc.want || !errors.Is(err, tc.wantErr) {
				t.Errorf("Admit = %v, %v; want %v, %v", got, err, tc.want, tc.wantErr)
			}
		})
	}
}

// TestCheckAdmission tries what a member that holds the CA's key would
// pass off as another node's admission: each is refused.
func TestCheckAdmission(t *testing.T) {
	owner, err := pki.NewOwner("owner", now)
	if err != nil {
		t.Fatal(err)
	}
	rogue, err := pki.NewOwner("owner", now)
	if err != nil {
		t.Fatal(err)
	}
	tk, rec := mint(t)
	statement := func(by *pki.Cert, claimKey []byte) []byte {
		b, err := authority.Sign(by.Cert, by.Key, authority.KindTicket, &authoritypb.Ticket{
			Cluster: tk.GetClusterName(), Id: tk.GetId(), Expires: rec.GetExpires(), ClaimKey: claimKey})
		if err != nil {
			t.Fatal(err)
		}
		return b
	}
	key := sha256.Sum256([]byte("node key"))
	mine := sha256.Sum256([]byte("the rogue's key"))
	admission := func(statement []byte, p Proof) []byte {
		b, err := NewAdmission(statement, p)
		if err != nil {
			t.Fatal(err)
		}
		return b
	}
	// A ticket of the rogue's own, claimed for its key in the node's name.
	own, ownRec := mint(t)
	ownTicket := proto.Clone(tk).(*enrolmentpb.Ticket)
	ownTicket.Secret = own.GetSecret()
	good := admission(statement(owner, rec.GetClaimKey()), Prove(tk, "node-00000001", key[:]))
	for _, tc := range []struct {
		name      string
		admission []byte
		node      string
		key       []byte
		want      string
	}{
		{"the owner's admission", good, "node-00000001", key[:], ""},
		{"none", nil, "node-00000001", key[:], "has no admission"},
		{"damaged", []byte("\xff\xff"), "node-00000001", key[:], "damaged"},
		{"another node's, shown for this node", good, "node-00000002", key[:], "not node-00000002's"},
		{"the node's, with the rogue's key", good, "node-00000001", mine[:], "another key"},
		{"its claim re-signed for the rogue's key", admission(statement(owner, rec.GetClaimKey()), Prove(ownTicket, "node-00000001", mine[:])),
			"node-00000001", mine[:], "does not verify"},
		{"a ticket the rogue signed", admission(statement(rogue, ownRec.GetClaimKey()), Prove(ownTicket, "node-00000001", mine[:])),
			"node-00000001", mine[:], "not signed by this node's owner"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			err := CheckAdmission(tc.admission, owner.Cert, tk.GetClusterName(), tc.node, tc.key)
			if tc.want == "" {
				if err != nil {
					t.Fatalf("CheckAdmission = %v", err)
				}
				return
			}
			if !errors.Is(err, ErrNotAdmitted) || !strings.Contains(err.Error(), tc.want) {
				t.Errorf("CheckAdmission = %v, want %v containing %q", err, ErrNotAdmitted, tc.want)
			}
		})
	}
	if err := CheckAdmission(good, owner.Cert, "other", "node-00000001", key[:]); err == nil || !strings.Contains(err.Error(), "for cluster") {
		t.Errorf("CheckAdmission in another cluster = %v", err)
	}
}
