package power

import (
	"bytes"
	"encoding/binary"
	"os"
	"path/filepath"
	"testing"

	"github.com/google/go-cmp/cmp"
)

func event(typ, code uint16, value int32) []byte {
	b := make([]byte, eventSize)
	binary.NativeEndian.PutUint16(b[16:], typ)
	binary.NativeEndian.PutUint16(b[18:], code)
	binary.NativeEndian.PutUint32(b[20:], uint32(value))
	return b
}

func TestReadPresses(t *testing.T) {
	for _, tc := range []struct {
		name   string
		events [][]byte
		want   int
	}{
		{"press and release", [][]byte{event(evKey, keyPower, 1), event(0, 0, 0), event(evKey, keyPower, 0)}, 1},
		{"two presses", [][]byte{event(evKey, keyPower, 1), event(evKey, keyPower, 0), event(evKey, keyPower, 1)}, 2},
		{"other key", [][]byte{event(evKey, 28, 1)}, 0},
		{"autorepeat is not a press", [][]byte{event(evKey, keyPower, 2)}, 0},
	} {
		t.Run(tc.name, func(t *testing.T) {
			n := 0
			err := readPresses(bytes.NewReader(bytes.Join(tc.events, nil)), func() { n++ })
			if err == nil {
				t.Error("readPresses returned nil at end of input, want an error")
			}
			if n != tc.want {
				t.Errorf("pressed %d times, want %d", n, tc.want)
			}
		})
	}
}

func TestButtons(t *testing.T) {
	dir := t.TempDir()
	for event, name := range map[string]string{"event0": "Power Button\n", "event1": "AT Translated Set 2 keyboard\n", "event2": "Power Button\n"} {
		p := filepath.Join(dir, event, "device")
		if err := os.MkdirAll(p, 0o755); err != nil {
			t.Fatal(err)
		}
		if err := os.WriteFile(filepath.Join(p, "name"), []byte(name), 0o644); err != nil {
			t.Fatal(err)
		}
	}
	got, err := buttons(dir)
	if err != nil {
		t.Fatal(err)
	}
	if diff := cmp.Diff([]string{"/dev/input/event0", "/dev/input/event2"}, got); diff != "" {
		t.Errorf("buttons (-want +got):\n%s", diff)
	}
}
