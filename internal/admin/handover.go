package admin

import (
	"context"
	"crypto/tls"
	"errors"
	"fmt"
	"strconv"
	"strings"
	"time"

	"go.etcd.io/etcd/api/v3/mvccpb"
	clientv3 "go.etcd.io/etcd/client/v3"

	"github.com/borough-os/borough/internal/authority"
	"github.com/borough-os/borough/internal/keyspace"
	"github.com/borough-os/borough/internal/pki"
	"github.com/borough-os/borough/internal/ticket"
	"github.com/borough-os/borough/proto/authoritypb"
)

// HandOverResult says what HandOver did.
type HandOverResult struct {
	// Number is the hand-over's number in the cluster.
	Number uint64
	// Admitted are the nodes whose admissions the next owner signed;
	// NotAdmitted the nodes it could not, and why.
	Admitted    []string
	NotAdmitted []Admitted
	// CRL is the CRL that carries the owner's revocations signed again by
	// the next owner; nil for a cluster whose owner never removed a node.
	CRL []byte
}

// HandOver hands the cluster over from owner to next, both a certificate
// and its key, in one transaction that fails if the cluster changed
// meanwhile: a succession statement owner signs (authority.
// SignSuccession), which every node that trusts owner takes, the
// admission of every node signed again by next (the nodes' claims stand;
// ticket.HandOverAdmission) and, if owner removed nodes, a CRL that
// carries those revocations signed by next. Before, it makes next an etcd
// root user by its common name, for the client port to know next once
// the nodes trust it. Tickets owner minted and nobody used are void after
// it: their configs name owner, and the cluster's members name next.
// remembered is the last CRL the owner's tool made for the cluster (nil
// if none).
func HandOver(ctx context.Context, c *clientv3.Client, owner, next tls.Certificate, remembered []byte) (HandOverResult, error) {
	var err error
	if owner, err = withLeaf(owner); err != nil {
		return HandOverResult{}, err
	}
	if next, err = withLeaf(next); err != nil {
		return HandOverResult{}, fmt.Errorf("the next owner: %w", err)
	}
	switch {
	case owner.Leaf == nil || next.Leaf == nil:
		return HandOverResult{}, errors.New("a hand-over takes the owner's certificate and the next owner's")
	case owner.Leaf.Equal(next.Leaf):
		return HandOverResult{}, fmt.Errorf("the next owner is the owner (%s)", pki.Fingerprint(owner.Leaf))
	}
	if err := keyspace.RootUser(ctx, c, next.Leaf.Subject.CommonName); err != nil {
		return HandOverResult{}, fmt.Errorf("the next owner: %w", err)
	}
	resp, err := c.Txn(ctx).Then(
		clientv3.OpGet(keyspace.Cluster), clientv3.OpGet(keyspace.Nodes, clientv3.WithPrefix()),
		clientv3.OpGet(keyspace.CRL), clientv3.OpGet(keyspace.Successions, clientv3.WithPrefix(), clientv3.WithKeysOnly()),
	).Commit()
	if err != nil {
		return HandOverResult{}, fmt.Errorf("reading the cluster: %w", err)
	}
	cluster := string(keyspace.Value(resp, 0))
	h := HandOverResult{Number: nextSuccession(resp.Responses[3].GetResponseRange().Kvs)}
	cmps := []clientv3.Cmp{clientv3.Compare(clientv3.CreateRevision(keyspace.SuccessionKey(h.Number)), "=", 0)}
	ops, err := h.admissions(resp.Responses[1].GetResponseRange().Kvs, owner, next, cluster, &cmps)
	if err != nil {
		return h, err
	}
	if crlKV := keyspace.KV(resp, 2); crlKV != nil {
		if h.CRL, err = handOverCRL(ctx, c, crlKV.Value, remembered, owner, next, cluster); err != nil {
			return h, err
		}
		cmps = append(cmps, clientv3.Compare(clientv3.ModRevision(keyspace.CRL), "=", crlKV.ModRevision))
		if h.CRL != nil {
			ops = append(ops, clientv3.OpPut(keyspace.CRL, string(h.CRL)))
		}
	}
	key, err := ownerSigner(owner)
	if err != nil {
		return h, err
	}
	statement, err := authority.SignSuccession(owner.Leaf, key, cluster, h.Number, next.Leaf)
	if err != nil {
		return h, err
	}
	ops = append(ops, clientv3.OpPut(keyspace.SuccessionKey(h.Number), string(statement)))
	put, err := c.Txn(ctx).If(cmps...).Then(ops...).Commit()
	if err != nil {
		return h, fmt.Errorf("storing the hand-over: %w", err)
	}
	if !put.Succeeded {
		return h, errors.New("the cluster changed while it was being handed over; try again")
	}
	return h, nil
}

// nextSuccession is the number after the highest of the hand-overs kvs
// (keyspace.SuccessionKey) hold.
func nextSuccession(kvs []*mvccpb.KeyValue) uint64 {
	var last uint64
	for _, kv := range kvs {
		if n, err := strconv.ParseUint(strings.TrimPrefix(string(kv.Key), keyspace.Successions), 10, 64); err == nil {
			last = max(last, n)
		}
	}
	return last + 1
}

// admissions are the puts that give each node in kvs (keyspace.Nodes) an
// admission by next, and the comparisons that they rest on, added to
// cmps; the nodes it gives none are h.NotAdmitted.
func (h *HandOverResult) admissions(kvs []*mvccpb.KeyValue, owner, next tls.Certificate, cluster string, cmps *[]clientv3.Cmp) ([]clientv3.Op, error) {
	key, err := ownerSigner(next)
	if err != nil {
		return nil, fmt.Errorf("the next owner: %w", err)
	}
	sign := func(t *authoritypb.Ticket) ([]byte, error) {
		return authority.Sign(next.Leaf, key, authority.KindTicket, t)
	}
	var ops []clientv3.Op
	for _, kv := range kvs {
		name := strings.TrimPrefix(string(kv.Key), keyspace.Nodes)
		rec, err := keyspace.ParseNodeRecord(kv.Value)
		if err != nil {
			return nil, fmt.Errorf("the record of node %s: %w", name, err)
		}
		if rec.Removed {
			continue
		}
		if rec.Admission, err = ticket.HandOverAdmission(rec.Admission, owner.Leaf, cluster, name, sign); err != nil {
			h.NotAdmitted = append(h.NotAdmitted, Admitted{Node: name, Why: err.Error()})
			continue
		}
		b, err := rec.Marshal()
		if err != nil {
			return nil, err
		}
		ops = append(ops, clientv3.OpPut(string(kv.Key), string(b)))
		*cmps = append(*cmps, clientv3.Compare(clientv3.ModRevision(string(kv.Key)), "=", kv.ModRevision))
		h.Admitted = append(h.Admitted, name)
	}
	return ops, nil
}

// handOverCRL is the CRL that follows etcd's (der) with the owner's
// revocations signed again by next, numbered one higher; nil if owner
// revoked nothing.
func handOverCRL(ctx context.Context, c *clientv3.Client, der, remembered []byte, owner, next tls.Certificate, cluster string) ([]byte, error) {
	ca, err := keyspace.ReadCA(ctx, c)
	if err != nil {
		return nil, err
	}
	current, mine, err := parseCRLs(ca.Cert, der, remembered)
	if err != nil {
		return nil, err
	}
	base, prev, err := ownersLast(current, mine, owner.Leaf)
	if err != nil || prev == nil {
		return nil, err
	}
	number, revoked := pki.Next(base, nil)
	stmt := &authoritypb.Revocations{Cluster: cluster, Number: uint64(number), Nodes: prev.GetNodes(), Serials: pki.Hex(revoked)}
	key, err := ownerSigner(next)
	if err != nil {
		return nil, err
	}
	return authority.RevocationsCRL(ca, number, revoked, next.Leaf, key, stmt, time.Now())
}
