package authority

import (
	"cmp"
	"crypto"
	"crypto/x509"
	"errors"
	"fmt"
	"slices"

	"github.com/borough-os/borough/internal/pki"
	"github.com/borough-os/borough/proto/authoritypb"
)

// KindSuccession is an authoritypb.Succession: the owner's hand-over of
// a cluster to the next owner.
const KindSuccession Kind = "succession"

// ErrSuccession is wrapped by what Succeed refuses.
var ErrSuccession = errors.New("an owner succession does not hold")

// Handover is a succession the current owner signed, and the next
// owner's certificate it names.
type Handover struct {
	// Statement is the signed authoritypb.Succession.
	Statement []byte
	Number    uint64
	Owner     *x509.Certificate
}

// SignSuccession is the hand-over of cluster from owner (cert and key) to
// next, numbered number.
func SignSuccession(cert *x509.Certificate, key crypto.Signer, cluster string, number uint64, next *x509.Certificate) ([]byte, error) {
	if err := checkNextOwner(next); err != nil {
		return nil, err
	}
	return Sign(cert, key, KindSuccession, &authoritypb.Succession{
		Cluster: cluster, Number: number, Previous: pki.Fingerprint(cert), Owner: next.Raw,
	})
}

// Succeed follows the hand-overs of cluster in statements, in order of
// their numbers, from owner, the node's owner since the hand-over
// numbered after (0: since its enrolment): each one signed by the owner
// it hands over from and numbered higher than the last taken. It returns
// the hand-overs it took, the last of which names the node's owner now
// (none, if no statement hands over from owner), and the error of each
// statement that names an owner it follows as previous and does not
// hold, or does not parse: a member forged it or a disk damaged it. Such a statement is
// passed over, so that a forged one cannot hold a genuine one up.
func Succeed(statements [][]byte, owner *x509.Certificate, after uint64, cluster string) ([]Handover, error) {
	type candidate struct {
		b []byte
		s *authoritypb.Succession
	}
	var all []candidate
	var refused []error
	for _, b := range statements {
		var s authoritypb.Succession
		if err := openUnchecked(b, KindSuccession, &s); err != nil {
			refused = append(refused, fmt.Errorf("%w: %w", ErrSuccession, err))
			continue
		}
		all = append(all, candidate{b, &s})
	}
	slices.SortStableFunc(all, func(a, b candidate) int { return cmp.Compare(a.s.GetNumber(), b.s.GetNumber()) })
	var taken []Handover
	for _, c := range all {
		if c.s.GetNumber() <= after || c.s.GetPrevious() != pki.Fingerprint(owner) {
			continue
		}
		h, err := take(c.b, owner, cluster)
		if err != nil {
			refused = append(refused, err)
			continue
		}
		taken = append(taken, h)
		owner, after = h.Owner, h.Number
	}
	return taken, errors.Join(refused...)
}

// take checks one hand-over from owner and returns it.
func take(b []byte, owner *x509.Certificate, cluster string) (Handover, error) {
	var s authoritypb.Succession
	if err := Open(b, owner, KindSuccession, &s); err != nil {
		return Handover{}, fmt.Errorf("%w: %w", ErrSuccession, err)
	}
	if s.GetCluster() != cluster {
		return Handover{}, fmt.Errorf("%w: succession %d hands over cluster %q, this node's is %q", ErrSuccession, s.GetNumber(), s.GetCluster(), cluster)
	}
	next, err := x509.ParseCertificate(s.GetOwner())
	if err != nil {
		return Handover{}, fmt.Errorf("%w: succession %d names an owner certificate that does not parse: %w", ErrSuccession, s.GetNumber(), err)
	}
	if err := checkNextOwner(next); err != nil {
		return Handover{}, fmt.Errorf("%w: succession %d: %w", ErrSuccession, s.GetNumber(), err)
	}
	return Handover{Statement: b, Number: s.GetNumber(), Owner: next}, nil
}

// checkNextOwner checks that next can be an owner: its key signs
// statements, and it has a common name, which etcd names the owner by.
func checkNextOwner(next *x509.Certificate) error {
	if _, _, err := algorithm(next); err != nil {
		return fmt.Errorf("the next owner: %w", err)
	}
	if next.Subject.CommonName == "" {
		return fmt.Errorf("the next owner's certificate %s has no common name, which etcd would name the owner by", pki.Fingerprint(next))
	}
	return nil
}

// SuccessionNumber is the number of a hand-over statement a node took
// before, whose signature it checked then.
func SuccessionNumber(b []byte) (uint64, error) {
	var s authoritypb.Succession
	if err := openUnchecked(b, KindSuccession, &s); err != nil {
		return 0, err
	}
	return s.GetNumber(), nil
}
