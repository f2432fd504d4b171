package escrow

import (
	"crypto/ecdh"
	"crypto/ecdsa"
	"crypto/hpke"
	"encoding/json"
	"errors"
	"fmt"
)

// OwnerRecovery is a node's two unlock keys sealed to its cluster owner's
// public key (HPKE, DHKEM(P-256): the owner's key is ECDSA P-256), kept on
// the node's ESP: with the owner's private key, the node's volume opens
// from its disk alone, whatever became of the cluster.
type OwnerRecovery struct {
	Version int    `json:"version"`
	Cluster string `json:"cluster"`
	Node    string `json:"node"`
	// Owner is the fingerprint of the owner certificate sealed to.
	Owner  string `json:"owner"`
	Sealed []byte `json:"sealed"`
}

// ownerKeys is what OwnerRecovery seals.
type ownerKeys struct {
	LUK []byte `json:"luk"`
	CUK []byte `json:"cuk"`
}

func ownerInfo(cluster, node string) []byte {
	return Binding{Cluster: cluster, Node: node}.bytes("owner-recovery", "")
}

// SealForOwner seals the node's unlock keys to the owner's public key.
func SealForOwner(owner *ecdsa.PublicKey, fingerprint, cluster, node string, luk, cuk []byte) (*OwnerRecovery, error) {
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
	sealed, err := hpke.Seal(pk, kdf, aead, ownerInfo(cluster, node), plain)
	if err != nil {
		return nil, err
	}
	return &OwnerRecovery{Version: Version, Cluster: cluster, Node: node, Owner: fingerprint, Sealed: sealed}, nil
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
	plain, err := hpke.Open(sk, kdf, aead, ownerInfo(r.Cluster, r.Node), r.Sealed)
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
