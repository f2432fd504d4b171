package storage

import (
	"context"
	"encoding/json"
	"errors"
	"os"
	"path/filepath"
	"strings"
	"testing"

	"github.com/borough-os/borough/esp"
	"github.com/borough-os/borough/internal/keyfile"
)

// TestKeyPolicy: an established node unlocks by how its key is kept, not
// by a policy an ESP edit could have changed; and a key in clear where the
// confirmed policy requires the TPM is refused.
func TestKeyPolicy(t *testing.T) {
	sealed, _ := keyfile.File{Sealed: json.RawMessage(`{"blob":"x"}`)}.Marshal()
	inClear, _ := keyfile.File{Clear: make([]byte, 32)}.Marshal()
	for _, tc := range []struct {
		name      string
		file      []byte // nil: none
		confirmed keyfile.TPMPolicy
		want      keyfile.TPMPolicy
		refused   bool
	}{
		{"sealed, ESP says disabled", sealed, keyfile.TPMRequired, keyfile.TPMRequired, false},
		{"in clear, TPM disabled", inClear, keyfile.TPMDisabled, keyfile.TPMDisabled, false},
		{"in clear, best effort without a TPM", inClear, keyfile.TPMBestEffort, keyfile.TPMDisabled, false},
		{"in clear where the TPM is required", inClear, keyfile.TPMRequired, keyfile.TPMDisabled, true},
		{"missing", nil, keyfile.TPMRequired, keyfile.TPMBestEffort, false},
		{"damaged", sealed[:9], keyfile.TPMRequired, keyfile.TPMBestEffort, false},
	} {
		t.Run(tc.name, func(t *testing.T) {
			root := t.TempDir()
			if tc.file != nil {
				path := esp.SealedLocalKey.In(root)
				if err := os.MkdirAll(filepath.Dir(path), 0o755); err != nil {
					t.Fatal(err)
				}
				if err := os.WriteFile(path, tc.file, 0o600); err != nil {
					t.Fatal(err)
				}
			}
			got := KeyPolicy(root, keyfile.TPMBestEffort)
			if got != tc.want {
				t.Errorf("KeyPolicy = %v, want %v", got, tc.want)
			}
			err := CheckPolicy(tc.confirmed, got)
			if (err != nil) != tc.refused || err != nil && !strings.Contains(err.Error(), "someone replaced the sealed key") {
				t.Errorf("CheckPolicy(%v, %v) = %v, want refused: %v", tc.confirmed, got, err, tc.refused)
			}
		})
	}
}

// TestTPMFailed: a TPM the machine has but the kernel did not bring up
// keeps the data volume closed unless the policy disables the TPM, and
// MountData says why before it reads the partition (here a partition
// whose probe failed: what MountData reports next).
func TestTPMFailed(t *testing.T) {
	failed, probe := errors.New("the TPM failed"), errors.New("the partition's probe")
	for _, tc := range []struct {
		policy keyfile.TPMPolicy
		want   error
	}{
		{keyfile.TPMBestEffort, failed},
		{keyfile.TPMRequired, failed},
		{keyfile.TPMDisabled, probe},
	} {
		t.Run(tc.policy.String(), func(t *testing.T) {
			s := &Storage{probeErr: probe}
			if err := s.MountData(context.Background(), Config{Policy: tc.policy, TPMFailed: failed}); !errors.Is(err, tc.want) {
				t.Errorf("MountData = %v, want %v", err, tc.want)
			}
		})
	}
}
