package escrow

import (
	"crypto/ecdh"
	"crypto/hpke"
	"crypto/rand"
	"fmt"
)

// The HPKE suite: DHKEM(X25519) (from the keys' type), HKDF-SHA256,
// ChaCha20-Poly1305.
var (
	kdf  = hpke.HKDFSHA256()
	aead = hpke.ChaCha20Poly1305()
)

// NewKey returns a new X25519 key pair for HPKE: an escrow key (kept
// TPM-sealed by its node) or a requester's one-time key. The private key
// is 32 bytes.
func NewKey() (priv, pub []byte, err error) {
	k, err := ecdh.X25519().GenerateKey(rand.Reader)
	if err != nil {
		return nil, nil, err
	}
	return k.Bytes(), k.PublicKey().Bytes(), nil
}

// OpenEnvelope opens an envelope as its holder, with the holder's escrow
// private key, for the node and epoch of binding b. It returns the share.
func OpenEnvelope(priv []byte, b Binding, env Envelope) ([]byte, error) {
	share, err := open(priv, b.bytes("share", env.Holder), env.Sealed)
	if err != nil {
		return nil, fmt.Errorf("envelope of %s for %s: %w", env.Holder, b.Node, err)
	}
	return share, nil
}

// SealTransfer seals a share from holder to the requester's one-time
// public key, for binding b.
func SealTransfer(pub []byte, b Binding, holder string, share []byte) ([]byte, error) {
	return seal(pub, b.bytes("transfer", holder), share)
}

// OpenTransfer opens a share holder sent, with the requester's one-time
// private key.
func OpenTransfer(priv []byte, b Binding, holder string, sealed []byte) ([]byte, error) {
	share, err := open(priv, b.bytes("transfer", holder), sealed)
	if err != nil {
		return nil, fmt.Errorf("share from %s: %w", holder, err)
	}
	return share, nil
}

func seal(pub, info, plaintext []byte) ([]byte, error) {
	k, err := ecdh.X25519().NewPublicKey(pub)
	if err != nil {
		return nil, fmt.Errorf("escrow public key: %w", err)
	}
	pk, err := hpke.NewDHKEMPublicKey(k)
	if err != nil {
		return nil, err
	}
	return hpke.Seal(pk, kdf, aead, info, plaintext)
}

func open(priv, info, sealed []byte) ([]byte, error) {
	k, err := ecdh.X25519().NewPrivateKey(priv)
	if err != nil {
		return nil, fmt.Errorf("escrow private key: %w", err)
	}
	sk, err := hpke.NewDHKEMPrivateKey(k)
	if err != nil {
		return nil, err
	}
	pt, err := hpke.Open(sk, kdf, aead, info, sealed)
	if err != nil {
		return nil, ErrWrongKey
	}
	return pt, nil
}

// PublicKey returns the public key of an escrow private key.
func PublicKey(priv []byte) ([]byte, error) {
	k, err := ecdh.X25519().NewPrivateKey(priv)
	if err != nil {
		return nil, fmt.Errorf("escrow private key: %w", err)
	}
	return k.PublicKey().Bytes(), nil
}
