package enrolment

import (
	"bytes"
	"errors"
	"log/slog"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"filippo.io/age"
	"google.golang.org/protobuf/proto"

	"github.com/borough-os/borough/esp"
	"github.com/borough-os/borough/internal/authority"
	"github.com/borough-os/borough/internal/pki"
	"github.com/borough-os/borough/internal/ticket"
	"github.com/borough-os/borough/proto/enrolmentpb"
)

// TestSpend enrols a fresh node from the ESP, spends its config as a
// member does, and checks what an offline attacker would read: no ticket
// secret in either record or in the config on the ESP; the node still
// runs from its records; and the spent config enrols no fresh node.
func TestSpend(t *testing.T) {
	owner, err := pki.NewOwner("owner", now.AddDate(0, -1, 0))
	if err != nil {
		t.Fatal(err)
	}
	founder := founderConfig(t, owner)
	transfer, err := age.GenerateX25519Identity()
	if err != nil {
		t.Fatal(err)
	}
	restorer := proto.Clone(founder).(*enrolmentpb.Config)
	restorer.GetBootstrap().Restore = validRestore()
	// A restore config of an earlier release carries a transfer key:
	// spending erases it too.
	restorer.GetBootstrap().Restore.TransferIdentity = transfer.String()
	for _, tc := range []struct {
		name   string
		config *enrolmentpb.Config
		spent  func(*Enrolment) bool
	}{
		{"join", join(validTicket(t)), func(e *Enrolment) bool { return e.Spent() }},
		{"bootstrap with a first node's ticket", founder, func(e *Enrolment) bool { return e.FounderTicket == nil && e.Owner != nil }},
		{"bootstrap from a backup", restorer, func(e *Enrolment) bool { return e.Spent() && e.Restore.SnapshotSize == 1<<20 }},
	} {
		t.Run(tc.name, func(t *testing.T) {
			lg := slog.New(slog.DiscardHandler)
			espRoot, dataRoot := t.TempDir(), t.TempDir()
			write(t, espRoot, string(esp.EnrolmentConfig), marshal(t, tc.config))
			e, err := Load(lg, espRoot, true)
			if err != nil {
				t.Fatal(err)
			}
			if e, err = Confirm(lg, e, espRoot, dataRoot); err != nil {
				t.Fatal(err)
			}
			done, err := Spend(e, espRoot, dataRoot)
			if err != nil || len(done) != 3 {
				t.Fatalf("Spend rewrote %v, %v; want both records and the ESP's config", done, err)
			}
			if again, err := Spend(e, espRoot, dataRoot); err != nil || len(again) != 0 {
				t.Errorf("spending again rewrote %v, %v", again, err)
			}
			for _, path := range done {
				b, err := os.ReadFile(path)
				if err != nil {
					t.Fatal(err)
				}
				if bytes.Contains(b, []byte("AGE-SECRET-KEY-")) {
					t.Errorf("%s after Spend still holds a transfer key", filepath.Base(path))
				}
				got, err := Parse(b, path, now)
				if err != nil || !tc.spent(got) {
					t.Errorf("%s after Spend: %+v, %v; want it spent", filepath.Base(path), got, err)
				}
			}
			e, err = Load(lg, espRoot, false)
			if err == nil {
				e, err = Confirm(lg, e, espRoot, dataRoot)
			}
			if err != nil || !tc.spent(e) {
				t.Errorf("the member's next boot: %+v, %v", e, err)
			}
		})
	}
	for _, config := range []*enrolmentpb.Config{join(validTicket(t)), restorer} {
		espRoot := t.TempDir()
		spent, _, err := spend(marshal(t, config))
		if err != nil {
			t.Fatal(err)
		}
		write(t, espRoot, string(esp.EnrolmentConfig), spent)
		if _, err := Load(slog.New(slog.DiscardHandler), espRoot, true); !errors.Is(err, ErrSpent) {
			t.Errorf("a fresh node with a spent %T config: %v, want %v", config.GetMode(), err, ErrSpent)
		}
	}
}

// TestPush: the owner's config sent through the node API is written for
// the next boot, and comes before the config on the ESP; one that does
// not parse, whose ticket expired or was spent, is refused, and nothing
// is written.
func TestPush(t *testing.T) {
	good := marshal(t, join(validTicket(t)))
	spent, _, err := spend(good)
	if err != nil {
		t.Fatal(err)
	}
	for _, tc := range []struct {
		name   string
		config []byte
		at     time.Time
		want   string
	}{
		{"a join config", good, now.Add(-time.Minute), ""},
		{"an expired ticket", good, now.Add(time.Minute), "its ticket expired"},
		{"a spent ticket", spent, now.Add(-time.Minute), ErrSpent.Error()},
		{"not a config", []byte("not a config"), now, "is not a valid config"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			espRoot := t.TempDir()
			write(t, espRoot, string(esp.EnrolmentConfig), marshal(t, bootstrap("other", nil)))
			err := Push(tc.config, espRoot, tc.at)
			if tc.want != "" {
				if err == nil || !strings.Contains(err.Error(), tc.want) {
					t.Errorf("Push = %v, want an error saying %q", err, tc.want)
				}
				if _, err := os.Stat(esp.PushedEnrolment.In(espRoot)); err == nil {
					t.Error("Push wrote a config it refused")
				}
				return
			}
			if err != nil {
				t.Fatal(err)
			}
			e, err := Load(slog.New(slog.DiscardHandler), espRoot, true)
			if err != nil || e.ClusterName != "prod" || !strings.Contains(e.Source, "node API") {
				t.Errorf("a fresh boot after the push loads %+v, %v; want the pushed config", e, err)
			}
		})
	}
}

// TestResetOwner: a fresh node that its owner reset, without a config,
// waits for one from that owner; given one, it takes it, and forgets the
// owner of the reset once it has a data volume.
func TestResetOwner(t *testing.T) {
	owner, err := pki.NewOwner("owner", now.AddDate(0, -1, 0))
	if err != nil {
		t.Fatal(err)
	}
	lg := slog.New(slog.DiscardHandler)
	espRoot := t.TempDir()
	write(t, espRoot, string(esp.ResetOwner), pki.CertPEM(owner.Cert))
	e, err := Load(lg, espRoot, true)
	if err != nil || !e.AwaitsConfig || e.Owner == nil || !e.Owner.Equal(owner.Cert) {
		t.Fatalf("a reset node without a config loads %+v, %v; want it waiting for its owner's", e, err)
	}
	if err := Push(marshal(t, join(validTicket(t))), espRoot, now.Add(-time.Minute)); err != nil {
		t.Fatal(err)
	}
	if e, err = Load(lg, espRoot, true); err != nil || e.AwaitsConfig || e.Ticket == nil {
		t.Fatalf("with the owner's config: %+v, %v", e, err)
	}
	if _, err := os.Stat(esp.ResetOwner.In(espRoot)); err != nil {
		t.Errorf("the owner of the reset is gone before the node has a data volume: %v", err)
	}
	if _, err := Confirm(lg, e, espRoot, t.TempDir()); err != nil {
		t.Fatal(err)
	}
	if _, err := os.Stat(esp.ResetOwner.In(espRoot)); !errors.Is(err, os.ErrNotExist) {
		t.Errorf("the owner of the reset is still on the ESP: %v", err)
	}
}

// founderConfig is a bootstrap config of cluster prod with owner's
// first node's ticket.
func founderConfig(t *testing.T, owner *pki.Cert) *enrolmentpb.Config {
	t.Helper()
	tk, body, err := ticket.Founder("prod", now)
	if err != nil {
		t.Fatal(err)
	}
	stmt, err := authority.Sign(owner.Cert, owner.Key, authority.KindTicket, body)
	if err != nil {
		t.Fatal(err)
	}
	c := bootstrap("prod", owner.Cert.Raw)
	c.GetBootstrap().OwnerTicket, c.GetBootstrap().TicketSecret = stmt, tk.GetSecret()
	return c
}
