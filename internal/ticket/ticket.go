// Package ticket makes and checks join tickets: what the owner hands a new
// node so that the cluster admits it, once.
//
// A ticket names the cluster, pins its CA by fingerprint, lists members'
// join endpoints, and carries a random ID and secret, an expiry and the
// node's role. It carries no private key: the joining node makes its own
// and sends only a certificate request, so a ticket that leaks before use
// admits at most one node, and one that leaks after use admits none.
//
// The secret never leaves the node either. It derives the ticket's claim
// key, an Ed25519 key (claim.go), whose public half the owner signs with
// the ticket and the cluster keeps in its record of it, under Key(id).
// The node proves it holds the ticket by signing, with the claim key,
// the cluster's name, the ticket's ID and its own name and key: a member
// that serves the request, or reads etcd or a backup of it, learns
// nothing that claims the ticket for another key. The claim and the
// owner's ticket together are the node's Admission, which anyone with
// the owner certificate checks, without trusting any member: the owner
// admitted this key under this name. Admit decides a join request
// against the record:
//
//   - unknown ID, a claim that does not verify, or an expired ticket:
//     refused;
//   - an unused ticket: admitted, and the caller claims it for the
//     request's key in the same etcd transaction that reads it unchanged;
//   - a ticket claimed by the same key: admitted again, even after expiry,
//     so that a node that lost power while joining finishes its join
//     (a ticket is never burned without a member to show for it);
//   - a ticket claimed by another key: refused as used.
package ticket

import (
	"bytes"
	"crypto/rand"
	"encoding/hex"
	"errors"
	"fmt"
	"net"
	"regexp"
	"strconv"
	"time"

	"google.golang.org/protobuf/proto"

	"github.com/borough-os/borough/internal/pki"
	"github.com/borough-os/borough/internal/protostrict"
	"github.com/borough-os/borough/proto/enrolmentpb"
	"github.com/borough-os/borough/proto/joinpb"
)

// Version is the ticket format this node reads and writes.
const Version = 1

// DefaultTTL is how long a ticket admits a node unless told otherwise.
const DefaultTTL = time.Hour

// KeyPrefix is where the cluster keeps ticket records in etcd.
const KeyPrefix = "/borough/tickets/"

// Sizes of a ticket's random parts.
const (
	idSize     = 16
	secretSize = 32
)

// Errors of Admit, for callers that branch on them.
var (
	ErrUnknown     = errors.New("the cluster has no such ticket: it was never minted for this cluster")
	ErrWrongSecret = errors.New("the ticket's claim does not verify against its claim key: its secret is forged or damaged")
	ErrExpired     = errors.New("the ticket has expired")
	ErrUsed        = errors.New("the ticket was already used by another node")
)

// Key is the etcd key of the record of the ticket with this ID.
func Key(id []byte) string { return KeyPrefix + hex.EncodeToString(id) }

// Params say what ticket to mint.
type Params struct {
	Cluster       string
	CAFingerprint string
	// Endpoints are members' join endpoints, "host:port".
	Endpoints []string
	// TTL is how long the ticket is good for; zero means DefaultTTL.
	TTL time.Duration
	// Learner makes the node a learner for good instead of a voter.
	Learner bool
	// StoragePolicy is the cluster's intent for the node's data volume.
	StoragePolicy enrolmentpb.StoragePolicy
}

// Mint makes a ticket and the record the cluster keeps of it.
func Mint(p Params, now time.Time) (*enrolmentpb.Ticket, *joinpb.TicketRecord, error) {
	if p.TTL == 0 {
		p.TTL = DefaultTTL
	}
	if p.TTL < 0 {
		return nil, nil, fmt.Errorf("ticket lifetime %v is negative", p.TTL)
	}
	id, secret, err := newIDSecret()
	if err != nil {
		return nil, nil, err
	}
	role := enrolmentpb.Role_ROLE_VOTER
	if p.Learner {
		role = enrolmentpb.Role_ROLE_LEARNER
	}
	t := &enrolmentpb.Ticket{
		Version: Version, ClusterName: p.Cluster, CaFingerprint: p.CAFingerprint,
		JoinEndpoints: p.Endpoints, Id: id, Secret: secret,
		Expires: now.Add(p.TTL).Unix(), Role: role, StoragePolicy: p.StoragePolicy,
	}
	if err := Check(t); err != nil {
		return nil, nil, err
	}
	rec := &joinpb.TicketRecord{ClaimKey: ClaimKey(t), Expires: t.Expires, LearnerForGood: p.Learner}
	return t, rec, nil
}

// newIDSecret makes a ticket's random ID and secret.
func newIDSecret() (id, secret []byte, err error) {
	id, secret = make([]byte, idSize), make([]byte, secretSize)
	if _, err := rand.Read(id); err != nil {
		return nil, nil, err
	}
	if _, err := rand.Read(secret); err != nil {
		return nil, nil, err
	}
	return id, secret, nil
}

// Parse decodes a ticket and checks its form (not its expiry, which is the
// cluster's to judge by its clock).
func Parse(b []byte) (*enrolmentpb.Ticket, error) {
	if len(b) == 0 {
		return nil, errors.New("the ticket is empty")
	}
	var t enrolmentpb.Ticket
	if err := proto.Unmarshal(b, &t); err != nil {
		return nil, fmt.Errorf("not a ticket: %w", err)
	}
	if err := Check(&t); err != nil {
		return nil, err
	}
	return &t, nil
}

// where says where in a message a path is, for an error.
func where(path string) string {
	if path == "" {
		return ""
	}
	return " (in " + path + ")"
}

var fingerprint = regexp.MustCompile(`^sha256:[0-9a-f]{64}$`)

// Check checks a ticket's form. A ticket without a secret is a spent one,
// as a member keeps it (enrolment.Spend): it claims nothing.
func Check(t *enrolmentpb.Ticket) error {
	if path, ok := protostrict.Unknown(t); ok {
		return fmt.Errorf("the ticket has fields this node does not know%s; it may be for a newer version", where(path))
	}
	switch {
	case t.GetVersion() != Version:
		return fmt.Errorf("the ticket has version %d; this node reads version %d", t.GetVersion(), Version)
	case !pki.IsClusterName(t.GetClusterName()):
		return fmt.Errorf("the ticket's cluster name %q is not a cluster name", t.GetClusterName())
	case !fingerprint.MatchString(t.GetCaFingerprint()):
		return fmt.Errorf("the ticket's CA fingerprint %q is not sha256: and 64 hex digits", t.GetCaFingerprint())
	case len(t.GetId()) != idSize:
		return fmt.Errorf("the ticket's ID has %d bytes, want %d", len(t.GetId()), idSize)
	case len(t.GetSecret()) != secretSize && len(t.GetSecret()) != 0:
		return fmt.Errorf("the ticket's secret has %d bytes, want %d (or none, in a spent ticket)", len(t.GetSecret()), secretSize)
	case t.GetExpires() <= 0:
		return errors.New("the ticket has no expiry")
	case len(t.GetJoinEndpoints()) == 0:
		return errors.New("the ticket names no join endpoint")
	}
	if _, ok := enrolmentpb.Role_name[int32(t.GetRole())]; !ok {
		return fmt.Errorf("the ticket's role %d is unknown", t.GetRole())
	}
	for _, e := range t.GetJoinEndpoints() {
		host, port, err := net.SplitHostPort(e)
		if n, perr := strconv.Atoi(port); err != nil || host == "" || perr != nil || n <= 0 || n > 65535 {
			return fmt.Errorf("the ticket's join endpoint %q is not host:port", e)
		}
	}
	return nil
}

// Admission is how Admit admits a request.
type Admission int

const (
	// Claim: the ticket is unused; claim it for the request's key.
	Claim Admission = iota + 1
	// Again: the ticket was claimed by this key; finish that join, which
	// only the ticket's lifetime allows.
	Again
)

// Admit decides a join request, which proves its claim of the ticket
// with p, against the cluster's record (nil if it has none) at now. A
// request that only checks the ticket claims it for no node and no key.
func Admit(rec *joinpb.TicketRecord, p Proof, now time.Time) (Admission, error) {
	if rec == nil {
		return 0, ErrUnknown
	}
	if err := p.verify(rec.GetClaimKey()); err != nil {
		return 0, err
	}
	claimed := len(rec.GetClaimedBy()) > 0
	switch {
	case claimed && !bytes.Equal(rec.GetClaimedBy(), p.KeyHash):
		return 0, fmt.Errorf("%w (%s)", ErrUsed, rec.GetNode())
	case now.Unix() >= rec.GetExpires():
		return 0, fmt.Errorf("%w at %s", ErrExpired, time.Unix(rec.GetExpires(), 0).UTC().Format(time.RFC3339))
	case claimed:
		return Again, nil
	}
	return Claim, nil
}
