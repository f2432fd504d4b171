// Package efivar reads and writes UEFI variables through efivarfs, and
// encodes the boot entries Borough writes.
//
// The node reads the Secure Boot state and the boot entry it was started
// from, and writes a boot entry and BootNext to arm a one-shot boot (an
// update's try boot; in test builds, a boot entry with a command line of
// an attacker's choosing). u-root's uefivars parses boot entries but does
// not encode them, and pulling u-root in for two small structures is not
// worth it: the encoding (UEFI 2.10, 3.1.3 Load Options and 10.3 Device
// Path Nodes) is written here and checked byte by byte in the tests.
package efivar

import (
	"encoding/binary"
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"unicode/utf16"

	"golang.org/x/sys/unix"
)

// Dir is where efivarfs is mounted.
const Dir = "/sys/firmware/efi/efivars"

// GlobalVariable is the vendor GUID of the variables UEFI defines
// (EFI_GLOBAL_VARIABLE).
const GlobalVariable = "8be4df61-93ca-11d2-aa0d-00e098032b8c"

// Variable attributes.
const (
	NonVolatile       uint32 = 0x1
	BootServiceAccess uint32 = 0x2
	RuntimeAccess     uint32 = 0x4
	// BootVariable are the attributes of Boot#### and BootNext.
	BootVariable = NonVolatile | BootServiceAccess | RuntimeAccess
)

// ErrNotFound says the variable does not exist.
var ErrNotFound = errors.New("no such EFI variable")

// path is the efivarfs file of variable name of vendor.
func path(dir, name, vendor string) string {
	return filepath.Join(dir, name+"-"+vendor)
}

// Read returns the attributes and data of variable name of vendor.
func Read(dir, name, vendor string) (uint32, []byte, error) {
	b, err := os.ReadFile(path(dir, name, vendor))
	if errors.Is(err, os.ErrNotExist) {
		return 0, nil, fmt.Errorf("%s: %w", name, ErrNotFound)
	}
	if err != nil {
		return 0, nil, err
	}
	// efivarfs files start with the attributes, then the data.
	if len(b) < 4 {
		return 0, nil, fmt.Errorf("EFI variable %s: %d bytes, shorter than its attributes", name, len(b))
	}
	return binary.LittleEndian.Uint32(b), b[4:], nil
}

// Write sets variable name of vendor, creating it if need be. efivarfs
// marks most existing variables immutable, to protect them from a stray
// rm; Write lifts that flag for the write.
func Write(dir, name, vendor string, attrs uint32, data []byte) error {
	p := path(dir, name, vendor)
	if err := setMutable(p); err != nil {
		return fmt.Errorf("EFI variable %s: %w", name, err)
	}
	// efivarfs takes a variable in one write: attributes, then data.
	b := binary.LittleEndian.AppendUint32(nil, attrs)
	b = append(b, data...)
	f, err := os.OpenFile(p, os.O_WRONLY|os.O_CREATE|os.O_TRUNC, 0o644)
	if err != nil {
		return fmt.Errorf("EFI variable %s: %w", name, err)
	}
	if _, err := f.Write(b); err != nil {
		f.Close()
		return fmt.Errorf("writing EFI variable %s: %w", name, err)
	}
	return f.Close()
}

// Remove deletes variable name of vendor, if there is one.
func Remove(dir, name, vendor string) error {
	p := path(dir, name, vendor)
	if err := setMutable(p); err != nil {
		return fmt.Errorf("EFI variable %s: %w", name, err)
	}
	if err := os.Remove(p); err != nil && !errors.Is(err, os.ErrNotExist) {
		return fmt.Errorf("removing EFI variable %s: %w", name, err)
	}
	return nil
}

// immutableFlag is FS_IMMUTABLE_FL of linux/fs.h, which x/sys/unix lacks.
const immutableFlag = 0x10

// setMutable clears the immutable flag of an existing efivarfs file.
func setMutable(p string) error {
	f, err := os.Open(p)
	if errors.Is(err, os.ErrNotExist) {
		return nil
	}
	if err != nil {
		return err
	}
	defer f.Close()
	flags, err := unix.IoctlGetUint32(int(f.Fd()), unix.FS_IOC_GETFLAGS)
	if errors.Is(err, unix.ENOTTY) || errors.Is(err, unix.EOPNOTSUPP) {
		// A filesystem without file flags (tests use tmpfs).
		return nil
	}
	if err != nil {
		return fmt.Errorf("reading file flags: %w", err)
	}
	if flags&immutableFlag == 0 {
		return nil
	}
	if err := unix.IoctlSetPointerInt(int(f.Fd()), unix.FS_IOC_SETFLAGS, int(flags&^immutableFlag)); err != nil {
		return fmt.Errorf("clearing the immutable flag: %w", err)
	}
	return nil
}

// SecureBoot says whether the firmware booted with Secure Boot on.
func SecureBoot(dir string) (bool, error) {
	return flag(dir, "SecureBoot")
}

// SetupMode says whether the firmware is in setup mode: it has no
// platform key, so anyone may enrol Secure Boot keys.
func SetupMode(dir string) (bool, error) {
	return flag(dir, "SetupMode")
}

// flag reads a one-byte boolean global variable.
func flag(dir, name string) (bool, error) {
	_, b, err := Read(dir, name, GlobalVariable)
	if err != nil {
		return false, err
	}
	if len(b) != 1 {
		return false, fmt.Errorf("EFI variable %s: %d bytes, want 1", name, len(b))
	}
	return b[0] == 1, nil
}

// BootCurrent returns the number of the boot entry the firmware started.
func BootCurrent(dir string) (uint16, error) {
	_, b, err := Read(dir, "BootCurrent", GlobalVariable)
	if err != nil {
		return 0, err
	}
	if len(b) != 2 {
		return 0, fmt.Errorf("EFI variable BootCurrent: %d bytes, want 2", len(b))
	}
	return binary.LittleEndian.Uint16(b), nil
}

// SetBootEntry writes boot entry Boot#### number n.
func SetBootEntry(dir string, n uint16, o LoadOption) error {
	b, err := o.Marshal()
	if err != nil {
		return err
	}
	return Write(dir, BootEntryName(n), GlobalVariable, BootVariable, b)
}

// SetBootNext makes the firmware start boot entry n on the next boot
// only.
func SetBootNext(dir string, n uint16) error {
	return Write(dir, "BootNext", GlobalVariable, BootVariable, binary.LittleEndian.AppendUint16(nil, n))
}

// BootOrder returns the boot entries the firmware tries, in order; none
// without the variable.
func BootOrder(dir string) ([]uint16, error) {
	_, b, err := Read(dir, "BootOrder", GlobalVariable)
	if errors.Is(err, ErrNotFound) {
		return nil, nil
	}
	if err != nil {
		return nil, err
	}
	if len(b)%2 != 0 {
		return nil, fmt.Errorf("EFI variable BootOrder: %d bytes, not a list of entries", len(b))
	}
	order := make([]uint16, len(b)/2)
	for i := range order {
		order[i] = binary.LittleEndian.Uint16(b[2*i:])
	}
	return order, nil
}

// SetBootOrder makes the firmware try the boot entries in order.
func SetBootOrder(dir string, order []uint16) error {
	var b []byte
	for _, n := range order {
		b = binary.LittleEndian.AppendUint16(b, n)
	}
	return Write(dir, "BootOrder", GlobalVariable, BootVariable, b)
}

// BootEntryName is the variable name of boot entry n.
func BootEntryName(n uint16) string {
	return fmt.Sprintf("Boot%04X", n)
}

// ucs2 encodes s as the firmware's strings are: UTF-16LE, with a NUL if
// nul is set.
func ucs2(s string, nul bool) []byte {
	var b []byte
	for _, u := range utf16.Encode([]rune(s)) {
		b = binary.LittleEndian.AppendUint16(b, u)
	}
	if nul {
		b = append(b, 0, 0)
	}
	return b
}
