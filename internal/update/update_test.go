package update

import (
	"bytes"
	"crypto/sha256"
	"encoding/hex"
	"fmt"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/klauspost/compress/zstd"
	"github.com/u-root/mkuimage/cpio"

	"github.com/borough-os/borough/esp"
	"github.com/borough-os/borough/internal/efivar"
	"github.com/borough-os/borough/internal/espledger"
	"github.com/borough-os/borough/internal/payload"
	"github.com/borough-os/borough/internal/pki"
	"github.com/borough-os/borough/internal/uki"
)

func TestDecide(t *testing.T) {
	for _, tc := range []struct {
		name   string
		rec    *Record
		booted Slot
		want   Outcome
	}{
		{"no update", nil, A, Normal},
		{"the try boot", &Record{State: Trying, Slot: B, From: A}, B, TryBoot},
		{"the old slot while trying: rolled back", &Record{State: Trying, Slot: B, From: A}, A, RollBack},
		{"a try boot into A", &Record{State: Trying, Slot: A, From: B}, A, TryBoot},
		{"confirmed, on its slot", &Record{State: Confirmed, Slot: B, From: A}, B, Normal},
		{"confirmed, on the other slot", &Record{State: Confirmed, Slot: B, From: A}, A, Normal},
		{"rolled back already", &Record{State: RolledBack, Slot: B, From: A}, A, Normal},
	} {
		t.Run(tc.name, func(t *testing.T) {
			if got := Decide(tc.rec, tc.booted); got != tc.want {
				t.Errorf("Decide = %q, want %q", got, tc.want)
			}
		})
	}
}

func TestConfirmedOrder(t *testing.T) {
	for _, tc := range []struct {
		order []uint16
		slot  Slot
		want  []uint16
	}{
		{nil, B, []uint16{0xB00B, 0xB00A}},
		{[]uint16{1, 0xB00A, 2, 0xB00B}, B, []uint16{0xB00B, 0xB00A, 1, 2}},
		{[]uint16{0xB00B, 0xB00A, 3}, A, []uint16{0xB00A, 0xB00B, 3}},
	} {
		if got := confirmedOrder(tc.order, tc.slot); fmt.Sprint(got) != fmt.Sprint(tc.want) {
			t.Errorf("confirmedOrder(%x, %s) = %x, want %x", tc.order, tc.slot, got, tc.want)
		}
	}
}

// bootBinary builds a UKI of version whose initramfs names payloadSHA.
func bootBinary(t *testing.T, version, payloadSHA string) []byte {
	t.Helper()
	stub, err := os.ReadFile(uki.DebianStub)
	if err != nil {
		t.Fatalf("reading the EFI stub (apt-get install systemd-boot-efi): %v", err)
	}
	var archive bytes.Buffer
	w := cpio.Newc.Writer(&archive)
	if err := cpio.WriteRecordsAndDirs(w, []cpio.Record{cpio.StaticFile(payload.Hash, payloadSHA+"\n", 0o444)}); err != nil {
		t.Fatal(err)
	}
	if err := cpio.WriteTrailer(w); err != nil {
		t.Fatal(err)
	}
	enc, _ := zstd.NewWriter(nil)
	initrd := enc.EncodeAll(archive.Bytes(), nil)
	b, err := uki.Build(stub, uki.Section{Name: uki.SectionOSRel, Data: []byte(`VERSION_ID="` + version + `"` + "\n")},
		uki.Section{Name: uki.SectionLinux, Data: []byte{1}}, uki.Section{Name: uki.SectionInitrd, Data: initrd})
	if err != nil {
		t.Fatal(err)
	}
	return b
}

func sha(b []byte) string {
	s := sha256.Sum256(b)
	return hex.EncodeToString(s[:])
}

// owners are the node's owner and someone else with a key of their own.
func owners(t *testing.T) (owner, other *pki.Cert) {
	t.Helper()
	owner, err := pki.NewOwner("owner", time.Now())
	if err != nil {
		t.Fatal(err)
	}
	other, err = pki.NewOwner("owner", time.Now())
	if err != nil {
		t.Fatal(err)
	}
	return owner, other
}

// signed is an update of version and payload, signed by signer.
func signed(t *testing.T, signer *pki.Cert, version string, pl []byte, downgrade bool) Update {
	t.Helper()
	u := Update{BootBinary: bootBinary(t, version, sha(pl)), Payload: pl}
	var err error
	if u.Release, err = SignRelease(signer.Cert, signer.Key, u.BootBinary, u.Payload, downgrade); err != nil {
		t.Fatal(err)
	}
	return u
}

// TestCheck tries the updates an attacker would send, and the owner's
// own: only a whole version the owner signed, newer or with the owner's
// statement for a downgrade, passes.
func TestCheck(t *testing.T) {
	pl := []byte("payload of the new version")
	owner, other := owners(t)
	running := Running{Slot: A, Version: "1.2.0"}
	good := signed(t, owner, "1.3.0", pl, false)
	for _, tc := range []struct {
		name    string
		u       Update
		version string
		err     string
	}{
		{"newer", good, "1.3.0", ""},
		{"newer, with a v", signed(t, owner, "v1.10.0", pl, false), "v1.10.0", ""},
		{"not a semantic version", signed(t, owner, "e44966e-dirty", pl, false), "e44966e-dirty", ""},
		{"older", signed(t, owner, "1.1.9", pl, false), "", "older than the running 1.2.0: a downgrade needs the owner's statement"},
		{"older, the owner's downgrade", signed(t, owner, "1.1.9", pl, true), "1.1.9", ""},
		{"the same", signed(t, owner, "1.2.0", pl, false), "", "already runs version 1.2.0"},
		{"unsigned", Update{BootBinary: good.BootBinary, Payload: pl}, "", "the update is not signed"},
		{"signed by another key", signed(t, other, "1.3.0", pl, false), "", "not signed by this node's owner"},
		{"boot binary changed", Update{BootBinary: bootBinary(t, "1.3.1", sha(pl)), Payload: pl, Release: good.Release}, "",
			"the owner signed version 1.3.0, but the update's boot binary is version 1.3.1"},
		{"statement of another version, same number", Update{BootBinary: signed(t, owner, "1.3.0", []byte("x"), false).BootBinary,
			Payload: []byte("x"), Release: good.Release}, "", "boot binary is not the one the owner signed"},
		{"downgrade statement of another version", Update{BootBinary: bootBinary(t, "1.1.9", sha(pl)), Payload: pl,
			Release: signed(t, owner, "1.1.8", pl, true).Release}, "", "the owner signed version 1.1.8"},
		{"statement damaged", Update{BootBinary: good.BootBinary, Payload: pl, Release: good.Release[:20]}, "", "release statement"},
		{"a payload of another build", Update{BootBinary: good.BootBinary, Payload: []byte("another payload"), Release: good.Release}, "",
			"they are from different builds"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			v, err := Check(running, tc.u, owner.Cert)
			if tc.err != "" {
				if err == nil || !strings.Contains(err.Error(), tc.err) {
					t.Fatalf("Check = %v, want %q", err, tc.err)
				}
				return
			}
			if err != nil || v != tc.version {
				t.Errorf("Check = %q, %v; want %q", v, err, tc.version)
			}
		})
	}
	if _, err := Check(running, good, nil); err == nil || !strings.Contains(err.Error(), "no owner") {
		t.Errorf("a node without an owner: Check = %v, want a refusal", err)
	}
	if _, err := Check(running, Update{BootBinary: []byte("MZ not really")}, owner.Cert); err == nil {
		t.Error("Check took a boot binary that is not a PE image")
	}
}

// TestInstallRefusedWritesNothing: a refused update leaves the ESP as it
// was, stale payloads and all.
func TestInstallRefusedWritesNothing(t *testing.T) {
	root := t.TempDir()
	stale := esp.NodePayload(sha([]byte("a stale one"))).In(root)
	os.MkdirAll(filepath.Dir(stale), 0o700)
	os.WriteFile(stale, []byte("a stale one"), 0o600)
	owner, other := owners(t)
	u := signed(t, other, "1.1.0", []byte("new payload"), false)
	if _, err := Install(root, espledger.Unauthenticated(root), Running{Slot: A, Version: "1.0.0"}, u, owner.Cert); err == nil {
		t.Fatal("Install took an update signed by another key")
	}
	files, _ := filepath.Glob(filepath.Join(root, esp.Dir, "*"))
	if len(files) != 1 || files[0] != stale {
		t.Errorf("the ESP holds %v after a refused update, want only %s", files, stale)
	}
}

func TestInstallAndArm(t *testing.T) {
	root, efivars := t.TempDir(), t.TempDir()
	oldPayload, newPayload := []byte("old payload"), []byte("new payload")
	for _, f := range []struct {
		file esp.File
		data []byte
	}{
		{esp.BootBinary, []byte("slot A")},
		{esp.NodePayload(sha(oldPayload)), oldPayload},
		{esp.NodePayload(sha([]byte("a stale one"))), []byte("a stale one")},
	} {
		os.MkdirAll(filepath.Dir(f.file.In(root)), 0o700)
		os.WriteFile(f.file.In(root), f.data, 0o600)
	}
	running := Running{Slot: A, Version: "1.0.0", PayloadSHA: sha(oldPayload)}
	owner, _ := owners(t)
	u := signed(t, owner, "1.1.0", newPayload, false)
	rec, err := Install(root, espledger.Unauthenticated(root), running, u, owner.Cert)
	if err != nil {
		t.Fatal(err)
	}
	if *rec != (Record{Version: recordVersion, State: Trying, Slot: B, From: A, NewVersion: "1.1.0", OldVersion: "1.0.0"}) {
		t.Errorf("record %+v", rec)
	}
	files, _ := filepath.Glob(filepath.Join(root, esp.Dir, "node-*"))
	want := []string{esp.NodePayload(sha(newPayload)).In(root), esp.NodePayload(sha(oldPayload)).In(root)}
	slices.Sort(files)
	slices.Sort(want)
	if fmt.Sprint(files) != fmt.Sprint(want) {
		t.Errorf("payloads on the ESP %v, want %v", files, want)
	}
	if b, _ := os.ReadFile(esp.BootBinaryB.In(root)); !bytes.Equal(b, u.BootBinary) {
		t.Error("slot B does not hold the new boot binary")
	}
	if b, _ := os.ReadFile(esp.BootBinary.In(root)); string(b) != "slot A" {
		t.Error("the running slot was written")
	}
	back, err := ReadRecord(espledger.Unauthenticated(root))
	if err != nil || *back != *rec {
		t.Errorf("ReadRecord = %+v, %v", back, err)
	}

	part := efivar.Partition{Number: 1, Start: 2048, Size: 262144}
	if err := Arm(efivars, part, rec); err != nil {
		t.Fatal(err)
	}
	if _, next, _ := efivar.Read(efivars, "BootNext", efivar.GlobalVariable); hex.EncodeToString(next) != "0bb0" {
		t.Errorf("BootNext = %x, want slot B's entry B00B", next)
	}
	if err := Confirm(efivars, espledger.Unauthenticated(root), rec); err != nil {
		t.Fatal(err)
	}
	if order, _ := efivar.BootOrder(efivars); fmt.Sprint(order) != fmt.Sprint([]uint16{0xB00B, 0xB00A}) {
		t.Errorf("BootOrder after confirming B = %x", order)
	}
	if back, _ := ReadRecord(espledger.Unauthenticated(root)); back.State != Confirmed {
		t.Errorf("record after Confirm: %+v", back)
	}
}

func TestReadRecordBad(t *testing.T) {
	for _, tc := range []struct{ name, data, err string }{
		{"torn", `{"version":1,"sta`, "damaged"},
		{"another version", `{"version":9}`, "has version 9"},
		{"bad slots", `{"version":1,"state":"trying","slot":"C","from":"A"}`, `names slots "C" and "A"`},
	} {
		t.Run(tc.name, func(t *testing.T) {
			root := t.TempDir()
			os.MkdirAll(filepath.Dir(esp.UpdateRecord.In(root)), 0o700)
			os.WriteFile(esp.UpdateRecord.In(root), []byte(tc.data), 0o600)
			if _, err := ReadRecord(espledger.Unauthenticated(root)); err == nil || !strings.Contains(err.Error(), tc.err) {
				t.Errorf("ReadRecord = %v, want %q", err, tc.err)
			}
		})
	}
	if r, err := ReadRecord(espledger.Unauthenticated(t.TempDir())); r != nil || err != nil {
		t.Errorf("ReadRecord without a record = %v, %v", r, err)
	}
}
