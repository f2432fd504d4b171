package update

import (
	"errors"
	"fmt"
	"strings"

	"github.com/borough-os/borough/esp"
	"github.com/borough-os/borough/internal/efivar"
)

// Slot is a boot slot, A or B.
type Slot string

// The slots.
const (
	A Slot = "A"
	B Slot = "B"
)

// Other returns the slot that is not s.
func (s Slot) Other() Slot {
	if s == A {
		return B
	}
	return A
}

// BootBinary is the slot's boot binary on the ESP.
func (s Slot) BootBinary() esp.File {
	if s == B {
		return esp.BootBinaryB
	}
	return esp.BootBinary
}

// Entry is the number of the slot's NVRAM boot entry.
func (s Slot) Entry() uint16 {
	if s == B {
		return 0xB00B
	}
	return 0xB00A
}

// efiPath is the slot's boot binary as a boot entry names it.
func (s Slot) efiPath() string {
	return `\` + strings.ReplaceAll(string(s.BootBinary()), "/", `\`)
}

// Booted returns the slot the firmware started: B if it started slot B's
// boot entry, else A, whose boot binary is also what the firmware starts
// without one.
func Booted(efivars string) (Slot, error) {
	n, err := efivar.BootCurrent(efivars)
	switch {
	case errors.Is(err, efivar.ErrNotFound):
		return A, nil
	case err != nil:
		return A, fmt.Errorf("which slot booted: %w", err)
	case n == B.Entry():
		return B, nil
	}
	return A, nil
}
