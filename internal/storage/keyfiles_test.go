package storage

import (
	"bytes"
	"crypto/sha256"
	"encoding/base64"
	"encoding/json"
	"errors"
	"fmt"
	"io/fs"
	"os"
	"path"
	"path/filepath"
	"strings"
	"testing"

	"github.com/google/go-cmp/cmp"
	"github.com/google/go-tpm/tpm2"
	"github.com/google/go-tpm/tpm2/transport"

	"github.com/borough-os/borough/esp"
	"github.com/borough-os/borough/internal/crypt"
	"github.com/borough-os/borough/internal/keyfile"
	"github.com/borough-os/borough/internal/tpm"
	"github.com/borough-os/borough/internal/tpmtest"
)

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
	tr := tpmtest.Transport(t, seed)
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

func TestKeyFilesStoreLoad(t *testing.T) {
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
				k := keyFiles{root: root, policy: tc.policy}
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

// TestKeyFilesStoreStaleTmp: a crash during a store can leave f.tmp; the
// next store must replace its contents (it is longer than the new file)
// and leave no f.tmp.
func TestKeyFilesStoreStaleTmp(t *testing.T) {
	const f = esp.SealedLocalKey
	root := t.TempDir()
	mkdir(t, filepath.Dir(f.In(root)))
	writeFile(t, f.In(root)+".tmp", []byte(`{"version":1,"clear":"c3RhbGU="}`+strings.Repeat(" stale", 100)))
	k := keyFiles{root: root, policy: keyfile.TPMDisabled}
	if err := k.store(f, testKey(3)); err != nil {
		t.Fatalf("store: %v", err)
	}
	checkKeyFile(t, root, f, testKey(3), false)
}

func TestKeyFilesStoreError(t *testing.T) {
	// The ESP root is a file: the key's directory cannot be made.
	root := filepath.Join(t.TempDir(), "esp")
	writeFile(t, root, nil)
	k := keyFiles{root: root, policy: keyfile.TPMDisabled}
	err := k.store(esp.SealedLocalKey, testKey(1))
	if err == nil {
		t.Fatal("store on an ESP root that is a file succeeded")
	}
	if want := "writing " + string(esp.SealedLocalKey); !strings.Contains(err.Error(), want) {
		t.Errorf("store error %q does not contain %q", err, want)
	}
}

func TestKeyFilesLoadErrors(t *testing.T) {
	const f = esp.SealedLocalKey
	clearKey := func(key []byte) string {
		return `{"version":1,"clear":"` + base64.StdEncoding.EncodeToString(key) + `"}`
	}
	// withFile writes content to f and loads with no TPM and policy.
	withFile := func(content string, policy keyfile.TPMPolicy) func(*testing.T, string) keyFiles {
		return func(t *testing.T, root string) keyFiles {
			mkdir(t, filepath.Dir(f.In(root)))
			writeFile(t, f.In(root), []byte(content))
			return keyFiles{root: root, policy: policy}
		}
	}
	// sealed stores a key sealed to a simulated TPM (seed 1), then lets
	// change alter the machine and return the keyFiles for load.
	sealed := func(change func(*testing.T, *testSim, keyFiles) keyFiles) func(*testing.T, string) keyFiles {
		return func(t *testing.T, root string) keyFiles {
			s := openSim(t, 1)
			k := keyFiles{root: root, tpm: s.tpm, policy: keyfile.TPMRequired}
			if err := k.store(f, testKey(1)); err != nil {
				t.Fatalf("store: %v", err)
			}
			return change(t, s, k)
		}
	}
	for _, tc := range []struct {
		name string
		// setup writes f under root and returns the keyFiles to load it.
		setup func(t *testing.T, root string) keyFiles
		// wantIs, if set, must be in the error's chain.
		wantIs error
		// want are substrings of the error.
		want []string
	}{
		{
			name:   "missing file",
			setup:  func(t *testing.T, root string) keyFiles { return keyFiles{root: root} },
			wantIs: fs.ErrNotExist,
			want:   []string{"reading " + string(f)},
		},
		{
			name:  "garbage",
			setup: withFile("not JSON", keyfile.TPMBestEffort),
			want:  []string{string(f) + ": key file: damaged"},
		},
		{
			name:  "empty file",
			setup: withFile("", keyfile.TPMBestEffort),
			want:  []string{string(f) + ": key file: damaged"},
		},
		{
			name:  "truncated JSON",
			setup: withFile(clearKey(testKey(1))[:20], keyfile.TPMBestEffort),
			want:  []string{string(f) + ": key file: damaged"},
		},
		{
			name:  "no version",
			setup: withFile(strings.Replace(clearKey(testKey(1)), `"version":1,`, "", 1), keyfile.TPMBestEffort),
			want:  []string{string(f) + ": key file has version 0, this node reads 1"},
		},
		{
			name:  "newer version",
			setup: withFile(strings.Replace(clearKey(testKey(1)), `"version":1`, `"version":2`, 1), keyfile.TPMBestEffort),
			want:  []string{string(f) + ": key file has version 2, this node reads 1"},
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
			want:  []string{string(f) + ": key file: damaged"},
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
			setup: func(t *testing.T, root string) keyFiles {
				k := withFile(clearKey(testKey(1)), keyfile.TPMRequired)(t, root)
				k.tpm = openSim(t, 1).tpm
				return k
			},
			wantIs: ErrKeyInClear,
			want:   []string{string(f)},
		},
		{
			name: "sealed key, no TPM",
			setup: sealed(func(t *testing.T, s *testSim, k keyFiles) keyFiles {
				s.close(t)
				return keyFiles{root: k.root, policy: keyfile.TPMBestEffort}
			}),
			wantIs: ErrNoTPMForKey,
			want:   []string{string(f)},
		},
		{
			name: "sealed key, TPM disabled",
			setup: sealed(func(t *testing.T, s *testSim, k keyFiles) keyFiles {
				s.close(t)
				return keyFiles{root: k.root, policy: keyfile.TPMDisabled}
			}),
			wantIs: ErrTPMDisabled,
			want:   []string{string(f)},
		},
		{
			name: "sealed key, another TPM",
			setup: sealed(func(t *testing.T, s *testSim, k keyFiles) keyFiles {
				s.close(t)
				k.tpm = openSim(t, 2).tpm
				return k
			}),
			wantIs: tpm.ErrWrongTPM,
			want:   []string{"unsealing " + string(f)},
		},
		{
			name: "sealed key, PCR 7 extended",
			setup: sealed(func(t *testing.T, s *testSim, k keyFiles) keyFiles {
				s.extend(t, 7, "another Secure Boot key")
				return k
			}),
			wantIs: tpm.ErrPolicy,
			want:   []string{"unsealing " + string(f)},
		},
		{
			name: "sealed key, PCR 4 extended",
			setup: sealed(func(t *testing.T, s *testSim, k keyFiles) keyFiles {
				s.extend(t, 4, "another boot binary")
				return k
			}),
			wantIs: tpm.ErrPolicy,
			want:   []string{"unsealing " + string(f)},
		},
		{
			name: "sealed object not a sealed key",
			setup: func(t *testing.T, root string) keyFiles {
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
