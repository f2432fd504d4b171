package cluster

import (
	"context"
	"encoding/hex"
	"errors"
	"fmt"
	"os"
	"time"

	clientv3 "go.etcd.io/etcd/client/v3"

	"github.com/borough-os/borough/internal/consensus"
	"github.com/borough-os/borough/internal/keyspace"
	"github.com/borough-os/borough/internal/nodestate"
	"github.com/borough-os/borough/internal/pki"
	"github.com/borough-os/borough/internal/ticket"
)

// bootstrap creates the cluster. prev is the record of a bootstrap that
// did not finish, whose leftovers it removes.
func (mg *Manager) bootstrap(ctx context.Context, prev *nodestate.Record) (*consensus.Consensus, *nodestate.Record, error) {
	cluster := mg.cfg.Enrolment.ClusterName
	name := newName()
	if prev != nil {
		mg.log.Warn("a previous bootstrap did not finish; starting it over", "node", prev.Node)
		name, cluster = prev.Node, prev.Cluster
		for _, dir := range []string{mg.etcdDir(), mg.pkiFiles().Dir} {
			if err := os.RemoveAll(dir); err != nil {
				return nil, nil, fmt.Errorf("removing %s of the unfinished bootstrap: %w", dir, err)
			}
		}
	}
	if mg.cfg.Enrolment.Restore != nil {
		return mg.restore(ctx, cluster, name)
	}
	rec := &nodestate.Record{Phase: nodestate.PhaseBootstrapping, Cluster: cluster, Node: name}
	now := time.Now()
	ca, err := pki.NewCA(rec.Cluster, now)
	if err != nil {
		return nil, nil, err
	}
	crl, err := ca.CRL(1, nil, now)
	if err != nil {
		return nil, nil, err
	}
	// The data volume's record goes in one batch with the PKI files.
	node, err := mg.writePKI(rec, ca, crl)
	if err != nil {
		return nil, nil, err
	}
	if err := mg.writeESPRecord(rec); err != nil {
		return nil, nil, err
	}
	c, err := consensus.Start(ctx, mg.consensusConfig(name, cluster, consensus.ModeNew))
	if err != nil {
		return nil, nil, err
	}
	if err := mg.storeCluster(ctx, c, cluster, ca, name, node); err != nil {
		c.Close()
		return nil, nil, err
	}
	if err := mg.recordMember(rec, c); err != nil {
		c.Close()
		return nil, nil, err
	}
	mg.log.Info("cluster created", "cluster", rec.Cluster, "id", rec.ClusterID,
		"ca_fingerprint", pki.Fingerprint(ca.Cert))
	return c, rec, nil
}

// writePKI issues this node's certificate of the cluster CA ca, and
// writes the files etcd reads, with the CRL crl, together with the data
// volume's record rec: a bootstrap begun is one write of all of them (the
// ESP's record follows; decide starts over from the data volume's alone),
// where writing the record on its own first took two syncs more.
func (mg *Manager) writePKI(rec *nodestate.Record, ca *pki.CA, crl []byte) (*pki.Cert, error) {
	node, err := ca.Issue(rec.Node, mg.ips(), []string{rec.Node, "localhost"}, time.Now())
	if err != nil {
		return nil, err
	}
	record, err := nodestate.RecordFile(mg.dataRecord(), rec)
	if err != nil {
		return nil, err
	}
	admission, err := mg.founderAdmission(rec.Node, node)
	if err != nil {
		return nil, err
	}
	err = mg.pkiFiles().Write(consensus.Bundle{
		CA: ca.Cert, Cert: node.Cert, Key: node.Key, Owner: mg.cfg.Enrolment.Owner, CRL: crl, CAKey: ca.Key,
		Admission: admission,
	}, record)
	return node, err
}

// founderAdmission claims the first node's ticket of the node's bootstrap
// config, if it has one, for node name's key, and returns the node's
// admission; nil without one (the owner then admits the node with its
// first ticket: admin.MintTicket). The config's check opened the ticket
// against the owner and its secret (ticket.OpenFounder).
func (mg *Manager) founderAdmission(name string, node *pki.Cert) ([]byte, error) {
	e := mg.cfg.Enrolment
	if e.FounderTicket == nil {
		return nil, nil
	}
	return ticket.NewAdmission(e.FounderStatement, ticket.Prove(e.FounderTicket, name, pki.KeyHash(node.Cert)))
}

// storeCluster records the cluster's CA, CRL and first node, with its
// key and admission, in etcd. A first node without an admission gets it
// when the owner first mints a ticket (admin.MintTicket).
func (mg *Manager) storeCluster(ctx context.Context, member *consensus.Consensus, cluster string, ca *pki.CA, name string, node *pki.Cert) error {
	c := member.Client
	key, err := pki.KeyPEM(ca.Key)
	if err != nil {
		return err
	}
	crl, err := os.ReadFile(mg.pkiFiles().CRL())
	if err != nil {
		return err
	}
	admission, err := os.ReadFile(mg.pkiFiles().Admission())
	if err != nil && !errors.Is(err, os.ErrNotExist) {
		return err
	}
	rec, err := keyspace.NodeRecord{
		Serials: []string{node.Cert.SerialNumber.Text(16)}, MemberID: member.MemberID(), Admission: admission,
	}.Marshal()
	if err != nil {
		return err
	}
	ops := []clientv3.Op{
		clientv3.OpPut(keyspace.Cluster, cluster),
		clientv3.OpPut(keyspace.CACert, string(pki.CertPEM(ca.Cert))),
		clientv3.OpPut(keyspace.CAKey, string(key)),
		clientv3.OpPut(keyspace.CRL, string(crl)),
		clientv3.OpPut(keyspace.Nodes+name, string(rec)),
		clientv3.OpPut(keyspace.NodeKeys+hex.EncodeToString(pki.KeyHash(node.Cert)), name),
	}
	if _, err := c.Txn(ctx).Then(ops...).Commit(); err != nil {
		return fmt.Errorf("storing the cluster CA in etcd: %w", err)
	}
	return nil
}
