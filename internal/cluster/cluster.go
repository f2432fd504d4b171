package cluster

import (
	"context"
	"crypto/rand"
	"encoding/hex"
	"fmt"
	"log/slog"
	"net"
	"net/netip"
	"os"
	"path/filepath"
	"strconv"
	"time"

	clientv3 "go.etcd.io/etcd/client/v3"

	"github.com/borough-os/borough/esp"
	"github.com/borough-os/borough/internal/consensus"
	"github.com/borough-os/borough/internal/enrolment"
	"github.com/borough-os/borough/internal/pki"
	"github.com/borough-os/borough/internal/supervisor"
)

// Socket is where local clients reach etcd.
const Socket = "/run/borough/etcd.sock"

// Config is what the manager needs.
type Config struct {
	Enrolment *enrolment.Enrolment
	// FreshData says the data volume was created on this boot.
	FreshData bool
	// IP is the node's address.
	IP netip.Addr
	// ESPRoot and DataRoot are where the ESP and data volume are mounted.
	ESPRoot, DataRoot string
	// Log is the node's root logger: transitions are node-level events.
	Log *slog.Logger
}

// Manager is the cluster manager.
type Manager struct {
	cfg Config
	m   machine
}

// New returns a manager for a node in state New.
func New(cfg Config) *Manager {
	return &Manager{cfg: cfg, m: machine{state: StateNew, log: cfg.Log}}
}

// Fail puts the node in Failed for a reason found before Run, such as a
// bad enrolment config.
func (mg *Manager) Fail(reason error) {
	mg.m.fail(reason)
}

func (mg *Manager) espRecord() string { return esp.NodeState.In(mg.cfg.ESPRoot) }
func (mg *Manager) dataRecord() string {
	return filepath.Join(mg.cfg.DataRoot, "borough", "node-state.json")
}
func (mg *Manager) etcdDir() string { return filepath.Join(mg.cfg.DataRoot, "etcd") }
func (mg *Manager) pkiFiles() consensus.Files {
	return consensus.Files{Dir: filepath.Join(mg.cfg.DataRoot, "pki")}
}

// Run brings the node into its cluster and runs the member until ctx
// ends. A failure puts the node in Failed, with the reason logged, and
// Run returns nil: a failed node stays up and says why, it does not loop.
func (mg *Manager) Run(ctx context.Context) error {
	c, err := mg.start(ctx)
	if err != nil {
		if ctx.Err() != nil {
			return ctx.Err()
		}
		mg.m.fail(err)
		return nil
	}
	mg.m.to(StateRunning)
	mg.cfg.Log.Info("node running", "cluster", c.cfg.Cluster, "member", c.cfg.Name,
		"client", net.JoinHostPort(mg.cfg.IP.String(), strconv.Itoa(consensus.ClientPort)))
	err = c.Run(ctx)
	if ctx.Err() != nil {
		return ctx.Err()
	}
	// Running has no way back but a fresh start: reboot into Restarting.
	return supervisor.Fatal(fmt.Errorf("the cluster member stopped: %w", err))
}

// member is a started consensus member and its config.
type member struct {
	*consensus.Consensus
	cfg consensus.Config
}

func (mg *Manager) start(ctx context.Context) (*member, error) {
	espRec, err := readRecord(mg.espRecord())
	if err != nil {
		return nil, err
	}
	dataRec, err := readRecord(mg.dataRecord())
	if err != nil {
		return nil, err
	}
	d := decide(espRec, dataRec, mg.cfg.FreshData)
	if d.Next == StateFailed {
		return nil, d.Reason
	}
	mg.m.to(d.Next)
	if d.Next == StateRestarting {
		return mg.restart(ctx, d.Record)
	}
	return mg.bootstrap(ctx, d.Record)
}

func (mg *Manager) consensusConfig(name string, isNew bool) consensus.Config {
	return consensus.Config{
		Name: name, Cluster: mg.cfg.Enrolment.ClusterName,
		DataDir: mg.etcdDir(), PKI: mg.pkiFiles(),
		IP: mg.cfg.IP, New: isNew, Socket: Socket,
		Log: mg.cfg.Log.With("service", "consensus"),
	}
}

// bootstrap creates the cluster. prev is the record of a bootstrap that
// did not finish, whose leftovers it removes.
func (mg *Manager) bootstrap(ctx context.Context, prev *Record) (*member, error) {
	name := newName()
	if prev != nil {
		mg.cfg.Log.Warn("a previous bootstrap did not finish; starting it over", "node", prev.Node)
		name = prev.Node
		for _, dir := range []string{mg.etcdDir(), mg.pkiFiles().Dir} {
			if err := os.RemoveAll(dir); err != nil {
				return nil, fmt.Errorf("removing %s of the unfinished bootstrap: %w", dir, err)
			}
		}
	}
	rec := &Record{Phase: PhaseBootstrapping, Cluster: mg.cfg.Enrolment.ClusterName, Node: name}
	if err := mg.writeRecords(rec); err != nil {
		return nil, err
	}
	ca, err := mg.writePKI(name)
	if err != nil {
		return nil, err
	}
	cfg := mg.consensusConfig(name, true)
	c, err := consensus.Start(ctx, cfg)
	if err != nil {
		return nil, err
	}
	if err := mg.storeCluster(ctx, c.Client, ca); err != nil {
		c.Close()
		return nil, err
	}
	rec.Phase = PhaseMember
	rec.ClusterID = strconv.FormatUint(c.ClusterID(), 16)
	rec.MemberID = strconv.FormatUint(c.MemberID(), 16)
	if err := mg.writeRecords(rec); err != nil {
		c.Close()
		return nil, err
	}
	mg.cfg.Log.Info("cluster created", "cluster", rec.Cluster, "id", rec.ClusterID,
		"ca_fingerprint", pki.Fingerprint(ca.Cert))
	return &member{Consensus: c, cfg: cfg}, nil
}

// restart starts the member from its data. The cluster is the record's:
// an enrolment config applies only to a node's first boot.
func (mg *Manager) restart(ctx context.Context, rec *Record) (*member, error) {
	if name := mg.cfg.Enrolment.ClusterName; name != rec.Cluster {
		mg.cfg.Log.Warn("the enrolment config names cluster "+name+", but this node is a member of "+rec.Cluster+
			"; an enrolment config applies only to a node's first boot", "cluster", rec.Cluster)
	}
	cfg := mg.consensusConfig(rec.Node, false)
	cfg.Cluster = rec.Cluster
	c, err := consensus.Start(ctx, cfg)
	if err != nil {
		return nil, err
	}
	if id := strconv.FormatUint(c.ClusterID(), 16); id != rec.ClusterID {
		c.Close()
		return nil, fmt.Errorf("etcd's data is of cluster %s, the node state record says %s", id, rec.ClusterID)
	}
	// The ESP's record may be behind the data volume's: bring it along.
	if err := writeRecord(mg.espRecord(), rec); err != nil {
		c.Close()
		return nil, err
	}
	caPEM, err := os.ReadFile(cfg.PKI.CA())
	if err != nil {
		c.Close()
		return nil, err
	}
	if ca, err := pki.ParseCertPEM(caPEM); err == nil {
		mg.cfg.Log.Info("rejoined cluster", "cluster", rec.Cluster, "id", rec.ClusterID,
			"ca_fingerprint", pki.Fingerprint(ca))
	}
	return &member{Consensus: c, cfg: cfg}, nil
}

// writeRecords writes rec to the data volume, then to the ESP.
func (mg *Manager) writeRecords(rec *Record) error {
	if err := writeRecord(mg.dataRecord(), rec); err != nil {
		return err
	}
	return writeRecord(mg.espRecord(), rec)
}

// writePKI creates the cluster CA and this node's certificate, and writes
// the files etcd reads.
func (mg *Manager) writePKI(name string) (*pki.CA, error) {
	now := time.Now()
	ca, err := pki.NewCA(mg.cfg.Enrolment.ClusterName, now)
	if err != nil {
		return nil, err
	}
	node, err := ca.Issue(name, []net.IP{mg.cfg.IP.AsSlice(), net.IPv4(127, 0, 0, 1), net.IPv6loopback},
		[]string{name, "localhost"}, now)
	if err != nil {
		return nil, err
	}
	key, err := pki.KeyPEM(node.Key)
	if err != nil {
		return nil, err
	}
	crl, err := ca.CRL(1, nil, now)
	if err != nil {
		return nil, err
	}
	trusted := pki.CertPEM(ca.Cert)
	if owner := mg.cfg.Enrolment.Owner; owner != nil {
		trusted = append(trusted, pki.CertPEM(owner)...)
	}
	f := mg.pkiFiles()
	if err := os.MkdirAll(f.Dir, 0o700); err != nil {
		return nil, err
	}
	for path, data := range map[string][]byte{
		f.CA():      pki.CertPEM(ca.Cert),
		f.Cert():    append(pki.CertPEM(node.Cert), pki.CertPEM(ca.Cert)...),
		f.Key():     key,
		f.Trusted(): trusted,
		f.CRL():     crl,
	} {
		if err := os.WriteFile(path, data, 0o600); err != nil {
			return nil, fmt.Errorf("writing %s: %w", path, err)
		}
	}
	return ca, nil
}

// storeCluster records the cluster's CA, CRL and owner in etcd.
func (mg *Manager) storeCluster(ctx context.Context, c *clientv3.Client, ca *pki.CA) error {
	key, err := pki.KeyPEM(ca.Key)
	if err != nil {
		return err
	}
	crl, err := os.ReadFile(mg.pkiFiles().CRL())
	if err != nil {
		return err
	}
	ops := []clientv3.Op{
		clientv3.OpPut(consensus.KeyCluster, mg.cfg.Enrolment.ClusterName),
		clientv3.OpPut(consensus.KeyCACert, string(pki.CertPEM(ca.Cert))),
		clientv3.OpPut(consensus.KeyCAKey, string(key)),
		clientv3.OpPut(consensus.KeyCRL, string(crl)),
	}
	if owner := mg.cfg.Enrolment.Owner; owner != nil {
		ops = append(ops, clientv3.OpPut(consensus.KeyOwnerCert, string(pki.CertPEM(owner))))
	}
	if _, err := c.Txn(ctx).Then(ops...).Commit(); err != nil {
		return fmt.Errorf("storing the cluster CA in etcd: %w", err)
	}
	return nil
}

func newName() string {
	b := make([]byte, 4)
	rand.Read(b)
	return "node-" + hex.EncodeToString(b)
}
