package follow

import (
	"context"
	"errors"
	"fmt"
	"testing"
	"time"

	"go.etcd.io/etcd/api/v3/v3rpc/rpctypes"
	clientv3 "go.etcd.io/etcd/client/v3"

	"github.com/borough-os/borough/internal/etcdtest"
)

// TestFrom: against a real etcd, From delivers every put from its
// revision on, in order, and returns nil when its context ends; from a
// revision compacted away it says so and names the compaction.
func TestFrom(t *testing.T) {
	c, err := clientv3.New(clientv3.Config{Endpoints: []string{etcdtest.Start(t)}, DialTimeout: 5 * time.Second})
	if err != nil {
		t.Fatal(err)
	}
	defer c.Close()
	ctx := context.Background()
	var revs []int64
	for i := range 5 {
		resp, err := c.Put(ctx, "/f/"+fmt.Sprint(i), fmt.Sprint(i))
		if err != nil {
			t.Fatal(err)
		}
		revs = append(revs, resp.Header.Revision)
	}
	if _, err := c.Compact(ctx, revs[2]); err != nil {
		t.Fatal(err)
	}
	for _, tc := range []struct {
		name          string
		from          int64
		want          []string
		wantCompacted int64
	}{
		{"from a revision kept", revs[3], []string{"3", "4"}, 0},
		{"from a revision compacted away", revs[0], nil, revs[2]},
	} {
		t.Run(tc.name, func(t *testing.T) {
			ctx, cancel := context.WithCancel(ctx)
			defer cancel()
			var got []string
			w := Watch{Client: c, Prefix: "/f/", Each: func(resp clientv3.WatchResponse) {
				for _, ev := range resp.Events {
					got = append(got, string(ev.Kv.Value))
				}
				if len(got) == len(tc.want) {
					cancel()
				}
			}}
			compacted, err := w.From(ctx, tc.from)
			if fmt.Sprint(got) != fmt.Sprint(tc.want) || compacted != tc.wantCompacted ||
				errors.Is(err, rpctypes.ErrCompacted) != (tc.wantCompacted != 0) {
				t.Errorf("From(%d) saw %v, then %d, %v; want %v, then %d", tc.from, got, compacted, err, tc.want, tc.wantCompacted)
			}
		})
	}
}
