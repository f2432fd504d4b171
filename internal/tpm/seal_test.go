package tpm

import (
	"bytes"
	"crypto/sha256"
	"encoding/binary"
	"errors"
	"fmt"
	"maps"
	"slices"
	"strings"
	"testing"

	"github.com/google/go-tpm/tpm2"
)

// secret32 is a 32-byte secret like the local unlock key.
var secret32 = bytes.Repeat([]byte{0xa5}, 32)

func TestSealUnseal(t *testing.T) {
	for _, tc := range []struct {
		name   string
		pcrs   []uint
		secret []byte
	}{
		{"default PCRs", DefaultPCRs, secret32},
		{"unsorted PCRs", []uint{7, 0, 4}, secret32},
		{"many PCRs", []uint{0, 1, 2, 3, 4, 5, 6, 7, 16, 23}, secret32},
		{"1 byte", DefaultPCRs, []byte{0}},
		{"128 bytes", DefaultPCRs, bytes.Repeat([]byte{1}, 128)},
	} {
		t.Run(tc.name, func(t *testing.T) {
			tp := newTPM(t, 1)
			// Non-zero PCRs, distinct per PCR.
			for _, pcr := range tc.pcrs {
				extend(t, tp, pcr, "boot")
				extend(t, tp, pcr, strings.Repeat("x", int(pcr)))
			}
			s, err := tp.Seal(tc.secret, tc.pcrs)
			if err != nil {
				t.Fatal(err)
			}
			if want := slices.Sorted(slices.Values(tc.pcrs)); !slices.Equal(s.PCRs, want) {
				t.Errorf("Sealed.PCRs = %v, want %v", s.PCRs, want)
			}
			got, err := tp.Unseal(s)
			if err != nil {
				t.Fatal(err)
			}
			if !bytes.Equal(got, tc.secret) {
				t.Errorf("Unseal = %x, want %x", got, tc.secret)
			}

			// The same after a trip through the on-disk encoding.
			b, err := s.Marshal()
			if err != nil {
				t.Fatal(err)
			}
			s2, err := UnmarshalSealed(b)
			if err != nil {
				t.Fatal(err)
			}
			got, err = tp.Unseal(s2)
			if err != nil {
				t.Fatalf("Unseal after Marshal and UnmarshalSealed: %v", err)
			}
			if !bytes.Equal(got, tc.secret) {
				t.Errorf("Unseal after Marshal and UnmarshalSealed = %x, want %x", got, tc.secret)
			}
			checkNoHandles(t, tp)
		})
	}
}

func TestUnsealAfterPCRChange(t *testing.T) {
	for _, tc := range []struct {
		name   string
		extend []uint
		want   error
		// says is what the error must say about the change.
		says string
	}{
		{"no change", nil, nil, ""},
		{"PCR 16 not sealed to", []uint{16}, nil, ""},
		{"PCR 4 changed", []uint{4}, ErrPolicy, "changed: PCR 4 (the boot binary)"},
		{"PCR 7 changed", []uint{7}, ErrPolicy, "changed: PCR 7 (the Secure Boot state or keys)"},
		{"PCR 12 changed", []uint{12}, ErrPolicy, "changed: PCR 12 (the kernel command line or credentials a boot entry passed)"},
		{"4 and 12 changed", []uint{4, 12}, ErrPolicy, "changed: PCR 4 (the boot binary), PCR 12 ("},
	} {
		t.Run(tc.name, func(t *testing.T) {
			tp := newTPM(t, 1)
			s, err := tp.Seal(secret32, DefaultPCRs)
			if err != nil {
				t.Fatal(err)
			}
			for _, pcr := range tc.extend {
				extend(t, tp, pcr, "new kernel")
			}
			got, err := tp.Unseal(s)
			if !errors.Is(err, tc.want) {
				t.Fatalf("Unseal error = %v, want %v", err, tc.want)
			}
			if err != nil && !strings.Contains(err.Error(), tc.says) {
				t.Errorf("Unseal error = %q, want it to say %q", err, tc.says)
			}
			if err == nil && !bytes.Equal(got, secret32) {
				t.Errorf("Unseal = %x, want %x", got, secret32)
			}
			if err != nil && got != nil {
				t.Errorf("Unseal returned %x with an error", got)
			}
			checkNoHandles(t, tp)
		})
	}
}

// TestCap checks that after Cap, what was sealed before no longer
// unseals in the same boot, and that a fresh seal still works.
func TestCap(t *testing.T) {
	tp := newTPM(t, 1)
	s, err := tp.Seal(secret32, DefaultPCRs)
	if err != nil {
		t.Fatal(err)
	}
	if _, err := tp.Unseal(s); err != nil {
		t.Fatalf("Unseal before Cap: %v", err)
	}
	if err := tp.Cap(DefaultPCRs); err != nil {
		t.Fatal(err)
	}
	if _, err := tp.Unseal(s); !errors.Is(err, ErrPolicy) {
		t.Errorf("Unseal after Cap: error %v, want %v", err, ErrPolicy)
	}
	if err := tp.Cap([]uint{24}); err == nil {
		t.Error("Cap of PCR 24 succeeded")
	}
	checkNoHandles(t, tp)
}

// TestUnsealPinnedSRK plays an interposer that answers with an SRK of
// its own: Unseal must refuse it before salting a session to it.
func TestUnsealPinnedSRK(t *testing.T) {
	tp := newTPM(t, 1)
	s, err := tp.Seal(secret32, DefaultPCRs)
	if err != nil {
		t.Fatal(err)
	}
	s.SRKName = slices.Clone(s.SRKName)
	s.SRKName[len(s.SRKName)-1] ^= 1
	rec := &recorder{TPMCloser: tp.t}
	tp.t = rec
	_, err = tp.Unseal(s)
	if !errors.Is(err, ErrWrongTPM) || !strings.Contains(err.Error(), "storage root key") {
		t.Fatalf("Unseal with another SRK: error %v, want %v naming the storage root key", err, ErrWrongTPM)
	}
	// traffic alternates commands and responses.
	for i := 0; i < len(rec.traffic); i += 2 {
		cmd := rec.traffic[i]
		if cc := tpm2.TPMCC(binary.BigEndian.Uint32(cmd[6:10])); cc == tpm2.TPMCCStartAuthSession || cc == tpm2.TPMCCLoad {
			t.Errorf("Unseal sent %v to a TPM with another SRK", cc)
		}
	}
	checkNoHandles(t, tp)
}

// TestSealTo plays a kernel update: seal to the predicted PCR 4 of the
// new boot binary, then "boot" it by extending PCR 4 with its hash.
func TestSealTo(t *testing.T) {
	tp := newTPM(t, 1)
	extend(t, tp, 4, "old UKI")
	extend(t, tp, 7, "secure boot on")
	current, err := tp.PCRs(DefaultPCRs)
	if err != nil {
		t.Fatal(err)
	}
	old, err := tp.SealTo(secret32, current, 0)
	if err != nil {
		t.Fatal(err)
	}
	if _, err := tp.Unseal(old); err != nil {
		t.Fatalf("Unseal of SealTo(current values): %v", err)
	}

	// The next boot measures the new binary on top of what PCR 4 held:
	// PCR 4 becomes SHA-256(PCR 4 || hash of the new binary).
	newUKI := sha256.Sum256([]byte("new UKI"))
	next := sha256.Sum256(append(slices.Clone(current[4]), newUKI[:]...))
	predicted := maps.Clone(current)
	predicted[4] = next[:]
	updated, err := tp.SealTo(secret32, predicted, 0)
	if err != nil {
		t.Fatal(err)
	}
	if _, err := tp.Unseal(updated); !errors.Is(err, ErrPolicy) {
		t.Errorf("Unseal before booting the predicted binary: error %v, want %v", err, ErrPolicy)
	}

	extend(t, tp, 4, "new UKI")
	got, err := tp.Unseal(updated)
	if err != nil {
		t.Fatalf("Unseal after booting the predicted binary: %v", err)
	}
	if !bytes.Equal(got, secret32) {
		t.Errorf("Unseal = %x, want %x", got, secret32)
	}
	if _, err := tp.Unseal(old); !errors.Is(err, ErrPolicy) {
		t.Errorf("Unseal of the old blob after the update: error %v, want %v", err, ErrPolicy)
	}
}

func TestUnsealWrongTPM(t *testing.T) {
	for _, tc := range []struct {
		name string
		// change returns the TPM to unseal with.
		change func(t *testing.T, tp *TPM) *TPM
	}{
		{"cleared", func(t *testing.T, tp *TPM) *TPM {
			// TPM2_Clear replaces the storage seed, and so the SRK, and
			// flushes the loaded one; the next boot opens the TPM
			// afresh.
			_, err := tpm2.Clear{
				AuthHandle: tpm2.AuthHandle{
					Handle: tpm2.TPMRHLockout,
					Auth:   tpm2.PasswordAuth(nil),
				},
			}.Execute(tp.t)
			if err != nil {
				t.Fatalf("clearing TPM: %v", err)
			}
			return New(tp.t)
		}},
		{"other machine", func(t *testing.T, tp *TPM) *TPM {
			if err := tp.Close(); err != nil {
				t.Fatal(err)
			}
			return newTPM(t, 2)
		}},
	} {
		t.Run(tc.name, func(t *testing.T) {
			tp := newTPM(t, 1)
			s, err := tp.Seal(secret32, DefaultPCRs)
			if err != nil {
				t.Fatal(err)
			}
			tp = tc.change(t, tp)
			if _, err := tp.Unseal(s); !errors.Is(err, ErrWrongTPM) {
				t.Errorf("Unseal error = %v, want %v", err, ErrWrongTPM)
			}
			checkNoHandles(t, tp)
		})
	}
}

// TestSecretNotOnBus checks that the salted sessions keep the secret off
// the bus: it appears in no command to the TPM and no response from it.
func TestSecretNotOnBus(t *testing.T) {
	tp := newTPM(t, 1)
	rec := &recorder{TPMCloser: tp.t}
	tp.t = rec
	secret := sha256.Sum256([]byte("local unlock key"))
	s, err := tp.Seal(secret[:], DefaultPCRs)
	if err != nil {
		t.Fatal(err)
	}
	got, err := tp.Unseal(s)
	if err != nil {
		t.Fatal(err)
	}
	if !bytes.Equal(got, secret[:]) {
		t.Fatalf("Unseal = %x, want %x", got, secret)
	}
	for i, b := range rec.traffic {
		// Any 8 bytes of the secret would be too many.
		for off := 0; off+8 <= len(secret); off++ {
			if bytes.Contains(b, secret[off:off+8]) {
				t.Fatalf("secret bytes %d-%d in message %d: %x", off, off+8, i, b)
			}
		}
	}
}

func TestSealRejects(t *testing.T) {
	tp := newTPM(t, 1)
	zero := make([]byte, sha256.Size)
	for _, tc := range []struct {
		name   string
		secret []byte
		values map[uint][]byte
		want   string
		// sealToOnly marks cases Seal cannot hit: it reads the values.
		sealToOnly bool
	}{
		{"secret too long", make([]byte, 129), map[uint][]byte{4: zero}, "secret is 129 bytes", false},
		{"empty secret", nil, map[uint][]byte{4: zero}, "empty secret", false},
		{"no PCRs", secret32, nil, "no PCRs selected", false},
		{"PCR out of range", secret32, map[uint][]byte{24: zero}, "PCR 24 out of range", false},
		{"short PCR value", secret32, map[uint][]byte{4: zero, 7: zero[:20]}, "PCR 7 value is 20 bytes", true},
	} {
		t.Run(tc.name, func(t *testing.T) {
			_, err := tp.SealTo(tc.secret, tc.values, 0)
			if err == nil || !strings.Contains(err.Error(), tc.want) {
				t.Errorf("SealTo = %v, want an error containing %q", err, tc.want)
			}
			if tc.sealToOnly {
				return
			}
			_, err = tp.Seal(tc.secret, slices.Collect(maps.Keys(tc.values)))
			if err == nil || !strings.Contains(err.Error(), tc.want) {
				t.Errorf("Seal = %v, want an error containing %q", err, tc.want)
			}
		})
	}
}

// TestConcurrentUse seals, unseals and reads random numbers and PCRs from
// several goroutines at once, as the node's services may: the simulator,
// like the device, takes one command at a time, and has no resource
// manager, so interleaved sessions would fail or leak handles.
func TestConcurrentUse(t *testing.T) {
	tp := newTPM(t, 1)
	const workers, rounds = 4, 3
	errs := make(chan error, workers)
	for w := range workers {
		go func() {
			errs <- func() error {
				for range rounds {
					secret := []byte{byte(w), 1, 2, 3}
					s, err := tp.Seal(secret, DefaultPCRs)
					if err != nil {
						return err
					}
					got, err := tp.Unseal(s)
					if err != nil {
						return err
					}
					if !bytes.Equal(got, secret) {
						return fmt.Errorf("worker %d unsealed %x, want %x", w, got, secret)
					}
					if _, err := tp.Random(32); err != nil {
						return err
					}
					if _, err := tp.PCRs(DefaultPCRs); err != nil {
						return err
					}
				}
				return nil
			}()
		}()
	}
	for range workers {
		if err := <-errs; err != nil {
			t.Error(err)
		}
	}
	checkNoHandles(t, tp)
}
