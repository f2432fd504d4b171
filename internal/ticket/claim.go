package ticket

import (
	"bytes"
	"crypto/ed25519"
	"crypto/hkdf"
	"crypto/sha256"
	"crypto/x509"
	"errors"
	"fmt"
	"time"

	"google.golang.org/protobuf/proto"

	"github.com/borough-os/borough/internal/authority"
	"github.com/borough-os/borough/proto/authoritypb"
	"github.com/borough-os/borough/proto/enrolmentpb"
)

// claimDomain starts every message a claim key signs, and names the
// derivation of the claim key from the secret.
const claimDomain = "borough ticket claim v1"

// Proof is a claim of a ticket: the ticket's holder signs, with the
// ticket's claim key, the cluster, the ticket's ID and the node's name
// and key, which the owner's ticket does not know when the owner signs it.
type Proof struct {
	Cluster string
	ID      []byte
	// Node and KeyHash (the SHA-256 of its public key) are empty in a
	// request that only checks the ticket.
	Node    string
	KeyHash []byte
	// Signature is by the claim key over the rest.
	Signature []byte
}

// claimKey derives the ticket's claim key from its secret (HKDF-SHA256),
// so that a ticket carries nothing more than it did.
func claimKey(secret []byte) ed25519.PrivateKey {
	seed, err := hkdf.Key(sha256.New, secret, nil, claimDomain, ed25519.SeedSize)
	if err != nil {
		panic("ticket: deriving a claim key: " + err.Error()) // only for a length HKDF cannot give
	}
	return ed25519.NewKeyFromSeed(seed)
}

// ClaimKey is the public claim key of t, which the owner signs and the
// cluster keeps.
func ClaimKey(t *enrolmentpb.Ticket) []byte {
	return claimKey(t.GetSecret()).Public().(ed25519.PublicKey)
}

// Prove is the holder's proof that it claims t for node name with the
// key whose SHA-256 is keyHash (both empty to check the ticket only).
func Prove(t *enrolmentpb.Ticket, name string, keyHash []byte) Proof {
	p := Proof{Cluster: t.GetClusterName(), ID: t.GetId(), Node: name, KeyHash: keyHash}
	p.Signature = ed25519.Sign(claimKey(t.GetSecret()), p.message())
	return p
}

// message is what a claim key signs: the domain and each field,
// length-prefixed.
func (p Proof) message() []byte {
	return authority.Framed([]byte(claimDomain), []byte(p.Cluster), p.ID, []byte(p.Node), p.KeyHash)
}

// verify checks the proof's signature against the claim key key.
func (p Proof) verify(key []byte) error {
	if len(key) != ed25519.PublicKeySize || !ed25519.Verify(key, p.message(), p.Signature) {
		return ErrWrongSecret
	}
	return nil
}

// Founder mints the ticket of a cluster's first node, whose key nobody
// knows before the node makes it at its first boot: the ticket (its
// cluster, ID and secret) and the statement for the owner to sign
// (authority.KindTicket). The node, or the owner's tool, claims it for
// the node's key once there is one.
func Founder(cluster string, now time.Time) (*enrolmentpb.Ticket, *authoritypb.Ticket, error) {
	id, secret, err := newIDSecret()
	if err != nil {
		return nil, nil, err
	}
	t := &enrolmentpb.Ticket{Version: Version, ClusterName: cluster, Id: id, Secret: secret}
	return t, &authoritypb.Ticket{Cluster: cluster, Id: id, Expires: now.Unix(), ClaimKey: ClaimKey(t)}, nil
}

// OpenFounder returns a first node's ticket (Founder) of cluster, as the
// node reads it from its bootstrap config: its secret, and statement, the
// owner's signed ticket, which it checks.
func OpenFounder(cluster string, secret, statement []byte, owner *x509.Certificate) (*enrolmentpb.Ticket, error) {
	var s authoritypb.Ticket
	if err := authority.Open(statement, owner, authority.KindTicket, &s); err != nil {
		return nil, err
	}
	t := &enrolmentpb.Ticket{Version: Version, ClusterName: cluster, Id: s.GetId(), Secret: secret}
	switch {
	case s.GetCluster() != cluster:
		return nil, fmt.Errorf("the owner's ticket is for cluster %q, not %q", s.GetCluster(), cluster)
	case len(secret) != secretSize:
		return nil, fmt.Errorf("the ticket's secret has %d bytes, want %d", len(secret), secretSize)
	case !bytes.Equal(s.GetClaimKey(), ClaimKey(t)):
		return nil, errors.New("the ticket's secret is not the one whose claim key the owner signed")
	}
	return t, nil
}

// NewAdmission is the admission of the node p claims the ticket for:
// statement is the owner's signed ticket.
func NewAdmission(statement []byte, p Proof) ([]byte, error) {
	return proto.Marshal(&authoritypb.Admission{Ticket: statement, Node: p.Node, KeySha256: p.KeyHash, Claim: p.Signature})
}

// HandOverAdmission is admission b, by which owner admitted node name
// of cluster, with its ticket signed again by sign, the next owner's
// signature: the node's claim stands as it was, so the admission holds
// under the next owner for the same key, and under no other.
func HandOverAdmission(b []byte, owner *x509.Certificate, cluster, name string, sign func(*authoritypb.Ticket) ([]byte, error)) ([]byte, error) {
	a, t, err := openAdmission(b, owner, cluster, name)
	if err != nil {
		return nil, err
	}
	if a.Ticket, err = sign(t); err != nil {
		return nil, err
	}
	return proto.Marshal(a)
}

// ErrNotAdmitted wraps every reason CheckAdmission refuses.
var ErrNotAdmitted = errors.New("the owner did not admit this key under this name")

// CheckAdmission checks that b, an Admission, shows that owner admitted
// the key whose SHA-256 is keyHash as node name in cluster (in any of the
// owner's clusters if cluster is empty: the key names the node).
func CheckAdmission(b []byte, owner *x509.Certificate, cluster, name string, keyHash []byte) error {
	a, _, err := openAdmission(b, owner, cluster, name)
	if err != nil {
		return err
	}
	if !bytes.Equal(a.GetKeySha256(), keyHash) {
		return fmt.Errorf("%w: node %s was admitted with another key", ErrNotAdmitted, name)
	}
	return nil
}

// openAdmission checks that b, an Admission, shows that owner admitted
// node name in cluster (any, if empty) with the key it names, and returns
// it and the owner's ticket in it.
func openAdmission(b []byte, owner *x509.Certificate, cluster, name string) (*authoritypb.Admission, *authoritypb.Ticket, error) {
	if len(b) == 0 {
		return nil, nil, fmt.Errorf("%w: node %s has no admission", ErrNotAdmitted, name)
	}
	var a authoritypb.Admission
	if err := proto.Unmarshal(b, &a); err != nil {
		return nil, nil, fmt.Errorf("%w: node %s's admission is damaged: %w", ErrNotAdmitted, name, err)
	}
	var t authoritypb.Ticket
	if err := authority.Open(a.GetTicket(), owner, authority.KindTicket, &t); err != nil {
		return nil, nil, fmt.Errorf("%w: node %s's ticket: %w", ErrNotAdmitted, name, err)
	}
	p := Proof{Cluster: t.GetCluster(), ID: t.GetId(), Node: a.GetNode(), KeyHash: a.GetKeySha256(), Signature: a.GetClaim()}
	switch {
	case cluster != "" && t.GetCluster() != cluster:
		return nil, nil, fmt.Errorf("%w: node %s's ticket is for cluster %q", ErrNotAdmitted, name, t.GetCluster())
	case a.GetNode() != name:
		return nil, nil, fmt.Errorf("%w: the admission is node %s's, not %s's", ErrNotAdmitted, a.GetNode(), name)
	case p.verify(t.GetClaimKey()) != nil:
		return nil, nil, fmt.Errorf("%w: node %s's claim of its ticket does not verify against the ticket's claim key", ErrNotAdmitted, name)
	}
	return &a, &t, nil
}
