// Package keyspace is the layout of Borough's own data in etcd: its keys
// and the records kept under them. The node and the owner's CLI both read
// and write them, so the layout lives here, in a package small enough for
// the CLI to import without linking etcd's server.
//
// Who can read what: every member reads and writes all of it through its
// in-process client, and the owner through the client port, both as etcd's
// root (etcd authentication is on: consensus/auth.go); a credential the
// owner makes for an application gets a role over its own keys, none of
// these. That includes the cluster CA's key (KeyCAKey), because any member
// must be able to admit a node while others are down; members hold the
// whole database anyway, and the key is at rest only on encrypted data
// volumes (where each member also keeps a copy, to give itself a new
// certificate when its address changed while it was down and etcd cannot
// be read yet). What the key grants is bounded by the owner's signatures
// (package authority; a node's admission, package ticket). A removed node cannot come
// back by minting itself a certificate with a copy of it: its member ID is
// removed, so the peers refuse its raft traffic whatever certificate it
// shows, its NodeRecord stays as a tombstone (Removed) that the join
// endpoint checks before it admits the ticket's node again, its key stays
// bound to that tombstone (NodeKeys), and joining again takes a new ticket
// from the owner, a new key and a new name.
package keyspace

import (
	"encoding/json"
	"fmt"
	"time"

	"go.etcd.io/etcd/api/v3/etcdserverpb"
)

// Keys Borough keeps in etcd.
const (
	// Cluster is the cluster's name.
	// Prefix begins every key of Borough's: no application credential
	// reaches it.
	Prefix  = "/borough/"
	Cluster = "/borough/cluster/name"
	// CACert and CAKey are the cluster CA, PEM.
	CACert = "/borough/pki/ca-cert"
	CAKey  = "/borough/pki/ca-key"
	// CRL is the cluster's DER revocation list; members put it in force,
	// in a cluster with an owner only if it carries the owner's signed
	// revocations of its number (authority.RevocationsExtension).
	CRL = "/borough/pki/crl"
	// ApplicationsCA is the owner's applications CA, PEM
	// (authority.NewApplicationsCA): each member's client port trusts it
	// once it checked it is over its owner's key.
	ApplicationsCA = "/borough/pki/applications-ca"
	// Nodes prefixes each node's NodeRecord, by node name.
	Nodes = "/borough/nodes/"
	// NodeKeys prefixes the name of the node each admitted key belongs
	// to, by the hex SHA-256 of the key (its SubjectPublicKeyInfo): a key
	// admits one node, once, so a removed node's key does not come back
	// under another name or ticket.
	NodeKeys = "/borough/node-keys/"
	// EscrowKeys prefixes each node's EscrowKey, by node name: its peers
	// seal their shares to it.
	EscrowKeys = "/borough/escrow-keys/"
	// Successions prefixes the owner's hand-overs of the cluster
	// (authority.KindSuccession), by number (SuccessionKey): each node
	// takes those that follow from the owner it trusts.
	Successions = "/borough/owner/successions/"
	// Credentials prefixes each application credential's record
	// (CredentialRecord, JSON), by name.
	Credentials = "/borough/credentials/"
	// SpaceReports prefixes each member's SpaceReport, by node name.
	SpaceReports = "/borough/space/members/"
	// DefragLock is the lock a member holds while it defragments, while
	// etcd takes writes (space.Keeper).
	DefragLock = "/borough/space/defrag-lock"
	// DefragRequest is the owner's request that every member defragment
	// now (borough cluster defrag): its revision is the request's.
	DefragRequest = "/borough/space/defrag-request"
	// Rollout is there while the owner rolls an update out, attached to
	// the rollout's lease: no member defragments meanwhile.
	Rollout = "/borough/rollout"
)

// SpaceReport is what a member last said of its space (space.Keeper), as
// JSON at SpaceReports + its node name.
type SpaceReport struct {
	// DB is the database file's size, InUse what of it holds data, Quota
	// etcd's quota; Volume and Free the data volume's size and free
	// space; all in bytes.
	DB     int64 `json:"db"`
	InUse  int64 `json:"in_use"`
	Quota  int64 `json:"quota"`
	Volume int64 `json:"volume"`
	Free   int64 `json:"free"`
	// Alarm says the member's space alarm is raised.
	Alarm bool `json:"alarm,omitempty"`
	// Defragmented is when the member last defragmented, and Request the
	// revision of the owner's last DefragRequest it has answered.
	Defragmented time.Time `json:"defragmented,omitzero"`
	Request      int64     `json:"request,omitempty"`
	// At is when the member wrote the report.
	At time.Time `json:"at"`
}

// SuccessionKey is the key of hand-over number n, in the order of n.
func SuccessionKey(n uint64) string { return fmt.Sprintf("%s%020d", Successions, n) }

// NodeRecord is what the cluster keeps of each node, as JSON at Nodes +
// the node's name: enough to revoke its certificate, to know its role and
// its etcd member, and, once the node is removed, to refuse it for good.
type NodeRecord struct {
	// Serials are the serial numbers, in hex, of every certificate the
	// cluster issued to the node (a join that is asked again issues
	// another): removing the node revokes them all.
	Serials []string `json:"serials"`
	// Learner says the node joined as a learner for good.
	Learner bool `json:"learner,omitempty"`
	// MemberID is the node's etcd member ID (0 if not yet known): an
	// admitted learner has no name in etcd until it has started, so
	// members are found by ID, not by name.
	MemberID uint64 `json:"member_id,omitempty"`
	// Removed says the owner removed the node: the record stays, so that
	// neither its name nor its ticket admits it again.
	Removed bool `json:"removed,omitempty"`
	// Admission is the node's borough.authority.Admission in a cluster
	// with an owner: any member can rewrite this record, none can forge
	// an admission, so a reader checks it (ticket.CheckAdmission) before
	// it believes that the node's key is the one the owner admitted.
	Admission []byte `json:"admission,omitempty"`
}

// Is says whether etcd member m is node name of this record: by the
// member ID the cluster recorded (a learner that has not started has no
// name in etcd), or by name for a record without one.
func (r NodeRecord) Is(m *etcdserverpb.Member, name string) bool {
	if r.MemberID != 0 {
		return m.ID == r.MemberID
	}
	return m.Name == name
}

// Marshal encodes the record as it is kept in etcd.
func (r NodeRecord) Marshal() ([]byte, error) { return json.Marshal(r) }

// ParseNodeRecord decodes a record.
func ParseNodeRecord(b []byte) (NodeRecord, error) {
	var r NodeRecord
	err := json.Unmarshal(b, &r)
	return r, err
}

// CredentialRecord is what the cluster keeps of an application
// credential (admin.MintCredential), as JSON at Credentials + its name:
// what it reaches, and its certificate, to revoke.
type CredentialRecord struct {
	Prefix   string    `json:"prefix"`
	ReadOnly bool      `json:"read_only,omitempty"`
	Serial   string    `json:"serial"`
	NotAfter time.Time `json:"not_after"`
}
