package keyspace

import (
	"context"
	"errors"
	"fmt"

	"go.etcd.io/etcd/api/v3/mvccpb"
	"go.etcd.io/etcd/api/v3/v3rpc/rpctypes"
	clientv3 "go.etcd.io/etcd/client/v3"

	"github.com/borough-os/borough/internal/pki"
)

// Value is the value of the i-th operation of a transaction made of gets,
// or nil if that key is missing.
func Value(resp *clientv3.TxnResponse, i int) []byte {
	if kv := KV(resp, i); kv != nil {
		return kv.Value
	}
	return nil
}

// KV is the key-value of the i-th operation of a transaction made of
// gets, or nil if that key is missing.
func KV(resp *clientv3.TxnResponse, i int) *mvccpb.KeyValue {
	if kvs := resp.Responses[i].GetResponseRange().Kvs; len(kvs) == 1 {
		return kvs[0]
	}
	return nil
}

// ReadCA reads the cluster CA, certificate and key, from etcd.
func ReadCA(ctx context.Context, kv clientv3.KV) (*pki.CA, error) {
	resp, err := kv.Txn(ctx).Then(clientv3.OpGet(CACert), clientv3.OpGet(CAKey)).Commit()
	if err != nil {
		return nil, fmt.Errorf("reading the cluster CA: %w", err)
	}
	ca, err := pki.ParseCA(Value(resp, 0), Value(resp, 1))
	if err != nil {
		return nil, fmt.Errorf("the cluster's CA in etcd: %w", err)
	}
	return ca, nil
}

// Issue is a certificate the cluster issued to a node, as AddSerial
// records it.
type Issue struct {
	// Serial is the certificate's serial number, hex.
	Serial string
	// Learner is the node's role, if the cluster has no record of it.
	Learner bool
	// MemberID, if not 0, is the node's etcd member.
	MemberID uint64
	// Admission, if not nil, is the node's (NodeRecord.Admission).
	Admission []byte
}

// AddSerial records certificate is of node name (UpdateNode). A node
// without a record gets one. A removed node's record takes no serial.
func AddSerial(ctx context.Context, kv clientv3.KV, name string, is Issue) error {
	_, err := UpdateNode(ctx, kv, name, func(r *NodeRecord, found bool) error {
		if !found {
			r.Learner = is.Learner
		}
		if r.Removed {
			return fmt.Errorf("node %s was removed from the cluster", name)
		}
		if is.MemberID != 0 {
			r.MemberID = is.MemberID
		}
		if is.Admission != nil {
			r.Admission = is.Admission
		}
		r.Serials = append(r.Serials, is.Serial)
		return nil
	})
	return err
}

// UpdateNode changes node name's record with change, which gets the
// record (the zero record if the cluster has none, found false), in a
// transaction that fails if the record changed meanwhile, and returns the
// record written.
func UpdateNode(ctx context.Context, kv clientv3.KV, name string, change func(r *NodeRecord, found bool) error) (NodeRecord, error) {
	r, rev, err := readNode(ctx, kv, name)
	if err != nil {
		return r, err
	}
	if err := change(&r, rev != 0); err != nil {
		return r, err
	}
	b, err := r.Marshal()
	if err != nil {
		return r, err
	}
	key := Nodes + name
	txn, err := kv.Txn(ctx).If(clientv3.Compare(clientv3.ModRevision(key), "=", rev)).
		Then(clientv3.OpPut(key, string(b))).Commit()
	if err != nil {
		return r, fmt.Errorf("recording node %s: %w", name, err)
	}
	if !txn.Succeeded {
		return r, fmt.Errorf("the record of node %s changed meanwhile; try again", name)
	}
	return r, nil
}

// ReadNode reads node name's record: the zero record if the cluster has
// none.
func ReadNode(ctx context.Context, kv clientv3.KV, name string) (NodeRecord, error) {
	r, _, err := readNode(ctx, kv, name)
	return r, err
}

// readNode reads node name's record and its revision, 0 if the cluster
// has none.
func readNode(ctx context.Context, kv clientv3.KV, name string) (NodeRecord, int64, error) {
	var r NodeRecord
	resp, err := kv.Get(ctx, Nodes+name)
	if err != nil {
		return r, 0, fmt.Errorf("reading the record of node %s: %w", name, err)
	}
	if len(resp.Kvs) == 0 {
		return r, 0, nil
	}
	if r, err = ParseNodeRecord(resp.Kvs[0].Value); err != nil {
		return r, 0, fmt.Errorf("the record of node %s: %w", name, err)
	}
	return r, resp.Kvs[0].ModRevision, nil
}

// RootUser makes user an etcd user with the root role, who logs in by the
// common name of a client certificate only: the node's own user and the
// owner's (consensus/auth.go).
func RootUser(ctx context.Context, c *clientv3.Client, user string) error {
	_, err := c.UserAddWithOptions(ctx, user, "", &clientv3.UserAddOptions{NoPassword: true})
	if err != nil && !errors.Is(err, rpctypes.ErrUserAlreadyExist) {
		return fmt.Errorf("adding etcd user %q: %w", user, err)
	}
	if _, err := c.UserGrantRole(ctx, user, "root"); err != nil {
		return fmt.Errorf("granting etcd user %q the root role: %w", user, err)
	}
	return nil
}
