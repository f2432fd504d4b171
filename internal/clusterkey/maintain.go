package clusterkey

import (
	"bytes"
	"context"
	"crypto/ecdsa"
	"crypto/tls"
	"encoding/json"
	"errors"
	"fmt"
	"os"
	"time"

	"github.com/borough-os/borough/esp"
	"github.com/borough-os/borough/internal/atomicfile"
	"github.com/borough-os/borough/internal/consensus"
	"github.com/borough-os/borough/internal/escrow"
	"github.com/borough-os/borough/internal/pki"
	"github.com/borough-os/borough/internal/unlock"
)

const (
	// maintainEvery is how often Maintain looks at the membership.
	maintainEvery = 10 * time.Second
	// maintainRetry is how soon Maintain tries again after a round that
	// failed: most failures are a leader election or a slow peer, and a
	// round that waits a whole maintainEvery on them can miss a record
	// another member held only briefly (a rogue escrow key among them).
	maintainRetry = time.Second
	// testUnlockTimeout bounds the test unlock of a new split.
	testUnlockTimeout = time.Minute
)

// Member is what Maintain needs of the running member.
type Member struct {
	Consensus *consensus.Consensus
	// PKI are the member's PKI files on the data volume.
	PKI consensus.Files
	// Cluster and Node name the member.
	Cluster, Node string
	// OwnerRecovery makes Maintain seal the node's unlock keys to the
	// cluster owner's key, when there is an owner: the enrolment the data
	// volume confirmed says so, which a keeper made before the volume
	// opened cannot know.
	OwnerRecovery bool
}

// Maintain keeps the unlock material on the ESP current, publishes the
// node's escrow key, and escrows the CUK with the other voters, until ctx
// ends (see the package doc).
func (k *Keeper) Maintain(ctx context.Context, m Member) error {
	for {
		wait := maintainEvery
		if err := k.maintain(ctx, m); err != nil && ctx.Err() == nil {
			k.Log.Warn("keeping the cluster unlock key with the cluster", "err", err, "retry_in", maintainRetry)
			wait = maintainRetry
		}
		select {
		case <-ctx.Done():
			return ctx.Err()
		case <-time.After(wait):
		}
	}
}

func (k *Keeper) maintain(ctx context.Context, m Member) error {
	k.memberPKI.Store(&m.PKI)
	if err := k.syncIdentity(m.PKI); err != nil {
		return fmt.Errorf("copying the node's identity to the ESP: %w", err)
	}
	pub, err := k.ensureEscrowKey()
	if err != nil {
		return err
	}
	k.startResponder()
	if err := k.publish(ctx, m, pub); err != nil {
		return err
	}
	if err := k.sealForOwner(m); err != nil {
		return fmt.Errorf("sealing the node's keys for the owner: %w", err)
	}
	return k.escrow(ctx, m)
}

// sealForOwner writes the node's unlock keys sealed to its owner's key to
// the ESP, if it has an owner and the ESP does not hold them sealed to
// that owner, bound to the node's key and CUK (for the owner's unlock over
// the node API), yet. The owner is the one the node fixed when it
// bootstrapped or joined (its PKI files), not the cluster's record in
// etcd, which any member can write: a member compromised while running
// must not have every node seal its keys to a key of its own.
func (k *Keeper) sealForOwner(m Member) error {
	k.mu.Lock()
	luk, cuk := k.luk, k.cuk
	k.mu.Unlock()
	if !m.OwnerRecovery || luk == nil || cuk == nil {
		return nil
	}
	owner, err := m.PKI.LoadOwner()
	if owner == nil || err != nil {
		return err
	}
	cert, err := m.PKI.LoadCert()
	if err != nil {
		return err
	}
	fp, nodeKey := pki.Fingerprint(owner), pki.KeyHash(cert)
	var old escrow.OwnerRecovery
	if b, err := k.Ledger.Read(esp.OwnerRecovery); err == nil && json.Unmarshal(b, &old) == nil &&
		old.Owner == fp && old.Binds(nodeKey) && old.Checks(cuk) {
		return nil
	}
	pub, ok := owner.PublicKey.(*ecdsa.PublicKey)
	if !ok {
		return fmt.Errorf("the owner's key is a %T, not ECDSA", owner.PublicKey)
	}
	r, err := escrow.SealForOwner(pub, fp, m.Cluster, m.Node, nodeKey, luk, cuk)
	if err != nil {
		return err
	}
	b, err := json.Marshal(r)
	if err != nil {
		return err
	}
	if err := k.Ledger.Write(map[esp.File][]byte{esp.OwnerRecovery: b}); err != nil {
		return err
	}
	k.Log.Info("sealed the node's unlock keys for the owner's recovery", "owner", fp)
	return nil
}

// syncIdentity copies the member's certificate, key, CA and CRL to the
// ESP when they differ from what is there.
func (k *Keeper) syncIdentity(files consensus.Files) error {
	certPEM, err := os.ReadFile(files.Cert())
	if err != nil {
		return err
	}
	if old, err := k.Ledger.Read(esp.UnlockCert); err != nil || !bytes.Equal(old, certPEM) {
		keyPEM, err := os.ReadFile(files.Key())
		if err != nil {
			return err
		}
		key, err := pki.ParseKeyPEM(keyPEM)
		if err != nil {
			return err
		}
		ec, ok := key.(*ecdsa.PrivateKey)
		if !ok {
			return fmt.Errorf("the node key is a %T, not ECDSA", key)
		}
		raw, err := ec.Bytes()
		if err != nil {
			return err
		}
		sealed, err := k.Seals.Seal(esp.UnlockKey.In(k.ESPRoot), raw)
		clear(raw)
		if err != nil {
			return err
		}
		if err := writeESP(k.ESPRoot, esp.UnlockKey, sealed); err != nil {
			return err
		}
		if err := k.Ledger.Write(map[esp.File][]byte{esp.UnlockCert: certPEM}); err != nil {
			return err
		}
		k.setIdentity(certPEM, ec, files)
	}
	copies := map[esp.File][]byte{}
	for from, to := range map[string]esp.File{files.CA(): esp.UnlockCA, files.CRL(): esp.UnlockCRL} {
		b, err := os.ReadFile(from)
		if err != nil {
			return err
		}
		copies[to] = b
	}
	if err := k.Ledger.Write(copies); err != nil {
		return err
	}
	return k.loadCRL(files)
}

// setIdentity makes the node's identity the certificate in certPEM.
func (k *Keeper) setIdentity(certPEM []byte, key *ecdsa.PrivateKey, files consensus.Files) {
	leaf, err := pki.ParseCertPEM(certPEM)
	if err != nil {
		return
	}
	ca, err := files.LoadCA()
	if err != nil {
		return
	}
	k.mu.Lock()
	defer k.mu.Unlock()
	k.id = &unlock.Identity{Cert: tls.Certificate{Certificate: [][]byte{leaf.Raw}, PrivateKey: key, Leaf: leaf}, CA: ca, CRL: k.crlInForce}
}

// loadCRL puts the member's CRL in force for the responder and fetches.
func (k *Keeper) loadCRL(files consensus.Files) error {
	der, err := os.ReadFile(files.CRL())
	if err != nil {
		return err
	}
	ca, err := files.LoadCA()
	if err != nil {
		return err
	}
	crl, err := pki.ParseCRL(der, ca)
	if err != nil {
		return err
	}
	return k.storeCRL(crl)
}

// ensureEscrowKey makes the node's escrow key the first time, sealed on
// the ESP, and returns its public key.
func (k *Keeper) ensureEscrowKey() ([]byte, error) {
	if k.escrowKey == nil {
		priv, _, err := escrow.NewKey()
		if err != nil {
			return nil, err
		}
		sealed, err := k.Seals.Seal(esp.EscrowKey.In(k.ESPRoot), priv)
		if err != nil {
			return nil, fmt.Errorf("sealing the escrow key: %w", err)
		}
		if err := writeESP(k.ESPRoot, esp.EscrowKey, sealed); err != nil {
			return nil, err
		}
		k.escrowKey = priv
		k.Log.Info("made the node's escrow key")
	}
	return escrow.PublicKey(k.escrowKey)
}

// escrow splits the CUK among the other voters when they are not the
// holders of the escrow on the ESP (reconcile), once every one of them
// has published its escrow key.
func (k *Keeper) escrow(ctx context.Context, m Member) error {
	var voters []consensus.Member
	for _, mb := range m.Consensus.Members() {
		if !mb.Learner && mb.Name != "" {
			voters = append(voters, mb)
		}
	}
	threshold := escrow.Threshold(len(voters))
	var holders []escrow.Holder
	var addrs map[string]string
	if threshold > 0 {
		var err error
		if holders, addrs, err = k.holdersOf(ctx, m, voters); err != nil || holders == nil {
			return err
		}
	}
	return k.reconcile(ctx, escrow.Binding{Cluster: m.Cluster, Node: m.Node}, threshold, holders, addrs)
}

// reconcile makes the ESP's escrow one of the CUK among holders, k =
// threshold of them needed, bound to the node's key (binding's epoch and
// key are chosen here; an escrow bound to another key, or to none, is
// split again): it splits anew, test unlocks through the holders'
// responders at addrs, and only then replaces the escrow on the ESP and
// drops the locally sealed CUK.
// With threshold 0 (one voter), it seals the CUK locally again.
//
// A crash or failure at any step leaves a key the node can get: the old
// escrow, whose holders still answer for it, until the new one has
// given the key back; the locally sealed CUK until an escrow has.
func (k *Keeper) reconcile(ctx context.Context, b escrow.Binding, threshold int, holders []escrow.Holder, addrs map[string]string) error {
	k.mu.Lock()
	cuk, id := k.cuk, k.id
	k.mu.Unlock()
	if cuk == nil || id == nil {
		return nil
	}
	current, err := readEscrow(k.Ledger)
	if err != nil {
		current = nil
	}
	if threshold == 0 {
		return k.keepLocally(cuk, current)
	}
	if b.Key, err = id.KeyHash(); err != nil {
		return err
	}
	_, err = os.Stat(esp.ClusterKeyEscrow.In(k.ESPRoot))
	sealedLocally := !errors.Is(err, os.ErrNotExist)
	if current != nil && current.SameHolders(threshold, holders) && bytes.Equal(current.Binding.Key, b.Key) && !sealedLocally {
		return nil
	}
	b.Epoch = 1
	if current != nil {
		b.Epoch = current.Binding.Epoch + 1
	}
	e, err := escrow.Split(cuk, b, threshold, holders)
	if err != nil {
		return err
	}
	tctx, cancel := context.WithTimeout(ctx, testUnlockTimeout)
	defer cancel()
	got, err := unlock.Fetch(tctx, k.Log.With("during", "test unlock of a new split"), *id, e, addrs)
	if err != nil {
		return fmt.Errorf("test unlock of a new split among %d peers: %w", len(holders), err)
	}
	if !bytes.Equal(got, cuk) {
		return errors.New("the test unlock gave another key")
	}
	j, err := json.Marshal(e)
	if err != nil {
		return err
	}
	if err := k.Ledger.Write(map[esp.File][]byte{esp.CUKEscrow: j}); err != nil {
		return err
	}
	if err := k.Seals.Retire(esp.ClusterKeyEscrow.In(k.ESPRoot)); err != nil {
		return fmt.Errorf("retiring %s: %w", esp.ClusterKeyEscrow, err)
	}
	if err := atomicfile.Erase(esp.ClusterKeyEscrow.In(k.ESPRoot)); err != nil {
		return fmt.Errorf("erasing %s: %w", esp.ClusterKeyEscrow, err)
	}
	k.Log.Info("the cluster keeps this node's unlock key", "holders", len(holders), "needed", threshold, "epoch", b.Epoch)
	return nil
}

// keepLocally seals the CUK on the ESP again when the peers can no longer
// hold it, then drops the escrow.
func (k *Keeper) keepLocally(cuk []byte, current *escrow.Escrow) error {
	if current == nil {
		return nil
	}
	if err := k.Local.Put(cuk); err != nil {
		return err
	}
	if err := k.Ledger.Write(map[esp.File][]byte{esp.CUKEscrow: nil}); err != nil {
		return err
	}
	k.Log.Warn("this node is the cluster's only voter: its unlock key is sealed on its own ESP again, and the disk opens alone")
	return nil
}

// holdersOf returns the voters other than the node with their published
// escrow keys, and their responders' addresses; nil while one of them has
// not published its key yet, an error naming every one whose published
// key does not check (checkEscrowKey): the node keeps its escrow as it is
// then. It reads every voter's key whatever it found before, so that one
// not published yet never hides another's forged one.
func (k *Keeper) holdersOf(ctx context.Context, m Member, voters []consensus.Member) ([]escrow.Holder, map[string]string, error) {
	t, err := k.trustOf(m)
	if err != nil {
		return nil, nil, err
	}
	var holders []escrow.Holder
	var refused []error
	missing := false
	urls := make(map[string][]string)
	for _, v := range voters {
		if v.Name == m.Node {
			continue
		}
		key, err := publishedKey(ctx, m.Consensus.Client, t, v.Name)
		switch {
		case err != nil:
			refused = append(refused, err)
		case key == nil:
			missing = true
		default:
			holders = append(holders, escrow.Holder{Name: v.Name, Key: key})
			urls[v.Name] = v.PeerURLs
		}
	}
	if err := errors.Join(refused...); err != nil || missing {
		return nil, nil, err
	}
	return holders, Responders(urls), nil
}

// writeESP replaces f on the ESP, atomically and durably, if it changed.
func writeESP(root string, f esp.File, b []byte) error {
	if err := atomicfile.Update(f.In(root), b, 0o600); err != nil {
		return fmt.Errorf("writing %s: %w", f, err)
	}
	return nil
}
