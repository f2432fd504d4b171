package escrow

import (
	"bytes"
	"errors"
	"fmt"
	"strings"
	"testing"
)

var cuk = bytes.Repeat([]byte{0xc5}, 32)

// peers makes n holders with their private keys.
func peers(t *testing.T, n int) ([]Holder, map[string][]byte) {
	t.Helper()
	var hs []Holder
	privs := make(map[string][]byte)
	for i := range n {
		priv, pub, err := NewKey()
		if err != nil {
			t.Fatal(err)
		}
		name := fmt.Sprintf("node-%08x", i+1)
		hs = append(hs, Holder{Name: name, Key: pub})
		privs[name] = priv
	}
	return hs, privs
}

var bind = Binding{Cluster: "prod", Node: "node-000000ff", Epoch: 3, Key: bytes.Repeat([]byte{0xa1}, 32)}

// fetch plays the unlock exchange: holders open their envelopes and
// send the shares sealed to a one-time key, which the node opens.
func fetch(t *testing.T, e *Escrow, privs map[string][]byte, holders ...string) map[string][]byte {
	t.Helper()
	onePriv, onePub, err := NewKey()
	if err != nil {
		t.Fatal(err)
	}
	out := make(map[string][]byte)
	for _, h := range holders {
		env, ok := e.Envelope(h)
		if !ok {
			t.Fatalf("no envelope for %s", h)
		}
		share, err := OpenEnvelope(privs[h], e.Binding, env)
		if err != nil {
			t.Fatal(err)
		}
		sealed, err := SealTransfer(onePub, e.Binding, h, share)
		if err != nil {
			t.Fatal(err)
		}
		if out[h], err = OpenTransfer(onePriv, e.Binding, h, sealed); err != nil {
			t.Fatal(err)
		}
	}
	return out
}

func TestThreshold(t *testing.T) {
	for voters, want := range map[int]int{1: 0, 2: 1, 3: 1, 4: 2, 5: 2, 7: 3} {
		if got := Threshold(voters); got != want {
			t.Errorf("Threshold(%d) = %d, want %d", voters, got, want)
		}
	}
}

// TestRecover splits for clusters of 2 to 7 voters and recovers the CUK
// from exactly k shares, from all, and not from k-1.
func TestRecover(t *testing.T) {
	for voters := 2; voters <= 7; voters++ {
		t.Run(fmt.Sprint(voters, " voters"), func(t *testing.T) {
			hs, privs := peers(t, voters-1)
			k := Threshold(voters)
			e, err := Split(cuk, bind, k, hs)
			if err != nil {
				t.Fatal(err)
			}
			var names []string
			for _, h := range hs {
				names = append(names, h.Name)
			}
			for _, n := range []int{k, len(names)} {
				// The last n holders, so that not always the first shares are used.
				got, err := e.Recover(fetch(t, e, privs, names[len(names)-n:]...))
				if err != nil || !bytes.Equal(got, cuk) {
					t.Errorf("Recover from %d of %d shares = %x, %v; want the CUK", n, len(names), got, err)
				}
			}
			if k > 1 {
				_, err := e.Recover(fetch(t, e, privs, names[:k-1]...))
				if err == nil || !strings.Contains(err.Error(), fmt.Sprintf("%d of %d shares", k-1, k)) {
					t.Errorf("Recover from %d shares = %v, want a refusal", k-1, err)
				}
			}
		})
	}
}

// TestRecoverBadShares: a tampered share counts for nothing; the same
// share sent twice counts once (circl's Recover would panic on it).
func TestRecoverBadShares(t *testing.T) {
	hs, privs := peers(t, 4)
	e, err := Split(cuk, bind, 2, hs)
	if err != nil {
		t.Fatal(err)
	}
	all := fetch(t, e, privs, hs[0].Name, hs[1].Name, hs[2].Name)
	tampered := bytes.Clone(all[hs[0].Name])
	tampered[40] ^= 1
	for _, tc := range []struct {
		name   string
		shares map[string][]byte
		err    string
	}{
		{"one tampered of three", map[string][]byte{hs[0].Name: tampered, hs[1].Name: all[hs[1].Name], hs[2].Name: all[hs[2].Name]}, ""},
		{"one tampered of two", map[string][]byte{hs[0].Name: tampered, hs[1].Name: all[hs[1].Name]}, "1 of 2 shares (bad: [" + hs[0].Name + "])"},
		{"one share twice", map[string][]byte{hs[1].Name: all[hs[1].Name], "impostor": all[hs[1].Name]}, "1 of 2 shares"},
		{"short share", map[string][]byte{hs[0].Name: tampered[:10], hs[1].Name: all[hs[1].Name]}, "1 of 2 shares"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			got, err := e.Recover(tc.shares)
			switch {
			case tc.err == "" && (err != nil || !bytes.Equal(got, cuk)):
				t.Errorf("Recover = %x, %v; want the CUK", got, err)
			case tc.err != "" && (err == nil || !strings.Contains(err.Error(), tc.err)):
				t.Errorf("Recover = %x, %v; want an error containing %q", got, err, tc.err)
			}
		})
	}
}

// TestBinding: an envelope, a transfer or a wrapped CUK opens only for
// the cluster, node, node key, holder and epoch it was made for.
func TestBinding(t *testing.T) {
	hs, privs := peers(t, 2)
	e, err := Split(cuk, bind, 1, hs)
	if err != nil {
		t.Fatal(err)
	}
	env, _ := e.Envelope(hs[0].Name)
	other := func(f func(b *Binding)) Binding { b := bind; f(&b); return b }
	for _, tc := range []struct {
		name string
		priv []byte
		b    Binding
		env  Envelope
	}{
		{"another cluster", privs[hs[0].Name], other(func(b *Binding) { b.Cluster = "test" }), env},
		{"another node", privs[hs[0].Name], other(func(b *Binding) { b.Node = "node-000000fe" }), env},
		{"an earlier epoch", privs[hs[0].Name], other(func(b *Binding) { b.Epoch = 2 }), env},
		{"another node key", privs[hs[0].Name], other(func(b *Binding) { b.Key = bytes.Repeat([]byte{0xa2}, 32) }), env},
		{"no node key", privs[hs[0].Name], other(func(b *Binding) { b.Key = nil }), env},
		{"another holder's key", privs[hs[1].Name], bind, env},
		{"claimed by another holder", privs[hs[1].Name], bind, Envelope{Holder: hs[1].Name, Sealed: env.Sealed}},
	} {
		t.Run(tc.name, func(t *testing.T) {
			if _, err := OpenEnvelope(tc.priv, tc.b, tc.env); !errors.Is(err, ErrWrongKey) {
				t.Errorf("OpenEnvelope = %v, want %v", err, ErrWrongKey)
			}
		})
	}

	share, err := OpenEnvelope(privs[hs[0].Name], bind, env)
	if err != nil {
		t.Fatal(err)
	}
	onePriv, onePub, _ := NewKey()
	sealed, err := SealTransfer(onePub, bind, hs[0].Name, share)
	if err != nil {
		t.Fatal(err)
	}
	if _, err := OpenTransfer(onePriv, bind, hs[1].Name, sealed); !errors.Is(err, ErrWrongKey) {
		t.Errorf("a transfer said to come from another holder opened: %v", err)
	}
	if _, err := OpenTransfer(onePriv, other(func(b *Binding) { b.Epoch++ }), hs[0].Name, sealed); !errors.Is(err, ErrWrongKey) {
		t.Errorf("a transfer of another epoch opened: %v", err)
	}

	moved := *e
	moved.Binding.Node = "node-000000fe"
	if _, err := moved.Recover(fetch(t, e, privs, hs[0].Name)); !errors.Is(err, ErrWrongKey) {
		t.Errorf("the wrapped CUK opened under another node's binding: %v", err)
	}
}

func TestSplitRejects(t *testing.T) {
	hs, _ := peers(t, 2)
	for _, tc := range []struct {
		name    string
		k       int
		holders []Holder
		want    string
	}{
		{"k 0", 0, hs, "threshold 0 with 2 holders"},
		{"k above holders", 3, hs, "threshold 3 with 2 holders"},
		{"holder twice", 1, []Holder{hs[0], hs[0]}, "listed twice"},
		{"the node itself", 1, []Holder{{Name: bind.Node, Key: hs[0].Key}}, "the node itself"},
		{"bad key", 1, []Holder{{Name: "node-00000001", Key: []byte("short")}}, "escrow public key"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			if _, err := Split(cuk, bind, tc.k, tc.holders); err == nil || !strings.Contains(err.Error(), tc.want) {
				t.Errorf("Split = %v, want an error containing %q", err, tc.want)
			}
		})
	}
}

func TestSameHolders(t *testing.T) {
	hs, _ := peers(t, 3)
	e, err := Split(cuk, bind, 2, hs)
	if err != nil {
		t.Fatal(err)
	}
	rotated := append([]Holder{}, hs...)
	rotated[1].Key = bytes.Repeat([]byte{9}, 32)
	for _, tc := range []struct {
		name    string
		k       int
		holders []Holder
		want    bool
	}{
		{"same", 2, hs, true},
		{"same, other order", 2, []Holder{hs[2], hs[0], hs[1]}, true},
		{"another threshold", 1, hs, false},
		{"one holder fewer", 2, hs[:2], false},
		{"a new key", 2, rotated, false},
	} {
		t.Run(tc.name, func(t *testing.T) {
			if got := e.SameHolders(tc.k, tc.holders); got != tc.want {
				t.Errorf("SameHolders = %v, want %v", got, tc.want)
			}
		})
	}
}
