package cluster

import (
	"bytes"
	"context"
	"crypto"
	"crypto/ecdsa"
	"crypto/elliptic"
	"crypto/rand"
	"crypto/x509"
	"errors"
	"fmt"
	"log/slog"
	"os"
	"time"

	"github.com/borough-os/borough/esp"
	"github.com/borough-os/borough/internal/atomicfile"
	"github.com/borough-os/borough/internal/authority"
	"github.com/borough-os/borough/internal/consensus"
	"github.com/borough-os/borough/internal/enrolment"
	"github.com/borough-os/borough/internal/join"
	"github.com/borough-os/borough/internal/nodestate"
	"github.com/borough-os/borough/internal/pki"
	"github.com/borough-os/borough/internal/ticket"
	"github.com/borough-os/borough/proto/joinpb"
)

// Preflight checks, before the node touches its data partition, that the
// cluster would admit a fresh node with its ticket: a ticket that is
// forged, expired, used, or for a cluster whose endpoints present another
// CA, fails the node with nothing written. A node that already began its
// join (its ESP record says so, or is damaged) has nothing to check. A
// node whose ESP record says the cluster removed it fails here, before
// it asks its peers for its unlock key. Unreachable
// endpoints are retried until ctx ends. It reads the ESP's record before
// the ESP's ledger can check it (nothing is unsealed yet): what it finds
// there only ever stops the node or skips a check the later boot steps
// make with the checked record, never grants anything.
func Preflight(ctx context.Context, log *slog.Logger, espRoot string, e *enrolment.Enrolment) error {
	rec, err := nodestate.ReadRecord(esp.NodeState.In(espRoot))
	switch {
	case errors.Is(err, nodestate.ErrDamaged):
		// The data volume's record will decide (decide).
		return nil
	case err != nil:
		return err
	case rec != nil && rec.Phase == nodestate.PhaseRemoved:
		// Its peers would not give it its unlock key anyway.
		return &consensus.RemovedError{Cluster: rec.Cluster}
	case rec != nil || e.Ticket == nil:
		return nil
	}
	log.Info("checking the join ticket", "cluster", e.Ticket.GetClusterName(), "endpoints", e.Ticket.GetJoinEndpoints())
	return retry(ctx, log, "checking the join ticket", refused, func() error {
		return join.Check(ctx, e.Ticket)
	})
}

func refused(err error) bool {
	var r *join.Refusal
	return errors.As(err, &r)
}

// join joins the cluster of the enrolment's ticket. prev is the record of
// a join that did not finish, which it finishes with the same name and
// key, from what the last attempt left in etcd's data directory
// (unfinished).
//
// The record names the etcd member the cluster admitted before etcd first
// starts: it is written in one batch with the certificate the cluster
// issued, so that a power cut anywhere after the admission leaves a
// record that says whose write-ahead log etcd's directory may hold.
func (mg *Manager) join(ctx context.Context, prev *nodestate.Record) (*consensus.Consensus, *nodestate.Record, error) {
	t := mg.cfg.Enrolment.Ticket
	rec := prev
	var dir consensus.DataDir
	if rec == nil {
		rec = &nodestate.Record{Phase: nodestate.PhaseJoining, Cluster: t.GetClusterName(), Node: newName()}
		if err := mg.writeRecords(rec); err != nil {
			return nil, nil, err
		}
	} else {
		mg.log.Warn("a previous join did not finish; finishing it", "node", rec.Node, "member", rec.MemberID)
		var c *consensus.Consensus
		var err error
		if c, dir, err = mg.unfinished(ctx, rec); c != nil || err != nil {
			return c, rec, err
		}
	}
	key, err := mg.nodeKey()
	if err != nil {
		return nil, nil, err
	}
	mg.pause(JoinRecorded)
	// What etcd wrote of the admitted member, if anything, is not usable
	// (unfinished): it needs a new member (JoinRequest.replace_member).
	replace := rec.MemberID != "" && dir.Exists
	resp, err := mg.askToJoin(ctx, rec, key, replace)
	if err != nil {
		return nil, nil, err
	}
	if dir.Exists {
		mg.log.Warn("removing what the unfinished join left in etcd's data directory",
			"wal", dir.WAL, "database", dir.DB, "member", rec.MemberID)
		if err := atomicfile.RemoveAll(mg.etcdDir()); err != nil {
			return nil, nil, fmt.Errorf("removing etcd's data directory: %w", err)
		}
	}
	if err := mg.writeJoinPKI(resp, key, rec); err != nil {
		return nil, nil, err
	}
	mg.pause(JoinAdmitted)
	cfg := mg.consensusConfig(rec.Node, rec.Cluster, consensus.ModeJoin)
	for _, m := range resp.GetMembers() {
		cfg.Peers = append(cfg.Peers, consensus.Peer{Name: m.GetName(), PeerURLs: m.GetPeerUrls()})
	}
	mg.log.Info("admitted as a learner; starting etcd", "cluster", rec.Cluster, "member", rec.MemberID)
	c, err := consensus.Start(ctx, cfg)
	if err != nil {
		return nil, nil, err
	}
	mg.pause(JoinStarted)
	if err := mg.recordMember(rec, c); err != nil {
		c.Close()
		return nil, nil, err
	}
	mg.log.Info("joined cluster", "cluster", rec.Cluster, "id", rec.ClusterID, "ca_fingerprint", mg.caFingerprint())
	return c, rec, nil
}

// unfinished reads etcd's data directory, which an unfinished join may
// have left, before etcd can start on it. A write-ahead log of the member
// the record names, with a database that lists that member, is its
// state: etcd restarts from it, as on any restart, and the join is done
// (c). A log of
// another member, or one where the record names none, is refused: the
// node cannot tell it is not a voter's, whose log is never removed.
// Anything else is removed once the cluster has admitted the node again
// (join).
func (mg *Manager) unfinished(ctx context.Context, rec *nodestate.Record) (*consensus.Consensus, consensus.DataDir, error) {
	dir, err := consensus.Inspect(mg.etcdDir())
	switch {
	case err != nil:
		return nil, dir, fmt.Errorf("checking etcd's data directory before finishing the join: %w", err)
	case !dir.WAL:
		return nil, dir, nil
	case rec.MemberID == "" || nodestate.HexID(dir.MemberID) != rec.MemberID:
		return nil, dir, fmt.Errorf("etcd's data directory %s holds the log of member %x, "+
			"but the node state record says this node was admitted as member %q: not starting etcd on it",
			mg.etcdDir(), dir.MemberID, rec.MemberID)
	case !dir.DB:
		return nil, dir, nil
	case !dir.KnowsMember:
		mg.log.Warn("etcd's database does not list this member, which its log names: a power cut lost what the "+
			"database had not flushed; joining again as a new member", "member", rec.MemberID)
		return nil, dir, nil
	}
	mg.log.Info("etcd's data directory holds this member's log; restarting it", "member", rec.MemberID)
	c, err := mg.startMember(ctx, rec)
	if err != nil {
		return nil, dir, err
	}
	if err := mg.recordMember(rec, c); err != nil {
		c.Close()
		return nil, dir, err
	}
	mg.log.Info("joined cluster", "cluster", rec.Cluster, "id", rec.ClusterID, "ca_fingerprint", mg.caFingerprint())
	return c, dir, nil
}

// askToJoin asks the cluster to admit the node with its key, until it
// answers or refuses, replacing the member admitted before if replace is
// set, and records the member admitted in rec. A node the cluster removed
// records that it was, once the refusal shows the owner's word for it
// (join.Refusal.CheckRemoved); without it the join fails, and the next
// boot asks again.
func (mg *Manager) askToJoin(ctx context.Context, rec *nodestate.Record, key crypto.Signer, replace bool) (*joinpb.JoinResponse, error) {
	t := mg.cfg.Enrolment.Ticket
	csr, err := pki.NewCSR(rec.Node, mg.ips(), key)
	if err != nil {
		return nil, err
	}
	var resp *joinpb.JoinResponse
	err = retry(ctx, mg.log, "asking to join", refused, func() (err error) {
		resp, err = join.Join(ctx, t, csr, mg.cfg.IP, replace)
		return err
	})
	var refusal *join.Refusal
	if errors.As(err, &refusal) && refusal.Removed {
		if cerr := refusal.CheckRemoved(mg.cfg.Enrolment.Owner, t.GetClusterName(), rec.Node); cerr != nil {
			mg.log.Warn("a member refused the join as a removed node's, without the owner's word for it", "err", cerr)
			return nil, fmt.Errorf("joining cluster %s: %w", t.GetClusterName(), err)
		}
		mg.log.Warn("the cluster refused the join", "reason", refusal.Reason)
		return nil, mg.recordRemoval(rec)
	}
	if err != nil {
		return nil, fmt.Errorf("joining cluster %s: %w", t.GetClusterName(), err)
	}
	id := nodestate.HexID(resp.GetMemberId())
	if rec.MemberID != "" && rec.MemberID != id {
		mg.log.Info("admitted again as a new member", "member", id, "was", rec.MemberID)
	}
	rec.MemberID = id
	return resp, nil
}

// nodeKey returns the node's private key from the data volume, making it
// on the first try: a join that is tried again must use the same key,
// which its ticket was claimed for.
func (mg *Manager) nodeKey() (crypto.Signer, error) {
	path := mg.pkiFiles().Key()
	b, err := os.ReadFile(path)
	if err == nil {
		return pki.ParseKeyPEM(b)
	}
	if !errors.Is(err, os.ErrNotExist) {
		return nil, err
	}
	key, err := ecdsa.GenerateKey(elliptic.P256(), rand.Reader)
	if err != nil {
		return nil, err
	}
	pemKey, err := pki.KeyPEM(key)
	if err != nil {
		return nil, err
	}
	if err := os.MkdirAll(mg.pkiFiles().Dir, 0o700); err != nil {
		return nil, err
	}
	if err := atomicfile.Write(path, pemKey, 0o600); err != nil {
		return nil, fmt.Errorf("writing the node key: %w", err)
	}
	return key, nil
}

// writeJoinPKI writes the PKI files from the cluster's answer, in one
// batch with the data volume's record rec, which names the member the
// cluster admitted.
func (mg *Manager) writeJoinPKI(resp *joinpb.JoinResponse, key crypto.Signer, rec *nodestate.Record) error {
	ca, err := x509.ParseCertificate(resp.GetCaCertificate())
	if err != nil {
		return err
	}
	cert, err := x509.ParseCertificate(resp.GetCertificate())
	if err != nil {
		return err
	}
	b := consensus.Bundle{CA: ca, Cert: cert, Key: key, CRL: resp.GetCrl()}
	if b.Owner, err = mg.joinOwner(resp); err != nil {
		return err
	}
	if err := checkJoinCRL(b.CRL, ca, b.Owner); err != nil {
		return fmt.Errorf("the cluster's CRL: %w", err)
	}
	if b.Owner != nil {
		if err := ticket.CheckAdmission(resp.GetAdmission(), b.Owner, rec.Cluster, rec.Node, pki.KeyHash(cert)); err != nil {
			return fmt.Errorf("the cluster's answer: %w", err)
		}
		b.Admission = resp.GetAdmission()
	}
	record, err := nodestate.RecordFile(mg.dataRecord(), rec)
	if err != nil {
		return err
	}
	return mg.pkiFiles().Write(b, record)
}

// checkJoinCRL checks the CRL the member that admitted the node gave it:
// signed by the cluster's CA and, in a cluster with an owner, one the
// node may put in force with none before it (authority.Follows): a member
// cannot start a joiner off with a CRL that revokes its peers.
func checkJoinCRL(der []byte, ca, owner *x509.Certificate) error {
	crl, err := pki.ParseCRL(der, ca)
	if err != nil || owner == nil {
		return err
	}
	return authority.Follows(crl, nil, owner)
}

// awaitRole waits until the member may say it runs, and returns its role:
// "voter", or "learner" for a learner for good or one the promotion
// policy keeps (the second node of a cluster), saying which.
func (mg *Manager) awaitRole(ctx context.Context, c *consensus.Consensus) (string, error) {
	warned := time.Now()
	for c.IsLearner() {
		if mg.learnerForGood() {
			mg.log.Info("this node joined as a learner for good: it holds the data but never votes")
			return "learner", nil
		}
		if consensus.KeepsLearners(c.Members()) {
			mg.log.Info("this node stays a learner until a third node joins: " +
				"two voters would stop all writes when either one fails")
			return "learner", nil
		}
		if time.Since(warned) > 30*time.Second {
			mg.log.Info("waiting for promotion to voter")
			warned = time.Now()
		}
		select {
		case <-ctx.Done():
			return "", ctx.Err()
		case <-time.After(200 * time.Millisecond):
		}
	}
	return "voter", nil
}

// joinOwner is the owner the node trusts once it joined: the one its
// enrolment config names, which the member that admitted it must name
// too; or, for a config that names none, the member's.
func (mg *Manager) joinOwner(resp *joinpb.JoinResponse) (*x509.Certificate, error) {
	theirs := resp.GetOwnerCertificate()
	ours := mg.cfg.Enrolment.Owner
	if ours == nil {
		if len(theirs) == 0 {
			return nil, nil
		}
		mg.log.Warn("the enrolment config names no owner: trusting the one the cluster names")
		owner, err := x509.ParseCertificate(theirs)
		if err != nil {
			return nil, fmt.Errorf("the cluster's owner certificate: %w", err)
		}
		return owner, nil
	}
	if !bytes.Equal(theirs, ours.Raw) {
		theirFP := "none"
		if c, err := x509.ParseCertificate(theirs); err == nil {
			theirFP = pki.Fingerprint(c)
		}
		return nil, fmt.Errorf("the member that admitted this node names the owner %s, its enrolment config %s: "+
			"refusing a cluster of another owner", theirFP, pki.Fingerprint(ours))
	}
	return ours, nil
}
