package secureboot

import (
	"errors"
	"fmt"
	"os"

	"github.com/borough-os/borough/esp"
	"github.com/borough-os/borough/internal/efivar"
)

// imageSecurityDatabase is the vendor GUID of db
// (EFI_IMAGE_SECURITY_DATABASE_GUID).
const imageSecurityDatabase = "d719b2cb-3d3a-4596-a3bc-dad00e67656f"

// timeBasedAuthenticatedWrite marks a write as a signed update.
const timeBasedAuthenticatedWrite uint32 = 0x20

// Enrol enrols the signed key updates on the ESP mounted at espRoot when
// the firmware is in setup mode, and says whether it did: the caller
// must then reboot, into Secure Boot. Without updates on the ESP, or out
// of setup mode, it does nothing. efivars is where efivarfs is mounted.
func Enrol(espRoot, efivars string) (bool, error) {
	setup, err := efivar.SetupMode(efivars)
	if err != nil || !setup {
		return false, nil
	}
	updates := make(map[string][]byte)
	for _, name := range keyNames {
		f := esp.SecureBootUpdate(name)
		b, err := os.ReadFile(f.In(espRoot))
		if errors.Is(err, os.ErrNotExist) {
			continue
		}
		if err != nil {
			return false, fmt.Errorf("reading %s: %w", f, err)
		}
		updates[name] = b
	}
	switch len(updates) {
	case 0:
		return false, nil
	case len(keyNames):
	default:
		return false, fmt.Errorf("the ESP holds %d of the 3 Secure Boot key updates (%s): put db, KEK and PK there, or none",
			len(updates), esp.SecureBootUpdate("*"))
	}
	attrs := efivar.BootVariable | timeBasedAuthenticatedWrite
	for _, name := range keyNames {
		vendor := efivar.GlobalVariable
		if name == "db" {
			vendor = imageSecurityDatabase
		}
		if err := efivar.Write(efivars, name, vendor, attrs, updates[name]); err != nil {
			return false, fmt.Errorf("enrolling the Secure Boot %s: %w", name, err)
		}
	}
	return true, nil
}
