// Package escrow keeps a node's cluster unlock key (CUK) with its peers,
// so that the node's data volume opens only when enough of them agree:
// a node taken away alone stays locked, and any majority of a cluster
// that lost power brings every member back. Of the cluster layer of the
// keys' map (docs/keys.md), it is the cryptography, with no I/O:
// package clusterkey decides, package unlock carries the shares.
//
// A node's CUK is wrapped (AES-256-GCM) under a key derived from a random
// secret s; s is split with Shamir's scheme (Feldman-verifiable, over the
// Ristretto255 group: github.com/cloudflare/circl) into one share per
// peer, k of which recover it. Each share is sealed with HPKE (RFC 9180,
// Go's crypto/hpke, DHKEM(X25519)) to the escrow key of the peer that
// holds it, which keeps that key sealed to its own TPM. The node keeps the
// whole Escrow (wrapped CUK, commitments, envelopes) on its own ESP:
// peers keep nothing per node. To unlock, the node sends each peer its
// envelope; a peer opens it and returns the share sealed to a one-time key
// of the requester (SealTransfer); with k shares that match the
// commitments, the node recovers s and unwraps its CUK.
//
// Every envelope, transfer and the wrap are bound, through HPKE's info and
// the AEAD's additional data, to a Binding: the cluster, the node, the
// node's key, the holder and the epoch of the split. An envelope copied
// from another node, cluster or holder, or from an earlier split, does not
// open; nor does one asked for with a certificate of another key, though
// it names the node: a holder binds the request to the key of the
// certificate it came with, so a member that signs itself a certificate
// in another's name (each holds the CA key) gets nothing.
//
// k is Threshold(V) for V voters, ⌊V/2⌋: the node and k peers are a
// majority, the same line as etcd's quorum. A one-voter cluster has no
// peer to hold anything (k = 0); its CUK stays sealed on the node.
package escrow

import (
	"bytes"
	"crypto/aes"
	"crypto/cipher"
	"crypto/hkdf"
	"crypto/rand"
	"crypto/sha256"
	"encoding/binary"
	"errors"
	"fmt"
	"maps"
	"slices"

	"github.com/cloudflare/circl/group"
	"github.com/cloudflare/circl/secretsharing"
)

// Version is the version of Escrow this node writes and reads.
const Version = 1

// Threshold is the number of peer shares that unlock a node of a cluster
// with voters voters.
func Threshold(voters int) int {
	return voters / 2
}

// Binding names what an escrow belongs to.
type Binding struct {
	Cluster string
	// Node is the node whose CUK it is.
	Node string
	// Epoch numbers the node's splits; a new split has a higher one.
	Epoch uint64
	// Key is the SHA-256 of the node's public key (pki.KeyHash of its
	// certificate), whose holder alone may ask for the shares; empty in
	// an escrow split before keys were bound, which its node splits again.
	Key []byte `json:",omitempty"`
}

// bytes encodes b, with holder (empty for the wrap), unambiguously: each
// string length-prefixed, and the key, if any, after the epoch (so that
// an escrow split before keys were bound encodes as it did).
func (b Binding) bytes(purpose, holder string) []byte {
	out := []byte("borough/escrow/v1/" + purpose)
	for _, s := range []string{b.Cluster, b.Node, holder} {
		out = binary.BigEndian.AppendUint32(out, uint32(len(s)))
		out = append(out, s...)
	}
	out = binary.BigEndian.AppendUint64(out, b.Epoch)
	if len(b.Key) == 0 {
		return out
	}
	out = binary.BigEndian.AppendUint32(out, uint32(len(b.Key)))
	return append(out, b.Key...)
}

// Holder is a peer that holds a share, with its escrow public key
// (X25519, 32 bytes).
type Holder struct {
	Name string
	Key  []byte
}

// Envelope is one holder's share, sealed to its escrow key.
type Envelope struct {
	Holder string `json:"holder"`
	// Key is the holder's escrow public key the share is sealed to.
	Key    []byte `json:"key"`
	Sealed []byte `json:"sealed"`
}

// Escrow is what a node keeps on its ESP.
type Escrow struct {
	Version int     `json:"version"`
	Binding Binding `json:"binding"`
	// K shares recover the secret.
	K int `json:"k"`
	// Commitments are the Feldman commitments to the split polynomial.
	Commitments [][]byte `json:"commitments"`
	// Wrapped is the CUK sealed under the key derived from the secret.
	Wrapped   []byte     `json:"wrapped"`
	Envelopes []Envelope `json:"envelopes"`
}

var g = group.Ristretto255

// Split escrows cuk with holders (distinct names), k of which recover it.
func Split(cuk []byte, b Binding, k int, holders []Holder) (*Escrow, error) {
	if k < 1 || k > len(holders) {
		return nil, fmt.Errorf("threshold %d with %d holders: want 1 to %d", k, len(holders), len(holders))
	}
	names := make(map[string]bool)
	for _, h := range holders {
		if h.Name == "" || h.Name == b.Node || names[h.Name] {
			return nil, fmt.Errorf("holder %q: empty, the node itself, or listed twice", h.Name)
		}
		names[h.Name] = true
	}
	secret := g.RandomScalar(rand.Reader)
	ss := secretsharing.New(rand.Reader, uint(k-1), secret)
	wrapped, err := wrap(secret, b, cuk)
	if err != nil {
		return nil, err
	}
	e := &Escrow{Version: Version, Binding: b, K: k, Wrapped: wrapped}
	for _, c := range ss.CommitSecret() {
		cb, err := c.MarshalBinary()
		if err != nil {
			return nil, err
		}
		e.Commitments = append(e.Commitments, cb)
	}
	for i, share := range ss.Share(uint(len(holders))) {
		sb, err := marshalShare(share)
		if err != nil {
			return nil, err
		}
		sealed, err := seal(holders[i].Key, b.bytes("share", holders[i].Name), sb)
		clear(sb)
		if err != nil {
			return nil, fmt.Errorf("sealing the share of %s: %w", holders[i].Name, err)
		}
		e.Envelopes = append(e.Envelopes, Envelope{Holder: holders[i].Name, Key: holders[i].Key, Sealed: sealed})
	}
	return e, nil
}

// SameHolders says whether e is split k ways among exactly holders, with
// the keys they have now: if not, the node splits again.
func (e *Escrow) SameHolders(k int, holders []Holder) bool {
	if e.K != k || len(e.Envelopes) != len(holders) {
		return false
	}
	for _, h := range holders {
		env, ok := e.Envelope(h.Name)
		if !ok || !bytes.Equal(env.Key, h.Key) {
			return false
		}
	}
	return true
}

// Envelope returns holder's envelope.
func (e *Escrow) Envelope(holder string) (Envelope, bool) {
	i := slices.IndexFunc(e.Envelopes, func(v Envelope) bool { return v.Holder == holder })
	if i < 0 {
		return Envelope{}, false
	}
	return e.Envelopes[i], true
}

// Recover returns the CUK from shares by holder, as the holders sent them
// (OpenTransfer). Shares that do not match the commitments are left out
// and named in the error if fewer than K good ones remain.
func (e *Escrow) Recover(shares map[string][]byte) ([]byte, error) {
	if e.K < 1 || len(e.Commitments) != e.K {
		return nil, fmt.Errorf("escrow with threshold %d and %d commitments", e.K, len(e.Commitments))
	}
	com := make(secretsharing.SecretCommitment, len(e.Commitments))
	for i, cb := range e.Commitments {
		com[i] = g.NewElement()
		if err := com[i].UnmarshalBinary(cb); err != nil {
			return nil, fmt.Errorf("commitment %d: %w", i, err)
		}
	}
	var good []secretsharing.Share
	var bad []string
	seen := make(map[string]bool)
	for _, holder := range slices.Sorted(maps.Keys(shares)) {
		s, err := unmarshalShare(shares[holder])
		if err != nil || !secretsharing.Verify(uint(e.K-1), s, com) {
			bad = append(bad, holder)
			continue
		}
		// circl's Recover panics on shares with the same ID.
		id, _ := s.ID.MarshalBinary()
		if seen[string(id)] {
			continue
		}
		seen[string(id)] = true
		good = append(good, s)
	}
	if len(good) < e.K {
		return nil, fmt.Errorf("%d of %d shares (bad: %v)", len(good), e.K, bad)
	}
	secret, err := secretsharing.Recover(uint(e.K-1), good)
	if err != nil {
		return nil, err
	}
	return unwrap(secret, e.Binding, e.Wrapped)
}

// ErrWrongKey says a wrapped CUK, an envelope or a transfer does not open
// with the key and binding given.
var ErrWrongKey = errors.New("does not open with this key and binding")

// wrapKey derives the wrap's AES-256 key from the secret.
func wrapKey(secret group.Scalar, b Binding) ([]byte, error) {
	sb, err := secret.MarshalBinary()
	if err != nil {
		return nil, err
	}
	defer clear(sb)
	return hkdf.Key(sha256.New, sb, nil, string(b.bytes("wrap", "")), 32)
}

func wrap(secret group.Scalar, b Binding, cuk []byte) ([]byte, error) {
	aead, err := wrapAEAD(secret, b)
	if err != nil {
		return nil, err
	}
	nonce := make([]byte, aead.NonceSize())
	if _, err := rand.Read(nonce); err != nil {
		return nil, err
	}
	return aead.Seal(nonce, nonce, cuk, b.bytes("wrap", "")), nil
}

func unwrap(secret group.Scalar, b Binding, wrapped []byte) ([]byte, error) {
	aead, err := wrapAEAD(secret, b)
	if err != nil {
		return nil, err
	}
	if len(wrapped) < aead.NonceSize() {
		return nil, fmt.Errorf("wrapped CUK: %w", ErrWrongKey)
	}
	cuk, err := aead.Open(nil, wrapped[:aead.NonceSize()], wrapped[aead.NonceSize():], b.bytes("wrap", ""))
	if err != nil {
		return nil, fmt.Errorf("wrapped CUK: %w", ErrWrongKey)
	}
	return cuk, nil
}

func wrapAEAD(secret group.Scalar, b Binding) (cipher.AEAD, error) {
	key, err := wrapKey(secret, b)
	if err != nil {
		return nil, err
	}
	defer clear(key)
	block, err := aes.NewCipher(key)
	if err != nil {
		return nil, err
	}
	return cipher.NewGCM(block)
}

// marshalShare encodes a share as its ID and value, 32 bytes each.
func marshalShare(s secretsharing.Share) ([]byte, error) {
	id, err := s.ID.MarshalBinary()
	if err != nil {
		return nil, err
	}
	v, err := s.Value.MarshalBinary()
	if err != nil {
		return nil, err
	}
	return append(id, v...), nil
}

func unmarshalShare(b []byte) (secretsharing.Share, error) {
	if len(b) != 64 {
		return secretsharing.Share{}, fmt.Errorf("share of %d bytes, want 64", len(b))
	}
	s := secretsharing.Share{ID: g.NewScalar(), Value: g.NewScalar()}
	if err := s.ID.UnmarshalBinary(b[:32]); err != nil {
		return s, err
	}
	if err := s.Value.UnmarshalBinary(b[32:]); err != nil {
		return s, err
	}
	return s, nil
}
