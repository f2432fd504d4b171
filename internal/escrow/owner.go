package escrow

import (
	"bytes"
	"crypto/ecdh"
	"crypto/ecdsa"
	"crypto/hpke"
	"crypto/sha256"
	"crypto/subtle"
	"encoding/json"
	"errors"
	"fmt"
)

// OwnerRecovery is a node's two unlock keys sealed to its cluster owner's
// public key (HPKE, DHKEM(P-256): the owner's key is ECDSA P-256), kept on
// the node's ESP: with the owner's private key, the node's volume opens
// from its disk alone, whatever became of the cluster; and a node that
// lost its peers for good is unlocked by its owner over its node API.
//
// For that remote unlock the record also says, bound into the seal so
// that nobody changes them without the owner's key failing to open it,
// whose it is and what the node checks: NodeKey, the hash of the node's
// key (pki.KeyHash), which the owner's tool compares with the key of the
// node it talks to before it sends anything, so that a disk's copy of the
// record served by another machine, or a member that has the CA's key
// posing under the node's name, gets nothing; and CUKCheck, a hash of the
// CUK, against which the node checks the key it is sent before it tries
// its volume with it.
type OwnerRecovery struct {
	Version int    `json:"version"`
	Cluster string `json:"cluster"`
	Node    string `json:"node"`
	// Owner is the fingerprint of the owner certificate sealed to.
	Owner    string `json:"owner"`
	NodeKey  []byte `json:"node_key,omitempty"`
	CUKCheck []byte `json:"cuk_check,omitempty"`
	Sealed   []byte `json:"sealed"`
}

// ownerKeys is what OwnerRecovery seals.
type ownerKeys struct {
	LUK []byte `json:"luk"`
	CUK []byte `json:"cuk"`
}

// info binds the record's cleartext; a record from before NodeKey and
// CUKCheck encodes as it did.
func (r *OwnerRecovery) info() []byte {
	return Binding{Cluster: r.Cluster, Node: r.Node, Key: r.NodeKey}.bytes("owner-recovery", string(r.CUKCheck))
}

// cukCheck is the hash of cuk the node checks an owner's unlock against.
func cukCheck(cluster, node string, cuk []byte) []byte {
	h := sha256.New()
	h.Write(Binding{Cluster: cluster, Node: node}.bytes("cuk-check", ""))
	h.Write(cuk)
	return h.Sum(nil)
}

// SealForOwner seals the node's unlock keys to the owner's public key;
// nodeKey is the hash of the node's key (pki.KeyHash).
func SealForOwner(owner *ecdsa.PublicKey, fingerprint, cluster, node string, nodeKey, luk, cuk []byte) (*OwnerRecovery, error) {
	pub, err := owner.ECDH()
	if err != nil {
		return nil, fmt.Errorf("the owner's key: %w", err)
	}
	if pub.Curve() != ecdh.P256() {
		return nil, errors.New("the owner's key is not on P-256")
	}
	pk, err := hpke.NewDHKEMPublicKey(pub)
	if err != nil {
		return nil, err
	}
	plain, err := json.Marshal(ownerKeys{LUK: luk, CUK: cuk})
	if err != nil {
		return nil, err
	}
	defer clear(plain)
	r := &OwnerRecovery{Version: Version, Cluster: cluster, Node: node, Owner: fingerprint,
		NodeKey: bytes.Clone(nodeKey), CUKCheck: cukCheck(cluster, node, cuk)}
	if r.Sealed, err = hpke.Seal(pk, kdf, aead, r.info(), plain); err != nil {
		return nil, err
	}
	return r, nil
}

// Binds says whether the record can serve a remote unlock of the node
// whose key hashes to nodeKey: it names that key and checks the CUK.
func (r *OwnerRecovery) Binds(nodeKey []byte) bool {
	return len(r.CUKCheck) > 0 && len(r.NodeKey) > 0 && bytes.Equal(r.NodeKey, nodeKey)
}

// Checks says whether cuk is the CUK the record holds.
func (r *OwnerRecovery) Checks(cuk []byte) bool {
	return len(r.CUKCheck) > 0 && subtle.ConstantTimeCompare(cukCheck(r.Cluster, r.Node, cuk), r.CUKCheck) == 1
}

// SealOwnerUnlock seals cuk, which the owner opened from the node's
// record, to the node's one-time key of this boot (NewKey), for the node
// of that record.
func SealOwnerUnlock(pub []byte, r *OwnerRecovery, cuk []byte) ([]byte, error) {
	return seal(pub, Binding{Cluster: r.Cluster, Node: r.Node}.bytes("owner-unlock", ""), cuk)
}

// OpenOwnerUnlock opens, with the node's one-time private key, the CUK its
// owner sealed with SealOwnerUnlock, and checks it against the record.
func OpenOwnerUnlock(priv []byte, r *OwnerRecovery, sealed []byte) ([]byte, error) {
	cuk, err := open(priv, Binding{Cluster: r.Cluster, Node: r.Node}.bytes("owner-unlock", ""), sealed)
	if err != nil {
		return nil, fmt.Errorf("the owner's unlock is not sealed to this boot's key: %w", err)
	}
	if !r.Checks(cuk) {
		clear(cuk)
		return nil, fmt.Errorf("the key the owner sent is not %s's cluster unlock key: %w", r.Node, ErrWrongKey)
	}
	return cuk, nil
}

// Open returns the node's LUK and CUK, with the owner's private key.
func (r *OwnerRecovery) Open(owner *ecdsa.PrivateKey) (luk, cuk []byte, err error) {
	if r.Version != Version {
		return nil, nil, fmt.Errorf("owner recovery of version %d, this tool reads %d", r.Version, Version)
	}
	priv, err := owner.ECDH()
	if err != nil {
		return nil, nil, fmt.Errorf("the owner's key: %w", err)
	}
	sk, err := hpke.NewDHKEMPrivateKey(priv)
	if err != nil {
		return nil, nil, err
	}
	plain, err := hpke.Open(sk, kdf, aead, r.info(), r.Sealed)
	if err != nil {
		return nil, nil, fmt.Errorf("the keys of %s in cluster %s are not sealed to this owner key (sealed to %s): %w",
			r.Node, r.Cluster, r.Owner, ErrWrongKey)
	}
	defer clear(plain)
	var k ownerKeys
	if err := json.Unmarshal(plain, &k); err != nil {
		return nil, nil, err
	}
	return k.LUK, k.CUK, nil
}
