package main

import (
	"context"
	"crypto/tls"
	"crypto/x509"
	"errors"
	"fmt"
	"io"
	"sync/atomic"
	"time"

	clientv3 "go.etcd.io/etcd/client/v3"

	"github.com/borough-os/borough/internal/cluster"
	"github.com/borough-os/borough/internal/clusterkey"
	"github.com/borough-os/borough/internal/efivar"
	"github.com/borough-os/borough/internal/enrolment"
	"github.com/borough-os/borough/internal/espledger"
	"github.com/borough-os/borough/internal/hardware"
	"github.com/borough-os/borough/internal/lifecycle"
	"github.com/borough-os/borough/internal/metrics"
	"github.com/borough-os/borough/internal/netconfig"
	"github.com/borough-os/borough/internal/nodeapi"
	"github.com/borough-os/borough/internal/pid1"
	"github.com/borough-os/borough/internal/pki"
	"github.com/borough-os/borough/internal/reset"
	"github.com/borough-os/borough/internal/space"
	"github.com/borough-os/borough/internal/storage"
	"github.com/borough-os/borough/internal/supervisor"
	"github.com/borough-os/borough/internal/timeline"
	"github.com/borough-os/borough/internal/update"
	"github.com/borough-os/borough/internal/updater"
	"github.com/borough-os/borough/proto/enrolmentpb"
	"github.com/borough-os/borough/proto/nodepb"
)

// apiParts are what the node API acts on.
type apiParts struct {
	// phase is how far bring-up has come, which it stores at each step.
	phase *atomic.Pointer[phase]
	// life is the node's way into its cluster, from the start of the boot.
	life *lifecycle.Lifecycle
	logs *logs
	// requests takes reboot and power-off requests.
	requests chan<- int
	// network writes the owner's network settings to try at a reboot.
	network func(*enrolmentpb.Network) error
	// fresh says that the node has no data volume yet: it takes an
	// enrolment config from the owner.
	fresh bool
	about nodeFacts
	// ledger writes the reset mark.
	ledger *espledger.Ledger
}

// apiService is the node API for the cluster's owner: the one on the data
// volume (the enrolment's, the one the cluster gave a joined node, or the
// one the owner handed the cluster over to), or the one the enrolment
// names while the volume is locked.
func apiService(p apiParts) supervisor.Service {
	ph, life, lg, about, requests := p.phase, p.life, p.logs, p.about, p.requests
	owner := func() *x509.Certificate { return ph.Load().owner(p.fresh, p.ledger.Refused()) }
	member, admission := apiIdentity(ph)
	identity := func() (*tls.Certificate, error) {
		if cert, err := member(); err == nil {
			return cert, nil
		}
		return ph.Load().lockedIdentity()
	}
	s := &nodeapi.Server{
		Owner: owner, Identity: identity, Admission: admission, Logs: lg.tree, Journal: lg.journal,
		Info: func() *nodepb.Info {
			now := ph.Load()
			info := about.info(life.Status(), now.enrolment.ClusterName)
			if now.mounted {
				info.DataUsed, info.DataSize = dataUse(storage.DataRoot)
			}
			if now.keys != nil {
				info.Escrow = escrowOf(now.keys.Place())
			}
			if now.mgr != nil {
				info.Space = spaceOf(now.mgr.Client())
				info.RestoreRecipient = now.mgr.RestoreRecipient()
			}
			return info
		},
		Update: func(req *nodepb.UpdateRequest) (*nodepb.UpdateResponse, error) {
			rec, err := about.updates.Install(update.Update{BootBinary: req.GetBootBinary(), Payload: req.GetPayload(),
				Release: req.GetRelease()}, owner())
			if err != nil {
				return nil, err
			}
			return &nodepb.UpdateResponse{Slot: string(rec.Slot), Version: rec.NewVersion}, nil
		},
		Reset: func(force bool) error {
			switch st := life.Status(); {
			case force:
			case st.State == lifecycle.Running, st.State == lifecycle.Restarting, st.State == lifecycle.Joining:
				return fmt.Errorf("the node is member %s of cluster %s (%s): remove it from the cluster first "+
					"(borough node reset does, given --cluster), or force the reset", st.Member, st.Cluster, st.State)
			}
			return reset.Request(p.ledger, owner())
		},
		Restore: func(ctx context.Context, r io.Reader) (*nodepb.RestoreResponse, error) {
			mgr := ph.Load().mgr
			if mgr == nil {
				return nil, cluster.ErrNoRestore
			}
			m, err := mgr.ReceiveBackup(ctx, r)
			if err != nil {
				return nil, err
			}
			return &nodepb.RestoreResponse{Cluster: m.Cluster, Revision: m.Revision, Taken: m.Taken.Unix(), SnapshotSha256: m.SnapshotSHA256}, nil
		},
		Locked: func() ([]byte, []byte, error) {
			if keys := ph.Load().keys; keys != nil {
				return keys.Locked()
			}
			return nil, nil, clusterkey.ErrNotWaiting
		},
		SealedOwner: func() string { return ph.Load().sealedOwner() },
		Unlock: func(sealed []byte) error {
			if keys := ph.Load().keys; keys != nil {
				return keys.Unlock(sealed)
			}
			return clusterkey.ErrNotWaiting
		},
		Recover: func() error {
			if mgr := ph.Load().mgr; mgr != nil {
				return mgr.Recover()
			}
			return errNotMounted
		},
		Network: p.network, NetworkWindow: netconfig.Window,
		Enrol: func(config []byte) error {
			if st := life.Status().State; !p.fresh || st != lifecycle.New && st != lifecycle.Failed {
				return errors.New("the node has a data volume: an enrolment config applies to a node's first boot only " +
					"(borough node reset erases the node first)")
			}
			return enrolment.Push(config, storage.ESPRoot, time.Now())
		},
		Unconfirmed: func() error {
			if ph.Load().enrolment.Provisional() {
				return errors.New("its enrolment record on the ESP is not yet confirmed by its data volume, which is still locked")
			}
			return nil
		},
		Power: func(a nodepb.PowerRequest_Action) {
			code := pid1.ExitPoweroff
			if a == nodepb.PowerRequest_ACTION_REBOOT {
				code = pid1.ExitReboot
			}
			request(requests, code)
		},
	}
	s.Metrics = metrics.Handler(s.Info)
	return supervisor.Service{Name: "node-api", Run: func(ctx context.Context) error {
		s.Log = supervisor.Logger(ctx)
		if p.fresh {
			logNodeKey(s)
		}
		return s.Run(ctx)
	}}
}

// errNotMounted refuses what a node does with its data volume before it
// is mounted.
var errNotMounted = errors.New("the node's data volume is not mounted")

// lockedOwner is the owner of a node whose data volume is still locked:
// the one its enrolment config names, unless the cluster was handed over
// since (its record is sealed to another owner: the node takes that one
// alone, through sealed), or the ESP's ledger was refused (an older or
// forged ESP put back, whose enrolment config may name an owner the
// cluster has since replaced: the node takes nobody until a peer or the
// sealed owner unlocks it). A fresh node (no data volume: its first boot,
// or its first after a reset, which erased its ledger) has nothing locked
// and no ledger to vouch for anything: its owner is its enrolment
// config's.
func lockedOwner(enrolled *x509.Certificate, sealed string, fresh bool, refused error) *x509.Certificate {
	switch {
	case enrolled == nil, refused != nil && !fresh:
		return nil
	case sealed != "" && pki.Fingerprint(enrolled) != sealed:
		return nil
	}
	return enrolled
}

// logNodeKey prints, for a node without a data volume, the key its node
// API presents until it has a cluster: the owner sends it a config or a
// backup only after checking that key (nodeapi's identity.go).
func logNodeKey(s *nodeapi.Server) {
	fp, err := s.NodeKey()
	if err != nil {
		s.Log.Error("making the node's own key", "err", err)
		return
	}
	s.Log.Info("until it has a cluster, the node API presents this node's own key", "node_key", fp)
}

// nodeFacts is what the node API says of the node besides its state.
type nodeFacts struct {
	hw       hardware.Report
	timeline *timeline.Timeline
	tpm      bool
	updates  *updater.Updater
}

func (a nodeFacts) info(st lifecycle.Status, enrolled string) *nodepb.Info {
	cl := st.Cluster
	if cl == "" {
		cl = enrolled
	}
	info := &nodepb.Info{
		Version: a.updates.Running().Version, BootSlot: string(a.updates.Running().Slot), Update: a.updates.Describe(),
		State: string(st.State), Failure: st.Failure, Cluster: cl, Member: st.Member,
		UptimeNanos: int64(timeline.SinceBoot()), Tpm: a.tpm, SecureBoot: secureBootState(),
		UnixNano: time.Now().UnixNano(),
	}
	for _, m := range a.timeline.Marks() {
		info.Timeline = append(info.Timeline, &nodepb.Phase{Name: m.Phase, AtNanos: int64(m.At)})
	}
	for _, d := range a.hw.Disks {
		info.Disks = append(info.Disks, &nodepb.Device{Name: d.Name, Driver: d.Driver, Detail: fmt.Sprintf("%d bytes", d.Size)})
	}
	for _, n := range a.hw.NICs {
		info.Nics = append(info.Nics, &nodepb.Device{Name: n.Name, Driver: n.Driver, Detail: n.MAC})
	}
	return info
}

// dataUse is the bytes in use and in all of the filesystem at root, as
// the space keeper counts them (space.Usage: what is not available to a
// write is in use); zeros if it cannot say.
func dataUse(root string) (used, size uint64) {
	total, free, err := space.Usage(root)
	if err != nil {
		return 0, 0
	}
	return uint64(total - free), uint64(total)
}

// spaceOf is the member's etcd database against its quota, for the node
// API; nil while etcd does not run here. A full member answers (etcd
// serves its status when it refuses writes); a member without a quorum
// gives its database without its alarms, after a second.
func spaceOf(c *clientv3.Client) *nodepb.Space {
	if c == nil {
		return nil
	}
	ctx, cancel := context.WithTimeout(context.Background(), time.Second)
	defer cancel()
	s, err := space.Read(ctx, c)
	if s.Quota == 0 && err != nil {
		return nil
	}
	return &nodepb.Space{DbSize: s.DB, DbInUse: s.InUse, Quota: s.Quota, Alarms: s.Alarms}
}

// escrowOf is where the node's cluster unlock key is, for the node API.
func escrowOf(p *clusterkey.Place) *nodepb.Escrow {
	if p == nil {
		return nil
	}
	return &nodepb.Escrow{Local: p.Local, Needed: int32(p.Needed), Holders: p.Holders, Epoch: p.Epoch}
}

func secureBootState() string {
	on, err := efivar.SecureBoot(efivar.Dir)
	switch {
	case err != nil:
		return "unknown"
	case on:
		return "on"
	}
	return "off"
}
