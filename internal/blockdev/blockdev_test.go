package blockdev

import (
	"os"
	"path/filepath"
	"testing"

	"github.com/google/go-cmp/cmp"
)

func TestList(t *testing.T) {
	sys := t.TempDir()
	for name, size := range map[string]string{
		"vda": "2097152\n", "nvme0n1": "8\n", "loop0": "100\n", "ram0": "100\n", "sr0": "0\n",
	} {
		dir := filepath.Join(sys, "block", name)
		if err := os.MkdirAll(dir, 0o755); err != nil {
			t.Fatal(err)
		}
		if err := os.WriteFile(filepath.Join(dir, "size"), []byte(size), 0o644); err != nil {
			t.Fatal(err)
		}
	}
	got, err := List(sys)
	if err != nil {
		t.Fatal(err)
	}
	want := []Disk{{Name: "nvme0n1", Size: 4096}, {Name: "vda", Size: 1 << 30}}
	if diff := cmp.Diff(want, got); diff != "" {
		t.Errorf("List (-want +got):\n%s", diff)
	}
}

func TestListErrors(t *testing.T) {
	sys := t.TempDir()
	if _, err := List(sys); err == nil {
		t.Error("List with no block dir succeeded")
	}
	dir := filepath.Join(sys, "block", "vda")
	if err := os.MkdirAll(dir, 0o755); err != nil {
		t.Fatal(err)
	}
	if err := os.WriteFile(filepath.Join(dir, "size"), []byte("lots"), 0o644); err != nil {
		t.Fatal(err)
	}
	if _, err := List(sys); err == nil {
		t.Error("List with a garbled size succeeded")
	}
}
