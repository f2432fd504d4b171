package admin

import (
	"context"
	"slices"
	"strings"

	"go.etcd.io/etcd/api/v3/etcdserverpb"
	clientv3 "go.etcd.io/etcd/client/v3"

	"github.com/borough-os/borough/internal/keyspace"
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
