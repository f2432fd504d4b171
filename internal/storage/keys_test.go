package storage

import (
	"bytes"
	"crypto/rand"
	"crypto/sha256"
	"encoding/base64"
	"encoding/binary"
	"encoding/json"
	"errors"
	"fmt"
	"io/fs"
	"os"
	"path"
	"path/filepath"
	"slices"
	"strings"
	"testing"
	"testing/cryptotest"

	"github.com/google/go-cmp/cmp"
	"github.com/google/go-tpm-tools/simulator"
	"github.com/google/go-tpm/tpm2"
	"github.com/google/go-tpm/tpm2/transport"

	"github.com/borough-os/borough/esp"
	"github.com/borough-os/borough/internal/crypt"
	"github.com/borough-os/borough/internal/keyfile"
	"github.com/borough-os/borough/internal/tpm"
)

var _ ClusterKeys = Escrow{}

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
// process (simulator.Get* blocks until the last one is closed), so a test
// must call newTestTPM at most once; the simulator is closed at the end
// of the test.
func newTestTPM(t *testing.T) (*tpm.TPM, *randomRecorder) {
	t.Helper()
	sim, err := simulator.GetWithFixedSeedInsecure(1)
	if err != nil {
		t.Fatalf("starting TPM simulator: %v", err)
	}
	rec := &randomRecorder{TPMCloser: transport.FromReadWriteCloser(sim)}
	tp := tpm.New(rec)
	t.Cleanup(func() {
		if err := tp.Close(); err != nil {
			t.Errorf("closing TPM simulator: %v", err)
		}
	})
	return tp, rec
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
	k := keeper{policy: keyfile.TPMDisabled}
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
	k := keeper{tpm: tp, policy: keyfile.TPMRequired}

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

// testSim is a simulated TPM that a test can close and replace, and whose
// PCRs it can extend.
type testSim struct {
	tpm *tpm.TPM
	tr  transport.TPMCloser
}

// openSim starts a freshly manufactured simulated TPM, all PCRs zero,
// whose seeds derive from seed: the same seed is the same machine. Only
// one simulator can be open per process, so a test must close it (or
// let the cleanup at its end do so) before opening another.
func openSim(t *testing.T, seed int64) *testSim {
	t.Helper()
	sim, err := simulator.GetWithFixedSeedInsecure(seed)
	if err != nil {
		t.Fatalf("starting TPM simulator: %v", err)
	}
	t.Cleanup(func() {
		if !sim.IsClosed() {
			if err := sim.Close(); err != nil {
				t.Errorf("closing TPM simulator: %v", err)
			}
		}
	})
	tr := transport.FromReadWriteCloser(sim)
	return &testSim{tpm: tpm.New(tr), tr: tr}
}

func (s *testSim) close(t *testing.T) {
	t.Helper()
	if err := s.tpm.Close(); err != nil {
		t.Fatalf("closing TPM simulator: %v", err)
	}
}

// extend extends pcr's SHA-256 bank, as firmware measures a binary.
func (s *testSim) extend(t *testing.T, pcr uint, data string) {
	t.Helper()
	digest := sha256.Sum256([]byte(data))
	_, err := tpm2.PCRExtend{
		PCRHandle: tpm2.AuthHandle{Handle: tpm2.TPMHandle(pcr), Auth: tpm2.PasswordAuth(nil)},
		Digests: tpm2.TPMLDigestValues{
			Digests: []tpm2.TPMTHA{{HashAlg: tpm2.TPMAlgSHA256, Digest: digest[:]}},
		},
	}.Execute(s.tr)
	if err != nil {
		t.Fatalf("extending PCR %d: %v", pcr, err)
	}
}

// testKey returns a distinct valid unlock key for each n.
func testKey(n byte) []byte {
	key := make([]byte, crypt.UnlockKeySize)
	for i := range key {
		key[i] = n + byte(i)
	}
	return key
}

// espFiles returns the regular files under root, relative to it.
func espFiles(t *testing.T, root string) []string {
	t.Helper()
	var files []string
	err := filepath.WalkDir(root, func(path string, d fs.DirEntry, err error) error {
		if err != nil || d.IsDir() {
			return err
		}
		rel, err := filepath.Rel(root, path)
		files = append(files, filepath.ToSlash(rel))
		return err
	})
	if err != nil {
		t.Fatal(err)
	}
	return files
}

// checkKeyFile checks the key file f under root: the only file there, in
// clear or sealed as wanted, and never holding key in the open when sealed.
func checkKeyFile(t *testing.T, root string, f esp.File, key []byte, sealed bool) {
	t.Helper()
	if diff := cmp.Diff([]string{string(f)}, espFiles(t, root)); diff != "" {
		t.Errorf("files on the ESP (-want +got); a .tmp file is left behind?\n%s", diff)
	}
	b, err := os.ReadFile(f.In(root))
	if err != nil {
		t.Fatal(err)
	}
	var fields map[string]json.RawMessage
	if err := json.Unmarshal(b, &fields); err != nil {
		t.Fatalf("key file is not JSON: %v\n%s", err, b)
	}
	if got := string(fields["version"]); got != fmt.Sprint(keyfile.Version) {
		t.Errorf("key file version = %s, want %d", got, keyfile.Version)
	}
	if sealed {
		if _, ok := fields["clear"]; ok {
			t.Errorf("sealed key file has a \"clear\" field: %s", b)
		}
		if !bytes.HasPrefix(fields["sealed"], []byte("{")) {
			t.Errorf("key file has no sealed object: %s", b)
		}
		if bytes.Contains(b, key) || bytes.Contains(b, []byte(base64.StdEncoding.EncodeToString(key))) {
			t.Errorf("sealed key file holds the key in the open: %s", b)
		}
		return
	}
	if _, ok := fields["sealed"]; ok {
		t.Errorf("key file in clear has a \"sealed\" field: %s", b)
	}
	var clearKey []byte
	if err := json.Unmarshal(fields["clear"], &clearKey); err != nil {
		t.Fatalf("key file has no \"clear\" key: %v\n%s", err, b)
	}
	if diff := cmp.Diff(key, clearKey); diff != "" {
		t.Errorf("key in clear in the file (-want +got):\n%s", diff)
	}
}

func TestKeeperStoreLoad(t *testing.T) {
	for _, tc := range []struct {
		name   string
		tpm    bool
		policy keyfile.TPMPolicy
		// between, if set, changes the machine between store and load
		// and returns the TPM for load.
		between func(t *testing.T, s *testSim) *testSim
	}{
		{name: "no TPM, best effort", policy: keyfile.TPMBestEffort},
		{name: "no TPM, TPM disabled", policy: keyfile.TPMDisabled},
		{name: "TPM, required", tpm: true, policy: keyfile.TPMRequired},
		{name: "TPM, best effort", tpm: true, policy: keyfile.TPMBestEffort},
		{
			// A reboot resets the PCRs; the same firmware measures the
			// same boot again (here: nothing), and the TPM keeps its seed.
			name: "TPM, after a reboot", tpm: true, policy: keyfile.TPMRequired,
			between: func(t *testing.T, s *testSim) *testSim {
				s.close(t)
				return openSim(t, 1)
			},
		},
		{
			// The key is sealed to PCRs 4, 7 and 12 only.
			name: "TPM, PCR 0 extended", tpm: true, policy: keyfile.TPMRequired,
			between: func(t *testing.T, s *testSim) *testSim {
				s.extend(t, 0, "firmware update")
				return s
			},
		},
	} {
		for _, f := range []esp.File{esp.SealedLocalKey, esp.ClusterKeyEscrow} {
			t.Run(tc.name+"/"+path.Base(string(f)), func(t *testing.T) {
				root := t.TempDir()
				k := keeper{root: root, policy: tc.policy}
				var s *testSim
				if tc.tpm {
					s = openSim(t, 1)
					k.tpm = s.tpm
				}
				// The second store replaces the first.
				for _, key := range [][]byte{testKey(1), testKey(2)} {
					if err := k.store(f, key); err != nil {
						t.Fatalf("store: %v", err)
					}
				}
				checkKeyFile(t, root, f, testKey(2), tc.tpm)
				if info, err := os.Stat(f.In(root)); err != nil {
					t.Fatal(err)
				} else if perm := info.Mode().Perm(); perm != 0o600 {
					t.Errorf("key file mode %v, want 0600", perm)
				}
				if tc.between != nil {
					s = tc.between(t, s)
					k.tpm = s.tpm
				}
				got, err := k.load(f)
				if err != nil {
					t.Fatalf("load: %v", err)
				}
				if diff := cmp.Diff(testKey(2), got); diff != "" {
					t.Errorf("load (-want +got):\n%s", diff)
				}
			})
		}
	}
}

// TestKeeperStoreStaleTmp: a crash during a store can leave f.tmp; the
// next store must replace its contents (it is longer than the new file)
// and leave no f.tmp.
func TestKeeperStoreStaleTmp(t *testing.T) {
	const f = esp.SealedLocalKey
	root := t.TempDir()
	mkdir(t, filepath.Dir(f.In(root)))
	writeFile(t, f.In(root)+".tmp", []byte(`{"version":1,"clear":"c3RhbGU="}`+strings.Repeat(" stale", 100)))
	k := keeper{root: root, policy: keyfile.TPMDisabled}
	if err := k.store(f, testKey(3)); err != nil {
		t.Fatalf("store: %v", err)
	}
	checkKeyFile(t, root, f, testKey(3), false)
}

func TestKeeperStoreError(t *testing.T) {
	// The ESP root is a file: the key's directory cannot be made.
	root := filepath.Join(t.TempDir(), "esp")
	writeFile(t, root, nil)
	k := keeper{root: root, policy: keyfile.TPMDisabled}
	err := k.store(esp.SealedLocalKey, testKey(1))
	if err == nil {
		t.Fatal("store on an ESP root that is a file succeeded")
	}
	if want := "writing " + string(esp.SealedLocalKey); !strings.Contains(err.Error(), want) {
		t.Errorf("store error %q does not contain %q", err, want)
	}
}

func TestKeeperLoadErrors(t *testing.T) {
	const f = esp.SealedLocalKey
	clearKey := func(key []byte) string {
		return `{"version":1,"clear":"` + base64.StdEncoding.EncodeToString(key) + `"}`
	}
	// withFile writes content to f and loads with no TPM and policy.
	withFile := func(content string, policy keyfile.TPMPolicy) func(*testing.T, string) keeper {
		return func(t *testing.T, root string) keeper {
			mkdir(t, filepath.Dir(f.In(root)))
			writeFile(t, f.In(root), []byte(content))
			return keeper{root: root, policy: policy}
		}
	}
	// sealed stores a key sealed to a simulated TPM (seed 1), then lets
	// change alter the machine and return the keeper for load.
	sealed := func(change func(*testing.T, *testSim, keeper) keeper) func(*testing.T, string) keeper {
		return func(t *testing.T, root string) keeper {
			s := openSim(t, 1)
			k := keeper{root: root, tpm: s.tpm, policy: keyfile.TPMRequired}
			if err := k.store(f, testKey(1)); err != nil {
				t.Fatalf("store: %v", err)
			}
			return change(t, s, k)
		}
	}
	for _, tc := range []struct {
		name string
		// setup writes f under root and returns the keeper to load it.
		setup func(t *testing.T, root string) keeper
		// wantIs, if set, must be in the error's chain.
		wantIs error
		// want are substrings of the error.
		want []string
	}{
		{
			name:   "missing file",
			setup:  func(t *testing.T, root string) keeper { return keeper{root: root} },
			wantIs: fs.ErrNotExist,
			want:   []string{"reading " + string(f)},
		},
		{
			name:  "garbage",
			setup: withFile("not JSON", keyfile.TPMBestEffort),
			want:  []string{string(f) + ": parsing key file"},
		},
		{
			name:  "empty file",
			setup: withFile("", keyfile.TPMBestEffort),
			want:  []string{string(f) + ": parsing key file"},
		},
		{
			name:  "truncated JSON",
			setup: withFile(clearKey(testKey(1))[:20], keyfile.TPMBestEffort),
			want:  []string{string(f) + ": parsing key file"},
		},
		{
			name:  "no version",
			setup: withFile(strings.Replace(clearKey(testKey(1)), `"version":1,`, "", 1), keyfile.TPMBestEffort),
			want:  []string{string(f) + ": key file has version 0, this node reads version 1"},
		},
		{
			name:  "newer version",
			setup: withFile(strings.Replace(clearKey(testKey(1)), `"version":1`, `"version":2`, 1), keyfile.TPMBestEffort),
			want:  []string{string(f) + ": key file has version 2, this node reads version 1"},
		},
		{
			name:  "no key",
			setup: withFile(`{"version":1}`, keyfile.TPMBestEffort),
			want:  []string{string(f) + " holds no key"},
		},
		{
			name:  "null clear key",
			setup: withFile(`{"version":1,"clear":null}`, keyfile.TPMBestEffort),
			want:  []string{string(f) + " holds no key"},
		},
		{
			name:  "clear key too short",
			setup: withFile(clearKey(testKey(1)[:16]), keyfile.TPMBestEffort),
			want:  []string{string(f) + " holds a 16-byte key, want 32"},
		},
		{
			name:  "clear key too long",
			setup: withFile(clearKey(append(testKey(1), 0)), keyfile.TPMDisabled),
			want:  []string{string(f) + " holds a 33-byte key, want 32"},
		},
		{
			name:  "clear key empty",
			setup: withFile(`{"version":1,"clear":""}`, keyfile.TPMBestEffort),
			want:  []string{string(f)},
		},
		{
			name:  "clear key not base64",
			setup: withFile(`{"version":1,"clear":"!!!"}`, keyfile.TPMBestEffort),
			want:  []string{string(f) + ": parsing key file"},
		},
		{
			name:   "clear key, TPM required, no TPM",
			setup:  withFile(clearKey(testKey(1)), keyfile.TPMRequired),
			wantIs: ErrKeyInClear,
			want:   []string{string(f)},
		},
		{
			// A key in clear must not be taken on a machine that
			// requires the TPM, even though it has one: the file may
			// have been swapped.
			name: "clear key, TPM required, with TPM",
			setup: func(t *testing.T, root string) keeper {
				k := withFile(clearKey(testKey(1)), keyfile.TPMRequired)(t, root)
				k.tpm = openSim(t, 1).tpm
				return k
			},
			wantIs: ErrKeyInClear,
			want:   []string{string(f)},
		},
		{
			name: "sealed key, no TPM",
			setup: sealed(func(t *testing.T, s *testSim, k keeper) keeper {
				s.close(t)
				return keeper{root: k.root, policy: keyfile.TPMBestEffort}
			}),
			wantIs: ErrNoTPMForKey,
			want:   []string{string(f)},
		},
		{
			name: "sealed key, TPM disabled",
			setup: sealed(func(t *testing.T, s *testSim, k keeper) keeper {
				s.close(t)
				return keeper{root: k.root, policy: keyfile.TPMDisabled}
			}),
			wantIs: ErrTPMDisabled,
			want:   []string{string(f)},
		},
		{
			name: "sealed key, another TPM",
			setup: sealed(func(t *testing.T, s *testSim, k keeper) keeper {
				s.close(t)
				k.tpm = openSim(t, 2).tpm
				return k
			}),
			wantIs: tpm.ErrWrongTPM,
			want:   []string{"unsealing " + string(f)},
		},
		{
			name: "sealed key, PCR 7 extended",
			setup: sealed(func(t *testing.T, s *testSim, k keeper) keeper {
				s.extend(t, 7, "another Secure Boot key")
				return k
			}),
			wantIs: tpm.ErrPolicy,
			want:   []string{"unsealing " + string(f)},
		},
		{
			name: "sealed key, PCR 4 extended",
			setup: sealed(func(t *testing.T, s *testSim, k keeper) keeper {
				s.extend(t, 4, "another boot binary")
				return k
			}),
			wantIs: tpm.ErrPolicy,
			want:   []string{"unsealing " + string(f)},
		},
		{
			name: "sealed object not a sealed key",
			setup: func(t *testing.T, root string) keeper {
				k := withFile(`{"version":1,"sealed":{"version":99}}`, keyfile.TPMRequired)(t, root)
				k.tpm = openSim(t, 1).tpm
				return k
			},
			want: []string{"parsing " + string(f)},
		},
	} {
		t.Run(tc.name, func(t *testing.T) {
			k := tc.setup(t, t.TempDir())
			got, err := k.load(f)
			if err == nil {
				t.Fatalf("load = %x, want an error", got)
			}
			if got != nil {
				t.Errorf("load returned a key with its error %v", err)
			}
			if tc.wantIs != nil && !errors.Is(err, tc.wantIs) {
				t.Errorf("load error %q is not %q", err, tc.wantIs)
			}
			for _, s := range tc.want {
				if !strings.Contains(err.Error(), s) {
					t.Errorf("load error %q does not contain %q", err, s)
				}
			}
		})
	}
}

func TestEscrow(t *testing.T) {
	for _, tc := range []struct {
		name string
		tpm  bool
	}{
		{"no TPM", false},
		{"TPM", true},
	} {
		t.Run(tc.name, func(t *testing.T) {
			root := t.TempDir()
			e := Escrow{k: keeper{root: root, policy: keyfile.TPMBestEffort}}
			if tc.tpm {
				e.k.tpm = openSim(t, 1).tpm
			}
			if key, err := e.Get(); err == nil {
				t.Fatalf("Get before New = %x, want an error", key)
			} else if !errors.Is(err, fs.ErrNotExist) || !strings.Contains(err.Error(), string(esp.ClusterKeyEscrow)) {
				t.Errorf("Get before New: error %q, want one naming %s and wrapping %v", err, esp.ClusterKeyEscrow, fs.ErrNotExist)
			}

			first, err := e.New()
			if err != nil {
				t.Fatalf("New: %v", err)
			}
			key, err := e.New()
			if err != nil {
				t.Fatalf("New: %v", err)
			}
			if len(key) != crypt.UnlockKeySize {
				t.Errorf("New returned %d bytes, want %d", len(key), crypt.UnlockKeySize)
			}
			if bytes.Equal(first, key) {
				t.Errorf("two calls of New returned the same key %x", key)
			}
			checkKeyFile(t, root, esp.ClusterKeyEscrow, key, tc.tpm)
			if _, err := os.Stat(filepath.Join(root, "EFI", "Borough", "cluster-key.sealed")); err != nil {
				t.Errorf("escrow file not at EFI/Borough/cluster-key.sealed: %v", err)
			}
			for range 2 {
				got, err := e.Get()
				if err != nil {
					t.Fatalf("Get: %v", err)
				}
				if diff := cmp.Diff(key, got); diff != "" {
					t.Errorf("Get is not the last New's key (-want +got):\n%s", diff)
				}
			}
		})
	}
}

func TestClearKey(t *testing.T) {
	// A key file as a node without a TPM writes it, and one as a node
	// with a TPM does.
	root := t.TempDir()
	if err := (keeper{root: root, policy: keyfile.TPMBestEffort}).store(esp.SealedLocalKey, testKey(5)); err != nil {
		t.Fatal(err)
	}
	s := openSim(t, 1)
	if err := (keeper{root: root, tpm: s.tpm, policy: keyfile.TPMRequired}).store(esp.ClusterKeyEscrow, testKey(6)); err != nil {
		t.Fatal(err)
	}
	s.close(t)
	stored := func(f esp.File) []byte {
		b, err := os.ReadFile(f.In(root))
		if err != nil {
			t.Fatal(err)
		}
		return b
	}
	clearFile := func(key []byte) []byte {
		return []byte(`{"version":1,"clear":"` + base64.StdEncoding.EncodeToString(key) + `"}`)
	}

	for _, tc := range []struct {
		name string
		b    []byte
		// want is the key; nil: an error.
		want []byte
		// wantIs, if set, must be in the error's chain.
		wantIs error
		// wantErr are substrings of the error.
		wantErr []string
	}{
		{name: "as stored without a TPM", b: stored(esp.SealedLocalKey), want: testKey(5)},
		{name: "clear", b: clearFile(testKey(7)), want: testKey(7)},
		{name: "unknown field", b: []byte(`{"version":1,"clear":"` + base64.StdEncoding.EncodeToString(testKey(8)) + `","x":1}`), want: testKey(8)},
		{name: "as stored with a TPM", b: stored(esp.ClusterKeyEscrow), wantIs: keyfile.ErrKeySealed},
		{name: "sealed", b: []byte(`{"version":1,"sealed":{}}`), wantIs: keyfile.ErrKeySealed},
		{name: "sealed and clear", b: []byte(`{"version":1,"sealed":{},"clear":"` + base64.StdEncoding.EncodeToString(testKey(9)) + `"}`), wantIs: keyfile.ErrKeySealed},
		{name: "no version", b: []byte(`{"clear":"` + base64.StdEncoding.EncodeToString(testKey(9)) + `"}`), wantErr: []string{"version 0, this node reads version 1"}},
		{name: "newer version", b: bytes.Replace(clearFile(testKey(9)), []byte(`"version":1`), []byte(`"version":2`), 1), wantErr: []string{"version 2, this node reads version 1"}},
		{name: "newer version, sealed", b: []byte(`{"version":2,"sealed":{}}`), wantErr: []string{"version 2, this node reads version 1"}},
		{name: "too short", b: clearFile(testKey(9)[:31]), wantErr: []string{"31-byte key, want 32"}},
		{name: "too long", b: clearFile(append(testKey(9), 1)), wantErr: []string{"33-byte key, want 32"}},
		{name: "empty key", b: []byte(`{"version":1,"clear":""}`), wantErr: []string{"0-byte key, want 32"}},
		{name: "no key", b: []byte(`{"version":1}`), wantErr: []string{"key file"}},
		{name: "garbage", b: []byte("garbage"), wantErr: []string{"parsing key file"}},
		{name: "empty", b: nil, wantErr: []string{"parsing key file"}},
		{name: "not base64", b: []byte(`{"version":1,"clear":"!!"}`), wantErr: []string{"parsing key file"}},
	} {
		t.Run(tc.name, func(t *testing.T) {
			got, err := keyfile.ClearKey(tc.b)
			if tc.want != nil {
				if err != nil {
					t.Fatalf("keyfile.ClearKey(%s): %v", tc.b, err)
				}
				if diff := cmp.Diff(tc.want, got); diff != "" {
					t.Errorf("keyfile.ClearKey (-want +got):\n%s", diff)
				}
				return
			}
			if err == nil {
				t.Fatalf("keyfile.ClearKey(%s) = %x, want an error", tc.b, got)
			}
			if got != nil {
				t.Errorf("keyfile.ClearKey returned a key with its error %v", err)
			}
			if tc.wantIs != nil && !errors.Is(err, tc.wantIs) {
				t.Errorf("keyfile.ClearKey error %q is not %q", err, tc.wantIs)
			}
			for _, s := range tc.wantErr {
				if !strings.Contains(err.Error(), s) {
					t.Errorf("keyfile.ClearKey error %q does not contain %q", err, s)
				}
			}
		})
	}
}
