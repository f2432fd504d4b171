package join

import (
	"bytes"
	"context"
	"crypto/sha256"
	"crypto/tls"
	"crypto/x509"
	"encoding/hex"
	"errors"
	"fmt"
	"io"
	"log/slog"
	"net/http"
	"net/netip"
	"net/url"
	"os"
	"strconv"
	"time"

	"go.etcd.io/etcd/api/v3/etcdserverpb"
	"go.etcd.io/etcd/api/v3/v3rpc/rpctypes"
	clientv3 "go.etcd.io/etcd/client/v3"
	"google.golang.org/protobuf/proto"

	"github.com/borough-os/borough/internal/authority"
	"github.com/borough-os/borough/internal/consensus"
	"github.com/borough-os/borough/internal/httpsserve"
	"github.com/borough-os/borough/internal/keyspace"
	"github.com/borough-os/borough/internal/pki"
	"github.com/borough-os/borough/internal/ports"
	"github.com/borough-os/borough/internal/ticket"
	"github.com/borough-os/borough/proto/authoritypb"
	"github.com/borough-os/borough/proto/joinpb"
)

// Paths of the endpoint.
const (
	pathCheck  = "/v1/check"
	pathJoin   = "/v1/join"
	pathStatus = "/v1/status"
)

// maxBody bounds a request body, readTimeout how long a client may take
// to send it: a slow client holds a connection no longer.
const (
	maxBody     = 64 << 10
	readTimeout = 10 * time.Second
)

// Server is a member's join endpoint.
type Server struct {
	// Client reaches the local etcd member.
	Client *clientv3.Client
	// PKI holds the member's certificate, which the endpoint presents.
	PKI consensus.Files
	Log *slog.Logger
	// Addr is the address to listen on; empty means every address, on
	// ports.Join.
	Addr string
	// Now is the clock tickets are checked against; nil is time.Now.
	Now func() time.Time
}

// now is the time to check a ticket at.
func (s *Server) now() time.Time {
	if s.Now != nil {
		return s.Now()
	}
	return time.Now()
}

// Run serves the endpoint until ctx ends.
func (s *Server) Run(ctx context.Context) error {
	cert, err := tls.LoadX509KeyPair(s.PKI.Cert(), s.PKI.Key())
	if err != nil {
		return fmt.Errorf("join endpoint: loading the node certificate: %w", err)
	}
	mux := http.NewServeMux()
	mux.HandleFunc("POST "+pathCheck, s.handle(s.check))
	mux.HandleFunc("POST "+pathJoin, s.handle(s.join))
	mux.HandleFunc("POST "+pathStatus, s.status)
	e := httpsserve.Endpoint{
		Name:        "join endpoint",
		Handler:     newLimiter().wrap(mux),
		ReadTimeout: readTimeout,
		// A node asking for its status presents its certificate, which
		// status checks itself; joining nodes have none.
		TLS: &tls.Config{Certificates: []tls.Certificate{cert}, MinVersion: tls.VersionTLS13,
			ClientAuth: tls.RequestClientCert},
	}
	// A source's connections past its budget are closed before their
	// handshake (limitConns), its requests before they reach etcd.
	l, err := e.Listen(s.Addr, ports.Join)
	if err != nil {
		return err
	}
	return e.Serve(ctx, limitConns(l))
}

// Refusal is a join request the cluster will not grant; asking again will
// not change that. Removed says the refusal is because the owner removed
// the node (HTTP 410 on the wire, with the answering member's CRL in
// force): the node records that it was removed, once CheckRemoved agrees.
type Refusal struct {
	Reason  string
	Removed bool
	// CRL is the answering member's CRL in force, with Removed.
	CRL []byte
}

func (r *Refusal) Error() string { return r.Reason }

func refuse(format string, args ...any) error {
	return &Refusal{Reason: fmt.Sprintf(format, args...)}
}

// errNoTicket is all a caller learns without a valid ticket for this
// cluster: not the cluster's name, nor whether the ticket exists.
var errNoTicket = &Refusal{Reason: "the cluster knows no such ticket: its ID, secret or cluster name is wrong"}

func refuseRemoved(name string) error {
	return &Refusal{Reason: fmt.Sprintf("node %s was removed from the cluster", name), Removed: true}
}

// handle decodes a JoinRequest, runs fn with the address the request
// comes from, and encodes its answer: a refusal is 403 with the reason,
// another error 503.
func (s *Server) handle(fn func(context.Context, netip.Addr, *joinpb.JoinRequest) (proto.Message, error)) http.HandlerFunc {
	return func(w http.ResponseWriter, r *http.Request) {
		body, err := io.ReadAll(http.MaxBytesReader(w, r.Body, maxBody))
		var req joinpb.JoinRequest
		if err == nil {
			err = proto.Unmarshal(body, &req)
		}
		if err != nil {
			http.Error(w, "not a join request: "+err.Error(), http.StatusBadRequest)
			return
		}
		from, err := netip.ParseAddrPort(r.RemoteAddr)
		if err != nil {
			http.Error(w, "the request's source address: "+err.Error(), http.StatusBadRequest)
			return
		}
		ctx, cancel := context.WithTimeout(r.Context(), 30*time.Second)
		defer cancel()
		resp, err := fn(ctx, from.Addr().Unmap(), &req)
		var refusal *Refusal
		switch {
		case errors.As(err, &refusal):
			s.Log.Warn("join refused", "from", r.RemoteAddr, "path", r.URL.Path, "reason", refusal.Reason)
			if refusal.Removed {
				s.gone(w, refusal.Reason)
				return
			}
			http.Error(w, refusal.Reason, http.StatusForbidden)
			return
		case err != nil:
			s.Log.Warn("join failed", "from", r.RemoteAddr, "path", r.URL.Path, "err", err)
			http.Error(w, err.Error(), http.StatusServiceUnavailable)
			return
		}
		b, err := proto.Marshal(resp)
		if err != nil {
			http.Error(w, err.Error(), http.StatusInternalServerError)
			return
		}
		w.Header().Set("Content-Type", "application/x-protobuf")
		w.Write(b)
	}
}

// gone refuses a join as a removed node's (HTTP 410), with the CRL in
// force that shows it: the node believes it only with the owner's word.
func (s *Server) gone(w http.ResponseWriter, reason string) {
	crl, err := os.ReadFile(s.PKI.CRL())
	if err != nil {
		s.Log.Warn("the CRL in force, for a removed node's refusal", "err", err)
	}
	b, err := proto.Marshal(&joinpb.MemberStatus{Removed: true, Crl: crl, Reason: reason})
	if err != nil {
		http.Error(w, err.Error(), http.StatusInternalServerError)
		return
	}
	w.Header().Set("Content-Type", "application/x-protobuf")
	w.WriteHeader(http.StatusGone)
	w.Write(b)
}

// status tells a node that presents a certificate of the cluster CA
// whether the cluster revoked it or removed its node.
func (s *Server) status(w http.ResponseWriter, r *http.Request) {
	ctx, cancel := context.WithTimeout(r.Context(), 10*time.Second)
	defer cancel()
	removed, crl, err := s.removed(ctx, r.TLS.PeerCertificates)
	var refusal *Refusal
	switch {
	case errors.As(err, &refusal):
		http.Error(w, refusal.Reason, http.StatusForbidden)
		return
	case err != nil:
		http.Error(w, err.Error(), http.StatusServiceUnavailable)
		return
	}
	b, err := proto.Marshal(&joinpb.MemberStatus{Removed: removed, Crl: crl})
	if err != nil {
		http.Error(w, err.Error(), http.StatusInternalServerError)
		return
	}
	w.Write(b)
}

// removed checks a node's certificate chain: issued by the cluster CA,
// and then revoked (by the CRL this member put in force), or of a node
// the owner removed (its record's tombstone), or whose etcd member is
// gone.
func (s *Server) removed(ctx context.Context, chain []*x509.Certificate) (bool, []byte, error) {
	if len(chain) == 0 {
		return false, nil, refuse("present the node's certificate")
	}
	ca, err := keyspace.ReadCA(ctx, s.Client)
	if err != nil {
		return false, nil, err
	}
	if err := chain[0].CheckSignatureFrom(ca.Cert); err != nil {
		return false, nil, refuse("the certificate is not of this cluster's CA")
	}
	der, err := os.ReadFile(s.PKI.CRL())
	if err != nil {
		return false, nil, fmt.Errorf("reading the CRL in force: %w", err)
	}
	crl, err := pki.ParseCRL(der, ca.Cert)
	if err != nil {
		return false, nil, err
	}
	if authority.Revokes(crl, chain[0]) != "" {
		return true, der, nil
	}
	name := chain[0].Subject.CommonName
	nr, err := keyspace.ReadNode(ctx, s.Client, name)
	if err != nil {
		return false, nil, err
	}
	if nr.Removed {
		return true, der, nil
	}
	m, err := s.member(ctx, name, nr)
	return m == nil, der, err
}

// member finds node name's etcd member (NodeRecord.Is), nil if it has
// none.
func (s *Server) member(ctx context.Context, name string, nr keyspace.NodeRecord) (*etcdserverpb.Member, error) {
	list, err := s.Client.MemberList(ctx)
	if err != nil {
		return nil, fmt.Errorf("listing members: %w", err)
	}
	for _, m := range list.Members {
		if nr.Is(m, name) {
			return m, nil
		}
	}
	return nil, nil
}

// record reads the record of the request's ticket and its revision (0 if
// there is none), once it has checked that the request is for this
// cluster.
func (s *Server) record(ctx context.Context, req *joinpb.JoinRequest) (*joinpb.TicketRecord, int64, error) {
	if len(req.GetTicketId()) == 0 {
		return nil, 0, refuse("the request names no ticket")
	}
	resp, err := s.Client.Txn(ctx).Then(clientv3.OpGet(keyspace.Cluster), clientv3.OpGet(ticket.Key(req.GetTicketId()))).Commit()
	if err != nil {
		return nil, 0, fmt.Errorf("reading the ticket: %w", err)
	}
	if string(keyspace.Value(resp, 0)) != req.GetClusterName() {
		return nil, 0, errNoTicket
	}
	kvs := resp.Responses[1].GetResponseRange().Kvs
	if len(kvs) == 0 {
		return nil, 0, nil
	}
	var rec joinpb.TicketRecord
	if err := proto.Unmarshal(kvs[0].Value, &rec); err != nil {
		return nil, 0, fmt.Errorf("the cluster's record of the ticket is damaged: %w", err)
	}
	if err := s.ownersTicket(req, &rec); err != nil {
		s.Log.Warn("refusing a ticket the owner did not sign, as if there were none", "ticket", fmt.Sprintf("%x", req.GetTicketId()), "err", err)
		return nil, 0, nil
	}
	return &rec, kvs[0].ModRevision, nil
}

// ownersTicket checks, in a cluster with an owner, that rec carries the
// owner's signed word for the request's ticket: any member can write a
// ticket record to etcd, only the owner can sign one.
func (s *Server) ownersTicket(req *joinpb.JoinRequest, rec *joinpb.TicketRecord) error {
	owner, err := s.PKI.LoadOwner()
	if owner == nil || err != nil {
		return err
	}
	if len(rec.GetOwnerStatement()) == 0 {
		return errors.New("its record carries no statement of the owner's")
	}
	var t authoritypb.Ticket
	if err := authority.Open(rec.GetOwnerStatement(), owner, authority.KindTicket, &t); err != nil {
		return err
	}
	switch {
	case t.GetCluster() != req.GetClusterName() || !bytes.Equal(t.GetId(), req.GetTicketId()):
		return fmt.Errorf("the owner's statement is for ticket %x of cluster %q", t.GetId(), t.GetCluster())
	case !bytes.Equal(t.GetClaimKey(), rec.GetClaimKey()) || t.GetExpires() != rec.GetExpires() ||
		t.GetLearnerForGood() != rec.GetLearnerForGood():
		return errors.New("the record's claim key, expiry or role is not what the owner signed")
	}
	return nil
}

// proof is the request's claim of its ticket for node name and the key
// whose SHA-256 is keyHash (none to check the ticket only).
func proof(req *joinpb.JoinRequest, name string, keyHash []byte) ticket.Proof {
	return ticket.Proof{Cluster: req.GetClusterName(), ID: req.GetTicketId(), Node: name, KeyHash: keyHash, Signature: req.GetClaim()}
}

// admitError is the refusal of a ticket ticket.Admit did not admit: the
// reason only to a caller who holds the ticket's secret.
func admitError(err error) error {
	if errors.Is(err, ticket.ErrUnknown) || errors.Is(err, ticket.ErrWrongSecret) {
		return errNoTicket
	}
	return refuse("%v", err)
}

// check says whether a fresh node may use the ticket, without claiming it.
func (s *Server) check(ctx context.Context, _ netip.Addr, req *joinpb.JoinRequest) (proto.Message, error) {
	rec, _, err := s.record(ctx, req)
	if err != nil {
		return nil, err
	}
	if _, err := ticket.Admit(rec, proof(req, "", nil), s.now()); err != nil {
		return nil, admitError(err)
	}
	return &joinpb.JoinResponse{}, nil
}

// join admits a node, which asks from the address from: see the package
// doc for the steps. The node's certificate and peer URL name from, the
// address the cluster sees it at, and no other.
func (s *Server) join(ctx context.Context, from netip.Addr, req *joinpb.JoinRequest) (proto.Message, error) {
	csr, err := x509.ParseCertificateRequest(req.GetCsr())
	if err != nil {
		return nil, refuse("the certificate request is not valid: %v", err)
	}
	name := csr.Subject.CommonName
	rec, admission, err := s.claim(ctx, from, req, csr)
	if err != nil {
		return nil, err
	}
	known, err := s.admitted(ctx, name, req.GetReplaceMember())
	if err != nil {
		return nil, err
	}
	if known != nil && req.GetReplaceMember() {
		if err := s.replace(ctx, name, known); err != nil {
			return nil, err
		}
		known = nil
	}
	ca, err := keyspace.ReadCA(ctx, s.Client)
	if err != nil {
		return nil, err
	}
	cert, err := ca.SignCSR(req.GetCsr(), from, time.Now())
	if err != nil {
		return nil, refuse("%v", err)
	}
	peer := url.URL{Scheme: "https", Host: netip.AddrPortFrom(from, ports.Peer).String()}
	var id uint64
	if known != nil {
		id = known.ID
	} else if id, err = s.addLearner(ctx, name, peer.String()); err != nil {
		return nil, err
	}
	is := keyspace.Issue{Serial: cert.SerialNumber.Text(16), Learner: rec.GetLearnerForGood(), MemberID: id, Admission: admission}
	if err := keyspace.AddSerial(ctx, s.Client, name, is); err != nil {
		return nil, err
	}
	resp, err := s.answer(ctx, ca)
	if err != nil {
		return nil, err
	}
	resp.Certificate, resp.MemberId, resp.LearnerForGood, resp.Admission = cert.Raw, id, rec.GetLearnerForGood(), admission
	s.Log.Info("admitted node as a learner", "node", name, "member", strconv.FormatUint(id, 16), "peer", peer.String())
	return resp, nil
}

// admitted returns the etcd member the cluster recorded for node name
// when it admitted it before, if that member is still there (nil if not: a
// first request, one whose earlier attempt stopped before the record, or
// one whose member was replaced), once it has checked that the owner did
// not remove the node since (the owner's removal leaves a tombstone, so a
// node removed while it was joining does not come back with its claimed
// ticket) and that its join is unfinished: a voter's ticket is spent,
// unless the node asks to replace its member (replace), which it lost the
// data of before it knew its join finished.
func (s *Server) admitted(ctx context.Context, name string, replace bool) (*etcdserverpb.Member, error) {
	nr, err := keyspace.ReadNode(ctx, s.Client, name)
	switch {
	case err != nil:
		return nil, err
	case nr.Removed:
		return nil, refuseRemoved(name)
	case nr.MemberID == 0:
		return nil, nil
	}
	m, err := s.member(ctx, name, nr)
	if m != nil && !m.IsLearner && !replace {
		return nil, refuse("node %s has joined and votes: its ticket is spent", name)
	}
	return m, err
}

// replace removes m, node name's member, which the node lost the data of
// (a power cut took what its disk had not flushed), so that it is admitted
// again as a new member: raft forbids a member to come back with less of
// the log than it acknowledged (its leader would commit entries the
// member no longer has, and it panics). A learner counts in no quorum. A
// voter may have: removing it is losing that voter for good, which raft
// survives while the rest keep a quorum (etcd removes a voter only then),
// and never survives the voter coming back with less of the log. The node
// proved it holds the key its ticket was claimed for, within the ticket's
// lifetime, so it replaces no member but its own.
func (s *Server) replace(ctx context.Context, name string, m *etcdserverpb.Member) error {
	if _, err := s.Client.MemberRemove(ctx, m.ID); err != nil {
		return fmt.Errorf("removing member %x to replace it: %w", m.ID, err)
	}
	s.Log.Info("removed the member of a joining node that lost its data, to admit it again", "node", name,
		"member", strconv.FormatUint(m.ID, 16), "voter", !m.IsLearner)
	return nil
}

// claim admits the request under its ticket, claiming an unused ticket
// for the request's key in one etcd transaction that also checks that
// nobody claimed it in between and binds the key to the node's name. A
// claimed ticket admits its own key again only within its lifetime, to
// finish that join. It returns the ticket's record and, in a cluster with
// an owner, the node's admission (ticket.NewAdmission).
func (s *Server) claim(ctx context.Context, from netip.Addr, req *joinpb.JoinRequest, csr *x509.CertificateRequest) (*joinpb.TicketRecord, []byte, error) {
	if err := pki.CheckAddresses(csr, from); err != nil {
		return nil, nil, refuse("%v", err)
	}
	rec, rev, err := s.record(ctx, req)
	if err != nil {
		return nil, nil, err
	}
	keyHash := sha256.Sum256(csr.RawSubjectPublicKeyInfo)
	name := csr.Subject.CommonName
	p := proof(req, name, keyHash[:])
	adm, err := ticket.Admit(rec, p, s.now())
	if errors.Is(err, ticket.ErrExpired) && rec.GetNode() != "" {
		if err := s.notRemoved(ctx, rec.GetNode()); err != nil {
			return nil, nil, err
		}
	}
	if err != nil {
		return nil, nil, admitError(err)
	}
	var admission []byte
	if len(rec.GetOwnerStatement()) > 0 {
		if admission, err = ticket.NewAdmission(rec.GetOwnerStatement(), p); err != nil {
			return nil, nil, err
		}
	}
	if adm == ticket.Again {
		if rec.GetNode() != name {
			return nil, nil, refuse("the ticket was used by node %s, not %s", rec.GetNode(), name)
		}
		return rec, admission, nil
	}
	claimed := proto.Clone(rec).(*joinpb.TicketRecord)
	claimed.ClaimedBy, claimed.Node = keyHash[:], name
	b, err := proto.Marshal(claimed)
	if err != nil {
		return nil, nil, err
	}
	key, nodeKey := ticket.Key(req.GetTicketId()), keyspace.NodeKeys+hex.EncodeToString(keyHash[:])
	// The node's name and key must be new to the cluster: a ticket admits
	// a node, it does not let one take over another's record, nor bring a
	// removed node back under a new name.
	txn, err := s.Client.Txn(ctx).If(
		clientv3.Compare(clientv3.ModRevision(key), "=", rev),
		clientv3.Compare(clientv3.CreateRevision(keyspace.Nodes+name), "=", 0),
		clientv3.Compare(clientv3.CreateRevision(nodeKey), "=", 0),
	).Then(clientv3.OpPut(key, string(b)), clientv3.OpPut(nodeKey, name)).
		Else(clientv3.OpGet(keyspace.Nodes+name), clientv3.OpGet(nodeKey)).Commit()
	if err != nil {
		return nil, nil, fmt.Errorf("claiming the ticket: %w", err)
	}
	if !txn.Succeeded {
		return nil, nil, s.taken(ctx, txn, name)
	}
	return claimed, admission, nil
}

// taken explains a claim that failed: the name or the key is another
// node's (a removed one's, which is then said), or the ticket changed.
func (s *Server) taken(ctx context.Context, txn *clientv3.TxnResponse, name string) error {
	if len(txn.Responses[0].GetResponseRange().Kvs) > 0 {
		if err := s.notRemoved(ctx, name); err != nil {
			return err
		}
		return refuse("the cluster already has a node named %s", name)
	}
	if kvs := txn.Responses[1].GetResponseRange().Kvs; len(kvs) > 0 {
		owner := string(kvs[0].Value)
		if err := s.notRemoved(ctx, owner); err != nil {
			return err
		}
		return refuse("the request's key is node %s's: a key is admitted once, for one node", owner)
	}
	return errors.New("the ticket changed while it was being claimed; ask again")
}

// notRemoved refuses node name if the owner removed it.
func (s *Server) notRemoved(ctx context.Context, name string) error {
	nr, err := keyspace.ReadNode(ctx, s.Client, name)
	switch {
	case err != nil:
		return err
	case nr.Removed:
		return refuseRemoved(name)
	}
	return nil
}

// addLearner adds the node as a learner at peerURL, or finds it if an
// earlier attempt added it: etcd then says the peer URL is taken, or, when
// the attempt was within the same second (etcd derives a member's ID from
// its peer URLs, the cluster and the time), that the ID exists.
func (s *Server) addLearner(ctx context.Context, name, peerURL string) (uint64, error) {
	add, err := s.Client.MemberAddAsLearner(ctx, []string{peerURL})
	if err == nil {
		return add.Member.ID, nil
	}
	if !errors.Is(err, rpctypes.ErrPeerURLExist) && !errors.Is(err, rpctypes.ErrMemberExist) {
		return 0, fmt.Errorf("adding the node as a learner: %w", err)
	}
	list, err := s.Client.MemberList(ctx)
	if err != nil {
		return 0, fmt.Errorf("listing members: %w", err)
	}
	for _, m := range list.Members {
		for _, u := range m.PeerURLs {
			if u != peerURL {
				continue
			}
			if m.Name != "" && m.Name != name {
				return 0, refuse("member %s already has the address %s", m.Name, peerURL)
			}
			return m.ID, nil
		}
	}
	return 0, fmt.Errorf("etcd says %s is taken, but no member has it", peerURL)
}

// answer collects what a joining node needs to know of the cluster. The
// owner is this member's own, fixed when it bootstrapped or joined: the
// cluster keeps no owner record in etcd that a member could rewrite; the
// CRL is the one this member put in force, not etcd's, which a member
// could have written without the owner's word (consensus.Consensus puts
// only a CRL that goes with the owner's revocations in force).
func (s *Server) answer(ctx context.Context, ca *pki.CA) (*joinpb.JoinResponse, error) {
	resp, err := s.Client.Get(ctx, keyspace.Cluster)
	if err != nil {
		return nil, fmt.Errorf("reading the cluster's name: %w", err)
	}
	crl, err := os.ReadFile(s.PKI.CRL())
	if err != nil {
		return nil, fmt.Errorf("reading the CRL in force: %w", err)
	}
	out := &joinpb.JoinResponse{CaCertificate: ca.Cert.Raw, Crl: crl}
	if len(resp.Kvs) == 1 {
		out.ClusterName = string(resp.Kvs[0].Value)
	}
	owner, err := s.PKI.LoadOwner()
	if err != nil {
		return nil, fmt.Errorf("this member's owner certificate: %w", err)
	}
	if owner != nil {
		out.OwnerCertificate = owner.Raw
	}
	list, err := s.Client.MemberList(ctx)
	if err != nil {
		return nil, fmt.Errorf("listing members: %w", err)
	}
	for _, m := range list.Members {
		out.Members = append(out.Members, &joinpb.Member{Name: m.Name, PeerUrls: m.PeerURLs, Id: m.ID, IsLearner: m.IsLearner})
	}
	return out, nil
}
