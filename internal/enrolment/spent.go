package enrolment

import (
	"errors"
	"fmt"
	"os"

	"google.golang.org/protobuf/proto"

	"github.com/borough-os/borough/datavol"
	"github.com/borough-os/borough/esp"
	"github.com/borough-os/borough/proto/enrolmentpb"
)

// A ticket's secret claims the ticket for a key (package ticket), before
// and after the node used it: with a spent ticket's secret and a member's
// copy of the CA key, someone could claim the node's name for a key of
// their own, which peers would take for the node's. Once the node is a
// member, nothing needs the secret (a join cut short asks again with it,
// a member does not), so Spend erases it from the node's records of its
// config, and from the config on the ESP: what an offline attacker could
// read from a member's disk then claims nothing. A config in fw_cfg is the
// hypervisor's, out of the node's reach; the log says so.

// ErrSpent is a fresh node's config whose ticket a node already spent.
var ErrSpent = errors.New("its ticket or backup was spent: a node joined or restored with it and erased its secret (mint a new ticket, or make a new config with enrolment bootstrap --restore)")

// spend returns config b without the secrets of its tickets: a join
// ticket's secret, and a bootstrap's first-node ticket with its secret
// (a bootstrap without one reads as the same cluster, same owner), and
// the transfer key of a restore config of an earlier release.
// It says whether b held any.
func spend(b []byte) ([]byte, bool, error) {
	var c enrolmentpb.Config
	if err := proto.Unmarshal(b, &c); err != nil {
		return nil, false, err
	}
	switch m := c.GetMode().(type) {
	case *enrolmentpb.Config_Join:
		var t enrolmentpb.Ticket
		if err := proto.Unmarshal(m.Join.GetTicket(), &t); err != nil {
			return nil, false, err
		}
		if len(t.GetSecret()) == 0 {
			return b, false, nil
		}
		t.Secret = nil
		tb, err := proto.MarshalOptions{Deterministic: true}.Marshal(&t)
		if err != nil {
			return nil, false, err
		}
		m.Join.Ticket = tb
	case *enrolmentpb.Config_Bootstrap:
		r := m.Bootstrap.GetRestore()
		if len(m.Bootstrap.GetTicketSecret()) == 0 && r.GetTransferIdentity() == "" {
			return b, false, nil
		}
		m.Bootstrap.TicketSecret, m.Bootstrap.OwnerTicket = nil, nil
		if r != nil {
			r.TransferIdentity = ""
		}
	default:
		return b, false, nil
	}
	out, err := proto.MarshalOptions{Deterministic: true}.Marshal(&c)
	return out, true, err
}

// Spent says whether e's ticket, or the first node's ticket of a restore,
// was spent (Spend): a restore's config is spent once its node ran.
func (e *Enrolment) Spent() bool {
	return e.Ticket != nil && len(e.Ticket.GetSecret()) == 0 || e.Restore != nil && e.FounderTicket == nil
}

// Spend erases the ticket secrets of the config e, the one the node runs
// from as a member, in the data volume's record (at dataRoot) and the
// ESP's (at espRoot), and in the config on the ESP if it is that config;
// it says which it rewrote. A member reads no other config from the
// ESP than for its network settings, so any ticket secret there is one
// nothing needs. The data volume's record goes first: a crash
// between the two leaves an ESP record that Confirm refuses and writes
// back from the volume's.
func Spend(e *Enrolment, espRoot, dataRoot string) ([]string, error) {
	switch {
	case e.provisional:
		return nil, errors.New("spending the ticket of an enrolment config the data volume has not confirmed")
	case len(e.applied) == 0:
		return nil, nil
	}
	spent, changed, err := spend(e.applied)
	if err != nil {
		return nil, fmt.Errorf("erasing the ticket secret of the applied enrolment config: %w", err)
	}
	var done []string
	if changed {
		for _, path := range []string{datavol.AppliedEnrolment.In(dataRoot), esp.AppliedEnrolment.In(espRoot)} {
			if err := writeRecord(path, spent); err != nil {
				return done, err
			}
			done = append(done, path)
		}
		e.applied = spent
	}
	for _, f := range []esp.File{esp.PushedEnrolment, esp.EnrolmentConfig} {
		input := f.In(espRoot)
		b, err := os.ReadFile(input)
		if errors.Is(err, os.ErrNotExist) {
			continue
		}
		if err != nil {
			return done, err
		}
		if s, changed, err := spend(b); err == nil && changed {
			if err := writeRecord(input, s); err != nil {
				return done, err
			}
			done = append(done, input)
		}
	}
	return done, nil
}
