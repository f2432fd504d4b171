package storage

import (
	"bytes"
	"crypto/rand"
	"crypto/sha256"
	"encoding/binary"
	"encoding/json"
	"errors"
	"fmt"
	"slices"
	"strings"
	"testing"
	"testing/cryptotest"

	"github.com/google/go-cmp/cmp"
	"github.com/google/go-tpm/tpm2"
	"github.com/google/go-tpm/tpm2/transport"

	"github.com/borough-os/borough/esp"
	"github.com/borough-os/borough/internal/crypt"
	"github.com/borough-os/borough/internal/keyfile"
	"github.com/borough-os/borough/internal/tpm"
	"github.com/borough-os/borough/internal/tpmtest"
)

// randomRecorder is a TPM transport that keeps the bytes of every
// TPM2_GetRandom response, so that a test can see what the TPM gave.
type randomRecorder struct {
	transport.TPMCloser
	random [][]byte
}

func (r *randomRecorder) Send(cmd []byte) ([]byte, error) {
	rsp, err := r.TPMCloser.Send(cmd)
	// Command: tag (2), size (4), command code (4). Response without
	// sessions: tag (2), size (4), response code (4), TPM2B_DIGEST.
	if err == nil && len(cmd) >= 10 && tpm2.TPMCC(binary.BigEndian.Uint32(cmd[6:10])) == tpm2.TPMCCGetRandom &&
		len(rsp) >= 12 && binary.BigEndian.Uint16(rsp[0:2]) == uint16(tpm2.TPMSTNoSessions) &&
		binary.BigEndian.Uint32(rsp[6:10]) == 0 {
		n := int(binary.BigEndian.Uint16(rsp[10:12]))
		if 12+n <= len(rsp) {
			r.random = append(r.random, slices.Clone(rsp[12:12+n]))
		}
	}
	return rsp, err
}

// newTestTPM returns a freshly manufactured simulated TPM and the
// recorder of its random numbers. Only one simulator can be open per
// process (tpmtest), so a test must call newTestTPM at most once; the
// simulator is closed at the end of the test.
func newTestTPM(t *testing.T) (*tpm.TPM, *randomRecorder) {
	t.Helper()
	rec := &randomRecorder{TPMCloser: tpmtest.Transport(t, 1)}
	return tpm.New(rec), rec
}

func TestCheckSize(t *testing.T) {
	const f = esp.SealedLocalKey
	for _, n := range []int{0, 1, 16, crypt.UnlockKeySize - 1, crypt.UnlockKeySize, crypt.UnlockKeySize + 1, 64} {
		t.Run(fmt.Sprint(n), func(t *testing.T) {
			key := bytes.Repeat([]byte{0xA5}, n)
			got, err := checkSize(f, key)
			if n == crypt.UnlockKeySize {
				if err != nil {
					t.Fatalf("checkSize(%d bytes): %v", n, err)
				}
				if diff := cmp.Diff(key, got); diff != "" {
					t.Errorf("checkSize (-want +got):\n%s", diff)
				}
				return
			}
			if err == nil {
				t.Fatalf("checkSize(%d bytes) = %x, want an error", n, got)
			}
			if got != nil {
				t.Errorf("checkSize(%d bytes) returned a key with its error", n)
			}
			for _, s := range []string{string(f), fmt.Sprintf("%d-byte key", n), fmt.Sprintf("want %d", crypt.UnlockKeySize)} {
				if !strings.Contains(err.Error(), s) {
					t.Errorf("checkSize error %q does not contain %q", err, s)
				}
			}
		})
	}
}

func TestNewKeyWithoutTPM(t *testing.T) {
	k := keyFiles{policy: keyfile.TPMDisabled}
	t.Run("fresh", func(t *testing.T) {
		k1, err := k.newKey()
		if err != nil {
			t.Fatal(err)
		}
		k2, err := k.newKey()
		if err != nil {
			t.Fatal(err)
		}
		for _, key := range [][]byte{k1, k2} {
			if len(key) != crypt.UnlockKeySize {
				t.Errorf("newKey returned %d bytes, want %d", len(key), crypt.UnlockKeySize)
			}
		}
		if bytes.Equal(k1, k2) {
			t.Errorf("two calls of newKey returned the same key %x", k1)
		}
	})
	t.Run("from crypto/rand", func(t *testing.T) {
		cryptotest.SetGlobalRandom(t, 42)
		want := make([]byte, crypt.UnlockKeySize)
		if _, err := rand.Read(want); err != nil {
			t.Fatal(err)
		}
		cryptotest.SetGlobalRandom(t, 42)
		got, err := k.newKey()
		if err != nil {
			t.Fatal(err)
		}
		if diff := cmp.Diff(want, got); diff != "" {
			t.Errorf("newKey without a TPM is not crypto/rand's output (-want +got):\n%s", diff)
		}
	})
}

func TestNewKeyWithTPM(t *testing.T) {
	tp, rec := newTestTPM(t)
	k := keyFiles{tpm: tp, policy: keyfile.TPMRequired}

	k1, err := k.newKey()
	if err != nil {
		t.Fatal(err)
	}
	k2, err := k.newKey()
	if err != nil {
		t.Fatal(err)
	}
	for _, key := range [][]byte{k1, k2} {
		if len(key) != crypt.UnlockKeySize {
			t.Errorf("newKey returned %d bytes, want %d", len(key), crypt.UnlockKeySize)
		}
	}
	if bytes.Equal(k1, k2) {
		t.Errorf("two calls of newKey returned the same key %x", k1)
	}

	// With crypto/rand made repeatable, the key must still change from
	// call to call (the TPM contributes), and be SHA-256 of crypto/rand's
	// 32 bytes followed by the TPM's 32.
	cryptotest.SetGlobalRandom(t, 7)
	osRandom := make([]byte, crypt.UnlockKeySize)
	if _, err := rand.Read(osRandom); err != nil {
		t.Fatal(err)
	}
	var keys [][]byte
	for i := range 2 {
		rec.random = nil
		cryptotest.SetGlobalRandom(t, 7)
		key, err := k.newKey()
		if err != nil {
			t.Fatalf("newKey %d: %v", i, err)
		}
		tpmRandom := bytes.Join(rec.random, nil)
		if len(tpmRandom) != crypt.UnlockKeySize {
			t.Fatalf("newKey %d read %d bytes from the TPM, want %d", i, len(tpmRandom), crypt.UnlockKeySize)
		}
		want := sha256.Sum256(append(slices.Clone(osRandom), tpmRandom...))
		if diff := cmp.Diff(want[:], key); diff != "" {
			t.Errorf("newKey %d is not SHA-256(crypto/rand || TPM random) (-want +got):\n%s", i, diff)
		}
		if bytes.Equal(key, osRandom) || bytes.Equal(key, tpmRandom) {
			t.Errorf("newKey %d returned one source's bytes unmixed", i)
		}
		keys = append(keys, key)
	}
	if bytes.Equal(keys[0], keys[1]) {
		t.Error("with crypto/rand repeating, newKey repeated too: the TPM's randomness is not used")
	}
}

// TestKeyFileJSON pins the on-disk format of key files: nodes must read
// what earlier versions wrote.
func TestKeyFileJSON(t *testing.T) {
	key := make([]byte, crypt.UnlockKeySize)
	for i := range key {
		key[i] = byte(i)
	}

	t.Run("clear", func(t *testing.T) {
		kf := keyfile.File{Version: keyfile.Version, Clear: key}
		b, err := json.Marshal(kf)
		if err != nil {
			t.Fatal(err)
		}
		const want = `{"version":1,"clear":"AAECAwQFBgcICQoLDA0ODxAREhMUFRYXGBkaGxwdHh8="}`
		if diff := cmp.Diff(want, string(b)); diff != "" {
			t.Errorf("keyFile in clear (-want +got):\n%s", diff)
		}
		var got keyfile.File
		if err := json.Unmarshal(b, &got); err != nil {
			t.Fatal(err)
		}
		if diff := cmp.Diff(kf, got); diff != "" {
			t.Errorf("keyFile round trip (-want +got):\n%s", diff)
		}
		if got.Sealed != nil {
			t.Errorf("clear keyFile decoded with Sealed = %s", got.Sealed)
		}
	})

	t.Run("sealed", func(t *testing.T) {
		tp, _ := newTestTPM(t)
		sealed, err := tp.Seal(key, tpm.DefaultPCRs)
		if err != nil {
			t.Fatalf("sealing: %v", err)
		}
		blob, err := sealed.Marshal()
		if err != nil {
			t.Fatal(err)
		}
		kf := keyfile.File{Version: keyfile.Version, Sealed: blob}
		b, err := json.Marshal(kf)
		if err != nil {
			t.Fatal(err)
		}
		var fields map[string]json.RawMessage
		if err := json.Unmarshal(b, &fields); err != nil {
			t.Fatal(err)
		}
		var names []string
		for name := range fields {
			names = append(names, name)
		}
		slices.Sort(names)
		if diff := cmp.Diff([]string{"sealed", "version"}, names); diff != "" {
			t.Errorf("sealed keyFile fields (-want +got):\n%s", diff)
		}
		if !bytes.HasPrefix(fields["sealed"], []byte("{")) {
			t.Errorf("sealed is stored as %.20s..., want a JSON object", fields["sealed"])
		}

		var got keyfile.File
		if err := json.Unmarshal(b, &got); err != nil {
			t.Fatal(err)
		}
		if diff := cmp.Diff(kf, got); diff != "" {
			t.Errorf("keyFile round trip (-want +got):\n%s", diff)
		}
		if got.Clear != nil {
			t.Errorf("sealed keyFile decoded with Clear = %x", got.Clear)
		}
		s, err := tpm.UnmarshalSealed(got.Sealed)
		if err != nil {
			t.Fatalf("decoding the sealed key: %v", err)
		}
		unsealed, err := tp.Unseal(s)
		if err != nil {
			t.Fatalf("unsealing: %v", err)
		}
		if diff := cmp.Diff(key, unsealed); diff != "" {
			t.Errorf("unsealed key (-want +got):\n%s", diff)
		}
	})
}

func TestExplainKeyError(t *testing.T) {
	for _, tc := range []struct {
		name string
		err  error
		want []string
	}{
		{"wrong TPM", fmt.Errorf("unsealing f: %w", tpm.ErrWrongTPM), []string{"unsealing the local unlock key", "another machine"}},
		{"policy", fmt.Errorf("unsealing f: %w", tpm.ErrPolicy), []string{"unsealing the local unlock key", "PCRs 4, 7 and 12"}},
		{"no TPM", fmt.Errorf("f: %w", ErrNoTPMForKey), []string{"reading the local unlock key", "enable the TPM"}},
		{"in clear", fmt.Errorf("f: %w", ErrKeyInClear), []string{"reading the local unlock key", ErrKeyInClear.Error()}},
		{"other", errors.New("disk on fire"), []string{"reading the local unlock key: disk on fire"}},
	} {
		t.Run(tc.name, func(t *testing.T) {
			err := explainKeyError("local unlock key", tc.err)
			if !errors.Is(err, tc.err) {
				t.Errorf("explainKeyError(%v) = %v, which does not wrap it", tc.err, err)
			}
			for _, s := range tc.want {
				if !strings.Contains(err.Error(), s) {
					t.Errorf("explainKeyError = %q, does not contain %q", err, s)
				}
			}
		})
	}
}
