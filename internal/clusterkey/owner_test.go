package clusterkey

import (
	"bytes"
	"context"
	"crypto/ecdsa"
	"crypto/elliptic"
	"crypto/rand"
	"crypto/x509"
	"encoding/json"
	"errors"
	"log/slog"
	"strings"
	"testing"
	"time"

	"github.com/borough-os/borough/esp"
	"github.com/borough-os/borough/internal/escrow"
	"github.com/borough-os/borough/internal/espledger"
	"github.com/borough-os/borough/internal/pki"
)

// TestOwnerUnlock: a node whose holders are gone for good waits for its
// CUK, serving WhileLocked meanwhile; its owner opens the record Locked
// gives and sends the CUK sealed to the wait's key. A key sealed to
// another, or one that is not the node's CUK, is refused and the node
// keeps waiting; the CUK ends the wait, and the wait's service with it.
// A record not bound to the node's key serves no remote unlock.
func TestOwnerUnlock(t *testing.T) {
	peers := newPeers(t, 3)
	self, holders := peers[0], peers[1:]
	leaf, err := x509.ParseCertificate(self.id.Cert.Certificate[0])
	if err != nil {
		t.Fatal(err)
	}
	self.id.Cert.Leaf = leaf
	owner, _ := ecdsa.GenerateKey(elliptic.P256(), rand.Reader)
	cuk := bytes.Repeat([]byte{0xc5}, 32)
	for _, tc := range []struct {
		name    string
		nodeKey []byte
		want    string
	}{
		{"a record bound to the node's key", pki.KeyHash(self.id.Cert.Leaf), ""},
		{"a record from before keys were bound", nil, "borough recovery"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			root := lockedESP(t, self, holders, cuk)
			r, err := escrow.SealForOwner(&owner.PublicKey, "sha256:owner", "prod", self.name, tc.nodeKey, nil, cuk)
			if err != nil {
				t.Fatal(err)
			}
			if tc.nodeKey == nil {
				r.NodeKey, r.CUKCheck = nil, nil
			}
			write(t, root, esp.OwnerRecovery, mustJSON(t, r))
			served := make(chan context.Context, 1)
			k := &Keeper{ESPRoot: root, Ledger: espledger.Unauthenticated(root), Log: slog.New(slog.DiscardHandler),
				id: &self.id, WhileLocked: func(ctx context.Context) { served <- ctx; <-ctx.Done() }}
			got := make(chan []byte, 1)
			getErr := make(chan error, 1)
			waitCtx, stopWaiting := context.WithCancel(t.Context())
			go func() {
				c, err := k.Get(waitCtx)
				getErr <- err
				got <- c
			}()
			defer func() {
				stopWaiting()
				if err := <-getErr; err != nil && !errors.Is(err, context.Canceled) {
					t.Error(err)
				}
			}()
			ctx := <-served
			_, _, err = k.Locked()
			if tc.want != "" {
				if err == nil || !strings.Contains(err.Error(), tc.want) {
					t.Errorf("Locked() = %v, want an error saying %q", err, tc.want)
				}
				return
			}
			if err != nil {
				t.Fatal(err)
			}
			ownerUnlocks(t, k, owner, cuk, got)
			if ctx.Err() == nil {
				t.Error("WhileLocked still runs after the node has its key")
			}
			if _, _, err := k.Locked(); !errors.Is(err, ErrNotWaiting) {
				t.Errorf("Locked() after the unlock = %v, want %v", err, ErrNotWaiting)
			}
		})
	}
}

// ownerUnlocks plays the owner's tool against k: refused keys first, then
// the CUK, which Get must return on got.
func ownerUnlocks(t *testing.T, k *Keeper, owner *ecdsa.PrivateKey, cuk []byte, got chan []byte) {
	t.Helper()
	raw, key, err := k.Locked()
	if err != nil {
		t.Fatal(err)
	}
	var r escrow.OwnerRecovery
	if err := json.Unmarshal(raw, &r); err != nil {
		t.Fatal(err)
	}
	_, opened, err := r.Open(owner)
	if err != nil || !bytes.Equal(opened, cuk) {
		t.Fatalf("the owner opens %x, %v", opened, err)
	}
	_, otherKey, _ := escrow.NewKey()
	for _, bad := range []struct {
		name   string
		to, of []byte
	}{
		{"to another key", otherKey, cuk},
		{"not the CUK", key, bytes.Repeat([]byte{1}, 32)},
	} {
		sealed, err := escrow.SealOwnerUnlock(bad.to, &r, bad.of)
		if err != nil {
			t.Fatal(err)
		}
		if err := k.Unlock(sealed); err == nil {
			t.Errorf("Unlock took a key sealed %s", bad.name)
		}
	}
	select {
	case c := <-got:
		t.Fatalf("Get returned %x before the owner sent the CUK", c)
	case <-time.After(100 * time.Millisecond):
	}
	sealed, err := escrow.SealOwnerUnlock(key, &r, cuk)
	if err != nil {
		t.Fatal(err)
	}
	if err := k.Unlock(sealed); err != nil {
		t.Fatal(err)
	}
	select {
	case c := <-got:
		if !bytes.Equal(c, cuk) {
			t.Errorf("Get = %x, want the CUK", c)
		}
	case <-time.After(10 * time.Second):
		t.Fatal("Get did not return within 10 s of the owner's unlock")
	}
}

// lockedESP writes an ESP for self, whose CUK holders (none serving)
// hold, and returns its root.
func lockedESP(t *testing.T, self *peer, holders []*peer, cuk []byte) string {
	t.Helper()
	root := t.TempDir()
	var hs []escrow.Holder
	dir := map[string][]string{self.name: {self.addrInFile}}
	for _, h := range holders {
		hs = append(hs, escrow.Holder{Name: h.name, Key: h.pub})
		dir[h.name] = []string{h.addrInFile}
	}
	e, err := escrow.Split(cuk, escrow.Binding{Cluster: "prod", Node: self.name, Epoch: 1}, 2, hs)
	if err != nil {
		t.Fatal(err)
	}
	write(t, root, esp.CUKEscrow, mustJSON(t, e))
	write(t, root, esp.MemberDirectory, mustJSON(t, map[string]any{"members": dir}))
	write(t, root, esp.NodeState, []byte(`{"version":1,"phase":"member","cluster":"prod","node":"`+self.name+`","cluster_id":"c1","member_id":"a1"}`))
	return root
}

func mustJSON(t *testing.T, v any) []byte {
	t.Helper()
	b, err := json.Marshal(v)
	if err != nil {
		t.Fatal(err)
	}
	return b
}

// TestGiveUp: a boot that gives up on its network (package netconfig),
// or a power request (Get's context ending), ends the wait for the CUK
// with an error saying which, and the wait's service.
func TestGiveUp(t *testing.T) {
	for _, tc := range []struct {
		name string
		stop func(giveUp chan struct{}, cancel context.CancelFunc)
		want string
	}{
		{"network on trial", func(giveUp chan struct{}, _ context.CancelFunc) { close(giveUp) }, "gave up"},
		{"power request", func(_ chan struct{}, cancel context.CancelFunc) { cancel() }, "stopped waiting for the cluster unlock key: context canceled"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			peers := newPeers(t, 3)
			self := peers[0]
			root := lockedESP(t, self, peers[1:], bytes.Repeat([]byte{0xc5}, 32))
			giveUp := make(chan struct{})
			served := make(chan struct{})
			k := &Keeper{ESPRoot: root, Ledger: espledger.Unauthenticated(root), Log: slog.New(slog.DiscardHandler),
				id: &self.id, GiveUp: giveUp, WhileLocked: func(ctx context.Context) {
					<-ctx.Done()
					close(served)
				}}
			ctx, cancel := context.WithCancel(t.Context())
			defer cancel()
			done := make(chan error, 1)
			go func() {
				_, err := k.Get(ctx)
				done <- err
			}()
			tc.stop(giveUp, cancel)
			select {
			case err := <-done:
				if err == nil || !strings.Contains(err.Error(), tc.want) {
					t.Errorf("Get = %v, want an error saying %q", err, tc.want)
				}
			case <-time.After(10 * time.Second):
				t.Fatal("Get still waits 10 s after it was stopped")
			}
			select {
			case <-served:
			default:
				t.Error("the wait's service still runs after Get returned")
			}
		})
	}
}
