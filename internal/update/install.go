package update

import (
	"bytes"
	"crypto/sha256"
	"crypto/x509"
	"debug/pe"
	"encoding/hex"
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"strings"

	"golang.org/x/mod/semver"

	"github.com/borough-os/borough/esp"
	"github.com/borough-os/borough/internal/atomicfile"
	"github.com/borough-os/borough/internal/payload"
	"github.com/borough-os/borough/internal/uki"
)

// Update is a new version: a boot binary and the node payload it runs,
// and the owner's signed statement that lets them onto the node
// (SignRelease).
type Update struct {
	BootBinary, Payload []byte
	Release             []byte
}

// Running is what runs now.
type Running struct {
	Slot    Slot
	Version string
	// PayloadSHA is the running payload's SHA-256 (hex).
	PayloadSHA string
}

// Check checks that u is a whole Borough version that the node's owner
// signed and that may replace r: its payload is the one its boot binary's
// initramfs names, the owner's release statement names both and their
// version, and that version is newer (semantic versions), or at least
// other (any other), unless the statement allows a downgrade. It returns
// the new version.
func Check(r Running, u Update, owner *x509.Certificate) (string, error) {
	version, err := checkPair(u.BootBinary, u.Payload)
	if err != nil {
		return "", err
	}
	rel, err := checkRelease(owner, u, version)
	if err != nil {
		return "", err
	}
	if rel.GetDowngrade() {
		return version, nil
	}
	switch {
	case version == r.Version:
		return "", fmt.Errorf("the node already runs version %s (to install it again, the owner signs it with --downgrade)", version)
	case isSemver(version) && isSemver(r.Version) && semver.Compare(canonical(version), canonical(r.Version)) < 0:
		return "", fmt.Errorf("version %s is older than the running %s: a downgrade needs the owner's statement for it "+
			"(borough image sign --downgrade)", version, r.Version)
	}
	return version, nil
}

// checkPair checks that a boot binary and a payload are of one build, and
// returns its version.
func checkPair(bootBinary, payload []byte) (string, error) {
	version, err := uki.VersionOf(bootBinary)
	if err != nil {
		return "", fmt.Errorf("the update's boot binary: %w", err)
	}
	want, err := PayloadSHA(bootBinary)
	if err != nil {
		return "", fmt.Errorf("the update's boot binary: %w", err)
	}
	sum := sha256.Sum256(payload)
	if got := hex.EncodeToString(sum[:]); got != want {
		return "", fmt.Errorf("the update's node payload has SHA-256 %s, but its boot binary runs %s: they are from different builds", got, want)
	}
	return version, nil
}

func canonical(v string) string {
	if !strings.HasPrefix(v, "v") {
		return "v" + v
	}
	return v
}

func isSemver(v string) bool { return semver.IsValid(canonical(v)) }

// PayloadSHA returns the payload hash (hex) in a boot binary's initramfs:
// the node payload it runs.
func PayloadSHA(bootBinary []byte) (string, error) {
	f, err := pe.NewFile(bytes.NewReader(bootBinary))
	if err != nil {
		return "", fmt.Errorf("not a PE image: %w", err)
	}
	s := f.Section(uki.SectionInitrd)
	if s == nil {
		return "", fmt.Errorf("no %s section", uki.SectionInitrd)
	}
	initrd, err := uki.SectionData(s)
	if err != nil {
		return "", err
	}
	records, err := uki.InitrdRecords(initrd)
	if err != nil {
		return "", fmt.Errorf("its initramfs: %w", err)
	}
	for _, r := range records {
		if r.Name != payload.Hash {
			continue
		}
		b := make([]byte, r.FileSize)
		if _, err := r.ReadAt(b, 0); err != nil {
			return "", err
		}
		return strings.TrimSpace(string(b)), nil
	}
	return "", fmt.Errorf("its initramfs has no %s", payload.Hash)
}

// Install checks u against owner (Check), before it writes a byte;
// writes it into the slot that is not running, on the ESP at root; and
// records it as being tried, in rs. It removes the payloads no slot will
// run, first, to make room. It does not arm the try boot (Arm).
func Install(root string, rs Records, r Running, u Update, owner *x509.Certificate) (*Record, error) {
	version, err := Check(r, u, owner)
	if err != nil {
		return nil, err
	}
	target := r.Slot.Other()
	if err := removeStalePayloads(root, r.PayloadSHA); err != nil {
		return nil, err
	}
	sum := sha256.Sum256(u.Payload)
	for _, f := range []struct {
		file esp.File
		data []byte
	}{
		{esp.NodePayload(hex.EncodeToString(sum[:])), u.Payload},
		{target.BootBinary(), u.BootBinary},
	} {
		if err := writeChecked(f.file.In(root), f.data); err != nil {
			return nil, fmt.Errorf("installing %s: %w", f.file, err)
		}
	}
	rec := &Record{Version: recordVersion, State: Trying, Slot: target, From: r.Slot, NewVersion: version, OldVersion: r.Version}
	return rec, rec.write(rs)
}

// writeChecked writes data durably and reads it back: an ESP that does
// not hold what was written must fail here, not in the try boot.
func writeChecked(path string, data []byte) error {
	if err := atomicfile.Write(path, data, 0o600); err != nil {
		return err
	}
	back, err := os.ReadFile(path)
	if err != nil {
		return err
	}
	if !bytes.Equal(back, data) {
		return errors.New("the ESP gave back other bytes than were written")
	}
	return nil
}

// removeStalePayloads removes every node payload but the running one:
// the other slot's is about to be replaced.
func removeStalePayloads(root, running string) error {
	keep := filepath.Base(string(esp.NodePayload(running)))
	files, err := filepath.Glob(filepath.Join(root, esp.NodePayloads))
	if err != nil {
		return err
	}
	for _, f := range files {
		if filepath.Base(f) == keep {
			continue
		}
		if err := os.Remove(f); err != nil {
			return fmt.Errorf("removing a stale payload: %w", err)
		}
	}
	return nil
}
