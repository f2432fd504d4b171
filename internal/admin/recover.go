package admin

import (
	"context"
	"fmt"
	"slices"
	"strings"

	"go.etcd.io/etcd/api/v3/etcdserverpb"
	clientv3 "go.etcd.io/etcd/client/v3"

	"github.com/borough-os/borough/internal/keyspace"
	"github.com/borough-os/borough/internal/pki"
)

// LostNodes returns the nodes the cluster's records count in (not
// removed) that are not etcd members: after the owner recovered a cluster
// from one member (its only member, forced), the nodes that were lost,
// which the owner removes, revoking them, before new ones join.
func LostNodes(ctx context.Context, c *clientv3.Client) ([]string, error) {
	list, err := c.MemberList(ctx)
	if err != nil {
		return nil, err
	}
	resp, err := c.Get(ctx, keyspace.Nodes, clientv3.WithPrefix())
	if err != nil {
		return nil, err
	}
	var lost []string
	for _, kv := range resp.Kvs {
		name := strings.TrimPrefix(string(kv.Key), keyspace.Nodes)
		r, err := keyspace.ParseNodeRecord(kv.Value)
		if err != nil {
			return nil, err
		}
		member := slices.ContainsFunc(list.Members, func(m *etcdserverpb.Member) bool { return r.Is(m, name) })
		if !r.Removed && !member {
			lost = append(lost, name)
		}
	}
	return lost, nil
}

// VoidedNodes returns the nodes the cluster's records count out (removed)
// whose certificates its CRL does not all revoke: after a restore, the
// backed-up cluster's nodes, which the restored node voided (it has no
// owner's key to revoke them with), for the owner to revoke.
func VoidedNodes(ctx context.Context, c *clientv3.Client) ([]string, error) {
	ca, err := keyspace.ReadCA(ctx, c)
	if err != nil {
		return nil, err
	}
	resp, err := c.Txn(ctx).Then(clientv3.OpGet(keyspace.CRL), clientv3.OpGet(keyspace.Nodes, clientv3.WithPrefix())).Commit()
	if err != nil {
		return nil, err
	}
	crl, err := pki.ParseCRL(keyspace.Value(resp, 0), ca.Cert)
	if err != nil {
		return nil, fmt.Errorf("the cluster's CRL: %w", err)
	}
	revoked := pki.RevokedSerials(crl)
	var voided []string
	for _, kv := range resp.Responses[1].GetResponseRange().Kvs {
		r, err := keyspace.ParseNodeRecord(kv.Value)
		if err != nil {
			return nil, err
		}
		if r.Removed && slices.ContainsFunc(r.Serials, func(s string) bool { _, ok := slices.BinarySearch(revoked, s); return !ok }) {
			voided = append(voided, strings.TrimPrefix(string(kv.Key), keyspace.Nodes))
		}
	}
	return voided, nil
}
