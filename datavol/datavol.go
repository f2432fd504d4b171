// Package datavol declares the layout of the node's data volume, the
// encrypted ext4 filesystem that internal/storage mounts: every file or
// directory Borough keeps there has one name, here, as every file on the
// ESP has in package esp.
//
// What sits here rather than on the ESP is what an attacker with the disk
// must not read or rewrite: the data volume opens only with the node's
// unlock keys (internal/storage). Records kept on both say so; the data
// volume's copy is the one that counts.
package datavol

import "path/filepath"

// File is the path of a file or directory on the data volume, relative to
// its root.
type File string

// In returns f's path on the data volume mounted at root.
func (f File) In(root string) string { return filepath.Join(root, string(f)) }

// The files and directories Borough keeps on the data volume.
const (
	// Etcd is etcd's data directory.
	Etcd File = "etcd"
	// PKI holds the member's certificates and keys (consensus.Files).
	PKI File = "pki"
	// NodeRecord is the node state record (internal/cluster), whose copy
	// on the ESP the node reads before the volume opens.
	NodeRecord File = dir + "/node-state.json"
	// MemberDirectory is the cluster's members and their peer URLs, as
	// this node last knew them (internal/cluster).
	MemberDirectory File = dir + "/members.json"
	// Recovery is the owner's recovery in progress (internal/cluster).
	Recovery File = dir + "/recovery.json"
	// RestoreSnapshot is the owner's backup on its way into a restore
	// (internal/cluster).
	RestoreSnapshot File = dir + "/restore.snapshot"
	// AppliedEnrolment is the enrolment config the node applied on its
	// first boot. It is the record that counts: the ESP's copy
	// (esp.AppliedEnrolment) is what the node can read before the volume
	// opens, and anyone who can write the disk while the machine is off
	// can rewrite it; this one they cannot write without both unlock keys
	// (internal/enrolment).
	AppliedEnrolment File = dir + "/enrolment-applied.pb"
	// LedgerKey is the SHA-256 of the ESP ledger's key (internal/espledger).
	LedgerKey File = dir + "/ledger-key.sha256"
	// Logs is the journal of the last boots' logs (internal/logtree).
	Logs File = dir + "/logs"
	// Ballast is a file the space keeper deletes if the volume fills
	// while etcd runs, for etcd to keep its space alarm; StartBallast one
	// it deletes only for etcd to start on a full volume: a writer that
	// fills the volume to the last block eats the first, and the second
	// is still there after the restart that follows (internal/space).
	Ballast      File = "ballast"
	StartBallast File = "ballast-start"
	// TestMarker is the marker file of test builds (cmdline.TestMarker),
	// which tells a data volume that survived a reboot from a new one.
	TestMarker File = "marker"
)

// dir holds Borough's own files, apart from etcd's and the PKI's.
const dir = "borough"
