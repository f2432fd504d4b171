package consensus

import (
	"context"
	"os"
	"path/filepath"
	"testing"
	"time"
	"unsafe"

	"golang.org/x/sys/unix"
)

// TestRestartReadsLittle restarts a member and counts the pages of its
// database that the restart brought into page cache: the pages bbolt
// reads, not the whole file (with the hole it grows into), as etcd's
// MAP_POPULATE would.
func TestRestartReadsLittle(t *testing.T) {
	tc := newTestCA(t)
	ctx, cancel := context.WithTimeout(context.Background(), 2*time.Minute)
	defer cancel()
	cfg := tc.member("n1", "127.0.0.11", ModeNew)
	c, err := Start(ctx, cfg)
	if err != nil {
		t.Fatal(err)
	}
	if _, err := c.Client.Put(ctx, "k", "v"); err != nil {
		t.Fatal(err)
	}
	c.Close()
	db := filepath.Join(cfg.DataDir, "member", "snap", "db")
	if err := dropCache(db); err != nil {
		t.Fatal(err)
	}

	cfg.Mode = ModeRestart
	if c, err = Start(ctx, cfg); err != nil {
		t.Fatal(err)
	}
	defer c.Close()
	if r, err := c.Client.Get(ctx, "k"); err != nil || len(r.Kvs) != 1 {
		t.Fatalf("get after the restart: %v, %v", r, err)
	}
	resident, total, err := residentPages(db)
	if err != nil {
		t.Fatal(err)
	}
	t.Logf("%s: %d of %d pages in page cache after the restart", db, resident, total)
	if total < 1024 {
		t.Fatalf("the database is %d pages: the test needs bbolt's hole past its data", total)
	}
	if resident > total/8 {
		t.Errorf("the restart read %d of the database's %d pages, want few: the mapping is populated", resident, total)
	}
}

// dropCache writes back and drops path's pages from page cache.
func dropCache(path string) error {
	f, err := os.Open(path)
	if err != nil {
		return err
	}
	defer f.Close()
	if err := f.Sync(); err != nil {
		return err
	}
	return unix.Fadvise(int(f.Fd()), 0, 0, unix.FADV_DONTNEED)
}

// residentPages counts path's pages in page cache (mincore on a new
// mapping of it, which faults nothing in).
func residentPages(path string) (resident, total int, err error) {
	f, err := os.Open(path)
	if err != nil {
		return 0, 0, err
	}
	defer f.Close()
	st, err := f.Stat()
	if err != nil {
		return 0, 0, err
	}
	m, err := unix.Mmap(int(f.Fd()), 0, int(st.Size()), unix.PROT_READ, unix.MAP_SHARED)
	if err != nil {
		return 0, 0, err
	}
	defer unix.Munmap(m)
	vec := make([]byte, (len(m)+os.Getpagesize()-1)/os.Getpagesize())
	// x/sys/unix has no wrapper for mincore.
	_, _, errno := unix.Syscall(unix.SYS_MINCORE, uintptr(unsafe.Pointer(&m[0])), uintptr(len(m)), uintptr(unsafe.Pointer(&vec[0])))
	if errno != 0 {
		return 0, 0, os.NewSyscallError("mincore", errno)
	}
	for _, v := range vec {
		resident += int(v & 1)
	}
	return resident, len(vec), nil
}
