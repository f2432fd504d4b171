package authority

import (
	"crypto"
	"crypto/x509"
	"crypto/x509/pkix"
	"encoding/asn1"
	"errors"
	"fmt"
	"math/big"
	"slices"
	"time"

	"github.com/borough-os/borough/internal/pki"
	"github.com/borough-os/borough/proto/authoritypb"
)

// RevocationsExtension is the ID of the CRL extension that carries the
// owner's signed revocations (KindRevocations) which the CRL goes with,
// as a DER OCTET STRING: whoever holds the CRL holds the owner's word for
// it, be it a member putting it in force, a node joining or a holder at
// boot, with no other record to fetch or trust. The extension is not
// critical; other readers of the CRL (etcd's TLS) skip it. Borough has no
// enterprise number: the ID is under 2.25 (ITU-T X.667, UUIDs as
// integers), from 31 random bits, as many as crypto/x509 parses in an
// arc.
var RevocationsExtension = asn1.ObjectIdentifier{2, 25, 1456701566}

// CRLExtension is the extension that carries stmt, the owner's signed
// revocations, in a CRL.
func CRLExtension(stmt []byte) (pkix.Extension, error) {
	v, err := asn1.Marshal(stmt)
	return pkix.Extension{Id: RevocationsExtension, Value: v}, err
}

// RevocationsCRL is CRL number of ca revoking serials, carrying r signed
// by the owner (cert and key). r is as given: the caller makes it say the
// same number and serials.
func RevocationsCRL(ca *pki.CA, number int64, serials []*big.Int, cert *x509.Certificate, key crypto.Signer,
	r *authoritypb.Revocations, now time.Time) ([]byte, error) {
	stmt, err := Sign(cert, key, KindRevocations, r)
	if err != nil {
		return nil, err
	}
	ext, err := CRLExtension(stmt)
	if err != nil {
		return nil, err
	}
	return ca.CRL(number, serials, now, ext)
}

// ErrRevocationsDiffer is a CRL that does not revoke what the owner's
// revocations it carries say, wrapped with the details.
var ErrRevocationsDiffer = errors.New("the CRL does not revoke what the owner's revocations it carries say")

// Revocations returns the owner's revocations crl carries, checked
// against owner and against crl itself: its number and exactly the
// certificates it revokes. nil and no error: crl carries none.
func Revocations(crl *x509.RevocationList, owner *x509.Certificate) (*authoritypb.Revocations, error) {
	signed, err := carried(crl)
	if signed == nil || err != nil {
		return nil, err
	}
	var r authoritypb.Revocations
	if err := Open(signed, owner, KindRevocations, &r); err != nil {
		return nil, fmt.Errorf("the owner's revocations in CRL number %v: %w", crl.Number, err)
	}
	want := slices.Clone(r.GetSerials())
	slices.Sort(want)
	switch {
	case crl.Number.Cmp(new(big.Int).SetUint64(r.GetNumber())) != 0:
		return nil, fmt.Errorf("%w: the CRL is number %v, the owner's revocations number %d", ErrRevocationsDiffer, crl.Number, r.GetNumber())
	case !slices.Equal(pki.RevokedSerials(crl), want):
		return nil, fmt.Errorf("%w: CRL number %v revokes %v, the owner revoked %v", ErrRevocationsDiffer, crl.Number, pki.RevokedSerials(crl), want)
	}
	return &r, nil
}

// Follows checks that crl may be put in force after current (nil: none,
// as on a node joining) by a node of owner: it carries the owner's
// revocations of its number, listing exactly what it revokes
// (Revocations), or, carrying none, revokes what current does (the CRL of
// a cluster whose owner never removed a node); and it takes back no
// certificate current revoked, nor any node the owner removed, for a
// revocation is for good. Every member holds the CA's key: none may
// revoke a node, or give one back its standing, on its own.
func Follows(crl, current *x509.RevocationList, owner *x509.Certificate) error {
	stmt, err := Revocations(crl, owner)
	if err != nil {
		return err
	}
	var was, removed []string
	if current != nil {
		was = pki.RevokedSerials(current)
		if removed, err = RemovedNodes(current); err != nil {
			return err
		}
	}
	if stmt == nil && !slices.Equal(pki.RevokedSerials(crl), was) {
		return fmt.Errorf("the CRL number %v changes what is revoked, and carries no revocations of the owner's", crl.Number)
	}
	if missing := without(was, pki.RevokedSerials(crl)); len(missing) > 0 {
		return fmt.Errorf("the CRL number %v takes back the revocation of %v", crl.Number, missing)
	}
	if missing := without(removed, stmt.GetNodes()); len(missing) > 0 {
		return fmt.Errorf("the CRL number %v takes back the removal of %v", crl.Number, missing)
	}
	return nil
}

// without are the elements of a not in b.
func without(a, b []string) []string {
	var out []string
	for _, x := range a {
		if !slices.Contains(b, x) {
			out = append(out, x)
		}
	}
	return out
}

// RemovedNodes are the nodes the owner's revocations in crl name, read
// without checking the owner's signature: only for a CRL in force, which
// its node put in force after Revocations checked it (and whose copy on
// the ESP the ESP's ledger authenticates). A node a member gave a new
// certificate, under its old name, stays removed though the CRL does not
// list that certificate.
func RemovedNodes(crl *x509.RevocationList) ([]string, error) {
	signed, err := carried(crl)
	if signed == nil || err != nil {
		return nil, err
	}
	var r authoritypb.Revocations
	if err := openUnchecked(signed, KindRevocations, &r); err != nil {
		return nil, fmt.Errorf("the owner's revocations in CRL number %v: %w", crl.Number, err)
	}
	return r.GetNodes(), nil
}

// carried is the signed statement crl carries; nil if none.
func carried(crl *x509.RevocationList) ([]byte, error) {
	for _, e := range crl.Extensions {
		if !e.Id.Equal(RevocationsExtension) {
			continue
		}
		var signed []byte
		if rest, err := asn1.Unmarshal(e.Value, &signed); err != nil || len(rest) > 0 {
			return nil, fmt.Errorf("%w: CRL number %v carries a malformed revocations extension", ErrDamaged, crl.Number)
		}
		return signed, nil
	}
	return nil, nil
}

// Revokes says why l, a CRL in force, revokes cert, or "": it lists the
// certificate, or the owner's revocations it carries name the
// certificate's node (a member, holding the CA key, can sign a removed
// node a new certificate, which no CRL lists).
func Revokes(l *x509.RevocationList, cert *x509.Certificate) string {
	name := cert.Subject.CommonName
	if slices.ContainsFunc(l.RevokedCertificateEntries, func(e x509.RevocationListEntry) bool {
		return e.SerialNumber.Cmp(cert.SerialNumber) == 0
	}) {
		return fmt.Sprintf("the certificate of %s is revoked: the cluster removed it", name)
	}
	removed, err := RemovedNodes(l)
	switch {
	case err != nil:
		return fmt.Sprintf("the CRL in force cannot say whether the owner removed %s: %v", name, err)
	case slices.Contains(removed, name):
		return fmt.Sprintf("the owner removed node %s", name)
	}
	return ""
}
