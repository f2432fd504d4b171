//go:build boot

package boottest

import (
	"bytes"
	"context"
	"crypto/tls"
	"crypto/x509"
	"encoding/json"
	"fmt"
	"net"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/diskfs/go-diskfs"
	"github.com/diskfs/go-diskfs/partition/gpt"
	clientv3 "go.etcd.io/etcd/client/v3"
	"go.uber.org/zap"

	"github.com/borough-os/borough/internal/initramfs"
	"github.com/borough-os/borough/internal/partition"
	"github.com/borough-os/borough/internal/pki"
	"github.com/borough-os/borough/internal/storage"
	"github.com/borough-os/borough/qemu"
	"github.com/borough-os/borough/qemu/multinode"
)

// floor is plain etcd, a member per VM, in VMs like a Borough cluster's
// (qemu/multinode): the same kernel, memory, virtual CPU, virtio disk of
// the data partition's size, formatted alike, and a LAN on a hub of its
// own. Each member runs etcd of the version Borough embeds, embedded in
// boottest/etcdfloor and logging as a member's does, with mutual TLS on
// both ports and gRPC alone on the client port (its HTTP on the loopback)
// as Borough's members have, and etcd's defaults for the rest. Serving gRPC on a port of its
// own is etcd's advice for production, not one of Borough's layers, so
// the floor has it too: what it measures is the layers' cost
// (docs/decisions.md, "gRPC on a port of its own").
type floor struct {
	hub *qemu.Hub
	VMs []*qemu.VM
	// Endpoints are the members' client ports, forwarded to the host.
	Endpoints []string
	// Env is etcdctl's environment for every member.
	Env map[string]string
	// Etcd is the binary the members run, etcd in etcdfloor; GDB their
	// gdbstub sockets (qemu.Options.GDB), for guestprof.
	Etcd string
	GDB  []string
	tls  *tls.Config
	// opts start each member's VM again (Restart).
	opts []qemu.Options
}

// userAddr is the address QEMU's user network forwards the host's ports
// to.
const userAddr = "10.0.2.15/24"

// startFloor boots n members of plain etcd, each with memoryMiB and a
// data disk of dataSize bytes, params on their kernel command line, and
// returns once a write through each member is accepted.
func startFloor(t testing.TB, n, memoryMiB int, dataSize int64, params ...string) *floor {
	t.Helper()
	dir := t.TempDir()
	hub, err := qemu.StartHub(filepath.Join(dir, "lan.sock"))
	if err != nil {
		t.Fatal(err)
	}
	f := &floor{hub: hub}
	t.Cleanup(f.Kill)
	initramfs, etcd := floorInitramfs(t)
	f.Etcd = etcd
	boot := bootBinary(t, initramfs, params...)
	ca, err := pki.NewCA("floor", time.Now())
	if err != nil {
		t.Fatal(err)
	}
	f.client(t, ca, dir)
	var cluster []string
	for i := range n {
		cluster = append(cluster, fmt.Sprintf("floor%d=https://%s:2380", i+1, multinode.LANAddr(i)))
	}
	for i := range n {
		port := freePort(t)
		vmDir := filepath.Join(dir, fmt.Sprintf("floor%d", i+1))
		cfg := floorConfig(t, ca, i, strings.Join(cluster, ","))
		opts := qemu.Options{
			Image: writeImage(t, boot, nil), StateDir: filepath.Join(vmDir, "vm"), MemoryMiB: memoryMiB,
			OtherDisks: []string{dataDisk(t, vmDir, dataSize)}, FwCfg: writeJSON(t, filepath.Join(vmDir, "floor.json"), cfg),
			Forwards: []qemu.Forward{{Host: port, Guest: 2379}}, LAN: &qemu.LAN{Hub: hub.Path(), MAC: multinode.MAC(i)},
			GDB: filepath.Join(vmDir, "gdb.sock"),
		}
		f.GDB, f.opts = append(f.GDB, opts.GDB), append(f.opts, opts)
		vm, err := qemu.Start(context.Background(), opts)
		if err != nil {
			t.Fatal(err)
		}
		f.VMs = append(f.VMs, vm)
		f.Endpoints = append(f.Endpoints, net.JoinHostPort("127.0.0.1", fmt.Sprint(port)))
	}
	f.Env["ETCDCTL_ENDPOINTS"] = "https://" + strings.Join(f.Endpoints, ",https://")
	f.awaitWrites(t)
	return f
}

// client makes the host's client certificate and etcdctl's environment.
func (f *floor) client(t testing.TB, ca *pki.CA, dir string) {
	t.Helper()
	c, err := ca.Issue("bench", nil, nil, time.Now())
	if err != nil {
		t.Fatal(err)
	}
	key, err := pki.KeyPEM(c.Key)
	if err != nil {
		t.Fatal(err)
	}
	kp, err := tls.X509KeyPair(pki.CertPEM(c.Cert), key)
	if err != nil {
		t.Fatal(err)
	}
	roots := x509.NewCertPool()
	roots.AddCert(ca.Cert)
	f.tls = &tls.Config{RootCAs: roots, Certificates: []tls.Certificate{kp}}
	f.Env = map[string]string{
		"ETCDCTL_CACERT": filepath.Join(dir, "ca.pem"),
		"ETCDCTL_CERT":   filepath.Join(dir, "client.pem"),
		"ETCDCTL_KEY":    filepath.Join(dir, "client-key.pem"),
	}
	for path, b := range map[string][]byte{f.Env["ETCDCTL_CACERT"]: pki.CertPEM(ca.Cert),
		f.Env["ETCDCTL_CERT"]: pki.CertPEM(c.Cert), f.Env["ETCDCTL_KEY"]: key} {
		if err := os.WriteFile(path, b, 0o600); err != nil {
			t.Fatal(err)
		}
	}
}

// Restart powers member i on again, with its disks as they are, once its
// VM is off (Kill).
func (f *floor) Restart(t testing.TB, i int) {
	t.Helper()
	vm, err := qemu.Start(context.Background(), f.opts[i])
	if err != nil {
		t.Fatal(err)
	}
	f.VMs[i] = vm
}

// Dial connects to one member, as load.Dial.
func (f *floor) Dial(endpoint string) (*clientv3.Client, error) { return f.dial(endpoint) }

// Client connects to every member.
func (f *floor) Client() (*clientv3.Client, error) { return f.dial(f.Endpoints...) }

func (f *floor) dial(endpoints ...string) (*clientv3.Client, error) {
	var urls []string
	for _, ep := range endpoints {
		urls = append(urls, "https://"+ep)
	}
	// Failures come back as errors; the client's own retry log would
	// only repeat them on stderr.
	return clientv3.New(clientv3.Config{Endpoints: urls, TLS: f.tls, DialTimeout: 10 * time.Second, Logger: zap.NewNop()})
}

// awaitWrites waits until a put through each member is accepted.
func (f *floor) awaitWrites(t testing.TB) {
	t.Helper()
	for i, ep := range f.Endpoints {
		c, err := f.Dial(ep)
		if err != nil {
			t.Fatal(err)
		}
		err = waitUntil(2*time.Minute, func() error {
			ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
			defer cancel()
			_, err := c.Put(ctx, "floor-up", ep)
			return err
		})
		c.Close()
		if err != nil {
			t.Fatalf("floor member %d accepted no write: %v\n%s", i+1, err, f.VMs[i].Tail(30))
		}
	}
}

// Kill powers every member off at once.
func (f *floor) Kill() {
	for _, vm := range f.VMs {
		vm.Kill()
	}
	f.hub.Close()
}

// floorConfig is member i's etcdfloor configuration.
func floorConfig(t testing.TB, ca *pki.CA, i int, cluster string) map[string]any {
	t.Helper()
	addr := multinode.LANAddr(i)
	cert, err := ca.Issue(fmt.Sprintf("floor%d", i+1), []net.IP{addr.AsSlice(), net.IPv4(127, 0, 0, 1), net.IPv4(10, 0, 2, 15)}, nil, time.Now())
	if err != nil {
		t.Fatal(err)
	}
	key, err := pki.KeyPEM(cert.Key)
	if err != nil {
		t.Fatal(err)
	}
	const etc = "/etc/etcd/"
	tlsFiles := map[string]any{"cert-file": etc + "node.pem", "key-file": etc + "node-key.pem", "trusted-ca-file": etc + "ca.pem", "client-cert-auth": true}
	return map[string]any{
		"addresses": map[string]string{qemu.UserMAC: userAddr, multinode.MAC(i): addr.String() + "/24"},
		"files": map[string]string{etc + "ca.pem": string(pki.CertPEM(ca.Cert)),
			etc + "node.pem": string(pki.CertPEM(cert.Cert)), etc + "node-key.pem": string(key)},
		"etcd": map[string]any{
			"name": fmt.Sprintf("floor%d", i+1), "data-dir": "/data/etcd",
			"listen-client-urls": "https://0.0.0.0:2379", "advertise-client-urls": "https://" + addr.String() + ":2379",
			"listen-client-http-urls": "https://127.0.0.1:2381",
			"listen-peer-urls":        "https://0.0.0.0:2380", "initial-advertise-peer-urls": "https://" + addr.String() + ":2380",
			"initial-cluster": cluster, "initial-cluster-token": "floor", "initial-cluster-state": "new",
			"client-transport-security": tlsFiles, "peer-transport-security": tlsFiles,
		},
	}
}

func writeJSON(t testing.TB, path string, v any) string {
	t.Helper()
	b, err := json.Marshal(v)
	if err != nil {
		t.Fatal(err)
	}
	if err := os.MkdirAll(filepath.Dir(path), 0o755); err != nil {
		t.Fatal(err)
	}
	if err := os.WriteFile(path, b, 0o600); err != nil {
		t.Fatal(err)
	}
	return path
}

// dataDisk makes a disk of size bytes in dir, formatted as Borough formats
// its data volume.
func dataDisk(t testing.TB, dir string, size int64) string {
	t.Helper()
	path := filepath.Join(dir, "data.img")
	if err := os.MkdirAll(dir, 0o755); err != nil {
		t.Fatal(err)
	}
	if err := os.WriteFile(path, nil, 0o600); err != nil {
		t.Fatal(err)
	}
	if err := os.Truncate(path, size); err != nil {
		t.Fatal(err)
	}
	if out, err := exec.Command("mke2fs", storage.MkfsArgs(path)...).CombinedOutput(); err != nil {
		t.Fatalf("mke2fs %s: %v\n%s", path, err, out)
	}
	return path
}

// grownDataSize is the size img's data partition grows to on a disk of
// disk bytes: the disk less what the image holds besides it.
func grownDataSize(t testing.TB, img string, disk int64) int64 {
	t.Helper()
	fi, err := os.Stat(img)
	if err != nil {
		t.Fatal(err)
	}
	return disk - (fi.Size() - dataPartitionSize(t, img))
}

// dataPartitionSize is the size of the data partition in img's GPT.
func dataPartitionSize(t testing.TB, img string) int64 {
	t.Helper()
	d, err := diskfs.Open(img, diskfs.WithOpenMode(diskfs.ReadOnly))
	if err != nil {
		t.Fatal(err)
	}
	defer d.Close()
	table, err := d.GetPartitionTable()
	if err != nil {
		t.Fatal(err)
	}
	for _, p := range table.(*gpt.Table).Partitions {
		if p.Name == partition.DataName {
			return int64(p.Size)
		}
	}
	t.Fatalf("%s has no partition named %s", img, partition.DataName)
	return 0
}

// floorInitramfs is etcdfloor as init, etcd embedded in it, and its
// binary's path.
func floorInitramfs(t testing.TB) ([]byte, string) {
	t.Helper()
	var buf bytes.Buffer
	floor := goBuild(t, "./etcdfloor", "etcdfloor")
	if err := initramfs.Build(&buf, initramfs.Params{Init: floor}); err != nil {
		t.Fatal(err)
	}
	return buf.Bytes(), floor
}

// goBuild builds a static binary of pkg named name, as build.sh builds
// Borough's.
func goBuild(t testing.TB, pkg, name string) string {
	t.Helper()
	bin := filepath.Join(t.TempDir(), name)
	cmd := exec.Command("go", "build", "-trimpath", "-ldflags=-s -w", "-o", bin, pkg)
	cmd.Env = append(cmd.Environ(), "CGO_ENABLED=0")
	if out, err := cmd.CombinedOutput(); err != nil {
		t.Fatalf("building %s: %v\n%s", pkg, err, out)
	}
	return bin
}
