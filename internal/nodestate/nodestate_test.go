package nodestate

import (
	"errors"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/google/go-cmp/cmp"
)

func TestRecordRoundTrip(t *testing.T) {
	path := filepath.Join(t.TempDir(), "dir", "state.json")
	if r, err := ReadRecord(path); r != nil || err != nil {
		t.Errorf("ReadRecord of a missing file = %v, %v", r, err)
	}
	want := &Record{Phase: PhaseMember, Cluster: "prod", Node: "node-0a1b2c3d", ClusterID: "8c94d1f80cf5a3e2", MemberID: "f2534c996fbe3a78"}
	if err := WriteRecord(path, want); err != nil {
		t.Fatal(err)
	}
	got, err := ReadRecord(path)
	if err != nil || !cmp.Equal(got, want) {
		t.Errorf("ReadRecord = %+v, %v, want %+v", got, err, want)
	}
	if _, err := os.Stat(path + ".tmp"); !os.IsNotExist(err) {
		t.Error("a temporary file was left behind")
	}
	// Dated back, so that a rewrite shows whatever the clock's grain.
	written := time.Date(2020, 1, 1, 0, 0, 0, 0, time.UTC)
	if err := os.Chtimes(path, written, written); err != nil {
		t.Fatal(err)
	}
	if err := WriteRecord(path, want); err != nil {
		t.Fatal(err)
	}
	if again, err := os.Stat(path); err != nil || !again.ModTime().Equal(written) {
		t.Errorf("writing the same record again rewrote the file (%v)", err)
	}
	good, _ := os.ReadFile(path)
	for _, tc := range []struct {
		name, content string
		damaged       bool
	}{
		{"garbage", "{", true},
		{"torn", string(good[:len(good)/2]), true},
		{"empty", "", true},
		{"version", `{"version":9}`, false},
		{"bad phase", strings.Replace(string(good), `"member"`, `"leader"`, 1), true},
		{"bad cluster", strings.Replace(string(good), `"prod"`, `"prod --force-new-cluster"`, 1), true},
		{"bad node", strings.Replace(string(good), `"node-0a1b2c3d"`, `"../etc"`, 1), true},
		{"bad ID", strings.Replace(string(good), `"8c94d1f80cf5a3e2"`, `"zz"`, 1), true},
		{"member without IDs", strings.Replace(string(good), `"8c94d1f80cf5a3e2"`, `""`, 1), true},
	} {
		os.WriteFile(path, []byte(tc.content), 0o600)
		if _, err := ReadRecord(path); err == nil || errors.Is(err, ErrDamaged) != tc.damaged {
			t.Errorf("ReadRecord of %s = %v, want an error (damaged: %v)", tc.name, err, tc.damaged)
		}
	}
}
