package keyspace

import (
	"context"
	"fmt"

	clientv3 "go.etcd.io/etcd/client/v3"

	"github.com/borough-os/borough/internal/pki"
)

// Value is the value of the i-th operation of a transaction made of gets,
// or nil if that key is missing.
func Value(resp *clientv3.TxnResponse, i int) []byte {
	if kvs := resp.Responses[i].GetResponseRange().Kvs; len(kvs) == 1 {
		return kvs[0].Value
	}
	return nil
}

// ReadCA reads the cluster CA, certificate and key, from etcd.
func ReadCA(ctx context.Context, kv clientv3.KV) (*pki.CA, error) {
	resp, err := kv.Txn(ctx).Then(clientv3.OpGet(CACert), clientv3.OpGet(CAKey)).Commit()
	if err != nil {
		return nil, fmt.Errorf("reading the cluster CA: %w", err)
	}
	cert, err := pki.ParseCertPEM(Value(resp, 0))
	if err != nil {
		return nil, fmt.Errorf("the cluster CA certificate in etcd: %w", err)
	}
	key, err := pki.ParseKeyPEM(Value(resp, 1))
	if err != nil {
		return nil, fmt.Errorf("the cluster CA key in etcd: %w", err)
	}
	return &pki.CA{Cert: cert, Key: key}, nil
}

// AddSerial adds a certificate serial to node name's record, in a
// transaction that fails if the record changed meanwhile. A node without a
// record gets one, with learner as its role; memberID, if not 0, is
// recorded as the node's etcd member.
func AddSerial(ctx context.Context, kv clientv3.KV, name, serial string, learner bool, memberID uint64) error {
	key := Nodes + name
	r, rev, found, err := ReadNode(ctx, kv, name)
	if err != nil {
		return err
	}
	if !found {
		r = NodeRecord{Learner: learner}
	}
	if r.Removed {
		return fmt.Errorf("node %s was removed from the cluster", name)
	}
	if memberID != 0 {
		r.MemberID = memberID
	}
	r.Serials = append(r.Serials, serial)
	b, err := r.Marshal()
	if err != nil {
		return err
	}
	txn, err := kv.Txn(ctx).If(clientv3.Compare(clientv3.ModRevision(key), "=", rev)).
		Then(clientv3.OpPut(key, string(b))).Commit()
	if err != nil {
		return fmt.Errorf("recording node %s: %w", name, err)
	}
	if !txn.Succeeded {
		return fmt.Errorf("the record of node %s changed meanwhile; try again", name)
	}
	return nil
}

// ReadNode reads node name's record and its revision; found is false when
// the cluster has none.
func ReadNode(ctx context.Context, kv clientv3.KV, name string) (r NodeRecord, rev int64, found bool, err error) {
	resp, err := kv.Get(ctx, Nodes+name)
	if err != nil {
		return r, 0, false, fmt.Errorf("reading the record of node %s: %w", name, err)
	}
	if len(resp.Kvs) == 0 {
		return r, 0, false, nil
	}
	if r, err = ParseNodeRecord(resp.Kvs[0].Value); err != nil {
		return r, 0, false, fmt.Errorf("the record of node %s: %w", name, err)
	}
	return r, resp.Kvs[0].ModRevision, true, nil
}
