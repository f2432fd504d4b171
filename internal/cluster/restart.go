package cluster

import (
	"context"
	"fmt"
	"strconv"

	"github.com/borough-os/borough/internal/consensus"
)

// restart starts the member from its data. The cluster is the record's:
// an enrolment config applies only to a node's first boot.
func (mg *Manager) restart(ctx context.Context, rec *Record) (*consensus.Consensus, error) {
	if name := mg.cfg.Enrolment.ClusterName; name != rec.Cluster {
		mg.log.Warn("the enrolment config names cluster "+name+", but this node is a member of "+rec.Cluster+
			"; an enrolment config applies only to a node's first boot", "cluster", rec.Cluster)
	}
	c, err := consensus.Start(ctx, mg.consensusConfig(rec.Node, rec.Cluster, consensus.ModeRestart))
	if err != nil {
		return nil, err
	}
	if c.Removed() {
		c.Close()
		return nil, errRemoved(rec.Cluster)
	}
	if id := strconv.FormatUint(c.ClusterID(), 16); id != rec.ClusterID {
		c.Close()
		return nil, fmt.Errorf("etcd's data is of cluster %s, the node state record says %s", id, rec.ClusterID)
	}
	// The ESP's record may be behind the data volume's: bring it along.
	if err := writeRecord(mg.espRecord(), rec); err != nil {
		c.Close()
		return nil, err
	}
	mg.log.Info("rejoined cluster", "cluster", rec.Cluster, "id", rec.ClusterID, "ca_fingerprint", mg.caFingerprint())
	return c, nil
}
