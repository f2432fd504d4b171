package consensus

import (
	"crypto/rand"
	"encoding/hex"
	"fmt"
	"net/netip"
	"net/url"
	"os"

	"go.etcd.io/etcd/etcdutl/v3/snapshot"
	"go.uber.org/zap/zapcore"

	"github.com/borough-os/borough/internal/atomicfile"
	"github.com/borough-os/borough/internal/etcdlog"
	"github.com/borough-os/borough/internal/ports"
)

// Restore makes cfg's data directory, which must not exist yet, from the
// etcd snapshot at path: a one-member cluster of cfg's member holding the
// snapshot's keys and values, as `etcdutl snapshot restore` makes it
// (etcd's own code does), with etcd's hash of the snapshot checked. Start
// the member on it with ModeNew.
//
// The cluster and member IDs must be new, not the backed-up cluster's: a
// member of that cluster still running must find nothing it knows here.
// etcd derives both from the member's peer URL and the cluster token, and
// a new cluster's member was created with its cluster's name as the
// token, so a restore on a machine at the same address would get its old
// IDs back: the token here is the name and a random suffix.
//
// The directory is made beside cfg.DataDir and renamed into place once
// whole: a restore cut short leaves no data directory for etcd to start
// on, only one the next Restore removes.
func Restore(cfg Config, path string) error {
	suffix := make([]byte, 8)
	if _, err := rand.Read(suffix); err != nil {
		return err
	}
	if _, err := os.Stat(cfg.DataDir); err == nil {
		return fmt.Errorf("restoring a snapshot into %s: the member's data directory exists", cfg.DataDir)
	}
	tmp := cfg.DataDir + ".restoring"
	if err := os.RemoveAll(tmp); err != nil {
		return fmt.Errorf("removing an earlier restore's leftovers: %w", err)
	}
	peer := url.URL{Scheme: "https", Host: netip.AddrPortFrom(cfg.IP, ports.Peer).String()}
	err := snapshot.NewV3(etcdlog.New(cfg.Log.With("service", "etcd"), zapcore.InfoLevel)).Restore(snapshot.RestoreConfig{
		SnapshotPath:        path,
		Name:                cfg.Name,
		OutputDataDir:       tmp,
		PeerURLs:            []string{peer.String()},
		InitialCluster:      cfg.Name + "=" + peer.String(),
		InitialClusterToken: cfg.Cluster + "-restored-" + hex.EncodeToString(suffix),
	})
	if err != nil {
		return fmt.Errorf("restoring the snapshot %s: %w", path, err)
	}
	if err := atomicfile.Rename(tmp, cfg.DataDir); err != nil {
		return fmt.Errorf("restoring the snapshot: %w", err)
	}
	return nil
}
