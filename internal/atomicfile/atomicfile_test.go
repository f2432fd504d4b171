package atomicfile

import (
	"os"
	"path/filepath"
	"strings"
	"testing"
)

func TestWrite(t *testing.T) {
	for _, tc := range []struct {
		name    string
		prepare func(t *testing.T, path string)
	}{
		{"new file in a new directory", func(*testing.T, string) {}},
		{"replaces an existing file", func(t *testing.T, path string) {
			os.MkdirAll(filepath.Dir(path), 0o700)
			os.WriteFile(path, []byte("old contents, longer than the new"), 0o600)
		}},
		{"replaces a stale temporary file with a wider mode", func(t *testing.T, path string) {
			os.MkdirAll(filepath.Dir(path), 0o700)
			os.WriteFile(path+".tmp", []byte("left by a crash, and longer than the new"), 0o644)
		}},
	} {
		t.Run(tc.name, func(t *testing.T) {
			path := filepath.Join(t.TempDir(), "dir", "f")
			tc.prepare(t, path)
			if err := Write(path, []byte("new"), 0o600); err != nil {
				t.Fatal(err)
			}
			got, err := os.ReadFile(path)
			if err != nil || string(got) != "new" {
				t.Errorf("contents = %q, %v", got, err)
			}
			if st, _ := os.Stat(path); st.Mode().Perm() != 0o600 {
				t.Errorf("mode = %v, want 0600", st.Mode().Perm())
			}
			if _, err := os.Stat(path + ".tmp"); !os.IsNotExist(err) {
				t.Error("the temporary file was left behind")
			}
		})
	}
	blocker := filepath.Join(t.TempDir(), "file")
	os.WriteFile(blocker, nil, 0o600)
	err := Write(filepath.Join(blocker, "f"), []byte("x"), 0o600)
	if err == nil || !strings.Contains(err.Error(), blocker) {
		t.Errorf("Write under a regular file = %v, want an error naming the path", err)
	}
}
