package update

import (
	"fmt"
	"slices"

	"github.com/borough-os/borough/internal/efivar"
)

// Arm writes both slots' boot entries, for the ESP partition part, and
// makes the firmware boot rec's slot on the next boot only.
func Arm(efivars string, part efivar.Partition, rec *Record) error {
	if err := writeEntries(efivars, part); err != nil {
		return err
	}
	if err := efivar.SetBootNext(efivars, rec.Slot.Entry()); err != nil {
		return fmt.Errorf("arming the try boot of slot %s: %w", rec.Slot, err)
	}
	return nil
}

// writeEntries writes both slots' boot entries, for the ESP partition
// part.
func writeEntries(efivars string, part efivar.Partition) error {
	for _, s := range []Slot{A, B} {
		entry := efivar.LoadOption{Description: "Borough slot " + string(s), Partition: part, Path: s.efiPath()}
		if err := efivar.SetBootEntry(efivars, s.Entry(), entry); err != nil {
			return fmt.Errorf("writing the boot entry of slot %s: %w", s, err)
		}
	}
	return nil
}

// Expected is the slot the update record r leaves to boot: a confirmed
// update's, the one a rolled-back update came from, and A (what the
// firmware starts without an entry) with no record. While an update is
// tried either slot is right (its try boot, or the old one rolling
// back), and Expected says false.
func Expected(r *Record) (Slot, bool) {
	switch {
	case r == nil:
		return A, true
	case r.State == Confirmed:
		return r.Slot, true
	case r.State == RolledBack:
		return r.From, true
	}
	return "", false
}

// Redirect makes the firmware boot slot again, for a node it started
// from the other one because its boot entries were lost or reordered (a
// firmware update, a flat CMOS battery): it writes both slots' entries
// again, puts slot first in the boot order, and makes the next boot
// slot's.
func Redirect(efivars string, part efivar.Partition, slot Slot) error {
	if err := writeEntries(efivars, part); err != nil {
		return err
	}
	order, err := efivar.BootOrder(efivars)
	if err != nil {
		return err
	}
	if err := efivar.SetBootOrder(efivars, confirmedOrder(order, slot)); err != nil {
		return fmt.Errorf("making slot %s the default: %w", slot, err)
	}
	if err := efivar.SetBootNext(efivars, slot.Entry()); err != nil {
		return fmt.Errorf("booting slot %s next: %w", slot, err)
	}
	return nil
}

// Confirm makes the try boot's slot the one the firmware boots, the other
// slot next, and records it confirmed in rs.
func Confirm(efivars string, rs Records, rec *Record) error {
	order, err := efivar.BootOrder(efivars)
	if err != nil {
		return err
	}
	if err := efivar.SetBootOrder(efivars, confirmedOrder(order, rec.Slot)); err != nil {
		return fmt.Errorf("making slot %s the default: %w", rec.Slot, err)
	}
	rec.State = Confirmed
	return rec.write(rs)
}

// confirmedOrder is order with slot's entry first and the other slot's
// second.
func confirmedOrder(order []uint16, slot Slot) []uint16 {
	out := []uint16{slot.Entry(), slot.Other().Entry()}
	for _, n := range order {
		if !slices.Contains(out, n) {
			out = append(out, n)
		}
	}
	return out
}

// RecordRollBack records that the old slot booted instead of rec's.
func RecordRollBack(rs Records, rec *Record) error {
	rec.State = RolledBack
	return rec.write(rs)
}
