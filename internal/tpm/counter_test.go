package tpm

import (
	"bytes"
	"errors"
	"strings"
	"testing"

	"github.com/google/go-tpm/tpm2"
)

// TestEpoch plays an attacker who keeps an old copy of a key file and
// puts it back: once the epoch has moved on, the old seal no longer
// unseals, with the reason; the seal of the current epoch does; and a
// counter undefined and defined again does not go back.
func TestEpoch(t *testing.T) {
	tp := newTPM(t, 1)
	first, err := tp.Epoch()
	if err != nil || first == 0 {
		t.Fatalf("Epoch = %d, %v; want a defined counter", first, err)
	}
	if again, err := tp.Epoch(); err != nil || again != first {
		t.Fatalf("Epoch again = %d, %v; want %d", again, err, first)
	}
	values, err := tp.PCRs(DefaultPCRs)
	if err != nil {
		t.Fatal(err)
	}
	old, err := tp.SealTo(secret32, values, first)
	if err != nil {
		t.Fatal(err)
	}
	if got, err := tp.Unseal(old); err != nil || !bytes.Equal(got, secret32) {
		t.Fatalf("Unseal in its epoch = %x, %v", got, err)
	}
	next, err := tp.SealTo(secret32, values, first+1)
	if err != nil {
		t.Fatal(err)
	}
	if _, err := tp.Unseal(next); !errors.Is(err, ErrRolledBack) {
		t.Errorf("Unseal before the epoch it was sealed to: %v, want %v", err, ErrRolledBack)
	}
	if now, err := tp.Advance(); err != nil || now != first+1 {
		t.Fatalf("Advance = %d, %v; want %d", now, err, first+1)
	}
	if _, err := tp.Unseal(old); !errors.Is(err, ErrRolledBack) || !strings.Contains(err.Error(), "sealed in epoch") {
		t.Errorf("Unseal of a seal from the epoch before: %v, want %v", err, ErrRolledBack)
	}
	if got, err := tp.Unseal(next); err != nil || !bytes.Equal(got, secret32) {
		t.Errorf("Unseal in the new epoch = %x, %v", got, err)
	}
	checkNoHandles(t, tp)

	// The owner (with the empty auth every Borough machine has) removes
	// the counter and defines it again: it comes back no lower.
	name, _, err := tp.counterName(EpochCounter)
	if err != nil {
		t.Fatal(err)
	}
	_, err = tpm2.NVUndefineSpace{
		AuthHandle: tpm2.AuthHandle{Handle: tpm2.TPMRHOwner, Auth: tpm2.PasswordAuth(nil)},
		NVIndex:    tpm2.NamedHandle{Handle: tpm2.TPMHandle(EpochCounter), Name: name},
	}.Execute(tp.t)
	if err != nil {
		t.Fatal(err)
	}
	if redefined, err := tp.Epoch(); err != nil || redefined < first+1 {
		t.Errorf("Epoch of a counter defined again = %d, %v; want at least %d", redefined, err, first+1)
	}
	if _, err := tp.Unseal(old); err == nil {
		t.Error("a seal of the first epoch unsealed after the counter was defined again")
	}
}

// TestEpochIndexTaken: an NV index of another program's at the epoch
// counter's number is not taken for the counter.
func TestEpochIndexTaken(t *testing.T) {
	tp := newTPM(t, 1)
	pub := counterPublic(EpochCounter, false)
	pub.Attributes.NT = tpm2.TPMNTOrdinary
	_, err := tpm2.NVDefineSpace{
		AuthHandle: tpm2.AuthHandle{Handle: tpm2.TPMRHOwner, Auth: tpm2.PasswordAuth(nil)},
		PublicInfo: tpm2.New2B(pub),
	}.Execute(tp.t)
	if err != nil {
		t.Fatal(err)
	}
	if _, err := tp.Epoch(); err == nil || !strings.Contains(err.Error(), "another program uses it") {
		t.Errorf("Epoch with the index taken = %v, want a refusal", err)
	}
}

// TestCounters: the ledger's counter is defined on first use (and says
// so), counts on its own, and moving it leaves the epoch, and so every
// seal, alone.
func TestCounters(t *testing.T) {
	tp := newTPM(t, 1)
	epoch, err := tp.Epoch()
	if err != nil {
		t.Fatal(err)
	}
	first, defined, err := tp.Count(LedgerCounter)
	if err != nil || !defined || first == 0 {
		t.Fatalf("Count of a new counter = %d, %v, %v; want a value, defined", first, defined, err)
	}
	if again, defined, err := tp.Count(LedgerCounter); err != nil || defined || again != first {
		t.Fatalf("Count again = %d, %v, %v; want %d, not defined again", again, defined, err, first)
	}
	if next, err := tp.Increment(LedgerCounter); err != nil || next != first+1 {
		t.Fatalf("Increment = %d, %v; want %d", next, err, first+1)
	}
	if now, err := tp.Epoch(); err != nil || now != epoch {
		t.Errorf("Epoch after the ledger counter moved = %d, %v; want %d", now, err, epoch)
	}
	checkNoHandles(t, tp)
}
