package backup

import (
	"bytes"
	"crypto"
	"crypto/sha256"
	"crypto/x509"
	"errors"
	"fmt"

	"github.com/borough-os/borough/internal/authority"
	"github.com/borough-os/borough/internal/pki"
	"github.com/borough-os/borough/proto/authoritypb"
)

// sign is the owner's statement on a backup whose Meta is meta, encoded
// as b.
func sign(b []byte, meta Meta, cert *x509.Certificate, key crypto.Signer) ([]byte, error) {
	st, err := statement(b, meta)
	if err != nil {
		return nil, err
	}
	return authority.Sign(cert, key, authority.KindBackup, st)
}

// statement is what the owner says of a backup whose Meta is meta,
// encoded as b.
func statement(b []byte, meta Meta) (*authoritypb.Backup, error) {
	ca, err := pki.ParseCertPEM(meta.CA)
	if err != nil {
		return nil, fmt.Errorf("%w: its CA: %w", ErrDamaged, err)
	}
	sum := sha256.Sum256(b)
	return &authoritypb.Backup{
		Cluster: meta.Cluster, CaFingerprint: pki.Fingerprint(ca), SnapshotSha256: meta.SnapshotSHA256,
		SnapshotSize: meta.SnapshotSize, Revision: meta.Revision, TakenUnix: meta.Taken.Unix(), MetaSha256: sum[:],
	}, nil
}

// checkSignature checks that stmt is owner's statement on the Meta meta,
// encoded as b.
func checkSignature(stmt, b []byte, meta Meta, owner *x509.Certificate) error {
	var got authoritypb.Backup
	if err := authority.Open(stmt, owner, authority.KindBackup, &got); err != nil {
		if errors.Is(err, authority.ErrDamaged) {
			return fmt.Errorf("%w: %w", ErrDamaged, err)
		}
		return fmt.Errorf("%w: %w", ErrUnsigned, err)
	}
	want, err := statement(b, meta)
	if err != nil {
		return err
	}
	if !bytes.Equal(got.GetMetaSha256(), want.GetMetaSha256()) || got.GetCluster() != want.GetCluster() ||
		got.GetCaFingerprint() != want.GetCaFingerprint() || got.GetSnapshotSha256() != want.GetSnapshotSha256() {
		return fmt.Errorf("%w: the owner's signature is on another backup (cluster %q, CA %s, snapshot %s)",
			ErrUnsigned, got.GetCluster(), got.GetCaFingerprint(), got.GetSnapshotSha256())
	}
	return nil
}
