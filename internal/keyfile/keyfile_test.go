package keyfile

import "testing"

func TestTPMPolicyString(t *testing.T) {
	for _, tc := range []struct {
		p    TPMPolicy
		want string
	}{
		{TPMBestEffort, "best-effort"},
		{TPMRequired, "required"},
		{TPMDisabled, "disabled"},
		{TPMDisabled + 1, "TPMPolicy(3)"},
		{-1, "TPMPolicy(-1)"},
	} {
		t.Run(tc.want, func(t *testing.T) {
			if got := tc.p.String(); got != tc.want {
				t.Errorf("TPMPolicy(%d).String() = %q, want %q", int(tc.p), got, tc.want)
			}
		})
	}
	// The zero policy must be best-effort: a TPM when there is one.
	if got := TPMPolicy(0); got != TPMBestEffort {
		t.Errorf("zero TPMPolicy = %v, want %v", got, TPMBestEffort)
	}
}
