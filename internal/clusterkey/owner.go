package clusterkey

import (
	"context"
	"crypto/tls"
	"encoding/json"
	"errors"
	"fmt"
	"os"
	"slices"

	"github.com/borough-os/borough/esp"
	"github.com/borough-os/borough/internal/escrow"
	"github.com/borough-os/borough/internal/pki"
	"github.com/borough-os/borough/internal/unlock"
)

// The owner's unlock. A node whose peers are gone for good (a majority of
// its cluster's voters lost) waits for shares that never come. While Get
// waits, it also takes the CUK from the node's owner (borough node
// unlock), through the node API, which runs for that wait (WhileLocked):
// Locked gives the owner the node's keys sealed to the owner
// (esp.OwnerRecovery, bound to the node's key) and a key made for this
// wait; Unlock takes the CUK sealed to that key, once the record's hash
// of the CUK matches it. These, Identity and Place answer for a nil
// Keeper too (a node with none yet): not waiting, no identity, no place.

// ErrNotWaiting refuses an owner's unlock of a node that does not wait
// for its CUK.
var ErrNotWaiting = errors.New("the node is not waiting for its cluster unlock key")

// wait is the owner's way in while Get waits for the CUK.
type wait struct {
	record *escrow.OwnerRecovery
	// raw is the record as on the ESP, for the owner to open.
	raw []byte
	// priv and pub are the wait's one-time key, to which the owner seals
	// the CUK.
	priv, pub []byte
	// cuk takes the owner's CUK.
	cuk chan []byte
	// why the owner cannot unlock, if it cannot.
	why error
}

// Identity is the node's certificate on its ESP and its key, with the CA
// after it as a member's, which the node API presents while the data
// volume is locked: the owner's record is bound to that key.
func (k *Keeper) Identity() (*tls.Certificate, error) {
	if k.id == nil {
		return nil, errors.New("no identity on the ESP")
	}
	c := k.id.Cert
	c.Certificate = append(slices.Clip(c.Certificate), k.id.CA.Raw)
	return &c, nil
}

// Locked returns, while Get waits for the CUK, the node's record sealed
// to its owner as on the ESP and the public key to seal the CUK to.
func (k *Keeper) Locked() (record, key []byte, err error) {
	k.mu.Lock()
	defer k.mu.Unlock()
	switch w := k.waiting; {
	case w == nil:
		return nil, nil, ErrNotWaiting
	case w.why != nil:
		return nil, nil, w.why
	default:
		return w.raw, w.pub, nil
	}
}

// SealedOwner returns, while Get waits for the CUK, the fingerprint of the
// owner the node's record is sealed to; "" otherwise.
func (k *Keeper) SealedOwner() string {
	k.mu.Lock()
	defer k.mu.Unlock()
	if w := k.waiting; w != nil && w.why == nil {
		return w.record.Owner
	}
	return ""
}

// Unlock hands Get the CUK the owner sealed to the wait's key, once it
// checks against the node's record.
func (k *Keeper) Unlock(sealed []byte) error {
	k.mu.Lock()
	defer k.mu.Unlock()
	w := k.waiting
	switch {
	case w == nil:
		return ErrNotWaiting
	case w.why != nil:
		return w.why
	}
	cuk, err := escrow.OpenOwnerUnlock(w.priv, w.record, sealed)
	if err != nil {
		return err
	}
	select {
	case w.cuk <- cuk:
		return nil
	default:
		return errors.New("the node has its cluster unlock key already")
	}
}

// await waits for the CUK from the peers in addrs, or from the owner,
// running WhileLocked meanwhile, until ctx ends.
func (k *Keeper) await(ctx context.Context, e *escrow.Escrow, addrs map[string]string) ([]byte, error) {
	w := k.openToOwner()
	ctx, cancel := context.WithCancel(ctx)
	served := make(chan struct{})
	go func() {
		defer close(served)
		if k.WhileLocked != nil {
			k.WhileLocked(ctx)
		}
	}()
	defer func() {
		cancel()
		<-served
		k.mu.Lock()
		clear(w.priv)
		k.waiting = nil
		k.mu.Unlock()
	}()
	type result struct {
		cuk []byte
		err error
	}
	peers := make(chan result, 1)
	go func() {
		cuk, err := unlock.Fetch(ctx, k.Log, *k.id, e, addrs)
		peers <- result{cuk, err}
	}()
	select {
	case r := <-peers:
		if r.err != nil && ctx.Err() != nil {
			// Fetch ended because the wait was stopped.
			return nil, fmt.Errorf("stopped waiting for the cluster unlock key: %w", ctx.Err())
		}
		return r.cuk, r.err
	case cuk := <-w.cuk:
		k.Log.Info("the owner sent the cluster unlock key (borough node unlock); it matches this node's record")
		return cuk, nil
	case <-k.GiveUp:
		return nil, errors.New("gave up waiting for the cluster unlock key: the network on trial does not reach the peers")
	case <-ctx.Done():
		return nil, fmt.Errorf("stopped waiting for the cluster unlock key: %w", ctx.Err())
	}
}

// openToOwner makes the wait's one-time key and reads the node's record
// for the owner, saying why the owner cannot unlock the node if it
// cannot; the wait is in force until await returns.
func (k *Keeper) openToOwner() *wait {
	w := &wait{cuk: make(chan []byte, 1)}
	w.raw, w.record, w.why = k.ownerRecord()
	if w.why == nil {
		w.priv, w.pub, w.why = escrow.NewKey()
	}
	if w.why != nil {
		k.Log.Info("the owner cannot unlock this node over its node API: " + w.why.Error())
	}
	k.mu.Lock()
	k.waiting = w
	k.mu.Unlock()
	return w
}

// ownerRecord reads the node's record for its owner, which must be bound
// to the node's key, and the latest the ledger lists: an older one, put
// back with an older ledger, may be sealed to an owner the cluster was
// handed over from, who must open nothing since.
func (k *Keeper) ownerRecord() ([]byte, *escrow.OwnerRecovery, error) {
	raw, err := k.Ledger.Read(esp.OwnerRecovery)
	if errors.Is(err, os.ErrNotExist) {
		return nil, nil, fmt.Errorf("its keys are not sealed to an owner (%s): a cluster without an owner, "+
			"or a config with no_owner_recovery", esp.OwnerRecovery)
	}
	if err != nil {
		return nil, nil, err
	}
	var r escrow.OwnerRecovery
	if err := json.Unmarshal(raw, &r); err != nil {
		return nil, nil, fmt.Errorf("%s: %w", esp.OwnerRecovery, err)
	}
	if !r.Binds(pki.KeyHash(k.id.Cert.Leaf)) {
		return nil, nil, fmt.Errorf("%s was sealed before Borough bound it to the node's key (its owner "+
			"can still open it from the disk: borough recovery)", esp.OwnerRecovery)
	}
	return raw, &r, nil
}
