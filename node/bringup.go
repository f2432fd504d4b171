package main

import (
	"context"
	"errors"
	"fmt"
	"log/slog"

	"github.com/borough-os/borough/internal/cluster"
	"github.com/borough-os/borough/internal/cmdline"
	"github.com/borough-os/borough/internal/console"
	"github.com/borough-os/borough/internal/enrolment"
	"github.com/borough-os/borough/internal/network"
	"github.com/borough-os/borough/internal/pki"
	"github.com/borough-os/borough/internal/storage"
	"github.com/borough-os/borough/internal/supervisor"
	"github.com/borough-os/borough/internal/tpm"
)

// bringUp reads the enrolment config, mounts the data volume, brings up
// the network, and returns the node's services. A bad enrolment config or
// network puts the node in Failed: it then runs no node services, and
// the data partition is untouched. An error is fatal.
func bringUp(log *slog.Logger, params cmdline.Params, st *storage.Storage) ([]supervisor.Service, error) {
	enrol, err := enrolment.Load(storage.ESPRoot)
	if err != nil {
		cluster.New(cluster.Config{Log: log}).Fail(err)
		return nil, nil
	}
	logEnrolment(log, enrol)
	if err := mountData(log, params, st, enrol.StoragePolicy); err != nil {
		return nil, err
	}
	if err := testMarker(log, params); err != nil {
		return nil, err
	}
	net, err := network.Up(context.Background(), log.With(console.ServiceKey, "network"), enrol.Network)
	if err != nil {
		cluster.New(cluster.Config{Log: log}).Fail(fmt.Errorf("bringing up the network: %w", err))
		return nil, nil
	}
	mgr := cluster.New(cluster.Config{
		Enrolment: enrol, FreshData: st.FirstBoot, IP: net.IP,
		ESPRoot: storage.ESPRoot, DataRoot: storage.DataRoot, Log: log,
	})
	return []supervisor.Service{
		{Name: "network", Run: net.Run},
		{Name: "cluster", Run: mgr.Run},
	}, nil
}

func logEnrolment(log *slog.Logger, e *enrolment.Enrolment) {
	if e.Source == "none" {
		log.Warn("no enrolment config (fw_cfg or ESP): bootstrapping cluster " + e.ClusterName +
			" with NO OWNER; only this node's local clients can reach it")
		return
	}
	owner := "none"
	if e.Owner != nil {
		owner = pki.Fingerprint(e.Owner)
	}
	log.Info("enrolment config", "source", e.Source, "cluster", e.ClusterName, "owner", owner,
		"storage_policy", e.StoragePolicy.String())
}

// mountData opens the TPM, if there is one, and mounts the data volume.
func mountData(log *slog.Logger, params cmdline.Params, st *storage.Storage, policy storage.TPMPolicy) error {
	t, err := tpm.Open()
	switch {
	case errors.Is(err, tpm.ErrNoTPM):
		log.Info("no TPM found")
		t = nil
	case err != nil:
		return fmt.Errorf("opening the TPM: %w", err)
	default:
		log.Info("TPM 2.0 found")
		defer t.Close()
	}
	return st.MountData(storage.Config{
		TPM:    t,
		Policy: policy,
		Pause:  pauseHook(log, params),
	})
}
