// Package consensus runs the node's embedded etcd member, with its data on
// the encrypted data volume.
//
//	the owner ──TLS, the owner's certificate (nothing else)───────────▶ :2379 ─┐
//	this node ──in-process calls (Consensus.Client)─────────────────────────────┼─ etcd
//	other members ──TLS, cluster CA cert, not in the CRL──────────────▶ :2380 ─┘
//
// The node's own client calls the member's API in its process
// (etcd's v3client, with the node's etcd user: localclient.go), not
// through a socket: no listener is there for
// another local process to reach, and none for etcd to set up. A unix
// socket listener made etcd build a second gRPC and HTTP server at
// every start, and the node's gRPC client over it was more cold code to
// run before the first request (docs/decisions.md, "etcd's start"). The
// in-process client has no gRPC interceptors. Nothing retries a request
// for it, so whatever may fail while there is no leader is retried by
// its caller: the cluster manager's retry, the join server's 503 (the
// joining node retries), the clusterkey and autopromote loops, the update
// confirmation's health check. And etcd's refusal of most requests from
// learners, also an interceptor, does not apply to the node's own.
//
// Certificates and the CRL are files in a PKI directory (Files, whose
// Write says why the client port trusts the owner alone), which the
// cluster manager writes; etcd re-reads the DER CRL on every handshake, on
// the peer port and on the client port, and the CRL watcher keeps that
// file equal to the CRL stored in etcd (keyspace.CRL) once it has checked that
// the cluster CA signed it, that it is newer than the one it replaces, and,
// in a cluster with an owner, that it carries the owner's signed
// revocations of its number and revokes exactly what they say, and no
// less than before (authority.Revocations): a garbage
// or rolled-back CRL in etcd, or one a member signed with the CA key every
// member holds, must not open or break the ports.
//
// A member is started in one of three modes: ModeNew creates a one-member
// cluster, ModeJoin starts a member the cluster has just added as a
// learner, ModeRestart starts a member from its data directory.
//
// # Learners and promotion
//
// A joining member starts as a learner and is promoted by the
// autopromoter of the leader once etcd says it has caught up. The policy
// (promotable) never stops at two voters: with two voters, either one
// going down stops all writes, and removing the dead one is unsafe (etcd
// docs), so two voters are worse than one. A second node therefore stays
// a learner until a third has joined; then both are promoted, one at a
// time, and the cluster goes from one voter to three in seconds. From three
// on, every caught-up learner is promoted (four voters tolerate one
// failure, as three do). Learners that joined with a learner ticket are
// never promoted. etcd allows MaxLearners learners at once (checked by
// every member when it applies a change, so the same everywhere): two, so
// that the second and third node can wait together.
//
// # Raft timing
//
// A member that is its cluster's only voter waits for nobody, yet etcd's
// raft makes it wait for an election timeout, randomized over a whole
// timeout, each time it starts: with etcd's timing, the largest share of
// a one-node cluster's etcd start. A member that starts alone
// (Config.Alone) therefore runs with aloneTiming: a tenth of etcd's tick
// and the shortest election timeout etcd takes, five ticks. A shorter
// tick would cut the wait further, but would wake an idle node more often
// (docs/decisions.md, "A lone member's raft timing", has the figures).
// That timing would not do for several voters: a leader steps down when
// no quorum answers within one timeout, and a slow network or a loaded
// machine would make it lose its leadership over and over. So a member
// started alone ends (ErrRetime) as soon as it sees a second voter, or
// before it would promote a learner into one, and the cluster manager
// starts it again with etcd's timing: an etcd restart and an election
// without a leader, once in a cluster's life, as it first grows to three
// voters.
package consensus

import (
	"context"
	"crypto/tls"
	"errors"
	"fmt"
	"log/slog"
	"net"
	"net/http"
	"net/netip"
	"net/url"
	"strconv"
	"strings"
	"time"

	"go.etcd.io/etcd/client/pkg/v3/transport"
	clientv3 "go.etcd.io/etcd/client/v3"
	"go.etcd.io/etcd/server/v3/embed"
	"go.etcd.io/etcd/server/v3/etcdserver"
	"go.etcd.io/etcd/server/v3/storage/wal"
	"go.uber.org/zap/zapcore"
	"golang.org/x/time/rate"
	"google.golang.org/grpc"

	"github.com/borough-os/borough/datavol"
	"github.com/borough-os/borough/internal/clientport"
	"github.com/borough-os/borough/internal/etcdlog"
	"github.com/borough-os/borough/internal/ports"
	"github.com/borough-os/borough/internal/space"
)

// MaxLearners is how many learners the cluster allows at once.
const MaxLearners = 2

// Mode is how a member starts.
type Mode int

const (
	// ModeNew creates a new one-member cluster.
	ModeNew Mode = iota + 1
	// ModeJoin starts a member just added to the cluster, from Peers.
	ModeJoin
	// ModeRestart starts a member from its data directory.
	ModeRestart
)

// aloneTiming is the raft timing, in milliseconds, of a member started
// alone: its heartbeat tick and election timeout (etcd's are 100 and 1000).
var aloneTiming = struct{ tick, election uint }{10, 50}

// ErrRetime says that a member started alone is no longer its cluster's
// only voter, or is about to promote another: it has stopped, to be
// started again with etcd's timing.
var ErrRetime = errors.New("this member is no longer its cluster's only voter: it restarts with the cluster's raft timing")

// Peer is a member of the cluster as a joining member first learns it.
type Peer struct {
	Name     string
	PeerURLs []string
}

// startTimeout bounds how long a new or joining member may take to serve.
const startTimeout = 2 * time.Minute

// Config describes the member.
type Config struct {
	// Name is the member's name; Cluster the cluster's, used as etcd's
	// initial cluster token.
	Name, Cluster string
	// DataDir is etcd's data directory.
	DataDir string
	// PKI are the certificate files.
	PKI Files
	// IP is the address other members and remote clients reach.
	IP netip.Addr
	// ListenIP is the address etcd listens on; zero means every address
	// (remote clients may come through another link than peers) and the
	// loopback for ports.EtcdHTTP.
	ListenIP netip.Addr
	// Mode says how the member starts.
	Mode Mode
	// Alone says that the member is its cluster's only member, as far as
	// the node knows: it then runs with aloneTiming until ErrRetime.
	Alone bool
	// Peers are the cluster's members, this one among them (ModeJoin).
	Peers []Peer
	// ForceNewCluster restarts the member as its cluster's only member,
	// with its data (etcd's --force-new-cluster): for a cluster that lost
	// its quorum for good (ModeRestart only).
	ForceNewCluster bool
	Log             *slog.Logger
	// Snapshots, if set, are how many applied entries make etcd snapshot
	// its state and compact its raft log (keeping Snapshots/10), instead
	// of etcd's 10000: tests use it to make a joining member catch up
	// from a snapshot rather than from the log.
	Snapshots uint64
	// Volume is the root of the data volume that holds DataDir: etcd's
	// quota and log segments come from its size at every start
	// (space.Plan), and the member's space keeper watches it.
	Volume string
	// VolumeSize, if set, stands for the volume's size: tests use it for
	// a small quota.
	VolumeSize int64
}

// budget is the space budget of the member's volume.
func (c Config) budget() (space.Budget, error) {
	if c.VolumeSize > 0 {
		return space.Plan(c.VolumeSize)
	}
	return space.Measure(c.Volume)
}

// ballast is the path of the volume's ballast file.
func (c Config) ballast() string      { return datavol.Ballast.In(c.Volume) }
func (c Config) startBallast() string { return datavol.StartBallast.In(c.Volume) }

// Consensus is a running etcd member.
type Consensus struct {
	cfg  Config
	etcd *embed.Etcd
	gate *gate
	// port is the client port; json the JSON API's server on it, once
	// the member serves.
	port *clientport.Port
	json *http.Server
	// budget is the volume's space budget, as the member started.
	budget space.Budget
	// stopUnstall stops the member's unstall (stall.go), which runs from
	// Start to Close, and waits for it.
	stopUnstall func()
	// Client calls this member's API in process.
	Client *clientv3.Client
}

// peerURL is the URL the member advertises to its peers.
func (c Config) peerURL() url.URL {
	return url.URL{Scheme: "https", Host: netip.AddrPortFrom(c.IP, ports.Peer).String()}
}

// PeerURL is the URL the member advertises to its peers.
func (c *Consensus) PeerURL() string {
	u := c.cfg.peerURL()
	return u.String()
}

func (c Config) embed(b space.Budget, grpcServer chan<- *grpc.Server) *embed.Config {
	ec := embed.NewConfig()
	ec.Name = c.Name
	ec.Dir = c.DataDir
	peer := c.peerURL()
	client := url.URL{Scheme: "https", Host: netip.AddrPortFrom(c.IP, ports.Client).String()}
	listen, httpHost := c.listen()
	ec.ListenPeerUrls = []url.URL{{Scheme: "https", Host: net.JoinHostPort(listen, strconv.Itoa(ports.Peer))}}
	ec.AdvertisePeerUrls = []url.URL{peer}
	// etcd's own client listener is on the loopback, at a port the
	// kernel picks: the client port is the node's (internal/clientport),
	// which hands gRPC connections to etcd's gRPC server (ServiceRegister
	// below) and HTTP ones to the JSON API (jsonapi.go). gRPC alone on
	// etcd's listener, served by gRPC's own transport: on a shared port
	// etcd serves gRPC through net/http's HTTP/2 server
	// (grpc.Server.ServeHTTP), which costs more per request
	// (docs/decisions.md, "gRPC on a port of its own").
	ec.ListenClientUrls = []url.URL{{Scheme: "https", Host: net.JoinHostPort(httpHost, "0")}}
	ec.ListenClientHttpUrls = []url.URL{{Scheme: "https", Host: net.JoinHostPort(httpHost, strconv.Itoa(ports.EtcdHTTP))}}
	ec.AdvertiseClientUrls = []url.URL{client}
	ec.InitialCluster = c.initialCluster(peer.String())
	ec.InitialClusterToken = c.Cluster
	ec.ClusterState = embed.ClusterStateFlagExisting
	if c.Mode == ModeNew {
		ec.ClusterState = embed.ClusterStateFlagNew
	}
	ec.ForceNewCluster = c.ForceNewCluster && c.Mode == ModeRestart
	ec.MaxLearners = MaxLearners
	ec.ServiceRegister = func(s *grpc.Server) {
		select {
		case grpcServer <- s:
		default:
		}
	}
	// Not etcd's gRPC gateway: it would call etcd as the member, not as
	// its caller; the node serves the gateway's handlers itself
	// (jsonapi.go).
	ec.EnableGRPCGateway = false
	if c.Alone {
		ec.TickMs, ec.ElectionMs = aloneTiming.tick, aloneTiming.election
	}
	ec.ClientTLSInfo = transport.TLSInfo{
		CertFile: c.PKI.Cert(), KeyFile: c.PKI.Key(),
		TrustedCAFile: c.PKI.Trusted(), ClientCertAuth: true, CRLFile: c.PKI.CRL(),
	}
	ec.PeerTLSInfo = transport.TLSInfo{
		CertFile: c.PKI.Cert(), KeyFile: c.PKI.Key(),
		TrustedCAFile: c.PKI.CA(), ClientCertAuth: true, CRLFile: c.PKI.CRL(),
	}
	ec.QuotaBackendBytes, ec.MaxWalFiles = b.Quota, space.WALFiles
	if b.Snapshots > 0 {
		ec.SnapshotCount = b.Snapshots
	}
	if c.Snapshots > 0 {
		ec.SnapshotCount, ec.SnapshotCatchUpEntries = c.Snapshots, max(c.Snapshots/10, 1)
	}
	ec.AutoCompactionMode = embed.CompactorModePeriodic
	ec.AutoCompactionRetention = "1h"
	ec.Logger = "zap"
	ec.ZapLoggerBuilder = embed.NewZapLoggerBuilder(etcdlog.New(c.Log.With("service", "etcd"), zapcore.InfoLevel))
	return ec
}

// listen are the addresses the member listens on: the peer and client
// ports', and the loopback's (etcd's own client listener, ports.EtcdHTTP).
func (c Config) listen() (ports, loopback string) {
	if c.ListenIP.IsValid() {
		return c.ListenIP.String(), c.ListenIP.String()
	}
	return "0.0.0.0", "127.0.0.1"
}

// initialCluster is etcd's initial cluster: this member alone, or, when
// joining, every member, with a name for those that have none yet (etcd
// matches them by peer URL; only this member's name must be its own).
func (c Config) initialCluster(self string) string {
	if c.Mode != ModeJoin {
		return c.Name + "=" + self
	}
	var entries []string
	for i, p := range c.Peers {
		name := p.Name
		for _, u := range p.PeerURLs {
			if u == self {
				name = c.Name
			}
		}
		if name == "" {
			name = "unstarted-" + strconv.Itoa(i)
		}
		for _, u := range p.PeerURLs {
			entries = append(entries, name+"="+u)
		}
	}
	return strings.Join(entries, ",")
}

// prepareSpace plans the volume's budget, sets etcd's log segments by it
// (a package variable of etcd's, the same for every member in the
// process) and clears the ballast of a full volume, for etcd to start.
func (c Config) prepareSpace() (space.Budget, error) {
	b, err := c.budget()
	if err != nil {
		return b, err
	}
	wal.SegmentSizeBytes = b.Segment
	cleared, err := space.ClearForStart(c.Volume, b.Reserve(), c.ballast(), c.startBallast())
	if err != nil {
		return b, err
	}
	if cleared {
		c.Log.Error("the data volume is full: its ballast is deleted, for etcd to start")
	}
	c.Log.Info("space budget", "volume", mib(b.Volume), "quota", mib(b.Quota), "wal", mib(b.WAL),
		"wal_segment", mib(b.Segment), "snapshot_every", b.Snapshots, "defrag_copy", mib(b.Defrag),
		"borough", mib(b.Node), "margin", mib(b.Margin), "ballast", mib(b.Ballast))
	return b, nil
}

// mib is n bytes, in MiB, for the log.
func mib(n int64) string { return strconv.FormatInt(n>>20, 10) + "MiB" }

// Start starts the member and waits until it serves: a new or joining
// member for startTimeout, a restarting one as long as it takes (until
// ctx ends), for its quorum comes back with its peers, however late, or
// the owner recovers the cluster from it (Config.ForceNewCluster). A new
// member serves once its cluster also has a version (awaitVersion). From
// Start to Close the member unstalls itself after a snapshot (stall.go):
// publishing its name, which it must do to serve, is a proposal. On
// failure, everything started is closed.
func Start(ctx context.Context, cfg Config) (_ *Consensus, err error) {
	if cfg.Alone {
		cfg.Log.Info("the only member of its cluster: raft with a short election timeout until another member votes",
			"tick", time.Duration(aloneTiming.tick)*time.Millisecond, "election", time.Duration(aloneTiming.election)*time.Millisecond)
	}
	budget, err := cfg.prepareSpace()
	if err != nil {
		return nil, err
	}
	listen, _ := cfg.listen()
	port, err := clientport.Listen(net.JoinHostPort(listen, strconv.Itoa(ports.Client)))
	if err != nil {
		return nil, err
	}
	port.Dropped = droppedLogger(cfg.Log)
	grpcServer := make(chan *grpc.Server, 1)
	e, err := embed.StartEtcd(cfg.embed(budget, grpcServer))
	if err != nil {
		port.Close()
		return nil, fmt.Errorf("starting etcd: %w", err)
	}
	g := newGate()
	member := &Consensus{cfg: cfg, etcd: e, gate: g, port: port, budget: budget, Client: localClient(e.Server, nodeUser, g)}
	member.stopUnstall = member.startUnstall()
	defer func() {
		if err != nil {
			// etcd's Close waits for its client servers, which start
			// only once the member is ready, or once the server stops:
			// without the stop, closing a member that never became
			// ready (a removed one, say) waits for ever.
			e.Server.HardStop()
			member.Close()
		}
	}()
	var expired <-chan time.Time
	if cfg.Mode != ModeRestart {
		expired = time.After(startTimeout)
	}
	select {
	case <-e.Server.ReadyNotify():
	case err := <-e.Err():
		return nil, fmt.Errorf("etcd failed while starting: %w", err)
	case <-expired:
		return nil, fmt.Errorf("etcd did not become ready within %v", startTimeout)
	case <-ctx.Done():
		return nil, ctx.Err()
	}
	if cfg.Mode == ModeNew {
		if err := awaitVersion(ctx, e.Server, expired); err != nil {
			return nil, err
		}
	}
	if err := member.serveClientPort(ctx, grpcServer); err != nil {
		return nil, err
	}
	return member, nil
}

// droppedLogger logs the client port's dropped connections, the first
// ten and then one a minute: a client that speaks plain HTTP to the TLS
// port learns nothing else, and a scanner must not fill the log.
func droppedLogger(log *slog.Logger) func(net.Addr, error) {
	every := &rate.Sometimes{First: 10, Interval: time.Minute}
	return func(remote net.Addr, why error) {
		every.Do(func() {
			log.Warn("client port: closed a connection before TLS (the first ten are logged, then one a minute)",
				"remote", remote.String(), "err", why)
		})
	}
}

// serveClientPort serves the client port once etcd serves: gRPC
// connections by etcd's gRPC server, which etcd hands over as it starts
// serving (and stops, with the listener, as it closes), HTTP ones by the
// JSON API.
func (c *Consensus) serveClientPort(ctx context.Context, grpcServer <-chan *grpc.Server) error {
	var gs *grpc.Server
	select {
	case gs = <-grpcServer:
	case <-time.After(startTimeout):
		return errors.New("etcd did not start its gRPC server")
	case <-ctx.Done():
		return ctx.Err()
	}
	srv, tlsCfg, err := jsonServer(c.etcd.Server, c.gate, c.cfg.PKI, c.etcd.Server.Logger())
	if err != nil {
		return err
	}
	c.json = srv
	go gs.Serve(c.port.GRPC())
	go srv.Serve(tls.NewListener(c.port.HTTP(), tlsCfg))
	go c.port.Serve()
	return nil
}

// awaitVersion waits until a new cluster has its version, which its
// leader sets once it has committed an entry of its term, 1 to 5 ms after
// the member serves in process (at the latest at etcd's next version
// check, 4 s on): etcd refuses to start a member joining a cluster that
// has none yet ("incompatible with current running cluster"), so a node
// admitted that early would fail.
func awaitVersion(ctx context.Context, s *etcdserver.EtcdServer, expired <-chan time.Time) error {
	for s.ClusterVersion() == nil {
		select {
		case <-expired:
			return fmt.Errorf("the new cluster had no version within %v", startTimeout)
		case <-ctx.Done():
			return ctx.Err()
		case <-time.After(10 * time.Millisecond):
		}
	}
	return nil
}

// ClusterID and MemberID identify the cluster and this member.
func (c *Consensus) ClusterID() uint64 { return uint64(c.etcd.Server.Cluster().ID()) }
func (c *Consensus) MemberID() uint64  { return uint64(c.etcd.Server.MemberID()) }

// RemovedError says that the cluster removed this member.
type RemovedError struct {
	// Cluster names the cluster, where the one saying so knows it.
	Cluster string
}

func (e *RemovedError) Error() string {
	if e.Cluster == "" {
		return "the cluster removed this member"
	}
	return "removed from cluster " + e.Cluster
}

// Is makes every RemovedError match ErrRemoved (errors.Is).
func (e *RemovedError) Is(target error) bool {
	_, ok := target.(*RemovedError)
	return ok
}

// ErrRemoved is the RemovedError of etcd, which does not say the
// cluster's name; errors.Is(err, ErrRemoved) matches any RemovedError.
var ErrRemoved = &RemovedError{}

// Run keeps the CRL file current, promotes learners and turns etcd
// authentication on (auth.go) until ctx ends or etcd stops, then closes
// the member. Shutdown order:
//  1. the watchers stop with ctx;
//  2. the client closes;
//  3. etcd stops serving and closes its data.
//
// It returns ErrRemoved when etcd stopped because the cluster removed the
// member.
func (c *Consensus) Run(ctx context.Context) error {
	defer c.Close()
	// Stops the watchers (before Close, deferred earlier) whatever ends Run.
	ctx, cancel := context.WithCancel(ctx)
	defer cancel()
	errs := make(chan error, 4)
	go func() { errs <- c.keepSpace(ctx) }()
	go func() { errs <- c.watchCRL(ctx) }()
	go func() { errs <- c.autopromote(ctx) }()
	go func() { errs <- c.keepAuth(ctx) }()
	select {
	case <-ctx.Done():
		return ctx.Err()
	case <-c.etcd.Server.StopNotify():
		if c.Removed() {
			return ErrRemoved
		}
		return errors.New("etcd stopped")
	case err := <-c.etcd.Err():
		return fmt.Errorf("etcd: %w", err)
	case err := <-errs:
		if errors.Is(err, context.Canceled) {
			return err
		}
		return fmt.Errorf("consensus: %w", err)
	}
}

// Removed says whether the cluster has removed this member.
func (c *Consensus) Removed() bool {
	return c.etcd.Server.IsIDRemoved(c.MemberID())
}

// HasLeader says whether this member knows a leader: a voter cut off
// from its peers soon knows none. A learner never campaigns, so one cut
// off keeps naming its last leader: ask Led.
func (c *Consensus) HasLeader() bool {
	return c.etcd.Server.Leader() != 0
}

// Led says whether a leader leads this member: for a voter, one it knows
// (a voter cut off campaigns, and knows none); for a learner, which
// never campaigns and goes on naming a leader that dropped it, one that
// confirms it within wait (a read index, which costs the leader a
// heartbeat).
func (c *Consensus) Led(ctx context.Context, wait time.Duration) bool {
	if !c.HasLeader() {
		return false
	}
	if !c.IsLearner() {
		return true
	}
	ctx, cancel := context.WithTimeout(ctx, wait)
	defer cancel()
	return c.leaderConfirms(ctx) == nil
}

// leaderConfirms waits, until ctx ends, for the leader to confirm that it
// still leads this member, as a linearizable read does (raft's ReadIndex).
// It fails for a member the cluster removed, whether or not the member
// still names its leader: etcd drops a removed member's messages.
func (c *Consensus) leaderConfirms(ctx context.Context) error {
	if err := c.etcd.Server.LinearizableReadNotify(ctx); err != nil {
		return fmt.Errorf("the leader did not confirm this member's read index: %w", err)
	}
	return nil
}

// IsLearner says whether this member is a learner. A member the cluster
// removed is none (etcd's own IsLearner panics for it, and a removal can
// come at any time).
func (c *Consensus) IsLearner() bool {
	m := c.etcd.Server.Cluster().Member(c.etcd.Server.MemberID())
	return m != nil && m.IsLearner
}

// Members returns the cluster's members as this member knows them; it
// works on a learner, which etcd's client API does not serve.
func (c *Consensus) Members() []Member {
	var out []Member
	for _, m := range c.etcd.Server.Cluster().Members() {
		out = append(out, Member{ID: uint64(m.ID), Name: m.Name, Learner: m.IsLearner, PeerURLs: m.PeerURLs})
	}
	return out
}

// Member is a member of the cluster.
type Member struct {
	ID       uint64
	Name     string
	Learner  bool
	PeerURLs []string
}

// Close stops the member: its unstall and the node's own requests end
// first (gate.go), then its client, then etcd and its data.
func (c *Consensus) Close() {
	c.port.Close()
	if c.json != nil {
		c.json.Close()
	}
	c.stopUnstall()
	if !c.gate.close() {
		c.cfg.Log.Warn("closing etcd with requests of the node still in it", "waited", closeWait)
	}
	c.Client.Close()
	c.etcd.Close()
}
