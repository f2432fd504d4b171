package update

import (
	"encoding/json"
	"errors"
	"fmt"
	"os"

	"github.com/borough-os/borough/esp"
	"github.com/borough-os/borough/internal/versioned"
)

// State is where an update is.
type State string

// States of an update.
const (
	// Trying: installed and armed; its try boot has not confirmed it.
	Trying State = "trying"
	// Confirmed: the new system ran and made itself the default.
	Confirmed State = "confirmed"
	// RolledBack: the old system booted instead, and runs.
	RolledBack State = "rolled-back"
)

// recordVersion is the record format's version.
const recordVersion = 1

// Record is the last update, kept on the ESP.
type Record struct {
	Version int   `json:"version"`
	State   State `json:"state"`
	// Slot is where the update installed; From the slot it replaced as
	// the one that runs.
	Slot Slot `json:"slot"`
	From Slot `json:"from"`
	// NewVersion and OldVersion are the boot binaries' versions.
	NewVersion string `json:"new_version"`
	OldVersion string `json:"old_version"`
}

// Records keeps the update record on the ESP: on a node, its ESP ledger
// (package espledger), which refuses a record the node did not write.
type Records interface {
	Read(esp.File) ([]byte, error)
	Write(map[esp.File][]byte) error
}

// ReadRecord reads the record from rs; none is (nil, nil).
func ReadRecord(rs Records) (*Record, error) {
	b, err := rs.Read(esp.UpdateRecord)
	if errors.Is(err, os.ErrNotExist) {
		return nil, nil
	}
	if err != nil {
		return nil, fmt.Errorf("reading the update record: %w", err)
	}
	r, err := versioned.Decode("the update record "+string(esp.UpdateRecord), b, func(r *Record) int { return r.Version }, recordVersion)
	if err != nil {
		return nil, err
	}
	if (r.Slot != A && r.Slot != B) || r.From != r.Slot.Other() {
		return nil, fmt.Errorf("the update record %s names slots %q and %q", esp.UpdateRecord, r.Slot, r.From)
	}
	return r, nil
}

// write writes r to rs, atomically.
func (r Record) write(rs Records) error {
	r.Version = recordVersion
	b, err := json.MarshalIndent(r, "", "  ")
	if err != nil {
		return err
	}
	if err := rs.Write(map[esp.File][]byte{esp.UpdateRecord: b}); err != nil {
		return fmt.Errorf("writing the update record: %w", err)
	}
	return nil
}

// Outcome is what a boot is, given the last update.
type Outcome string

// Outcomes of a boot.
const (
	// Normal: no update is being tried.
	Normal Outcome = "normal"
	// TryBoot: this boot is an update's try boot; it must confirm it.
	TryBoot Outcome = "try boot"
	// RollBack: an update was being tried, and the old slot booted.
	RollBack Outcome = "rolled back"
)

// Decide says what this boot of slot booted is, given the last update's
// record (nil without one).
func Decide(r *Record, booted Slot) Outcome {
	switch {
	case r == nil || r.State != Trying:
		return Normal
	case booted == r.Slot:
		return TryBoot
	}
	return RollBack
}
