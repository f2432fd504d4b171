package atomicfile

import (
	"bytes"
	"errors"
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

func TestWriteAll(t *testing.T) {
	dir := t.TempDir()
	old := filepath.Join(dir, "a", "old")
	os.MkdirAll(filepath.Dir(old), 0o700)
	os.WriteFile(old, []byte("old contents"), 0o600)
	blocker := filepath.Join(dir, "blocker")
	os.WriteFile(blocker, nil, 0o600)
	for _, tc := range []struct {
		name    string
		files   []File
		wantErr string
		// want is each path's contents afterwards; "" for no file.
		want map[string]string
	}{
		{"new and replaced files in several directories",
			[]File{{old, []byte("new a"), 0o600}, {filepath.Join(dir, "b", "c", "new"), []byte("new b"), 0o644}}, "",
			map[string]string{old: "new a", filepath.Join(dir, "b", "c", "new"): "new b"}},
		{"one that cannot be written replaces none",
			[]File{{old, []byte("not written"), 0o600}, {filepath.Join(blocker, "f"), []byte("x"), 0o600}}, blocker,
			map[string]string{old: "new a", filepath.Join(blocker, "f"): ""}},
	} {
		t.Run(tc.name, func(t *testing.T) {
			err := WriteAll(tc.files...)
			if tc.wantErr == "" && err != nil || tc.wantErr != "" && (err == nil || !strings.Contains(err.Error(), tc.wantErr)) {
				t.Fatalf("WriteAll = %v, want an error naming %q", err, tc.wantErr)
			}
			for path, want := range tc.want {
				got, err := os.ReadFile(path)
				if string(got) != want || want != "" && err != nil {
					t.Errorf("%s = %q, %v; want %q", path, got, err, want)
				}
				if _, err := os.Stat(path + ".tmp"); want != "" && !os.IsNotExist(err) {
					t.Errorf("the temporary file of %s was left behind", path)
				}
			}
			for _, f := range tc.files {
				if st, err := os.Stat(f.Path); err == nil && tc.wantErr == "" && st.Mode().Perm() != f.Perm {
					t.Errorf("%s: mode = %v, want %v", f.Path, st.Mode().Perm(), f.Perm)
				}
			}
		})
	}
}

func TestRemove(t *testing.T) {
	dir := t.TempDir()
	present := filepath.Join(dir, "present")
	if err := os.WriteFile(present, []byte("x"), 0o600); err != nil {
		t.Fatal(err)
	}
	blocker := filepath.Join(dir, "blocker")
	if err := os.WriteFile(blocker, nil, 0o600); err != nil {
		t.Fatal(err)
	}
	for _, tc := range []struct {
		name, path string
		wantErr    bool
	}{
		{"present", present, false},
		{"already gone", filepath.Join(dir, "absent"), false},
		{"under a regular file", filepath.Join(blocker, "f"), true},
	} {
		t.Run(tc.name, func(t *testing.T) {
			err := Remove(tc.path)
			if (err != nil) != tc.wantErr {
				t.Fatalf("Remove(%s) = %v, want error %v", tc.path, err, tc.wantErr)
			}
			if _, err := os.Stat(tc.path); !tc.wantErr && !errors.Is(err, os.ErrNotExist) {
				t.Errorf("%s still there after Remove: %v", tc.path, err)
			}
		})
	}
}

// TestErase reads an erased file through a second link to it, as one
// would read freed clusters on the raw disk: its bytes must be zeros.
func TestErase(t *testing.T) {
	for _, tc := range []struct {
		name    string
		content []byte
		absent  bool
	}{
		{"key", []byte("a secret key that must not stay on the disk"), false},
		{"empty", nil, false},
		{"absent", nil, true},
	} {
		t.Run(tc.name, func(t *testing.T) {
			dir := t.TempDir()
			path, other := filepath.Join(dir, "key"), filepath.Join(dir, "other-link")
			if !tc.absent {
				if err := os.WriteFile(path, tc.content, 0o600); err != nil {
					t.Fatal(err)
				}
				if err := os.Link(path, other); err != nil {
					t.Skipf("no hard links here: %v", err)
				}
			}
			if err := Erase(path); err != nil {
				t.Fatalf("Erase: %v", err)
			}
			if _, err := os.Stat(path); !errors.Is(err, os.ErrNotExist) {
				t.Errorf("%s still there after Erase: %v", path, err)
			}
			if tc.absent {
				return
			}
			got, err := os.ReadFile(other)
			if err != nil {
				t.Fatal(err)
			}
			if want := make([]byte, len(tc.content)); !bytes.Equal(got, want) {
				t.Errorf("the erased file's blocks hold %q, want %d zeros", got, len(want))
			}
		})
	}
}

func TestRemoveAll(t *testing.T) {
	dir := t.TempDir()
	tree := filepath.Join(dir, "tree")
	if err := os.MkdirAll(filepath.Join(tree, "member", "wal"), 0o700); err != nil {
		t.Fatal(err)
	}
	if err := os.WriteFile(filepath.Join(tree, "member", "wal", "0.wal"), []byte("x"), 0o600); err != nil {
		t.Fatal(err)
	}
	for _, tc := range []struct{ name, path string }{
		{"a tree", tree},
		{"already gone", filepath.Join(dir, "absent")},
	} {
		t.Run(tc.name, func(t *testing.T) {
			if err := RemoveAll(tc.path); err != nil {
				t.Fatalf("RemoveAll(%s) = %v", tc.path, err)
			}
			if _, err := os.Stat(tc.path); !errors.Is(err, os.ErrNotExist) {
				t.Errorf("%s still there after RemoveAll: %v", tc.path, err)
			}
		})
	}
}

// TestRename renames a directory tree into place, whole, and refuses to
// replace a directory that holds something.
func TestRename(t *testing.T) {
	dir := t.TempDir()
	tmp, dst := filepath.Join(dir, "tree.partial"), filepath.Join(dir, "tree")
	if err := os.MkdirAll(filepath.Join(tmp, "member"), 0o700); err != nil {
		t.Fatal(err)
	}
	if err := os.WriteFile(filepath.Join(tmp, "member", "db"), []byte("data"), 0o600); err != nil {
		t.Fatal(err)
	}
	if err := Rename(tmp, dst); err != nil {
		t.Fatal(err)
	}
	if b, err := os.ReadFile(filepath.Join(dst, "member", "db")); err != nil || string(b) != "data" {
		t.Errorf("after Rename: %q, %v", b, err)
	}
	if _, err := os.Stat(tmp); !os.IsNotExist(err) {
		t.Errorf("the old name is still there: %v", err)
	}
	if err := os.MkdirAll(tmp, 0o700); err != nil {
		t.Fatal(err)
	}
	if err := Rename(tmp, dst); err == nil {
		t.Error("Rename replaced a directory that holds a tree")
	}
}
