package cluster

import (
	"encoding/json"
	"errors"
	"fmt"
	"os"
	"regexp"
	"strconv"

	"github.com/borough-os/borough/internal/atomicfile"
	"github.com/borough-os/borough/internal/consensus"
	"github.com/borough-os/borough/internal/lifecycle"
	"github.com/borough-os/borough/internal/pki"
)

// Phases of a Record.
const (
	// PhaseBootstrapping: the node began bootstrapping a cluster.
	PhaseBootstrapping = "bootstrapping"
	// PhaseJoining: the node began joining Cluster as Node.
	PhaseJoining = "joining"
	// PhaseMember: the node is a member of Cluster.
	PhaseMember = "member"
	// PhaseRemoved: the cluster removed the node.
	PhaseRemoved = "removed"
)

// recordVersion is the Record format this node writes and reads.
const recordVersion = 1

// Record is the node state record.
type Record struct {
	Version   int    `json:"version"`
	Phase     string `json:"phase"`
	Cluster   string `json:"cluster"`
	Node      string `json:"node"`
	ClusterID string `json:"cluster_id,omitempty"`
	MemberID  string `json:"member_id,omitempty"`
}

// readRecord reads a record; a missing file is (nil, nil). A record that
// does not parse, or whose fields are not what a node writes, is damaged
// (errDamaged): its names must not reach etcd's flags or certificates.
func readRecord(path string) (*Record, error) {
	b, err := os.ReadFile(path)
	return parseRecord(path, b, err)
}

// parseRecord parses b, the record read from path with err, as readRecord
// does.
func parseRecord(path string, b []byte, err error) (*Record, error) {
	if errors.Is(err, os.ErrNotExist) {
		return nil, nil
	}
	if err != nil {
		return nil, fmt.Errorf("reading node state record: %w", err)
	}
	var r Record
	if err := json.Unmarshal(b, &r); err != nil {
		return nil, fmt.Errorf("node state record %s: %w: %w", path, errDamaged, err)
	}
	if r.Version != recordVersion {
		return nil, fmt.Errorf("node state record %s has version %d, this node reads %d", path, r.Version, recordVersion)
	}
	if err := r.check(); err != nil {
		return nil, fmt.Errorf("node state record %s: %w: %w", path, errDamaged, err)
	}
	return &r, nil
}

// errDamaged says a record is damaged, as a torn write to the ESP leaves
// it (a FAT rename is not atomic across a power cut).
var errDamaged = errors.New("damaged")

var hexID = regexp.MustCompile(`^[0-9a-f]{1,16}$`)

// hexID64 is an etcd ID as a record holds it (hexID).
func hexID64(id uint64) string { return strconv.FormatUint(id, 16) }

// check checks that r's fields are of the form a node writes.
func (r *Record) check() error {
	switch {
	case r.Phase != PhaseBootstrapping && r.Phase != PhaseJoining && r.Phase != PhaseMember && r.Phase != PhaseRemoved:
		return fmt.Errorf("phase %q is not a phase", r.Phase)
	case !pki.IsClusterName(r.Cluster):
		return fmt.Errorf("cluster %q is not a cluster name", r.Cluster)
	case !pki.IsNodeName(r.Node):
		return fmt.Errorf("node %q is not a node name", r.Node)
	case r.ClusterID != "" && !hexID.MatchString(r.ClusterID):
		return fmt.Errorf("cluster ID %q is not an etcd ID", r.ClusterID)
	case r.MemberID != "" && !hexID.MatchString(r.MemberID):
		return fmt.Errorf("member ID %q is not an etcd ID", r.MemberID)
	case r.Phase == PhaseMember && (r.ClusterID == "" || r.MemberID == ""):
		return errors.New("a member's record without its cluster and member IDs")
	}
	return nil
}

// writeRecord writes r to path atomically and durably, unless the file
// holds r already: the ESP's record is rewritten only when it changes, so
// that a power cut on an ordinary restart cannot tear it.
func writeRecord(path string, r *Record) error {
	f, err := recordFile(path, r)
	if err != nil {
		return err
	}
	if err := atomicfile.Update(f.Path, f.Data, f.Perm); err != nil {
		return fmt.Errorf("writing node state record: %w", err)
	}
	return nil
}

// recordFile is the file that holds r at path, for a caller that writes
// it in one batch with other files.
func recordFile(path string, r *Record) (atomicfile.File, error) {
	r.Version = recordVersion
	b, err := json.MarshalIndent(r, "", "  ")
	if err != nil {
		return atomicfile.File{}, err
	}
	return atomicfile.File{Path: path, Data: b, Perm: 0o600}, nil
}

// Decision is what the records say to do.
type Decision struct {
	Next lifecycle.State
	// Record is the record to continue from, if any.
	Record *Record
	// Reason explains a Failed decision.
	Reason error
}

// decide reads the ESP's and the data volume's records. freshData says the
// data volume was created on this boot, joining that the enrolment config
// holds a join ticket (it matters only to a fresh node). espDamaged says
// the ESP had a record that was damaged (esp is then nil): the data
// volume's record decides alone, and without one the node refuses to
// start a cluster it may already be a member of.
func decide(esp, data *Record, espDamaged, freshData, joining bool) Decision {
	switch {
	case espDamaged && data == nil:
		return Decision{Next: lifecycle.Failed, Reason: errors.New(
			"the node state record on the ESP is damaged and the data volume holds none: " +
				"this node may be a member of a cluster; refusing to bootstrap or join one")}
	case esp != nil && esp.Phase == PhaseRemoved, data != nil && data.Phase == PhaseRemoved:
		r := esp
		if r == nil || r.Phase != PhaseRemoved {
			r = data
		}
		return Decision{Next: lifecycle.Failed, Reason: &consensus.RemovedError{Cluster: r.Cluster}}
	case esp == nil && data == nil && joining:
		return Decision{Next: lifecycle.Joining}
	case esp == nil && data == nil:
		return Decision{Next: lifecycle.CreatingCluster}
	case esp != nil && esp.Phase == PhaseMember && (data == nil || data.Phase != PhaseMember):
		return Decision{Next: lifecycle.Failed, Reason: fmt.Errorf(
			"the ESP says this node is member %s of cluster %s, but its data volume does not (new: %v): "+
				"the data volume is not this node's, or was rolled back; refusing to bootstrap a second cluster",
			esp.Node, esp.Cluster, freshData)}
	case data != nil && data.Phase == PhaseMember:
		if esp != nil && esp.Phase == PhaseMember && (esp.ClusterID != data.ClusterID || esp.MemberID != data.MemberID) {
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
	if r.Phase != PhaseJoining {
		return Decision{Next: lifecycle.CreatingCluster, Record: r}
	}
	if data == nil {
		return Decision{Next: lifecycle.Failed, Reason: fmt.Errorf(
			"the ESP says this node began joining cluster %s as %s, but its data volume does not: "+
				"the data volume with the node's key is gone, and the ticket admits only that key", r.Cluster, r.Node)}
	}
	return Decision{Next: lifecycle.Joining, Record: r}
}
