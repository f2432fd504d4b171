package measure

import (
	"bytes"
	"crypto/sha256"
	"errors"
	"fmt"

	"github.com/google/go-attestation/attest"
)

// EventLog is where Linux shows the firmware's TCG event log (securityfs).
const EventLog = "/sys/kernel/security/tpm0/binary_bios_measurements"

// evBootServicesApplication is EV_EFI_BOOT_SERVICES_APPLICATION: an EFI
// application the firmware started, measured by its Authenticode digest.
const evBootServicesApplication = 0x80000003

// bootPCR is the PCR of boot manager code.
const bootPCR = 4

// ErrNotInLog says the event log does not show the running boot binary
// among the applications the firmware started.
var ErrNotInLog = errors.New("the event log shows no application with the running boot binary's digest")

// PredictPCR4 returns the SHA-256 PCR 4 a boot would have that ran the
// same way as the one log records, but started the boot binary next where
// it started running. running and next are boot binaries (PE images); nil
// next is running again, hashed once.
func PredictPCR4(log, running, next []byte) ([]byte, error) {
	was, err := Authenticode(running)
	if err != nil {
		return nil, fmt.Errorf("the running boot binary: %w", err)
	}
	will := was
	if next != nil {
		if will, err = Authenticode(next); err != nil {
			return nil, fmt.Errorf("the new boot binary: %w", err)
		}
	}
	return Replay4(log, was, will)
}

// Replay4 replays the SHA-256 PCR 4 of log with the application whose
// digest is was measured as will instead.
func Replay4(log, was, will []byte) ([]byte, error) {
	el, err := attest.ParseEventLog(log)
	if err != nil {
		return nil, fmt.Errorf("parsing the event log: %w", err)
	}
	pcr := make([]byte, sha256.Size)
	found := false
	for _, e := range el.Events(attest.HashSHA256) {
		if e.Index != bootPCR {
			continue
		}
		digest := e.Digest
		if uint32(e.Type) == evBootServicesApplication && bytes.Equal(digest, was) {
			digest, found = will, true
		}
		sum := sha256.Sum256(append(append([]byte{}, pcr...), digest...))
		pcr = sum[:]
	}
	if !found {
		return nil, ErrNotInLog
	}
	return pcr, nil
}
