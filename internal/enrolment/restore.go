package enrolment

import (
	"encoding/hex"
	"strings"

	"github.com/borough-os/borough/proto/enrolmentpb"
)

// Restore is a backup a first node starts its cluster from: what the
// owner's tool read from the backup, which the node checks the backup
// the owner sends against. The key the backup travels encrypted to is
// the node's own, made as it waits (cluster's restore.go): no private key
// lies in a config, which is read from an ESP or fw_cfg in clear.
type Restore struct {
	// CAFingerprint is the backup's cluster CA's (pki.Fingerprint).
	CAFingerprint string
	// SnapshotSHA256 (hex) and SnapshotSize are the backup's etcd
	// snapshot's; Revision the etcd revision it was taken at.
	SnapshotSHA256 string
	SnapshotSize   int64
	Revision       int64
}

// checkRestore checks the restore a bootstrap config names, if any.
func checkRestore(e *Enrolment, r *enrolmentpb.Restore) error {
	if r == nil {
		return nil
	}
	const field = "bootstrap.restore"
	switch {
	case e.Owner == nil:
		return fieldErr(field, "is set in a cluster without an owner: only the owner can send the node its backup")
	case !strings.HasPrefix(r.GetCaFingerprint(), "sha256:") || !isHex(strings.TrimPrefix(r.GetCaFingerprint(), "sha256:"), 32):
		return fieldErr(field+".ca_fingerprint", "%q is not sha256: and 64 hex digits", r.GetCaFingerprint())
	case !isHex(r.GetSnapshotSha256(), 32):
		return fieldErr(field+".snapshot_sha256", "%q is not 64 hex digits", r.GetSnapshotSha256())
	case r.GetSnapshotSize() <= 0:
		return fieldErr(field+".snapshot_size", "is %d; a snapshot has bytes", r.GetSnapshotSize())
	case r.GetRevision() <= 0:
		return fieldErr(field+".revision", "is %d; a backup is taken at a revision", r.GetRevision())
	}
	e.Restore = &Restore{
		CAFingerprint: r.GetCaFingerprint(), SnapshotSHA256: r.GetSnapshotSha256(),
		SnapshotSize: r.GetSnapshotSize(), Revision: r.GetRevision(),
	}
	return nil
}

// isHex says whether s is n bytes in lower-case hex.
func isHex(s string, n int) bool {
	b, err := hex.DecodeString(s)
	return err == nil && len(b) == n && hex.EncodeToString(b) == s
}
