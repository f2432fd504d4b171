package enrolment

import (
	"bytes"
	"errors"
	"fmt"
	"log/slog"
	"os"
	"path/filepath"
	"strings"
	"time"

	"google.golang.org/protobuf/proto"

	"github.com/borough-os/borough/datavol"
	"github.com/borough-os/borough/esp"
	"github.com/borough-os/borough/internal/atomicfile"
	"github.com/borough-os/borough/internal/pki"
	"github.com/borough-os/borough/proto/enrolmentpb"
)

// Load returns the node's enrolment config.
//
// A fresh node (its data partition holds no volume yet) reads the config
// from fw_cfg, else from the ESP mounted at espRoot, checks it, and
// records it on the ESP as the config it applied (esp.AppliedEnrolment);
// Confirm records it on the data volume once that exists. With neither,
// it bootstraps a cluster with no owner. Load does not check the config
// against the clock, which may not be set yet: a fresh node calls
// CheckClock once it is.
//
// A node that was set up runs from the config it applied, never checked
// against the clock again: an RTC a year off, or an owner certificate that
// expired since, must not stop an established node. Load returns the
// ESP's record of it, provisional: the node may bring up its network with
// it, but trusts nothing in it that grants authority (the owner, the
// storage policy) until Confirm has matched it to the data volume's. Of a
// config in fw_cfg or on the ESP that differs from the record, only the
// network settings are applied (applyNetwork); the rest is ignored, with a
// warning: a config applies to a node's first boot only. Without a
// readable record on the ESP, the current config stands in for it until
// Confirm.
func Load(log *slog.Logger, espRoot string, fresh bool) (*Enrolment, error) {
	source, b, err := read(espRoot)
	if err != nil {
		return nil, err
	}
	record := esp.AppliedEnrolment.In(espRoot)
	if fresh {
		if source == sourceNone {
			if e, err := awaitingConfig(espRoot); e != nil || err != nil {
				return e, err
			}
		}
		e, err := parse(b, source, time.Time{})
		if err != nil {
			return nil, err
		}
		if e.Spent() {
			return nil, fmt.Errorf("enrolment config from %s: %w", source, ErrSpent)
		}
		e.applied = b
		return e, writeRecord(record, b)
	}
	applied, err := os.ReadFile(record)
	if err == nil {
		e, perr := parse(applied, "the config this node applied on its first boot", time.Time{})
		if perr == nil {
			warnUnused(log, source, b, applied)
			e.provisional, e.applied = true, applied
			return e, nil
		}
		err = fmt.Errorf("it is damaged: %w", perr)
	} else if errors.Is(err, os.ErrNotExist) {
		err = errors.New("it is missing")
	}
	log.Warn("the ESP's record of the applied enrolment config is unusable; the config in "+source+
		" stands in for it until the data volume's record is read, with DHCP for this boot: "+
		"an established node takes no network settings from a config that is not its own record", "err", err)
	e, perr := parse(b, source, time.Time{})
	if perr != nil {
		log.Warn("the config in "+source+" is unusable too; the default config stands in", "err", perr)
		e, _ = parse(nil, sourceNone, time.Time{})
	}
	e.Interfaces, e.NTPServers = nil, nil
	e.provisional, e.applied, e.refused = true, b, err
	return e, nil
}

// Provisional says whether e is an established node's config as read
// from the ESP, not yet confirmed by the data volume's record: nothing in
// it that grants authority may be trusted.
func (e *Enrolment) Provisional() bool { return e.provisional }

// Confirm checks e, the config Load returned, against the data volume's
// record, with the volume mounted at dataRoot, and returns the config the
// node runs from.
//
// A fresh node's config is recorded on the volume. An established node's
// ESP record that matches the volume's, byte for byte, stands. One that
// differs, is damaged or is missing is refused, by name and with the
// reason, in the log; the volume's record is used and written back to the
// ESP, and its network settings apply from the next boot (the network
// comes up once, before the volume opens). A volume without a
// record (set up by an older Borough) takes the ESP's, once: trust on
// first use, said in the log. A volume record that does not parse is an
// error: the authentic record is lost, and the node must not guess.
func Confirm(log *slog.Logger, e *Enrolment, espRoot, dataRoot string) (*Enrolment, error) {
	path := datavol.AppliedEnrolment.In(dataRoot)
	if !e.provisional {
		if err := forgetResetOwner(espRoot); err != nil {
			return nil, err
		}
		return e, writeRecord(path, e.applied)
	}
	data, err := os.ReadFile(path)
	if errors.Is(err, os.ErrNotExist) {
		log.Warn("the data volume holds no record of the applied enrolment config (this node was set up by an " +
			"older Borough): recording the ESP's, which from now on is checked against it")
		confirmed := *e
		confirmed.provisional = false
		if e.refused != nil {
			if err := writeRecord(esp.AppliedEnrolment.In(espRoot), e.applied); err != nil {
				return nil, err
			}
		}
		return &confirmed, writeRecord(path, e.applied)
	}
	if err != nil {
		return nil, fmt.Errorf("reading the data volume's record of the applied enrolment config: %w", err)
	}
	auth, err := parse(data, "the data volume's record of the config this node applied on its first boot", time.Time{})
	if err != nil {
		return nil, fmt.Errorf("%w; refusing to guess which config this node was enrolled with "+
			"(the ESP's copy is not authenticated)", err)
	}
	auth.applied = data
	if e.refused == nil && bytes.Equal(data, e.applied) {
		return auth, nil
	}
	log.Error("refused " + string(esp.AppliedEnrolment) + ": " + refusal(e, auth) +
		"; running from the data volume's record, and writing it back to the ESP (its network settings apply from the next boot)")
	return auth, writeRecord(esp.AppliedEnrolment.In(espRoot), data)
}

// refusal says why the ESP's record e was refused, against auth, the data
// volume's.
func refusal(e, auth *Enrolment) string {
	if e.refused != nil {
		return e.refused.Error()
	}
	diffs := differences(e, auth)
	if len(diffs) == 0 {
		return "it differs from the data volume's record"
	}
	return "it differs from the data volume's record in " + strings.Join(diffs, ", ")
}

// differences names what a refused record changed, in the terms of the
// authority it would have granted.
func differences(e, auth *Enrolment) []string {
	var diffs []string
	if a, b := e.OwnerName(), auth.OwnerName(); a != b {
		diffs = append(diffs, fmt.Sprintf("the owner (%s, not %s)", a, b))
	}
	if e.StoragePolicy != auth.StoragePolicy {
		diffs = append(diffs, fmt.Sprintf("the storage policy (%s, not %s)", e.StoragePolicy, auth.StoragePolicy))
	}
	if e.ClusterName != auth.ClusterName {
		diffs = append(diffs, fmt.Sprintf("the cluster (%s, not %s)", e.ClusterName, auth.ClusterName))
	}
	if (e.Ticket == nil) != (auth.Ticket == nil) {
		diffs = append(diffs, "bootstrap or join")
	}
	if e.OwnerRecovery != auth.OwnerRecovery {
		diffs = append(diffs, fmt.Sprintf("owner recovery (%v, not %v)", e.OwnerRecovery, auth.OwnerRecovery))
	}
	return diffs
}

// OwnerName is the fingerprint of e's owner, or "none".
func (e *Enrolment) OwnerName() string {
	if e.Owner == nil {
		return "none"
	}
	return pki.Fingerprint(e.Owner)
}

// warnUnused warns, on an established node, of a config in source (b)
// other than its record (applied), which it does not use: an enrolment
// config applies to a node's first boot only, and anyone who writes the
// disk or the machine's fw_cfg writes one. The node's network comes from
// its record and the owner's network change (package netconfig), which
// its ledger authenticates. A config left in fw_cfg is warned of at every
// boot: whoever reads the machine's configuration reads it.
func warnUnused(log *slog.Logger, source string, b, applied []byte) {
	switch {
	case source == sourceNone:
	case !sameConfig(b, applied):
		log.Warn("ignoring the enrolment config in " + source + ", which differs from the one this node applied on " +
			"its first boot: an enrolment config applies to a node's first boot only, and an established node takes " +
			"its network only from its own record and the owner's change (borough node network)")
	case strings.HasPrefix(source, "fw_cfg"):
		log.Warn("the machine's " + source + " still holds this node's enrolment config, which it applied on its " +
			"first boot and does not use again: remove it from the machine's configuration, where whoever reads that reads it")
	}
}

// Network is the network settings of e's config as the config holds them
// (a marshalled enrolmentpb.Network; empty for none): for a record of the
// network the data volume confirmed (package netconfig).
func (e *Enrolment) Network() ([]byte, error) {
	var c enrolmentpb.Config
	if err := proto.Unmarshal(e.applied, &c); err != nil {
		return nil, fmt.Errorf("the applied enrolment config: %w", err)
	}
	return proto.MarshalOptions{Deterministic: true}.Marshal(c.GetNetwork())
}

// sameConfig says whether two configs are the same but for the ticket
// secrets, which a member erases from its record (Spend).
func sameConfig(a, b []byte) bool {
	if sa, _, err := spend(a); err == nil {
		a = sa
	}
	if sb, _, err := spend(b); err == nil {
		b = sb
	}
	return bytes.Equal(a, b)
}

// writeRecord records b as the applied config at path, if it is not
// already.
func writeRecord(path string, b []byte) error {
	if err := os.MkdirAll(filepath.Dir(path), 0o700); err != nil {
		return fmt.Errorf("recording the applied enrolment config: %w", err)
	}
	if err := atomicfile.Update(path, b, 0o600); err != nil {
		return fmt.Errorf("recording the applied enrolment config: %w", err)
	}
	return nil
}
