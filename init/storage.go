package main

import (
	"errors"
	"fmt"
	"log/slog"

	"github.com/borough-os/borough/internal/cmdline"
	"github.com/borough-os/borough/internal/console"
	"github.com/borough-os/borough/internal/storage"
	"github.com/borough-os/borough/internal/tpm"
)

// mountStorage opens the TPM, if there is one, and mounts the ESP and the
// data volume.
func mountStorage(log *slog.Logger, params cmdline.Params) (*storage.Storage, error) {
	t, err := tpm.Open()
	switch {
	case errors.Is(err, tpm.ErrNoTPM):
		log.Info("no TPM found")
		t = nil
	case err != nil:
		return nil, fmt.Errorf("opening the TPM: %w", err)
	default:
		log.Info("TPM 2.0 found")
		defer t.Close()
	}
	return storage.Mount(storage.Config{
		TPM:    t,
		Policy: storage.TPMBestEffort,
		Pause:  pauseHook(log, params),
		Log:    log.With(console.ServiceKey, "storage"),
	})
}
