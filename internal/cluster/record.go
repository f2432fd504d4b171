package cluster

import (
	"errors"
	"fmt"

	"github.com/borough-os/borough/datavol"
	"github.com/borough-os/borough/esp"
	"github.com/borough-os/borough/internal/consensus"
	"github.com/borough-os/borough/internal/espledger"
	"github.com/borough-os/borough/internal/lifecycle"
	"github.com/borough-os/borough/internal/nodestate"
)

// Decision is what the records say to do.
type Decision struct {
	Next lifecycle.State
	// Record is the record to continue from, if any.
	Record *nodestate.Record
	// Reason explains a Failed decision.
	Reason error
}

// decide reads the ESP's and the data volume's records. freshData says the
// data volume was created on this boot, joining that the enrolment config
// holds a join ticket (it matters only to a fresh node). espDamaged says
// the ESP had a record that was damaged (esp is then nil): the data
// volume's record decides alone, and without one the node refuses to
// start a cluster it may already be a member of.
func decide(esp, data *nodestate.Record, espDamaged, freshData, joining bool) Decision {
	switch {
	case espDamaged && data == nil:
		return Decision{Next: lifecycle.Failed, Reason: errors.New(
			"the node state record on the ESP is damaged and the data volume holds none: " +
				"this node may be a member of a cluster; refusing to bootstrap or join one")}
	case esp != nil && esp.Phase == nodestate.PhaseRemoved, data != nil && data.Phase == nodestate.PhaseRemoved:
		r := esp
		if r == nil || r.Phase != nodestate.PhaseRemoved {
			r = data
		}
		return Decision{Next: lifecycle.Failed, Reason: &consensus.RemovedError{Cluster: r.Cluster}}
	case esp == nil && data == nil && joining:
		return Decision{Next: lifecycle.Joining}
	case esp == nil && data == nil:
		return Decision{Next: lifecycle.CreatingCluster}
	case esp != nil && esp.Phase == nodestate.PhaseMember && (data == nil || data.Phase != nodestate.PhaseMember):
		return Decision{Next: lifecycle.Failed, Reason: fmt.Errorf(
			"the ESP says this node is member %s of cluster %s, but its data volume does not (new: %v): "+
				"the data volume is not this node's, or was rolled back; refusing to bootstrap a second cluster",
			esp.Node, esp.Cluster, freshData)}
	case data != nil && data.Phase == nodestate.PhaseMember:
		if esp != nil && esp.Phase == nodestate.PhaseMember && (esp.ClusterID != data.ClusterID || esp.MemberID != data.MemberID) {
			return Decision{Next: lifecycle.Failed, Reason: fmt.Errorf(
				"the ESP's node state record (cluster %s, member %s) disagrees with the data volume's (cluster %s, member %s)",
				esp.ClusterID, esp.MemberID, data.ClusterID, data.MemberID)}
		}
		return Decision{Next: lifecycle.Restarting, Record: data}
	}
	// A bootstrap or join began but did not finish. The data volume's
	// record wins: it is written first. A join whose data volume is new
	// lost its key with the old volume and cannot finish.
	r := data
	if r == nil {
		r = esp
	}
	if r.Phase != nodestate.PhaseJoining {
		return Decision{Next: lifecycle.CreatingCluster, Record: r}
	}
	if data == nil {
		return Decision{Next: lifecycle.Failed, Reason: fmt.Errorf(
			"the ESP says this node began joining cluster %s as %s, but its data volume does not: "+
				"the data volume with the node's key is gone, and the ticket admits only that key", r.Cluster, r.Node)}
	}
	return Decision{Next: lifecycle.Joining, Record: r}
}

// dataRecord is the node state record's path on the data volume; the
// ESP's goes through the ledger.
func (l *local) dataRecord() string {
	return datavol.NodeRecord.In(l.cfg.DataRoot)
}

// recordRemoval records in the node state records that the cluster
// removed the node, and returns the error that says so.
func (l *local) recordRemoval(rec *nodestate.Record) error {
	rec.Phase = nodestate.PhaseRemoved
	if err := l.writeRecords(rec); err != nil {
		l.log.Warn("recording the removal", "err", err)
	}
	return &consensus.RemovedError{Cluster: rec.Cluster}
}

// writeRecords writes rec to the data volume, then to the ESP.
func (l *local) writeRecords(rec *nodestate.Record) error {
	if err := nodestate.WriteRecord(l.dataRecord(), rec); err != nil {
		return err
	}
	return l.writeESPRecord(rec)
}

// readESPRecord reads the ESP's node state record through the ledger: a
// copy the ledger refuses is damaged, and the data volume's decides.
func (l *local) readESPRecord() (*nodestate.Record, error) {
	b, err := l.cfg.Ledger.Read(esp.NodeState)
	if r := (*espledger.Refused)(nil); errors.As(err, &r) {
		return nil, fmt.Errorf("node state record %s: %w: %w", esp.NodeState, nodestate.ErrDamaged, err)
	}
	return nodestate.ParseRecord(string(esp.NodeState), b, err)
}

// writeESPRecord writes rec to the ESP through the ledger, unless the
// ESP holds it already.
func (l *local) writeESPRecord(rec *nodestate.Record) error {
	f, err := nodestate.RecordFile(string(esp.NodeState), rec)
	if err != nil {
		return err
	}
	if err := l.cfg.Ledger.Write(map[esp.File][]byte{esp.NodeState: f.Data}); err != nil {
		return fmt.Errorf("writing node state record: %w", err)
	}
	return nil
}

// recordMember records the started member in the node state record.
func (mg *Manager) recordMember(rec *nodestate.Record, c *consensus.Consensus) error {
	rec.Phase = nodestate.PhaseMember
	rec.ClusterID = nodestate.HexID(c.ClusterID())
	rec.MemberID = nodestate.HexID(c.MemberID())
	return mg.writeRecords(rec)
}

// ips are the addresses in the node's certificate.
