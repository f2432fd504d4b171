package cluster

import (
	"context"
	"fmt"

	"github.com/borough-os/borough/internal/consensus"
	"github.com/borough-os/borough/internal/nodestate"
)

// restart starts the member from its data. The cluster is the record's:
// an enrolment config applies only to a node's first boot.
func (mg *Manager) restart(ctx context.Context, rec *nodestate.Record) (*consensus.Consensus, error) {
	if name := mg.cfg.Enrolment.ClusterName; name != rec.Cluster {
		mg.log.Warn("the enrolment config names cluster "+name+", but this node is a member of "+rec.Cluster+
			"; an enrolment config applies only to a node's first boot", "cluster", rec.Cluster)
	}
	serial, err := mg.reissueIfMoved()
	if err != nil {
		return nil, err
	}
	c, err := mg.startMember(ctx, rec)
	if err != nil {
		return nil, err
	}
	if id := nodestate.HexID(c.ClusterID()); id != rec.ClusterID {
		c.Close()
		return nil, fmt.Errorf("etcd's data is of cluster %s, the node state record says %s", id, rec.ClusterID)
	}
	// The ESP's record may be behind the data volume's: bring it along.
	if err := mg.writeESPRecord(rec); err != nil {
		c.Close()
		return nil, err
	}
	mg.log.Info("rejoined cluster", "cluster", rec.Cluster, "id", rec.ClusterID, "ca_fingerprint", mg.caFingerprint())
	if serial != "" {
		if err := mg.announceMove(ctx, c, rec.Node, serial); err != nil {
			c.Close()
			return nil, err
		}
		mg.log.Info("told the cluster the node's new address", "address", mg.cfg.IP)
	}
	return c, nil
}
