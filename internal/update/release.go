package update

import (
	"bytes"
	"crypto"
	"crypto/sha256"
	"crypto/x509"
	"errors"
	"fmt"

	"github.com/borough-os/borough/internal/authority"
	"github.com/borough-os/borough/proto/authoritypb"
)

// SignRelease returns the owner's signed statement (package authority)
// that lets the boot binary and node payload of an update onto their
// nodes; downgrade lets it onto nodes that run its version or a newer
// one. cert and key are the owner's.
func SignRelease(cert *x509.Certificate, key crypto.Signer, bootBinary, payload []byte, downgrade bool) ([]byte, error) {
	version, err := checkPair(bootBinary, payload)
	if err != nil {
		return nil, err
	}
	boot, pl := sha256.Sum256(bootBinary), sha256.Sum256(payload)
	return authority.Sign(cert, key, authority.KindRelease, &authoritypb.Release{
		Version: version, BootBinarySha256: boot[:], PayloadSha256: pl[:], Downgrade: downgrade,
	})
}

// ErrUnsigned refuses an update that carries no release statement.
var ErrUnsigned = errors.New("the update is not signed: sign its image with the owner's key (borough image sign)")

// checkRelease checks that the owner signed u's release statement, and
// that it names u's boot binary, payload and version; it returns the
// statement.
func checkRelease(owner *x509.Certificate, u Update, version string) (*authoritypb.Release, error) {
	if owner == nil {
		return nil, errors.New("this node has no owner whose signature it could check: it takes no update")
	}
	if len(u.Release) == 0 {
		return nil, ErrUnsigned
	}
	var rel authoritypb.Release
	if err := authority.Open(u.Release, owner, authority.KindRelease, &rel); err != nil {
		return nil, fmt.Errorf("the update's release statement: %w", err)
	}
	boot, pl := sha256.Sum256(u.BootBinary), sha256.Sum256(u.Payload)
	switch {
	case rel.GetVersion() != version:
		return nil, fmt.Errorf("the owner signed version %s, but the update's boot binary is version %s", rel.GetVersion(), version)
	case !bytes.Equal(rel.GetBootBinarySha256(), boot[:]):
		return nil, fmt.Errorf("the update's boot binary is not the one the owner signed for version %s: it was changed", version)
	case !bytes.Equal(rel.GetPayloadSha256(), pl[:]):
		return nil, fmt.Errorf("the update's node payload is not the one the owner signed for version %s: it was changed", version)
	}
	return &rel, nil
}
