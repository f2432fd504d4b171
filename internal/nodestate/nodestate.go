// Package nodestate owns the node's own records of where it stands in
// its cluster, kept on its ESP (through the ledger) and its data volume:
// the node state record (which cluster, which name, how far it got) and
// the member directory (the cluster's members and their peer URLs, read
// before etcd can say anything). Each has its format, parse, checks and
// write here, once: the cluster manager writes them, the keeper of the
// unlock key reads them to find its peers.
package nodestate

import (
	"encoding/json"
	"errors"
	"fmt"
	"net"
	"net/url"
	"os"
	"regexp"
	"slices"
	"strconv"

	"github.com/borough-os/borough/internal/atomicfile"
	"github.com/borough-os/borough/internal/pki"
	"github.com/borough-os/borough/internal/ports"
	"github.com/borough-os/borough/internal/versioned"
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

// ReadRecord reads a record; a missing file is (nil, nil). A record that
// does not parse, or whose fields are not what a node writes, is damaged
// (ErrDamaged): its names must not reach etcd's flags or certificates.
func ReadRecord(path string) (*Record, error) {
	b, err := os.ReadFile(path)
	return ParseRecord(path, b, err)
}

// ParseRecord parses b, the record read from path with err, as ReadRecord
// does.
func ParseRecord(path string, b []byte, err error) (*Record, error) {
	if errors.Is(err, os.ErrNotExist) {
		return nil, nil
	}
	if err != nil {
		return nil, fmt.Errorf("reading node state record: %w", err)
	}
	r, err := versioned.Decode("node state record "+path, b, func(r *Record) int { return r.Version }, recordVersion)
	if err != nil {
		return nil, err
	}
	if err := r.check(); err != nil {
		return nil, fmt.Errorf("node state record %s: %w: %w", path, ErrDamaged, err)
	}
	return r, nil
}

// ErrDamaged says a record is damaged, as a torn write to the ESP leaves
// it (package versioned).
var ErrDamaged = versioned.ErrDamaged

var hexID = regexp.MustCompile(`^[0-9a-f]{1,16}$`)

// HexID is an etcd ID as a record holds it.
func HexID(id uint64) string { return strconv.FormatUint(id, 16) }

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
func WriteRecord(path string, r *Record) error {
	f, err := RecordFile(path, r)
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
func RecordFile(path string, r *Record) (atomicfile.File, error) {
	r.Version = recordVersion
	b, err := json.MarshalIndent(r, "", "  ")
	if err != nil {
		return atomicfile.File{}, err
	}
	return atomicfile.File{Path: path, Data: b, Perm: 0o600}, nil
}

// The member directory is the node's own list of the cluster's members
// and their last peer URLs, kept on the ESP and the data volume while the
// member runs. A node that restarts reads it before etcd can tell it
// anything: to ask its peers whether it is still a member (a node removed
// while it was off must say so, not wait for a cluster that refuses it).

// Directory is the member directory.
type Directory struct {
	Cluster string `json:"cluster"`
	// Members maps member names to their peer URLs.
	Members map[string][]string `json:"members"`
}

// ParseDirectory parses a member directory read from name.
func ParseDirectory(name string, b []byte) (*Directory, error) {
	var d Directory
	if err := json.Unmarshal(b, &d); err != nil {
		return nil, fmt.Errorf("%s: %w", name, err)
	}
	return &d, nil
}

// Marshal is d as its files hold it.
func (d *Directory) Marshal() ([]byte, error) {
	return json.MarshalIndent(d, "", "  ")
}

// Same says whether d and e list the same members at the same URLs.
func (d *Directory) Same(e *Directory) bool {
	if len(d.Members) != len(e.Members) {
		return false
	}
	for name, urls := range d.Members {
		if !slices.Equal(urls, e.Members[name]) {
			return false
		}
	}
	return true
}

// PeerEndpoints are the join endpoints of the directory's members other
// than self.
func (d *Directory) PeerEndpoints(self string) []string {
	var out []string
	for name, urls := range d.Members {
		if name == self {
			continue
		}
		for _, u := range urls {
			if pu, err := url.Parse(u); err == nil {
				out = append(out, net.JoinHostPort(pu.Hostname(), strconv.Itoa(ports.Join)))
			}
		}
	}
	slices.Sort(out)
	return out
}
