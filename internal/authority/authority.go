// Package authority signs and checks statements on the owner's word:
// what a node must believe only if the owner said it, whoever handed it
// over. A member of the cluster, a copy on the ESP or a client with the
// owner's TLS session can pass a statement along; none can make one,
// because the signature is by the owner's key, which never touches a
// node, and is checked against the owner certificate the node fixed when
// it was enrolled, or that owner handed the node over to: a succession
// (succession.go) is the one statement that changes whose word counts,
// and only the owner in force can sign it, so the chain of owners a node
// follows starts at its enrolment and never at what a member says.
//
// A statement is a protobuf message (proto/authority.proto) of a kind,
// e.g. a release the owner lets onto their nodes. The signature covers a
// domain string, the kind and the body, each length-prefixed, so that a
// signature over one kind never verifies as another, nor as anything else
// the owner's key signs (TLS handshakes, certificates). It is an X.509
// signature of the owner certificate's key type (ECDSA P-256 with SHA-256
// for the keys `borough owner init` makes), checked with crypto/x509: no
// new format, no new library, and the owner's existing key signs.
package authority

import (
	"crypto"
	"crypto/rand"
	"crypto/sha256"
	"crypto/x509"
	"encoding/binary"
	"errors"
	"fmt"

	"google.golang.org/protobuf/proto"

	"github.com/borough-os/borough/internal/pki"
	"github.com/borough-os/borough/proto/authoritypb"
)

// Kind names what a statement is.
type Kind string

// The kinds of statement.
const (
	// KindRelease is an authoritypb.Release.
	KindRelease Kind = "release"
	// KindRevocations is an authoritypb.Revocations.
	KindRevocations Kind = "revocations"
	// KindTicket is an authoritypb.Ticket.
	KindTicket Kind = "ticket"
	// KindBackup is an authoritypb.Backup.
	KindBackup Kind = "backup"
)

// domain starts every signed message: nothing else the owner's key
// signs begins with it.
const domain = "borough authority v1"

// Sign returns body as a statement of kind, signed by the owner: cert and
// its key.
func Sign(cert *x509.Certificate, key crypto.Signer, kind Kind, body proto.Message) ([]byte, error) {
	b, err := proto.Marshal(body)
	if err != nil {
		return nil, err
	}
	algo, hash, err := algorithm(cert)
	if err != nil {
		return nil, err
	}
	digest := message(kind, b)
	if hash != 0 {
		sum := sha256.Sum256(digest)
		digest = sum[:]
	}
	sig, err := key.Sign(rand.Reader, digest, hash)
	if err != nil {
		return nil, fmt.Errorf("signing the %s statement: %w", kind, err)
	}
	if err := cert.CheckSignature(algo, message(kind, b), sig); err != nil {
		return nil, fmt.Errorf("signing the %s statement: the key is not the certificate's: %w", kind, err)
	}
	return proto.Marshal(&authoritypb.Signed{Kind: string(kind), Body: b, Signer: pki.Fingerprint(cert), Signature: sig})
}

// Errors of Open, wrapped with the details.
var (
	ErrDamaged   = errors.New("the statement is damaged")
	ErrKind      = errors.New("the statement is of another kind")
	ErrSigner    = errors.New("the statement is not signed by this node's owner")
	ErrSignature = errors.New("the statement's signature does not verify")
)

// Open checks that b is a statement of kind signed by owner and decodes
// its body into body.
func Open(b []byte, owner *x509.Certificate, kind Kind, body proto.Message) error {
	s, err := decode(b, kind)
	if err != nil {
		return err
	}
	if fp := pki.Fingerprint(owner); s.GetSigner() != fp {
		return fmt.Errorf("%w: it names the signer %s, the owner is %s", ErrSigner, s.GetSigner(), fp)
	}
	algo, _, err := algorithm(owner)
	if err != nil {
		return err
	}
	if err := owner.CheckSignature(algo, message(kind, s.GetBody()), s.GetSignature()); err != nil {
		return fmt.Errorf("%w against the owner's key %s: %w", ErrSignature, pki.Fingerprint(owner), err)
	}
	return decodeBody(s, kind, body)
}

// openUnchecked decodes the body of b, a statement of kind, without
// checking its signature: for a copy whose reader checked it before.
func openUnchecked(b []byte, kind Kind, body proto.Message) error {
	s, err := decode(b, kind)
	if err != nil {
		return err
	}
	return decodeBody(s, kind, body)
}

// decode decodes b, a signed statement that must be of kind.
func decode(b []byte, kind Kind) (*authoritypb.Signed, error) {
	var s authoritypb.Signed
	if err := proto.Unmarshal(b, &s); err != nil {
		return nil, fmt.Errorf("%w: %w", ErrDamaged, err)
	}
	if s.GetKind() != string(kind) {
		return nil, fmt.Errorf("%w: %q, want %q", ErrKind, s.GetKind(), kind)
	}
	return &s, nil
}

// decodeBody decodes s's body, of kind, into body.
func decodeBody(s *authoritypb.Signed, kind Kind, body proto.Message) error {
	if err := proto.Unmarshal(s.GetBody(), body); err != nil {
		return fmt.Errorf("%w: its %s body: %w", ErrDamaged, kind, err)
	}
	return nil
}

// message is what is signed: the domain, kind and body (Framed).
func message(kind Kind, body []byte) []byte {
	return Framed([]byte(domain), []byte(kind), body)
}

// Framed is parts, each prefixed with its length: what a Borough
// signature covers, so that no two lists of parts sign the same bytes.
func Framed(parts ...[]byte) []byte {
	var m []byte
	for _, part := range parts {
		m = binary.BigEndian.AppendUint32(m, uint32(len(part)))
		m = append(m, part...)
	}
	return m
}

// algorithm is the X.509 signature algorithm for cert's key, and the hash
// its signer takes (0: the message itself).
func algorithm(cert *x509.Certificate) (x509.SignatureAlgorithm, crypto.Hash, error) {
	switch cert.PublicKeyAlgorithm {
	case x509.ECDSA:
		return x509.ECDSAWithSHA256, crypto.SHA256, nil
	case x509.Ed25519:
		return x509.PureEd25519, 0, nil
	case x509.RSA:
		return x509.SHA256WithRSA, crypto.SHA256, nil
	}
	return 0, 0, fmt.Errorf("the owner certificate %s has a %v key, which cannot sign statements", pki.Fingerprint(cert), cert.PublicKeyAlgorithm)
}
