// Package consensus runs the node's embedded etcd member, with its data on
// the encrypted data volume.
//
//	remote clients ──TLS, client cert of the cluster CA or the owner──▶ :2379 ─┐
//	local clients (this node) ──unix socket──────────────────────────▶ sock ──┼─ etcd
//	other members ──TLS, cluster CA cert, not in the CRL──────────────▶ :2380 ─┘
//
// Certificates and the CRL are files in a PKI directory (Files), which the
// cluster manager writes; etcd re-reads the DER CRL on every peer
// handshake, and the CRL watcher keeps that file equal to the CRL stored
// in etcd (KeyCRL). The autopromoter promotes learners once they have
// caught up, so that a joining member becomes a voter by itself.
package consensus

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"net/netip"
	"net/url"
	"os"
	"path/filepath"
	"strconv"
	"time"

	"go.etcd.io/etcd/client/pkg/v3/transport"
	clientv3 "go.etcd.io/etcd/client/v3"
	"go.etcd.io/etcd/server/v3/embed"
	"go.uber.org/zap/zapcore"
)

// Ports of every member.
const (
	ClientPort = 2379
	PeerPort   = 2380
)

// Keys Borough keeps in etcd.
const (
	KeyCRL       = "/borough/pki/crl"
	KeyCACert    = "/borough/pki/ca-cert"
	KeyCAKey     = "/borough/pki/ca-key"
	KeyOwnerCert = "/borough/pki/owner-cert"
	KeyCluster   = "/borough/cluster/name"
)

// startTimeout bounds how long etcd may take to serve.
const startTimeout = 2 * time.Minute

// Files are the PKI files etcd reads, in one directory.
type Files struct{ Dir string }

// Paths of the PKI files.
func (f Files) CA() string      { return filepath.Join(f.Dir, "ca.pem") }
func (f Files) Cert() string    { return filepath.Join(f.Dir, "node.pem") }
func (f Files) Key() string     { return filepath.Join(f.Dir, "node-key.pem") }
func (f Files) Trusted() string { return filepath.Join(f.Dir, "client-trust.pem") }
func (f Files) CRL() string     { return filepath.Join(f.Dir, "crl.der") }

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
	// New creates a new one-member cluster; false restarts the member
	// from DataDir.
	New bool
	// Socket is the unix socket local clients use.
	Socket string
	Log    *slog.Logger
}

// Consensus is a running etcd member.
type Consensus struct {
	cfg  Config
	etcd *embed.Etcd
	// Client talks to this member over the local socket.
	Client *clientv3.Client
}

func (c Config) embed() *embed.Config {
	ec := embed.NewConfig()
	ec.Name = c.Name
	ec.Dir = c.DataDir
	host := netip.AddrPortFrom(c.IP, PeerPort).String()
	peer := url.URL{Scheme: "https", Host: host}
	client := url.URL{Scheme: "https", Host: netip.AddrPortFrom(c.IP, ClientPort).String()}
	ec.ListenPeerUrls = []url.URL{{Scheme: "https", Host: "0.0.0.0:" + strconv.Itoa(PeerPort)}}
	ec.AdvertisePeerUrls = []url.URL{peer}
	ec.ListenClientUrls = []url.URL{
		{Scheme: "https", Host: "0.0.0.0:" + strconv.Itoa(ClientPort)},
		{Scheme: "unix", Host: c.Socket},
	}
	ec.AdvertiseClientUrls = []url.URL{client}
	ec.InitialCluster = c.Name + "=" + peer.String()
	ec.InitialClusterToken = c.Cluster
	ec.ClusterState = embed.ClusterStateFlagExisting
	if c.New {
		ec.ClusterState = embed.ClusterStateFlagNew
	}
	ec.ClientTLSInfo = transport.TLSInfo{
		CertFile: c.PKI.Cert(), KeyFile: c.PKI.Key(),
		TrustedCAFile: c.PKI.Trusted(), ClientCertAuth: true,
	}
	ec.PeerTLSInfo = transport.TLSInfo{
		CertFile: c.PKI.Cert(), KeyFile: c.PKI.Key(),
		TrustedCAFile: c.PKI.CA(), ClientCertAuth: true, CRLFile: c.PKI.CRL(),
	}
	ec.AutoCompactionMode = embed.CompactorModePeriodic
	ec.AutoCompactionRetention = "1h"
	ec.Logger = "zap"
	ec.ZapLoggerBuilder = embed.NewZapLoggerBuilder(zapLogger(c.Log.With("service", "etcd"), zapcore.WarnLevel))
	return ec
}

// Start starts the member and waits until it serves, then connects a
// client over the local socket. On failure, everything started is closed.
func Start(ctx context.Context, cfg Config) (c *Consensus, err error) {
	if err := os.MkdirAll(filepath.Dir(cfg.Socket), 0o700); err != nil {
		return nil, err
	}
	_ = os.Remove(cfg.Socket)
	e, err := embed.StartEtcd(cfg.embed())
	if err != nil {
		return nil, fmt.Errorf("starting etcd: %w", err)
	}
	defer func() {
		if err != nil {
			e.Close()
		}
	}()
	select {
	case <-e.Server.ReadyNotify():
	case err := <-e.Err():
		return nil, fmt.Errorf("etcd failed while starting: %w", err)
	case <-time.After(startTimeout):
		return nil, fmt.Errorf("etcd did not become ready within %v", startTimeout)
	case <-ctx.Done():
		return nil, ctx.Err()
	}
	client, err := clientv3.New(clientv3.Config{
		Endpoints:   []string{"unix://" + cfg.Socket},
		DialTimeout: 10 * time.Second,
		Logger:      zapLogger(cfg.Log.With("service", "etcd-client"), zapcore.WarnLevel),
	})
	if err != nil {
		return nil, fmt.Errorf("connecting to etcd: %w", err)
	}
	return &Consensus{cfg: cfg, etcd: e, Client: client}, nil
}

// ClusterID and MemberID identify the cluster and this member.
func (c *Consensus) ClusterID() uint64 { return uint64(c.etcd.Server.Cluster().ID()) }
func (c *Consensus) MemberID() uint64  { return uint64(c.etcd.Server.MemberID()) }

// Run keeps the CRL file current and promotes learners until ctx ends or
// etcd fails, then closes the member. Shutdown order:
//  1. the watchers stop with ctx;
//  2. the client closes;
//  3. etcd stops serving and closes its data.
func (c *Consensus) Run(ctx context.Context) error {
	defer c.Close()
	// Stops the watchers (before Close, deferred earlier) whatever ends Run.
	ctx, cancel := context.WithCancel(ctx)
	defer cancel()
	errs := make(chan error, 2)
	go func() { errs <- c.watchCRL(ctx) }()
	go func() { errs <- c.autopromote(ctx) }()
	select {
	case <-ctx.Done():
		return ctx.Err()
	case err := <-c.etcd.Err():
		return fmt.Errorf("etcd: %w", err)
	case err := <-errs:
		if errors.Is(err, context.Canceled) {
			return err
		}
		return fmt.Errorf("consensus: %w", err)
	}
}

// Close stops the member.
func (c *Consensus) Close() {
	c.Client.Close()
	c.etcd.Close()
}
