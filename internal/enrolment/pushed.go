package enrolment

import (
	"errors"
	"fmt"
	"os"
	"time"

	"github.com/borough-os/borough/esp"
	"github.com/borough-os/borough/internal/atomicfile"
	"github.com/borough-os/borough/internal/pki"
)

// The owner's configs after the first boot: one sent through the node API
// to a node without a data volume (Push), which read takes before
// fw_cfg's, and the wait of a node its owner reset without one
// (esp.ResetOwner, package reset) for one from that owner.

// Push writes b, a config the owner sent through the node API, to the ESP
// mounted at espRoot for the node's next boot, once it checks at now: a
// config that does not parse, whose ticket has expired or was spent, is
// refused.
func Push(b []byte, espRoot string, now time.Time) error {
	e, err := Parse(b, "the owner's node API", now)
	if err != nil {
		return err
	}
	if e.Spent() {
		return fmt.Errorf("the config the owner sent: %w", ErrSpent)
	}
	if t := e.Ticket; t != nil && now.Unix() >= t.GetExpires() {
		return fmt.Errorf("the config the owner sent: its ticket expired at %s",
			time.Unix(t.GetExpires(), 0).UTC().Format(time.RFC3339))
	}
	if err := atomicfile.Update(esp.PushedEnrolment.In(espRoot), b, 0o600); err != nil {
		return fmt.Errorf("writing the config the owner sent: %w", err)
	}
	return nil
}

// awaitingConfig returns, for a fresh node without a config that its
// owner reset (esp.ResetOwner), a config that waits for one from that
// owner; nil for any other.
func awaitingConfig(espRoot string) (*Enrolment, error) {
	owner, err := pki.ReadCertPEM(esp.ResetOwner.In(espRoot))
	if errors.Is(err, os.ErrNotExist) {
		return nil, nil
	}
	if err != nil {
		return nil, err
	}
	return &Enrolment{Source: sourceNone, ClusterName: DefaultClusterName, Owner: owner, AwaitsConfig: true, OwnerRecovery: true}, nil
}

// forgetResetOwner removes the owner a reset named, once the node has a
// data volume with a config: a config refused before (its ticket spent,
// say) leaves the node waiting for its owner's again.
func forgetResetOwner(espRoot string) error {
	path := esp.ResetOwner.In(espRoot)
	if _, err := os.Stat(path); err != nil {
		return nil
	}
	if err := atomicfile.Remove(path); err != nil {
		return fmt.Errorf("removing %s: %w", esp.ResetOwner, err)
	}
	return nil
}
