package consensus

import (
	"context"
	"errors"
	"fmt"
	"strings"
	"testing"
	"time"

	pb "go.etcd.io/etcd/api/v3/etcdserverpb"
	"go.etcd.io/etcd/api/v3/v3rpc/rpctypes"
	clientv3 "go.etcd.io/etcd/client/v3"

	"github.com/borough-os/borough/internal/space"
)

// TestSpace runs a real one-member etcd whose volume counts as 300 MiB
// and writes it full: etcd's quota is the budget's, writes are refused
// with its space alarm while reads and watches go on, and once the keys
// are deleted the keeper compacts, defragments and clears the alarm, and
// writes come back with nobody's help.
func TestSpace(t *testing.T) {
	tc := newTestCA(t)
	ctx, cancel := context.WithTimeout(context.Background(), 3*time.Minute)
	defer cancel()
	cfg := tc.member("n1", "127.0.0.14", ModeNew)
	cfg.VolumeSize = 300 << 20
	c, done, _ := run(t, ctx, cfg)
	b, err := space.Plan(cfg.VolumeSize)
	if err != nil {
		t.Fatal(err)
	}
	if c.Budget() != b {
		t.Fatalf("the member's budget is %+v, want %+v", c.Budget(), b)
	}
	watch := c.Client.Watch(ctx, "fill/", clientv3.WithPrefix())
	value := strings.Repeat("v", 1<<20)
	var n int
	for ; ; n++ {
		_, err := c.Client.Put(ctx, fmt.Sprintf("fill/%04d", n), value)
		if errors.Is(rpctypes.Error(err), rpctypes.ErrNoSpace) {
			break
		}
		if err != nil {
			t.Fatalf("put %d: %v", n, err)
		}
		if int64(n) > 2*b.Quota>>20 {
			t.Fatalf("%d MiB written and no space alarm, quota %d MiB", n, b.Quota>>20)
		}
	}
	t.Logf("the space alarm after %d puts of 1 MiB (quota %d MiB)", n, b.Quota>>20)
	for range n {
		if ev := <-watch; ev.Err() != nil {
			t.Fatalf("the watch: %v", ev.Err())
		}
	}
	if got, err := c.Client.Get(ctx, "fill/", clientv3.WithPrefix(), clientv3.WithCountOnly()); err != nil || got.Count < int64(n) {
		t.Fatalf("reading a full member: %v keys, %v", got, err)
	}
	alarms, err := c.Client.AlarmList(ctx)
	if err != nil || len(alarms.Alarms) != 1 || alarms.Alarms[0].Alarm != pb.AlarmType_NOSPACE {
		t.Fatalf("alarms of a full member: %v, %v", alarms, err)
	}

	if _, err := c.Client.Delete(ctx, "fill/", clientv3.WithPrefix()); err != nil {
		t.Fatalf("deleting from a full member: %v", err)
	}
	for deadline := time.Now().Add(2 * time.Minute); ; time.Sleep(500 * time.Millisecond) {
		if _, err := c.Client.Put(ctx, "after", "x"); err == nil {
			break
		} else if time.Now().After(deadline) {
			t.Fatalf("writes still refused two minutes after the keys were deleted: %v", err)
		}
	}
	st, err := c.Client.Status(ctx, "")
	if err != nil {
		t.Fatal(err)
	}
	if st.DbSize >= b.Quota/2 {
		t.Errorf("the database is %d MiB after the keeper's defragmentation, want it back under half the quota", st.DbSize>>20)
	}
	for _, said := range []string{"etcd's space alarm is raised", "compacted to the latest revision", "defragmented etcd's database", "etcd's space alarm cleared"} {
		if !strings.Contains(tc.logs.String(), said) {
			t.Errorf("the log does not say %q", said)
		}
	}
	select {
	case err := <-done:
		t.Fatalf("the member stopped: %v", err)
	default:
	}
}
