package devmapper

import (
	"bytes"
	"encoding/binary"
	"testing"

	"golang.org/x/sys/unix"
)

func TestStructSizes(t *testing.T) {
	if got := binary.Size(unix.DmIoctl{}); got != headerSize {
		t.Errorf("sizeof(dm_ioctl) = %d, want %d", got, headerSize)
	}
	if got := binary.Size(unix.DmTargetSpec{}); got != specSize {
		t.Errorf("sizeof(dm_target_spec) = %d, want %d", got, specSize)
	}
}

func TestMarshalTable(t *testing.T) {
	for _, tc := range []struct {
		name    string
		targets []Target
		// sizes are the expected spec+params sizes, 8-aligned.
		sizes []int
	}{
		{"one", []Target{{0, 100, "crypt", []byte("aes-xts-plain64 00 0 8:2 2048")}}, []int{72}},
		{"exact fit", []Target{{0, 8, "linear", []byte("8:1 0")}}, []int{48}},
		{"two", []Target{{0, 10, "linear", []byte("8:1 0")}, {10, 10, "zero", []byte("")}}, []int{48, 48}},
	} {
		t.Run(tc.name, func(t *testing.T) {
			table := marshalTable(tc.targets)
			off := 0
			for i, want := range tc.sizes {
				var spec unix.DmTargetSpec
				if err := binary.Read(bytes.NewReader(table[off:]), binary.NativeEndian, &spec); err != nil {
					t.Fatal(err)
				}
				tg := tc.targets[i]
				if spec.Sector_start != tg.Start || spec.Length != tg.Length || int(spec.Next) != want {
					t.Errorf("spec %d = start %d length %d next %d, want %d %d %d",
						i, spec.Sector_start, spec.Length, spec.Next, tg.Start, tg.Length, want)
				}
				if typ := string(bytes.TrimRight(spec.Target_type[:], "\x00")); typ != tg.Type {
					t.Errorf("spec %d type = %q, want %q", i, typ, tg.Type)
				}
				params := table[off+specSize : off+want]
				if got := string(params[:bytes.IndexByte(params, 0)]); got != string(tg.Params) {
					t.Errorf("spec %d params = %q, want %q", i, got, tg.Params)
				}
				off += want
			}
			if off != len(table) {
				t.Errorf("table is %d bytes, want %d", len(table), off)
			}
		})
	}
}

func TestCreateRejectsBadNames(t *testing.T) {
	for _, name := range []string{"", "a/b", string(make([]byte, 128))} {
		if _, err := Create(name, nil); err == nil {
			t.Errorf("Create(%q) succeeded", name)
		}
	}
}
