package consensus

import (
	"context"
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"testing"
	"time"

	pb "go.etcd.io/etcd/api/v3/etcdserverpb"
	"go.etcd.io/etcd/api/v3/v3rpc/rpctypes"
	clientv3 "go.etcd.io/etcd/client/v3"
	"golang.org/x/sys/unix"

	"github.com/borough-os/borough/internal/poll"
	"github.com/borough-os/borough/internal/space"
)

// TestSpace runs a real one-member etcd whose volume counts as 400 MiB
// and writes it full: etcd's quota is the budget's, writes are refused
// with its space alarm while reads and watches go on, and once the keys
// are deleted the keeper compacts, defragments and clears the alarm, and
// writes come back with nobody's help.
func TestSpace(t *testing.T) {
	tc := newTestCA(t)
	ctx, cancel := context.WithTimeout(context.Background(), 3*time.Minute)
	defer cancel()
	cfg := tc.member("n1", "127.0.0.14", ModeNew)
	cfg.VolumeSize = 400 << 20
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
	full, err := space.Read(ctx, c.Client)
	if err != nil || !slices.Equal(full.Alarms, []string{pb.AlarmType_NOSPACE.String()}) {
		t.Fatalf("alarms of a full member: %+v, %v", full, err)
	}
	if full.Quota != b.Quota || full.DB < b.Quota-2<<20 || full.InUse <= 0 || full.InUse > full.DB {
		t.Errorf("a full member's database is %+v, its quota %d", full, b.Quota)
	}

	if _, err := c.Client.Delete(ctx, "fill/", clientv3.WithPrefix()); err != nil {
		t.Fatalf("deleting from a full member: %v", err)
	}
	awaitTrue(t, 2*time.Minute, "writes back after the keys were deleted", func() bool {
		_, err := c.Client.Put(ctx, "after", "x")
		return err == nil
	})
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

// TestVolumeFull fills a member's data volume (a real tmpfs) by someone
// else's doing, not etcd's: the keeper raises the member's space alarm,
// so writes are refused while reads go on and the member keeps running,
// deletes the running half of the ballast for etcd to keep its room (the
// other half waits for a start), and once the volume has room again
// clears the alarm and puts the ballast back by itself.
func TestVolumeFull(t *testing.T) {
	if os.Geteuid() != 0 {
		t.Skip("the data volume is a tmpfs of its own, which only root mounts")
	}
	tc := newTestCA(t)
	vol := filepath.Join(tc.dir, "n1")
	if err := os.MkdirAll(vol, 0o700); err != nil {
		t.Fatal(err)
	}
	if err := unix.Mount("tmpfs", vol, "tmpfs", 0, "size=600m"); err != nil {
		t.Fatalf("mounting a tmpfs as the data volume: %v", err)
	}
	t.Cleanup(func() { unix.Unmount(vol, unix.MNT_DETACH) })
	ctx, cancel := context.WithTimeout(context.Background(), 3*time.Minute)
	defer cancel()
	cfg := tc.member("n1", "127.0.0.15", ModeNew)
	cfg.VolumeSize = 0
	c, done, _ := run(t, ctx, cfg)
	b := c.Budget()
	if b.Volume != 600<<20 {
		t.Fatalf("the budget of a 600 MiB volume counts %d MiB", b.Volume>>20)
	}
	awaitTrue(t, time.Minute, "the keeper's ballast on the volume", func() bool {
		_, err := os.Stat(cfg.ballast())
		return err == nil
	})
	if _, err := c.Client.Put(ctx, "before", "x"); err != nil {
		t.Fatal(err)
	}

	hog := filepath.Join(vol, "someone-else's")
	_, free, err := space.Usage(vol)
	if err != nil {
		t.Fatal(err)
	}
	fill(t, hog, free-b.Reserve()/4)
	awaitTrue(t, time.Minute, "writes refused on a full volume", func() bool {
		_, err := c.Client.Put(ctx, "during", "x")
		return errors.Is(rpctypes.Error(err), rpctypes.ErrNoSpace)
	})
	if got, err := c.Client.Get(ctx, "before"); err != nil || len(got.Kvs) != 1 {
		t.Fatalf("reading from a member whose volume is full: %v, %v", got, err)
	}
	if _, err := os.Stat(cfg.ballast()); !errors.Is(err, os.ErrNotExist) {
		t.Errorf("the running half of a full volume's ballast is still there: %v", err)
	}
	if _, err := os.Stat(cfg.startBallast()); err != nil {
		t.Errorf("the half of the ballast kept for a start: %v", err)
	}

	if err := os.Remove(hog); err != nil {
		t.Fatal(err)
	}
	awaitTrue(t, time.Minute, "writes back once the volume has room", func() bool {
		_, err := c.Client.Put(ctx, "after", "x")
		return err == nil
	})
	awaitTrue(t, time.Minute, "the ballast back once the volume has room", func() bool {
		_, err := os.Stat(cfg.ballast())
		return err == nil
	})
	for _, said := range []string{"etcd's space alarm: the cluster refuses writes", "half its ballast is deleted", "etcd's space alarm cleared"} {
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

// fill makes a file of size bytes at path, its blocks allocated.
func fill(t *testing.T, path string, size int64) {
	t.Helper()
	f, err := os.Create(path)
	if err != nil {
		t.Fatal(err)
	}
	defer f.Close()
	if err := unix.Fallocate(int(f.Fd()), 0, 0, size); err != nil {
		t.Fatalf("filling the volume with %d MiB: %v", size>>20, err)
	}
}

// awaitTrue polls f every half second until it holds, failing the test
// with what it waited for if timeout passes first.
func awaitTrue(t *testing.T, timeout time.Duration, what string, f func() bool) {
	t.Helper()
	if poll.Until(t.Context(), timeout, 500*time.Millisecond, poll.True(f)) != nil {
		t.Fatalf("still waiting after %v for %s", timeout, what)
	}
}
