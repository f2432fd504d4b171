package tpm

import (
	"errors"
	"os"
	"path/filepath"
	"strings"
	"testing"
)

// TestOpenProbes checks what Open does on a machine without a TPM device:
// a TPM the firmware does not describe is none, one it describes is
// probed again, on every bus where no driver took it, and is an error
// if that brings no device.
func TestOpenProbes(t *testing.T) {
	for _, tc := range []struct {
		name string
		// node: the device node exists; table: the firmware's TPM2 table
		// does; bound: buses whose MSFT0101 device a driver took.
		node, table bool
		devices     []string
		bound       []string
		wantErr     error
		wantProbed  map[string]string
		wantDevices string
	}{
		// A file where the device node goes: linuxtpm refuses it, and Open
		// says so rather than probing.
		{name: "a device node", node: true, table: true, devices: []string{"platform"}, wantProbed: map[string]string{"platform": ""}},
		{name: "no TPM", wantErr: ErrNoTPM, wantProbed: map[string]string{}},
		{name: "no TPM the firmware describes, a stray device", devices: []string{"platform"}, wantErr: ErrNoTPM,
			wantProbed: map[string]string{}},
		{name: "described, no driver took it", table: true, devices: []string{"platform", "acpi"}, bound: []string{"acpi"},
			wantErr: ErrNotProbed, wantProbed: map[string]string{"platform": "MSFT0101:00"}, wantDevices: "platform/MSFT0101:00"},
		{name: "described, no device either", table: true, wantErr: ErrNotProbed, wantProbed: map[string]string{},
			wantDevices: "none: the kernel made no device of it either"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			dir := t.TempDir()
			m := machine{sys: filepath.Join(dir, "sys"), nodes: []string{filepath.Join(dir, "tpm0")}}
			if tc.node {
				write(t, m.nodes[0], "")
			}
			if tc.table {
				write(t, filepath.Join(m.sys, "firmware/acpi/tables/TPM2"), "TPM2")
			}
			for _, bus := range tc.devices {
				dev := filepath.Join(m.sys, "bus", bus, "devices", "MSFT0101:00")
				if err := os.MkdirAll(dev, 0o755); err != nil {
					t.Fatal(err)
				}
				for _, b := range tc.bound {
					if b == bus {
						write(t, filepath.Join(dev, "driver"), "")
					}
				}
				write(t, filepath.Join(m.sys, "bus", bus, "drivers_probe"), "")
			}
			_, err := m.open()
			switch {
			case tc.wantErr != nil && !errors.Is(err, tc.wantErr):
				t.Fatalf("open: %v, want %v", err, tc.wantErr)
			case tc.wantErr == nil && (err == nil || errors.Is(err, ErrNoTPM) || errors.Is(err, ErrNotProbed)):
				t.Fatalf("open of a file as the device: %v, want linuxtpm's refusal", err)
			}
			if errors.Is(err, ErrNotProbed) && (!strings.Contains(err.Error(), "3 probes") || !strings.Contains(err.Error(), tc.wantDevices)) {
				t.Errorf("open: %v, want the probes counted and the devices %q named", err, tc.wantDevices)
			}
			for _, bus := range tc.devices {
				b, err := os.ReadFile(filepath.Join(m.sys, "bus", bus, "drivers_probe"))
				if err != nil {
					t.Fatal(err)
				}
				if string(b) != tc.wantProbed[bus] {
					t.Errorf("%s/drivers_probe got %q, want %q", bus, b, tc.wantProbed[bus])
				}
			}
		})
	}
}

// write writes s to path, making its directory.
func write(t *testing.T, path, s string) {
	t.Helper()
	if err := os.MkdirAll(filepath.Dir(path), 0o755); err != nil {
		t.Fatal(err)
	}
	if err := os.WriteFile(path, []byte(s), 0o644); err != nil {
		t.Fatal(err)
	}
}
