// Package multinode launches a Borough cluster of N QEMU VMs on one
// machine: rootless, headless, without KVM, and without touching the
// host's network. The borough CLI (`borough qemu cluster`) and the boot
// tests use it.
//
// Each node has its own copy of the disk image, firmware variables and,
// optionally, a TPM, all under the state directory, and two NICs:
//
//   - a NIC on QEMU's user-mode network (DHCP), through which the host
//     reaches the node's client port, forwarded from 127.0.0.1;
//   - a NIC on the cluster LAN, a qemu.Hub on a unix socket, with a
//     static address (10.77.0.N/24) that the node advertises to its
//     peers. The LAN exists only between the VMs.
//
// Launch bootstraps node 1 with the owner's certificate, then, one at a
// time, mints a ticket as the owner and boots the next node with a join
// config, waiting until each says `node running`. Launched again on the
// same state directory, it boots every node at once: they restart into
// their cluster.
package multinode

import (
	"bytes"
	"context"
	"crypto/tls"
	"crypto/x509"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"net"
	"net/netip"
	"os"
	"path/filepath"
	"regexp"
	"slices"
	"strconv"
	"time"

	clientv3 "go.etcd.io/etcd/client/v3"
	"google.golang.org/protobuf/proto"

	"github.com/borough-os/borough/internal/admin"
	"github.com/borough-os/borough/internal/pki"
	"github.com/borough-os/borough/internal/ports"
	"github.com/borough-os/borough/proto/enrolmentpb"
	"github.com/borough-os/borough/qemu"
)

// Console lines the launcher waits for.
const (
	Running = "borough: node running"
)

// RunTimeout bounds a node's boot to `node running`; three TCG VMs on two
// cores are slow.
const RunTimeout = 4 * time.Minute

// Options describe a cluster.
type Options struct {
	// Nodes is how many nodes; at least 1.
	Nodes int
	// Image is the disk image every node starts from (copied).
	Image string
	// DiskSize, if larger than Image, is the size of each node's copy:
	// a disk larger than the image, into which the node grows its data
	// partition at its first boot.
	DiskSize int64
	// StateDir keeps the nodes' disks, firmware variables, TPM state,
	// configs and the LAN socket. Required.
	StateDir string
	// Owner is the owner's identity, whose certificate the cluster
	// trusts.
	Owner tls.Certificate
	// Cluster is the cluster's name; default "borough".
	Cluster string
	// TPM gives every node a TPM (swtpm).
	TPM bool
	// VolatileCache gives every node a disk that loses what it did not
	// flush when its VM is killed (qemu.Options.VolatileCache).
	VolatileCache bool
	// DiskFaults lets a test fail a node's disk (qemu.Options.DiskFaults,
	// VM.FailDisks).
	DiskFaults bool
	// Control gives every node a control port (qemu.Options.Control).
	Control bool
	// GDB gives every node a gdbstub socket (Node.GDB), for
	// guestprof.Record.
	GDB bool
	// MemoryMiB is each VM's memory; default 1024.
	MemoryMiB int
	// ClientPorts are the host ports forwarded to each node's client
	// port; missing ones are picked free.
	ClientPorts []int
	// APIPorts are the host ports forwarded to each node's API, likewise.
	APIPorts []int
	// TestParams, if set, are passed to every boot (see qemu.Options).
	TestParams string
	// Console, if set, receives node i's serial console.
	Console func(i int) io.Writer
	// Logf receives progress.
	Logf func(format string, args ...any)
}

// Cluster is a launched cluster.
type Cluster struct {
	opts  Options
	Hub   *qemu.Hub
	Nodes []*Node
	// Fingerprint is the cluster CA's, CA the CA itself, CAFile its PEM.
	Fingerprint string
	CA          *x509.Certificate
	CAFile      string
	owner       tls.Certificate
}

// Node is one VM of the cluster.
type Node struct {
	// Index counts from 0; Name is the node's, once it ran.
	Index int
	Name  string
	VM    *qemu.VM
	// ClientPort, PeerPort and APIPort are the host's forwarded ports to
	// the node's client, peer and node API ports.
	ClientPort, PeerPort, APIPort int
	LAN                           netip.Addr
	// TestParams are passed to the node's next boots (qemu.Options).
	TestParams string
	// RunningAt is the time from QEMU's start to `node running`, and
	// RunningLine that line.
	RunningAt   time.Duration
	RunningLine string
	opts        qemu.Options
}

// Endpoint is the node's client endpoint on the host.
func (n *Node) Endpoint() string { return net.JoinHostPort("127.0.0.1", strconv.Itoa(n.ClientPort)) }

// MAC is the address of n's NIC on the cluster's LAN (the hub's
// faults name NICs by it).
func (n *Node) MAC() string { return MAC(n.Index) }

// MAC is the LAN address of the NIC of node i (from 0), and LANAddr its
// IP address: the plan a cluster of other VMs on a hub (make bench's
// plain etcd) follows too.
func MAC(i int) string { return fmt.Sprintf("52:54:00:77:00:%02x", i+1) }

// LANAddr is node i's IP address on the cluster's LAN.
func LANAddr(i int) netip.Addr { return netip.AddrFrom4([4]byte{10, 77, 0, byte(i + 1)}) }

// GDB is n's gdbstub socket, if Options.GDB asked for one.
func (n *Node) GDB() string { return n.opts.GDB }

// API is the host's address of n's node API.
func (n *Node) API() string { return net.JoinHostPort("127.0.0.1", strconv.Itoa(n.APIPort)) }

// state is what the state directory remembers between launches.
type state struct {
	Fingerprint string   `json:"fingerprint"`
	Names       []string `json:"names"`
}

func (o *Options) defaults() error {
	if o.Nodes < 1 {
		return fmt.Errorf("a cluster needs at least one node, not %d", o.Nodes)
	}
	if o.StateDir == "" || o.Image == "" {
		return errors.New("multinode: Image and StateDir are required")
	}
	if _, err := os.Stat(o.Image); err != nil {
		return fmt.Errorf("the disk image every node starts from: %w (./build.sh builds out/borough.img)", err)
	}
	if o.Cluster == "" {
		o.Cluster = "borough"
	}
	if o.MemoryMiB == 0 {
		o.MemoryMiB = 1024
	}
	if o.Logf == nil {
		o.Logf = func(string, ...any) {}
	}
	return os.MkdirAll(o.StateDir, 0o755)
}

// Launch starts the cluster (see the package doc) and returns once every
// node runs. On failure, the VMs started are killed and the LAN's socket
// removed.
func Launch(ctx context.Context, opts Options) (*Cluster, error) {
	if err := opts.defaults(); err != nil {
		return nil, err
	}
	owner := opts.Owner
	if len(owner.Certificate) == 0 {
		return nil, errors.New("multinode: Options.Owner holds no certificate")
	}
	sock := filepath.Join(opts.StateDir, "lan.sock")
	os.Remove(sock)
	hub, err := qemu.StartHub(sock)
	if err != nil {
		return nil, err
	}
	c := &Cluster{opts: opts, Hub: hub, owner: owner, CAFile: filepath.Join(opts.StateDir, "ca.pem")}
	if err := c.start(ctx); err != nil {
		c.Kill()
		return nil, err
	}
	return c, nil
}

// start lays out every node and boots the cluster: anew, or again from
// the state a launch before left.
func (c *Cluster) start(ctx context.Context) error {
	for i := range c.opts.Nodes {
		n, err := c.prepare(i)
		if err != nil {
			return err
		}
		c.Nodes = append(c.Nodes, n)
	}
	var st state
	if b, err := os.ReadFile(c.statePath()); err == nil {
		if err := json.Unmarshal(b, &st); err != nil {
			return fmt.Errorf("%s: %w", c.statePath(), err)
		}
		return c.restartAll(ctx, st)
	}
	return c.create(ctx)
}

func (c *Cluster) statePath() string { return filepath.Join(c.opts.StateDir, "cluster.json") }

// prepare lays out node i's disk and options.
func (c *Cluster) prepare(i int) (*Node, error) {
	dir := filepath.Join(c.opts.StateDir, fmt.Sprintf("node%d", i+1))
	if err := os.MkdirAll(dir, 0o755); err != nil {
		return nil, err
	}
	disk := filepath.Join(dir, "disk.img")
	if _, err := os.Stat(disk); errors.Is(err, os.ErrNotExist) {
		if err := copySparse(c.opts.Image, disk, c.opts.DiskSize); err != nil {
			return nil, err
		}
	}
	port, err := c.port(c.opts.ClientPorts, i)
	if err != nil {
		return nil, err
	}
	peer, err := c.port(nil, i)
	if err != nil {
		return nil, err
	}
	api, err := c.port(c.opts.APIPorts, i)
	if err != nil {
		return nil, err
	}
	n := &Node{Index: i, ClientPort: port, PeerPort: peer, APIPort: api, LAN: LANAddr(i)}
	n.opts = qemu.Options{
		Image: disk, StateDir: filepath.Join(dir, "vm"), TPM: c.opts.TPM, MemoryMiB: c.opts.MemoryMiB,
		Network: true, Forwards: []qemu.Forward{{Host: port, Guest: ports.Client}, {Host: peer, Guest: ports.Peer},
			{Host: api, Guest: ports.NodeAPI}},
		LAN:  &qemu.LAN{Hub: c.Hub.Path(), MAC: n.MAC()},
		Logf: c.nodeLogf(i), VolatileCache: c.opts.VolatileCache, DiskFaults: c.opts.DiskFaults, Control: c.opts.Control,
	}
	if c.opts.GDB {
		n.opts.GDB = filepath.Join(dir, "gdb.sock")
	}
	n.TestParams = c.opts.TestParams
	if c.opts.Console != nil {
		n.opts.Console = c.opts.Console(i)
	}
	return n, nil
}

func (c *Cluster) nodeLogf(i int) func(string, ...any) {
	return func(format string, args ...any) {
		c.opts.Logf(fmt.Sprintf("node%d: ", i+1)+format, args...)
	}
}

// create bootstraps node 1 and joins the others one at a time.
func (c *Cluster) create(ctx context.Context) error {
	first := c.Nodes[0]
	cfg, err := c.bootstrapConfig(first)
	if err != nil {
		return err
	}
	if err := c.boot(ctx, first, cfg); err != nil {
		return err
	}
	m := regexp.MustCompile(`ca_fingerprint=(sha256:[0-9a-f]{64})`).FindStringSubmatch(first.VM.Console())
	if m == nil {
		return errors.New("node 1 printed no CA fingerprint")
	}
	if err := c.pin(m[1]); err != nil {
		return err
	}
	for _, n := range c.Nodes[1:] {
		if err := c.Join(ctx, n, admin.TicketParams{}); err != nil {
			return err
		}
	}
	if err := c.AwaitVoters(ctx); err != nil {
		return err
	}
	return c.save()
}

// AwaitVoters waits until every member of the cluster is a voter: the
// last learner is promoted a moment after it says it runs.
func (c *Cluster) AwaitVoters(ctx context.Context) error {
	cl, err := c.Client()
	if err != nil {
		return err
	}
	defer cl.Close()
	ctx, cancel := context.WithTimeout(ctx, RunTimeout)
	defer cancel()
	for {
		list, err := cl.MemberList(ctx)
		if err == nil {
			learners := 0
			for _, m := range list.Members {
				if m.IsLearner || m.Name == "" {
					learners++
				}
			}
			if learners == 0 {
				c.opts.Logf("all %d members vote", len(list.Members))
				return nil
			}
		}
		select {
		case <-ctx.Done():
			return fmt.Errorf("waiting for every member to vote: %w (last: %v)", ctx.Err(), err)
		case <-time.After(500 * time.Millisecond):
		}
	}
}

// AddNode lays out one more node, not yet booted.
func (c *Cluster) AddNode() (*Node, error) {
	n, err := c.prepare(len(c.Nodes))
	if err != nil {
		return nil, err
	}
	c.Nodes = append(c.Nodes, n)
	return n, nil
}

// Join mints a ticket and boots n with a join config, waiting until it
// runs.
func (c *Cluster) Join(ctx context.Context, n *Node, p admin.TicketParams) error {
	if err := c.StartJoin(ctx, n, p); err != nil {
		return err
	}
	return c.WaitRunning(n)
}

// StartJoin mints a ticket and boots n with a join config, without
// waiting.
func (c *Cluster) StartJoin(ctx context.Context, n *Node, p admin.TicketParams) error {
	t, err := c.Ticket(ctx, p)
	if err != nil {
		return fmt.Errorf("minting a ticket for node %d: %w", n.Index+1, err)
	}
	b, err := proto.Marshal(t)
	if err != nil {
		return err
	}
	cfg, err := c.JoinConfig(n, b)
	if err != nil {
		return err
	}
	return c.Start(ctx, n, cfg)
}

// Ticket mints a join ticket as the owner.
func (c *Cluster) Ticket(ctx context.Context, p admin.TicketParams) (*enrolmentpb.Ticket, error) {
	cl, err := c.Client()
	if err != nil {
		return nil, err
	}
	defer cl.Close()
	ctx, cancel := context.WithTimeout(ctx, time.Minute)
	defer cancel()
	return admin.MintTicket(ctx, cl, p, c.owner)
}

// JoinConfig writes n's join config with the ticket bytes given (valid
// or not: tests give bad ones), returning its path.
func (c *Cluster) JoinConfig(n *Node, ticket []byte) (string, error) {
	cfg := &enrolmentpb.Config{Version: 1, Mode: &enrolmentpb.Config_Join{Join: &enrolmentpb.Join{Ticket: ticket, OwnerCertificate: c.owner.Certificate[0]}},
		Network: c.network(n)}
	return c.writeConfig(n, cfg)
}

// Disk is n's disk image.
func (n *Node) Disk() string { return n.opts.Image }

// bootstrapConfig writes the first node's config, with its ticket signed
// by the owner (admin.FounderTicket).
func (c *Cluster) bootstrapConfig(n *Node) (string, error) {
	t, statement, err := admin.FounderTicket(c.owner, c.opts.Cluster)
	if err != nil {
		return "", err
	}
	return c.writeConfig(n, &enrolmentpb.Config{Version: 1, Mode: &enrolmentpb.Config_Bootstrap{
		Bootstrap: &enrolmentpb.Bootstrap{ClusterName: c.opts.Cluster, OwnerCertificate: c.owner.Certificate[0],
			OwnerTicket: statement, TicketSecret: t.GetSecret()},
	}, Network: c.network(n)})
}

// network is a node's two links: DHCP on the user network, the static
// LAN address advertised.
func (c *Cluster) network(n *Node) *enrolmentpb.Network {
	return &enrolmentpb.Network{Interfaces: []*enrolmentpb.Interface{
		{Mac: qemu.UserMAC, Config: &enrolmentpb.Interface_Dhcp{Dhcp: &enrolmentpb.DHCP{}}},
		{Mac: n.opts.LAN.MAC, Advertise: true, Config: &enrolmentpb.Interface_Static{
			Static: &enrolmentpb.Static{Addresses: []string{n.LAN.String() + "/24"}}}},
	}}
}

func (c *Cluster) writeConfig(n *Node, cfg *enrolmentpb.Config) (string, error) {
	b, err := proto.Marshal(cfg)
	if err != nil {
		return "", err
	}
	path := filepath.Join(c.opts.StateDir, fmt.Sprintf("node%d", n.Index+1), "enrolment.pb")
	return path, os.WriteFile(path, b, 0o600)
}

// boot starts n with the enrolment config at cfg and waits until it
// runs.
func (c *Cluster) boot(ctx context.Context, n *Node, cfg string) error {
	if err := c.Start(ctx, n, cfg); err != nil {
		return err
	}
	return c.WaitRunning(n)
}

// Start boots n's VM with the enrolment config at cfg, without waiting.
// The VM outlives ctx: Kill or PowerOff end it.
func (c *Cluster) Start(ctx context.Context, n *Node, cfg string) error {
	if err := ctx.Err(); err != nil {
		return err
	}
	n.opts.FwCfg, n.opts.TestParams = cfg, n.TestParams
	vm, err := qemu.Start(context.Background(), n.opts)
	if err != nil {
		return fmt.Errorf("node %d: %w", n.Index+1, err)
	}
	n.VM = vm
	return nil
}

// Restart boots n's VM again with the enrolment config it was last
// started with, without waiting.
func (c *Cluster) Restart(ctx context.Context, n *Node) error {
	return c.Start(ctx, n, n.opts.FwCfg)
}

// WaitRunning waits until n says `node running` and learns its name.
func (c *Cluster) WaitRunning(n *Node) error {
	line, at, err := n.VM.WaitLine(Running, RunTimeout)
	if err != nil {
		return fmt.Errorf("node %d: %w", n.Index+1, err)
	}
	m := regexp.MustCompile(` member=(node-[0-9a-f]{8})`).FindStringSubmatch(line)
	if m == nil {
		return fmt.Errorf("node %d said it runs without its name: %q", n.Index+1, line)
	}
	n.RunningAt, n.RunningLine, n.Name = at, line, m[1]
	c.opts.Logf("node%d: %s running", n.Index+1, n.Name)
	return nil
}

// restartAll boots every node of a cluster launched before and waits
// until all run.
func (c *Cluster) restartAll(ctx context.Context, st state) error {
	if err := c.loadCA(st.Fingerprint); err != nil {
		return err
	}
	for _, n := range c.Nodes {
		cfg := filepath.Join(c.opts.StateDir, fmt.Sprintf("node%d", n.Index+1), "enrolment.pb")
		if err := c.Start(ctx, n, cfg); err != nil {
			return err
		}
	}
	for _, n := range c.Nodes {
		if err := c.WaitRunning(n); err != nil {
			return err
		}
	}
	return nil
}

// pin learns the CA from node 1's client port, checked against the
// fingerprint it printed, and keeps it in the state directory.
func (c *Cluster) pin(fingerprint string) error {
	ca, err := admin.FetchCA(c.Nodes[0].Endpoint(), fingerprint, c.owner)
	if err != nil {
		return fmt.Errorf("node 1: %w", err)
	}
	c.CA, c.Fingerprint = ca, fingerprint
	return os.WriteFile(c.CAFile, pki.CertPEM(ca), 0o644)
}

func (c *Cluster) loadCA(fingerprint string) error {
	b, err := os.ReadFile(c.CAFile)
	if err != nil {
		return err
	}
	ca, err := pki.ParseCertPEM(b)
	if err != nil || pki.Fingerprint(ca) != fingerprint {
		return fmt.Errorf("%s is not the cluster CA %s", c.CAFile, fingerprint)
	}
	c.CA, c.Fingerprint = ca, fingerprint
	return nil
}

func (c *Cluster) save() error {
	st := state{Fingerprint: c.Fingerprint}
	for _, n := range c.Nodes {
		st.Names = append(st.Names, n.Name)
	}
	b, err := json.MarshalIndent(st, "", "  ")
	if err != nil {
		return err
	}
	return os.WriteFile(c.statePath(), b, 0o644)
}

// Endpoints are every node's client endpoint on the host.
func (c *Cluster) Endpoints() []string {
	var out []string
	for _, n := range c.Nodes {
		out = append(out, n.Endpoint())
	}
	return out
}

// HandedOver makes owner the owner the launcher acts as from now on, the
// cluster's owner having handed it over to them (borough owner rotate).
func (c *Cluster) HandedOver(owner tls.Certificate) { c.owner = owner }

// Client connects to the cluster as the owner, through every node.
func (c *Cluster) Client() (*clientv3.Client, error) {
	return admin.Connect(c.Endpoints(), c.CA, c.owner)
}

// Leader is the node that leads the cluster, as the first running node
// that answers says; nodes that are down or cut off are passed over.
func (c *Cluster) Leader(ctx context.Context) (*Node, error) {
	var errs []error
	for _, n := range c.Nodes {
		if n.VM == nil {
			continue
		}
		l, err := c.leaderSays(ctx, n)
		if err == nil {
			return l, nil
		}
		errs = append(errs, fmt.Errorf("node %d: %w", n.Index+1, err))
	}
	return nil, fmt.Errorf("no node names a leader: %w", errors.Join(errs...))
}

// leaderSays is the node n says leads.
func (c *Cluster) leaderSays(ctx context.Context, n *Node) (*Node, error) {
	cl, err := admin.Connect([]string{n.Endpoint()}, c.CA, c.owner)
	if err != nil {
		return nil, err
	}
	defer cl.Close()
	ctx, cancel := context.WithTimeout(ctx, 5*time.Second)
	defer cancel()
	st, err := cl.Status(ctx, n.Endpoint())
	if err != nil {
		return nil, err
	}
	list, err := cl.MemberList(ctx)
	if err != nil {
		return nil, err
	}
	for _, m := range list.Members {
		for _, l := range c.Nodes {
			if m.ID == st.Leader && m.Name == l.Name {
				return l, nil
			}
		}
	}
	return nil, fmt.Errorf("it names leader %x, no node of the cluster", st.Leader)
}

// Kill stops every VM at once and the hub.
func (c *Cluster) Kill() {
	for _, n := range c.Nodes {
		if n.VM != nil {
			n.VM.Kill()
		}
	}
	c.Hub.Close()
}

// PowerOff powers every VM off cleanly, then stops the hub.
func (c *Cluster) PowerOff(timeout time.Duration) error {
	var errs []error
	for _, n := range c.Nodes {
		if n.VM != nil {
			if err := n.VM.PowerOff(timeout); err != nil {
				errs = append(errs, fmt.Errorf("node %d: %w", n.Index+1, err))
			}
		}
	}
	c.Hub.Close()
	return errors.Join(errs...)
}

// port is node i's port from ports, or, where that has none, a free one
// (qemu.FreePort) that the options do not name.
func (c *Cluster) port(ports []int, i int) (int, error) {
	if i < len(ports) && ports[i] != 0 {
		return ports[i], nil
	}
	for range 100 {
		p, err := qemu.FreePort()
		if err != nil {
			return 0, err
		}
		if !slices.Contains(c.opts.ClientPorts, p) && !slices.Contains(c.opts.APIPorts, p) {
			return p, nil
		}
	}
	return 0, errors.New("no free port on 127.0.0.1 that the cluster's options do not name")
}

// copySparse copies a disk image, keeping its holes, to a file of at
// least size bytes.
func copySparse(src, dst string, size int64) error {
	in, err := os.Open(src)
	if err != nil {
		return err
	}
	defer in.Close()
	fi, err := in.Stat()
	if err != nil {
		return err
	}
	out, err := os.OpenFile(dst, os.O_CREATE|os.O_EXCL|os.O_WRONLY, 0o644)
	if err != nil {
		return err
	}
	buf := make([]byte, 1<<20)
	zero := make([]byte, len(buf))
	for off := int64(0); off < fi.Size(); {
		n, err := in.ReadAt(buf, off)
		if n > 0 && !bytes.Equal(buf[:n], zero[:n]) {
			if _, err := out.WriteAt(buf[:n], off); err != nil {
				out.Close()
				return err
			}
		}
		off += int64(n)
		if err == io.EOF {
			break
		}
		if err != nil {
			out.Close()
			return err
		}
	}
	if err := out.Truncate(max(fi.Size(), size)); err != nil {
		out.Close()
		return err
	}
	return out.Close()
}
