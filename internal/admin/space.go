package admin

import (
	"context"
	"encoding/json"
	"fmt"
	"strings"
	"time"

	clientv3 "go.etcd.io/etcd/client/v3"

	"github.com/borough-os/borough/internal/keyspace"
)

// SpaceReports reads what each member last said of its space, by node
// name (space.Keeper writes them).
func SpaceReports(ctx context.Context, c *clientv3.Client) (map[string]keyspace.SpaceReport, error) {
	resp, err := c.Get(ctx, keyspace.SpaceReports, clientv3.WithPrefix())
	if err != nil {
		return nil, fmt.Errorf("reading the members' space reports: %w", err)
	}
	out := map[string]keyspace.SpaceReport{}
	for _, kv := range resp.Kvs {
		var r keyspace.SpaceReport
		if err := json.Unmarshal(kv.Value, &r); err != nil {
			return nil, fmt.Errorf("the space report at %s: %w", kv.Key, err)
		}
		out[strings.TrimPrefix(string(kv.Key), keyspace.SpaceReports)] = r
	}
	return out, nil
}

// RequestDefrag asks every member to defragment its database now (each
// in its turn, the leader last), and returns the request's revision.
func RequestDefrag(ctx context.Context, c *clientv3.Client) (int64, error) {
	resp, err := c.Put(ctx, keyspace.DefragRequest, time.Now().UTC().Format(time.RFC3339))
	if err != nil {
		return 0, fmt.Errorf("asking the members to defragment: %w", err)
	}
	return resp.Header.Revision, nil
}

// AwaitDefrag waits until every member of the cluster has answered the
// defragmentation request of revision rev, calling each with a member's
// report as it answers, and fails when ctx ends first, naming those that
// have not.
func AwaitDefrag(ctx context.Context, c *clientv3.Client, rev int64, each func(name string, r keyspace.SpaceReport)) error {
	done := map[string]bool{}
	for {
		members, err := c.MemberList(ctx)
		if err != nil {
			return fmt.Errorf("the cluster's members: %w", err)
		}
		reports, err := SpaceReports(ctx, c)
		if err != nil {
			return err
		}
		var waiting []string
		for _, m := range members.Members {
			r, ok := reports[m.Name]
			switch {
			case ok && r.Request >= rev && !done[m.Name]:
				done[m.Name] = true
				each(m.Name, r)
			case !ok || r.Request < rev:
				waiting = append(waiting, m.Name)
			}
		}
		if len(waiting) == 0 {
			return nil
		}
		select {
		case <-ctx.Done():
			return fmt.Errorf("not defragmented yet: %s (%w)", strings.Join(waiting, ", "), ctx.Err())
		case <-time.After(time.Second):
		}
	}
}
