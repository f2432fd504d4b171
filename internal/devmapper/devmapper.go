// Package devmapper creates and removes device-mapper devices through the
// kernel's ioctl interface on /dev/mapper/control.
//
// It is written here because the Go module proxy serves no device-mapper
// library, and Borough runs no libdevmapper or dmsetup. The request numbers
// and the dm_ioctl and dm_target_spec layouts come from golang.org/x/sys/unix;
// this package only assembles the buffers (see
// include/uapi/linux/dm-ioctl.h). A device comes up in three steps:
// DM_DEV_CREATE makes an empty device, DM_TABLE_LOAD gives it an inactive
// table, and DM_DEV_SUSPEND without the suspend flag swaps the table in and
// resumes it. There is no udev, so Create makes the /dev/mapper/NAME node
// itself.
package devmapper

import (
	"bytes"
	"encoding/binary"
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"unsafe"

	"golang.org/x/sys/unix"
)

// Target is one line of a device-mapper table.
type Target struct {
	// Start and Length are in 512-byte sectors of the new device.
	Start, Length uint64
	// Type is the target type, e.g. "crypt".
	Type string
	// Params are the target's parameters. They may hold key material:
	// tables are loaded with DM_SECURE_DATA_FLAG, so the kernel wipes
	// its copies, and Create clears its own; the caller clears Params.
	Params []byte
}

const (
	controlPath = "/dev/mapper/control"
	// headerSize is sizeof(struct dm_ioctl).
	headerSize = 312
	// specSize is sizeof(struct dm_target_spec).
	specSize = 40
)

// version is the ioctl interface version Borough speaks: 4.0.0, which
// every kernel since 2.6 accepts.
var version = [3]uint32{4, 0, 0}

// Path returns the device node of the device named name.
func Path(name string) string {
	return filepath.Join(filepath.Dir(controlPath), name)
}

// Create creates and activates a device named name with table targets and
// returns its device node. On failure it removes whatever it created.
func Create(name string, targets []Target) (path string, err error) {
	return create(name, targets, 0)
}

// CreateReadOnly is Create of a read-only device, as a verity target
// must be.
func CreateReadOnly(name string, targets []Target) (path string, err error) {
	return create(name, targets, unix.DM_READONLY_FLAG)
}

func create(name string, targets []Target, flags uint32) (path string, err error) {
	if len(name) == 0 || len(name) >= 128 || bytes.ContainsAny([]byte(name), "/\x00") {
		return "", fmt.Errorf("device-mapper name %q is invalid", name)
	}
	ctl, err := os.OpenFile(controlPath, os.O_RDWR, 0)
	if err != nil {
		return "", fmt.Errorf("opening device-mapper control: %w", err)
	}
	defer ctl.Close()

	hdr, err := ioctl(ctl, unix.DM_DEV_CREATE, name, 0, nil, 0)
	if err != nil {
		return "", fmt.Errorf("creating device-mapper device %s: %w", name, err)
	}
	defer func() {
		if err != nil {
			_, _ = ioctl(ctl, unix.DM_DEV_REMOVE, name, 0, nil, 0)
		}
	}()
	table := marshalTable(targets)
	_, err = ioctl(ctl, unix.DM_TABLE_LOAD, name, unix.DM_SECURE_DATA_FLAG|flags, table, len(targets))
	clear(table)
	if err != nil {
		return "", fmt.Errorf("loading table of %s: %w", name, err)
	}
	if _, err = ioctl(ctl, unix.DM_DEV_SUSPEND, name, 0, nil, 0); err != nil {
		return "", fmt.Errorf("activating %s: %w", name, err)
	}
	path = Path(name)
	_ = os.Remove(path)
	if err = unix.Mknod(path, unix.S_IFBLK|0o600, int(hdr.Dev)); err != nil {
		return "", fmt.Errorf("creating device node %s: %w", path, err)
	}
	return path, nil
}

// Remove removes the device named name and its device node. The device
// must not be in use.
func Remove(name string) error {
	ctl, err := os.OpenFile(controlPath, os.O_RDWR, 0)
	if err != nil {
		return fmt.Errorf("opening device-mapper control: %w", err)
	}
	defer ctl.Close()
	if _, err := ioctl(ctl, unix.DM_DEV_REMOVE, name, 0, nil, 0); err != nil {
		return fmt.Errorf("removing device-mapper device %s: %w", name, err)
	}
	if err := os.Remove(Path(name)); err != nil && !errors.Is(err, os.ErrNotExist) {
		return err
	}
	return nil
}

// marshalTable lays out targets as DM_TABLE_LOAD wants them after the
// header: each dm_target_spec followed by its NUL-terminated parameters,
// padded to 8 bytes, with Next giving the offset to the next spec.
//
// The buffer is sized up front, so that no copy of the parameters is left
// behind in a smaller one it outgrew.
func marshalTable(targets []Target) []byte {
	total := 0
	for _, t := range targets {
		total += specLen(t)
	}
	buf := bytes.NewBuffer(make([]byte, 0, total))
	for _, t := range targets {
		size := specLen(t)
		spec := unix.DmTargetSpec{Sector_start: t.Start, Length: t.Length, Next: uint32(size)}
		copy(spec.Target_type[:len(spec.Target_type)-1], t.Type)
		_ = binary.Write(buf, binary.NativeEndian, spec)
		buf.Write(t.Params)
		buf.Write(make([]byte, size-specSize-len(t.Params)))
	}
	return buf.Bytes()
}

// specLen is the size of t's spec with its NUL-terminated parameters,
// padded to 8 bytes.
func specLen(t Target) int {
	return (specSize + len(t.Params) + 1 + 7) &^ 7
}

// ioctl issues one device-mapper request for the device name, with data
// (holding targets table entries) after the header, and returns the header
// the kernel wrote back.
func ioctl(ctl *os.File, req uint, name string, flags uint32, data []byte, targets int) (unix.DmIoctl, error) {
	hdr := unix.DmIoctl{
		Version:      version,
		Data_size:    uint32(headerSize + len(data)),
		Data_start:   headerSize,
		Flags:        flags,
		Target_count: uint32(targets),
	}
	copy(hdr.Name[:len(hdr.Name)-1], name)
	var buf bytes.Buffer
	_ = binary.Write(&buf, binary.NativeEndian, hdr)
	buf.Write(data)
	b := buf.Bytes()
	defer clear(b)
	_, _, errno := unix.Syscall(unix.SYS_IOCTL, ctl.Fd(), uintptr(req), uintptr(unsafe.Pointer(&b[0])))
	if errno != 0 {
		return hdr, errno
	}
	var out unix.DmIoctl
	err := binary.Read(bytes.NewReader(b[:headerSize]), binary.NativeEndian, &out)
	return out, err
}
