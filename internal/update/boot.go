package update

import (
	"fmt"
	"slices"

	"github.com/borough-os/borough/internal/efivar"
)

// Arm writes both slots' boot entries, for the ESP partition part, and
// makes the firmware boot rec's slot on the next boot only.
func Arm(efivars string, part efivar.Partition, rec *Record) error {
	for _, s := range []Slot{A, B} {
		entry := efivar.LoadOption{Description: "Borough slot " + string(s), Partition: part, Path: s.efiPath()}
		if err := efivar.SetBootEntry(efivars, s.entry(), entry); err != nil {
			return fmt.Errorf("writing the boot entry of slot %s: %w", s, err)
		}
	}
	if err := efivar.SetBootNext(efivars, rec.Slot.entry()); err != nil {
		return fmt.Errorf("arming the try boot of slot %s: %w", rec.Slot, err)
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
	out := []uint16{slot.entry(), slot.Other().entry()}
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
