// Package admin is what the owner does to a running cluster through its
// client port, with the owner's certificate: mint join tickets, admit the
// nodes that joined before admissions, remove nodes and revoke their
// certificates, mint and revoke application credentials (credential.go).
// The borough CLI and the QEMU cluster
// launcher both use it.
package admin

import (
	"context"
	"crypto"
	"crypto/tls"
	"crypto/x509"
	"encoding/hex"
	"errors"
	"fmt"
	"math/big"
	"net"
	"net/url"
	"slices"
	"strconv"
	"strings"
	"time"

	"go.etcd.io/etcd/api/v3/v3rpc/rpctypes"
	clientv3 "go.etcd.io/etcd/client/v3"
	"go.uber.org/zap"
	"google.golang.org/protobuf/proto"

	"github.com/borough-os/borough/internal/authority"
	"github.com/borough-os/borough/internal/keyspace"
	"github.com/borough-os/borough/internal/pki"
	"github.com/borough-os/borough/internal/ports"
	"github.com/borough-os/borough/internal/ticket"
	"github.com/borough-os/borough/proto/authoritypb"
	"github.com/borough-os/borough/proto/enrolmentpb"
	"github.com/borough-os/borough/proto/joinpb"
)

// Connect reaches the cluster at endpoints ("host:port") as the owner,
// trusting only the cluster CA ca.
func Connect(endpoints []string, ca *x509.Certificate, owner tls.Certificate) (*clientv3.Client, error) {
	roots := x509.NewCertPool()
	roots.AddCert(ca)
	var urls []string
	for _, e := range endpoints {
		urls = append(urls, "https://"+e)
	}
	return clientv3.New(clientv3.Config{
		Endpoints:   urls,
		DialTimeout: 10 * time.Second,
		TLS:         &tls.Config{RootCAs: roots, Certificates: []tls.Certificate{owner}},
		// Failures come back as errors; the client's own retry log
		// would only repeat them on stderr.
		Logger: zap.NewNop(),
	})
}

// FetchCA learns the cluster CA from the node at endpoint ("host:port"),
// trusting it only if it has the fingerprint the owner got out of band
// (the node's console) and the node's certificate verifies against it.
func FetchCA(endpoint, fingerprint string, owner tls.Certificate) (*x509.Certificate, error) {
	return FetchKnownCA(endpoint, []string{fingerprint}, owner)
}

// FetchKnownCA is FetchCA for any of the CAs with the fingerprints given:
// the first whose chain the endpoint presents, in their order.
func FetchKnownCA(endpoint string, fingerprints []string, owner tls.Certificate) (*x509.Certificate, error) {
	host, _, err := net.SplitHostPort(endpoint)
	if err != nil {
		return nil, err
	}
	conn, err := tls.DialWithDialer(&net.Dialer{Timeout: 10 * time.Second}, "tcp", endpoint,
		// The chain is verified below, against the fingerprints. h2: the
		// client port is gRPC's alone, which refuses a client without it.
		&tls.Config{InsecureSkipVerify: true, Certificates: []tls.Certificate{owner}, NextProtos: []string{"h2"}})
	if err != nil {
		return nil, fmt.Errorf("connecting to %s: %w", endpoint, err)
	}
	chain := conn.ConnectionState().PeerCertificates
	conn.Close()
	var errs []error
	for _, fp := range fingerprints {
		ca, err := pki.VerifyPinned(chain, fp, host)
		if err == nil {
			return ca, nil
		}
		errs = append(errs, err)
	}
	return nil, fmt.Errorf("%s: %w", endpoint, errors.Join(errs...))
}

// TicketParams say what ticket to mint; the cluster supplies the rest.
type TicketParams struct {
	TTL           time.Duration
	Learner       bool
	StoragePolicy enrolmentpb.StoragePolicy
}

// MintTicket mints a join ticket and stores its record in the cluster,
// with the owner's signed word for it (owner: the owner's certificate and
// key; none, for a cluster without an owner), without which no member of
// a cluster with an owner admits it. The owner's first ticket also admits
// the cluster's first node (admitFounder).
func MintTicket(ctx context.Context, c *clientv3.Client, p TicketParams, owner tls.Certificate) (*enrolmentpb.Ticket, error) {
	owner, err := withLeaf(owner)
	if err != nil {
		return nil, err
	}
	resp, err := c.Txn(ctx).Then(clientv3.OpGet(keyspace.Cluster), clientv3.OpGet(keyspace.CACert)).Commit()
	if err != nil {
		return nil, fmt.Errorf("reading the cluster: %w", err)
	}
	name, caPEM := keyspace.Value(resp, 0), keyspace.Value(resp, 1)
	ca, err := pki.ParseCertPEM(caPEM)
	if err != nil {
		return nil, fmt.Errorf("the cluster CA in etcd: %w", err)
	}
	endpoints, err := joinEndpoints(ctx, c)
	if err != nil {
		return nil, err
	}
	t, rec, err := ticket.Mint(ticket.Params{
		Cluster: string(name), CAFingerprint: pki.Fingerprint(ca), Endpoints: endpoints,
		TTL: p.TTL, Learner: p.Learner, StoragePolicy: p.StoragePolicy,
	}, time.Now())
	if err != nil {
		return nil, err
	}
	if owner.Leaf != nil {
		if rec.OwnerStatement, err = signTicket(owner, t, rec); err != nil {
			return nil, err
		}
		if err := admitFounder(ctx, c, owner, t); err != nil {
			return nil, err
		}
	}
	b, err := proto.Marshal(rec)
	if err != nil {
		return nil, err
	}
	key := ticket.Key(t.GetId())
	put, err := c.Txn(ctx).If(clientv3.Compare(clientv3.CreateRevision(key), "=", 0)).
		Then(clientv3.OpPut(key, string(b))).Commit()
	if err != nil {
		return nil, fmt.Errorf("storing the ticket in the cluster: %w", err)
	}
	if !put.Succeeded {
		return nil, fmt.Errorf("the cluster already has a ticket %x; try again", t.GetId())
	}
	return t, nil
}

// admitFounder gives the cluster's first node its admission by the owner
// (keyspace.NodeRecord.Admission), if it is the cluster's only node and
// has none: a first node's ticket of like's cluster, which the owner signs
// and claims for the node's name and key at once, and whose secret is then
// forgotten. The
// first node made its key before the owner could know it; until the
// owner's first ticket no other node can have joined (a member admits
// none without one), so the node the cluster records then is the one the
// owner bootstrapped, reached through its pinned CA.
func admitFounder(ctx context.Context, c *clientv3.Client, owner tls.Certificate, like *enrolmentpb.Ticket) error {
	resp, err := c.Txn(ctx).Then(
		clientv3.OpGet(keyspace.Nodes, clientv3.WithPrefix()), clientv3.OpGet(keyspace.NodeKeys, clientv3.WithPrefix()),
	).Commit()
	if err != nil {
		return fmt.Errorf("reading the cluster's nodes: %w", err)
	}
	nodes, keys := resp.Responses[0].GetResponseRange().Kvs, resp.Responses[1].GetResponseRange().Kvs
	if len(nodes) != 1 || len(keys) != 1 || string(keys[0].Value) != strings.TrimPrefix(string(nodes[0].Key), keyspace.Nodes) {
		return nil
	}
	name := string(keys[0].Value)
	rec, err := keyspace.ParseNodeRecord(nodes[0].Value)
	if err != nil || rec.Admission != nil || rec.Removed {
		return err
	}
	keyHash, err := hex.DecodeString(strings.TrimPrefix(string(keys[0].Key), keyspace.NodeKeys))
	if err != nil {
		return fmt.Errorf("the cluster's first node %s has a key recorded as %q: %w", name, keys[0].Key, err)
	}
	return admit(ctx, c, owner, like.GetClusterName(), name, keyHash)
}

// admit records the owner's admission of node name's key (its SHA-256,
// keyHash) in the node's record, unless it has one.
func admit(ctx context.Context, c *clientv3.Client, owner tls.Certificate, cluster, name string, keyHash []byte) error {
	admission, err := ownerAdmission(owner, cluster, name, keyHash)
	if err != nil {
		return err
	}
	_, err = keyspace.UpdateNode(ctx, c, name, func(r *keyspace.NodeRecord, _ bool) error {
		if r.Admission == nil {
			r.Admission = admission
		}
		return nil
	})
	return err
}

// ownerAdmission is the admission of node name's key: a first node's
// ticket, signed and claimed by the owner.
func ownerAdmission(owner tls.Certificate, cluster, name string, keyHash []byte) ([]byte, error) {
	t, statement, err := FounderTicket(owner, cluster)
	if err != nil {
		return nil, err
	}
	return ticket.NewAdmission(statement, ticket.Prove(t, name, keyHash))
}

// Unadmitted is a node of the cluster without the owner's admission, as
// a node that joined before Borough checked admissions: the certificate
// whose key its published escrow key record is signed with, or why it has
// none the owner could admit.
type Unadmitted struct {
	Node string
	Cert *x509.Certificate
	Why  string
}

// Admitted says what AdmitNodes did for one node.
type Admitted struct {
	Node string
	// Key is the fingerprint of the certificate whose key it admitted;
	// empty if it admitted none, and Why says why not.
	Key, Why string
}

// ListUnadmitted lists each node of the cluster that has no admission by
// the owner, with the certificate of the cluster CA in its name that
// signed its published escrow key record (keyspace.EscrowKey), if any:
// what AdmitNodes would admit, for the owner to see first. It writes
// nothing.
func ListUnadmitted(ctx context.Context, c *clientv3.Client) ([]Unadmitted, error) {
	resp, err := c.Txn(ctx).Then(clientv3.OpGet(keyspace.Cluster), clientv3.OpGet(keyspace.Nodes, clientv3.WithPrefix())).Commit()
	if err != nil {
		return nil, fmt.Errorf("reading the cluster's nodes: %w", err)
	}
	cluster := string(keyspace.Value(resp, 0))
	ca, err := keyspace.ReadCA(ctx, c)
	if err != nil {
		return nil, err
	}
	var out []Unadmitted
	for _, kv := range resp.Responses[1].GetResponseRange().Kvs {
		name := strings.TrimPrefix(string(kv.Key), keyspace.Nodes)
		rec, err := keyspace.ParseNodeRecord(kv.Value)
		if err != nil {
			return out, fmt.Errorf("the record of node %s: %w", name, err)
		}
		if rec.Removed || rec.Admission != nil {
			continue
		}
		out = append(out, escrowCert(ctx, c, cluster, ca.Cert, name))
	}
	return out, nil
}

// escrowCert is node name's certificate, from its escrow key record.
func escrowCert(ctx context.Context, c *clientv3.Client, cluster string, ca *x509.Certificate, name string) Unadmitted {
	u := Unadmitted{Node: name}
	resp, err := c.Get(ctx, keyspace.EscrowKeys+name)
	if err != nil || len(resp.Kvs) != 1 {
		u.Why = fmt.Sprintf("it has published no escrow key (%v): it runs a Borough from before admissions, or is down", err)
		return u
	}
	_, cert, err := keyspace.ParseEscrowKey(resp.Kvs[0].Value, cluster, name)
	switch {
	case err != nil:
		u.Why = "its escrow key record: " + err.Error()
	case cert.CheckSignatureFrom(ca) != nil || cert.Subject.CommonName != name:
		u.Why = fmt.Sprintf("its escrow key record is signed by a certificate of %q that is not the cluster CA's in its name", cert.Subject.CommonName)
	default:
		u.Cert = cert
	}
	return u
}

// AdmitNodes gives each of nodes (ListUnadmitted's, as the owner saw
// them) that has a certificate the owner's admission of that
// certificate's key, not of whatever the cluster holds by then. The owner
// trusts the cluster as it was when listed, as admitFounder does: run it
// right after the update that brought admissions, before any member could
// be compromised.
func AdmitNodes(ctx context.Context, c *clientv3.Client, owner tls.Certificate, nodes []Unadmitted) ([]Admitted, error) {
	owner, err := withLeaf(owner)
	if err != nil {
		return nil, err
	}
	resp, err := c.Get(ctx, keyspace.Cluster)
	if err != nil || len(resp.Kvs) != 1 {
		return nil, fmt.Errorf("reading the cluster's name: %v", err)
	}
	cluster := string(resp.Kvs[0].Value)
	var out []Admitted
	for _, n := range nodes {
		a := Admitted{Node: n.Node, Why: n.Why}
		if n.Cert != nil {
			if err := admit(ctx, c, owner, cluster, n.Node, pki.KeyHash(n.Cert)); err != nil {
				a.Why = err.Error()
			} else {
				a.Key = pki.Fingerprint(n.Cert)
			}
		}
		out = append(out, a)
	}
	return out, nil
}

// FounderTicket mints the ticket of cluster's first node (ticket.Founder)
// and signs it as the owner: the ticket and the owner's statement.
func FounderTicket(owner tls.Certificate, cluster string) (*enrolmentpb.Ticket, []byte, error) {
	owner, err := withLeaf(owner)
	if err != nil {
		return nil, nil, err
	}
	key, err := ownerSigner(owner)
	if err != nil {
		return nil, nil, err
	}
	t, body, err := ticket.Founder(cluster, time.Now())
	if err != nil {
		return nil, nil, err
	}
	statement, err := authority.Sign(owner.Leaf, key, authority.KindTicket, body)
	return t, statement, err
}

// joinEndpoints lists the voters' join endpoints, from their peer URLs.
func joinEndpoints(ctx context.Context, c *clientv3.Client) ([]string, error) {
	list, err := c.MemberList(ctx)
	if err != nil {
		return nil, fmt.Errorf("listing members: %w", err)
	}
	var out []string
	for _, m := range list.Members {
		if m.IsLearner {
			continue
		}
		for _, u := range m.PeerURLs {
			pu, err := url.Parse(u)
			if err != nil {
				return nil, fmt.Errorf("member %s has peer URL %q: %w", m.Name, u, err)
			}
			out = append(out, net.JoinHostPort(pu.Hostname(), strconv.Itoa(ports.Join)))
		}
	}
	if len(out) == 0 {
		return nil, fmt.Errorf("the cluster lists no voting member")
	}
	return out, nil
}

// Removal says what RemoveNode did.
type Removal struct {
	// Serials are the revoked certificates' serials, hex.
	Serials []string
	// MemberID is the removed etcd member, 0 if it was no longer one.
	MemberID uint64
	// CRL is the CRL the removal put in etcd, for the owner's tool to
	// remember (RemoveNode's remembered); nil without an owner.
	CRL []byte
}

// RemoveNode marks node name's record removed (a tombstone the join
// endpoint checks: neither the node's name nor its ticket admits it
// again), revokes its certificates with the owner's signed word (owner:
// the owner's certificate and key; none, for a cluster without an owner),
// then removes its etcd member, found by
// the member ID the cluster recorded when it admitted the node (a learner
// that never started has no name in etcd), or by name for a record
// without one. Revoking comes before the removal: a node that is no
// member but still trusted is worse than a member whose certificate no
// longer works. Removing a node again finishes a removal cut short.
func RemoveNode(ctx context.Context, c *clientv3.Client, name string, owner tls.Certificate, remembered []byte) (Removal, error) {
	owner, err := withLeaf(owner)
	if err != nil {
		return Removal{}, err
	}
	nr, err := tombstone(ctx, c, name)
	if err != nil {
		return Removal{}, err
	}
	der, err := revoke(ctx, c, name, nr.Serials, owner, remembered)
	if err != nil {
		return Removal{}, err
	}
	r := Removal{Serials: nr.Serials}
	if owner.Leaf != nil {
		r.CRL = der
	}
	list, err := c.MemberList(ctx)
	if err != nil {
		return r, err
	}
	for _, m := range list.Members {
		if !nr.Is(m, name) {
			continue
		}
		if err := removeMember(ctx, c, m.ID); err != nil {
			return r, fmt.Errorf("removing member %s (%x): %w", name, m.ID, err)
		}
		r.MemberID = m.ID
	}
	return r, nil
}

// tombstone marks node name's record removed and returns it.
func tombstone(ctx context.Context, c *clientv3.Client, name string) (keyspace.NodeRecord, error) {
	return keyspace.UpdateNode(ctx, c, name, func(r *keyspace.NodeRecord, found bool) error {
		if !found {
			return fmt.Errorf("the cluster has no node %s", name)
		}
		r.Removed = true
		return nil
	})
}

// removeMember removes a member, retrying while etcd refuses because a
// member has only just become active (its strict reconfiguration check
// says "unhealthy cluster" then).
func removeMember(ctx context.Context, c *clientv3.Client, id uint64) error {
	for {
		_, err := c.MemberRemove(ctx, id)
		if !errors.Is(err, rpctypes.ErrUnhealthy) {
			return err
		}
		select {
		case <-ctx.Done():
			return err
		case <-time.After(500 * time.Millisecond):
		}
	}
}

// revoke adds serials (hex), node name's certificates (an application
// credential's, for name ""), to the cluster's
// CRL, signed with the CA's key and numbered one higher than the CRL it
// follows (nextCRL), which, with an owner, carries the owner's signed
// revocations of the same number (authority.RevocationsExtension), in a
// transaction that fails if etcd's CRL changed meanwhile, and returns it.
// remembered is the last CRL the owner's tool made for this cluster, nil
// if it made none.
func revoke(ctx context.Context, c *clientv3.Client, name string, serialsHex []string, owner tls.Certificate, remembered []byte) ([]byte, error) {
	serials, err := parseSerials(serialsHex)
	if err != nil {
		return nil, err
	}
	ca, err := keyspace.ReadCA(ctx, c)
	if err != nil {
		return nil, err
	}
	resp, err := c.Txn(ctx).Then(clientv3.OpGet(keyspace.CRL), clientv3.OpGet(keyspace.Cluster)).Commit()
	if err != nil {
		return nil, err
	}
	crlKV := keyspace.KV(resp, 0)
	if crlKV == nil {
		return nil, fmt.Errorf("the cluster has no CRL")
	}
	current, mine, err := parseCRLs(ca.Cert, crlKV.Value, remembered)
	if err != nil {
		return nil, err
	}
	der, err := nextCRL(ca, current, mine, serials, name, string(keyspace.Value(resp, 1)), owner)
	if err != nil {
		return nil, err
	}
	put, err := c.Txn(ctx).If(clientv3.Compare(clientv3.ModRevision(keyspace.CRL), "=", crlKV.ModRevision)).
		Then(clientv3.OpPut(keyspace.CRL, string(der))).Commit()
	if err != nil {
		return nil, fmt.Errorf("storing the CRL: %w", err)
	}
	if !put.Succeeded {
		return nil, fmt.Errorf("the CRL changed while it was being updated; try again")
	}
	return der, nil
}

// parseCRLs parses etcd's CRL, der, and the one the owner's tool
// remembers making for the cluster (nil if none), both of the CA ca.
func parseCRLs(ca *x509.Certificate, der, remembered []byte) (current, mine *x509.RevocationList, err error) {
	if current, err = pki.ParseCRL(der, ca); err != nil {
		return nil, nil, err
	}
	if remembered != nil {
		if mine, err = pki.ParseCRL(remembered, ca); err != nil {
			return nil, nil, fmt.Errorf("the CRL this owner's tool last made for the cluster: %w", err)
		}
	}
	return current, mine, nil
}

// nextCRL is the CRL that follows current, etcd's, with serials, node
// name's, added and, with an owner, the one that follows the owner's last
// (ownersLast) carrying the owner's signed revocations that go with it.
func nextCRL(ca *pki.CA, current, remembered *x509.RevocationList, serials []*big.Int, name, cluster string, owner tls.Certificate) ([]byte, error) {
	if owner.Leaf == nil {
		return ca.Revoke(current, serials, time.Now())
	}
	base, prev, err := ownersLast(current, remembered, owner.Leaf)
	if err != nil {
		return nil, err
	}
	number, revoked := pki.Next(base, serials)
	next := &authoritypb.Revocations{Cluster: cluster, Number: uint64(number), Nodes: prev.GetNodes(), Serials: pki.Hex(revoked)}
	if name != "" && !slices.Contains(next.Nodes, name) {
		next.Nodes = append(next.Nodes, name)
	}
	key, err := ownerSigner(owner)
	if err != nil {
		return nil, err
	}
	return authority.RevocationsCRL(ca, number, revoked, owner.Leaf, key, next, time.Now())
}

// ownersLast is the owner's last CRL and its revocations: the newer of
// etcd's (current) and the one the owner's tool remembers making
// (remembered, nil if none) that carries the owner's revocations, checked
// against the owner's key, for only the owner signs those, whoever kept
// them. A member can write etcd's CRL, not the owner's word: one it wrote
// is passed over. Without either, it is etcd's if that revokes nothing (a
// cluster whose owner never removed a node).
func ownersLast(current, remembered *x509.RevocationList, owner *x509.Certificate) (*x509.RevocationList, *authoritypb.Revocations, error) {
	var base *x509.RevocationList
	var stmt *authoritypb.Revocations
	for _, crl := range []*x509.RevocationList{current, remembered} {
		if crl == nil {
			continue
		}
		r, err := authority.Revocations(crl, owner)
		if err == nil && r != nil && (base == nil || crl.Number.Cmp(base.Number) > 0) {
			base, stmt = crl, r
		}
	}
	switch {
	case base != nil:
		return base, stmt, nil
	case remembered == nil && len(current.RevokedCertificateEntries) == 0:
		return current, nil, nil
	}
	return nil, nil, fmt.Errorf("the cluster's CRL in etcd (number %v) does not carry the owner's revocations, and the "+
		"owner's tool remembers none of its own for this cluster: a member wrote it; remove the node from where "+
		"the owner last removed one", current.Number)
}

func parseSerials(hexes []string) ([]*big.Int, error) {
	var serials []*big.Int
	for _, h := range hexes {
		s, ok := new(big.Int).SetString(h, 16)
		if !ok {
			return nil, fmt.Errorf("the node's serial %q is not hex", h)
		}
		serials = append(serials, s)
	}
	return serials, nil
}

// signTicket is the owner's signed word for ticket t, whose record the
// cluster keeps as rec.
func signTicket(owner tls.Certificate, t *enrolmentpb.Ticket, rec *joinpb.TicketRecord) ([]byte, error) {
	key, err := ownerSigner(owner)
	if err != nil {
		return nil, err
	}
	return authority.Sign(owner.Leaf, key, authority.KindTicket, &authoritypb.Ticket{
		Cluster: t.GetClusterName(), Id: t.GetId(), ClaimKey: rec.GetClaimKey(),
		Expires: rec.GetExpires(), LearnerForGood: rec.GetLearnerForGood(),
	})
}

// ownerSigner is the owner's key, to sign statements with.
func ownerSigner(owner tls.Certificate) (crypto.Signer, error) {
	key, ok := owner.PrivateKey.(crypto.Signer)
	if !ok {
		return nil, fmt.Errorf("the owner's key is a %T, which cannot sign", owner.PrivateKey)
	}
	return key, nil
}

// withLeaf returns owner with its certificate parsed, if it has one.
func withLeaf(owner tls.Certificate) (tls.Certificate, error) {
	if owner.Leaf != nil || len(owner.Certificate) == 0 {
		return owner, nil
	}
	leaf, err := x509.ParseCertificate(owner.Certificate[0])
	if err != nil {
		return owner, fmt.Errorf("the owner's certificate: %w", err)
	}
	owner.Leaf = leaf
	return owner, nil
}
