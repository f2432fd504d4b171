package espledger

import (
	"bytes"
	"encoding/json"
	"errors"
	"log/slog"
	"os"
	"path/filepath"
	"strings"
	"testing"

	"github.com/borough-os/borough/esp"
	"github.com/borough-os/borough/internal/seals"
	"github.com/borough-os/borough/internal/tpm"
	"github.com/borough-os/borough/internal/tpmtest"
)

// node is one machine: a simulated TPM and an ESP directory.
type node struct {
	root string
	tpm  *tpm.TPM
}

func newNode(t *testing.T) *node {
	t.Helper()
	return &node{root: t.TempDir(), tpm: tpmtest.New(t, 7)}
}

// boot opens the ledger as a boot of the node does, with a new book.
func (n *node) boot(t *testing.T) *Ledger {
	t.Helper()
	l, err := Open(n.root, &seals.Book{TPM: n.tpm, Epoch: mustEpoch(t, n.tpm)}, slog.New(slog.DiscardHandler))
	if err != nil {
		t.Fatalf("Open: %v", err)
	}
	return l
}

func (n *node) read(t *testing.T, f esp.File) []byte {
	t.Helper()
	b, err := os.ReadFile(f.In(n.root))
	if err != nil {
		t.Fatal(err)
	}
	return b
}

func (n *node) put(t *testing.T, f esp.File, b []byte) {
	t.Helper()
	if err := os.MkdirAll(filepath.Dir(f.In(n.root)), 0o755); err != nil {
		t.Fatal(err)
	}
	if b == nil {
		if err := os.Remove(f.In(n.root)); err != nil {
			t.Fatal(err)
		}
		return
	}
	if err := os.WriteFile(f.In(n.root), b, 0o600); err != nil {
		t.Fatal(err)
	}
}

var (
	crlV1 = []byte("CRL number 1")
	crlV2 = []byte("CRL number 2: node2 revoked")
	caPEM = []byte("the cluster CA")
)

// TestAttacks plays an attacker who can write the ESP while the node is
// off: each edit is refused by name at the next boot, with its reason,
// and the files the attacker did not touch still read.
func TestAttacks(t *testing.T) {
	for _, tc := range []struct {
		name string
		// attack edits the ESP; old is what the ESP held before the last
		// write (its files and ledger), as freed clusters or an earlier
		// copy of the disk keep them.
		attack func(t *testing.T, n *node, old map[esp.File][]byte)
		// refused is the file that must be refused, with want in its
		// error; untouched must still read; own must be refused by Read
		// and read by ReadOwn.
		refused, untouched, own esp.File
		want                    string
	}{
		{"file edited", func(t *testing.T, n *node, _ map[esp.File][]byte) {
			n.put(t, esp.UnlockCRL, []byte("CRL number 9: nobody revoked"))
		}, esp.UnlockCRL, esp.UnlockCA, "", "not the ones the ledger lists"},
		{"older file put back", func(t *testing.T, n *node, old map[esp.File][]byte) {
			n.put(t, esp.UnlockCRL, old[esp.UnlockCRL])
		}, esp.UnlockCRL, esp.UnlockCA, "", "an older copy put back"},
		{"older file and ledger put back", func(t *testing.T, n *node, old map[esp.File][]byte) {
			n.put(t, esp.UnlockCRL, old[esp.UnlockCRL])
			n.put(t, esp.Ledger, old[esp.Ledger])
		}, esp.UnlockCRL, "", esp.UnlockCA, "only an older copy of the ledger, put back, lists it"},
		{"files swapped", func(t *testing.T, n *node, _ map[esp.File][]byte) {
			n.put(t, esp.UnlockCRL, caPEM)
		}, esp.UnlockCRL, esp.UnlockCA, "", "not the ones the ledger lists"},
		{"file deleted", func(t *testing.T, n *node, _ map[esp.File][]byte) {
			n.put(t, esp.UnlockCRL, nil)
		}, esp.UnlockCRL, esp.UnlockCA, "", "it was deleted"},
		{"file added", func(t *testing.T, n *node, _ map[esp.File][]byte) {
			n.put(t, esp.MemberDirectory, []byte(`{"members":{"evil":["https://10.0.0.66:2380"]}}`))
		}, esp.MemberDirectory, esp.UnlockCRL, "", "does not list it"},
		{"ledger bit-flipped", func(t *testing.T, n *node, _ map[esp.File][]byte) {
			b := n.read(t, esp.Ledger)
			b[len(b)/2] ^= 1
			n.put(t, esp.Ledger, b)
		}, esp.UnlockCRL, "", "", "esp.Ledger"},
		{"ledger truncated", func(t *testing.T, n *node, _ map[esp.File][]byte) {
			b := n.read(t, esp.Ledger)
			n.put(t, esp.Ledger, b[:len(b)-9])
		}, esp.UnlockCRL, "", "", "does not parse"},
		{"ledger forged with another key", func(t *testing.T, n *node, _ map[esp.File][]byte) {
			forged := &Ledger{key: []byte("the attacker's key")}
			m := manifest{Version: version, Count: 99, Files: map[esp.File][]string{esp.UnlockCRL: {digest(crlV1)}}}
			m.MAC = forged.mac(&m)
			b, _ := json.Marshal(m)
			n.put(t, esp.Ledger, b)
			n.put(t, esp.UnlockCRL, crlV1)
		}, esp.UnlockCRL, "", "", "its MAC does not match"},
		{"ledger deleted", func(t *testing.T, n *node, _ map[esp.File][]byte) {
			n.put(t, esp.Ledger, nil)
		}, esp.UnlockCA, "", "", "is missing, and this node keeps one"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			n := newNode(t)
			l := n.boot(t)
			write(t, l, map[esp.File][]byte{esp.UnlockCA: caPEM, esp.UnlockCRL: crlV1})
			old := map[esp.File][]byte{esp.UnlockCRL: n.read(t, esp.UnlockCRL), esp.Ledger: n.read(t, esp.Ledger)}
			write(t, l, map[esp.File][]byte{esp.UnlockCRL: crlV2})
			tc.attack(t, n, old)

			l = n.boot(t)
			_, err := l.Read(tc.refused)
			var r *Refused
			if !errors.As(err, &r) || r.File != tc.refused {
				t.Fatalf("Read(%s) after the attack = %v, want it refused", tc.refused, err)
			}
			if want := strings.ReplaceAll(tc.want, "esp.Ledger", string(esp.Ledger)); !strings.Contains(err.Error(), want) {
				t.Errorf("Read(%s) = %v, want the reason %q", tc.refused, err, want)
			}
			if tc.own != "" {
				if _, err := l.Read(tc.own); !errors.As(err, &r) {
					t.Errorf("Read(%s), listed only by an older ledger = %v, want it refused", tc.own, err)
				}
				for _, f := range []esp.File{tc.own, tc.refused} {
					if _, err := l.ReadOwn(f); err != nil {
						t.Errorf("ReadOwn(%s), listed by an older ledger = %v", f, err)
					}
				}
				if err := l.Refused(); err == nil || !strings.Contains(err.Error(), "older copy put back: it counts") {
					t.Errorf("Refused = %v, want the older ledger named", err)
				}
				// And at the boot after, before the node wrote them again.
				l = n.boot(t)
				if _, err := l.ReadOwn(tc.own); err != nil {
					t.Errorf("ReadOwn(%s) at the next boot = %v", tc.own, err)
				}
			}
			if tc.untouched != "" {
				if _, err := l.Read(tc.untouched); err != nil {
					t.Errorf("Read(%s), which the attacker did not touch = %v", tc.untouched, err)
				}
			}
			// The node writes the file again from an authentic copy: it
			// reads from then on, at this boot and the next.
			write(t, l, map[esp.File][]byte{tc.refused: crlV2})
			for range 2 {
				if b, err := l.Read(tc.refused); err != nil || string(b) != string(crlV2) {
					t.Errorf("Read(%s) after the node wrote it = %q, %v", tc.refused, b, err)
				}
				l = n.boot(t)
			}
		})
	}
}

func write(t *testing.T, l *Ledger, files map[esp.File][]byte) {
	t.Helper()
	if err := l.Write(files); err != nil {
		t.Fatalf("Write: %v", err)
	}
}

// TestPowerCut: a power cut at each step of a write leaves a ledger and
// files that agree: the file reads, old or new, and the next write works.
func TestPowerCut(t *testing.T) {
	for _, tc := range []struct {
		name string
		// cut leaves the ESP as a power cut during a write of crlV2
		// over crlV1 would.
		cut  func(t *testing.T, n *node, l *Ledger)
		want []byte
	}{
		{"after the ledger listed both, before the counter moved", func(t *testing.T, n *node, l *Ledger) {
			l.m.Files[esp.UnlockCRL] = append(l.m.Files[esp.UnlockCRL], digest(crlV2))
			l.m.Count++
			l.m.MAC = l.mac(&l.m)
			b, _ := json.Marshal(l.m)
			n.put(t, esp.Ledger, b)
		}, crlV1},
		{"after the file was written, before the ledger listed it alone", func(t *testing.T, n *node, l *Ledger) {
			l.m.Files[esp.UnlockCRL] = append(l.m.Files[esp.UnlockCRL], digest(crlV2))
			if err := l.commit(); err != nil {
				t.Fatal(err)
			}
			n.put(t, esp.UnlockCRL, crlV2)
		}, crlV2},
	} {
		t.Run(tc.name, func(t *testing.T) {
			n := newNode(t)
			l := n.boot(t)
			write(t, l, map[esp.File][]byte{esp.UnlockCRL: crlV1})
			tc.cut(t, n, l)
			l = n.boot(t)
			if b, err := l.Read(esp.UnlockCRL); err != nil || string(b) != string(tc.want) {
				t.Fatalf("Read after the cut = %q, %v; want %q", b, err, tc.want)
			}
			write(t, l, map[esp.File][]byte{esp.UnlockCRL: crlV2})
			l = n.boot(t)
			if b, err := l.Read(esp.UnlockCRL); err != nil || string(b) != string(crlV2) {
				t.Fatalf("Read after the next write = %q, %v", b, err)
			}
		})
	}
}

// TestAdopt: a node that kept no ledger (updated from a Borough without
// one) adopts its files once; a file removed through the ledger stays
// absent, and one put back is refused.
func TestAdopt(t *testing.T) {
	n := newNode(t)
	n.put(t, esp.NodeState, []byte(`{"cluster":"c","node":"n1"}`))
	l := n.boot(t)
	if _, err := l.Read(esp.NodeState); err != nil {
		t.Fatalf("Read of an adopted file: %v", err)
	}
	write(t, l, map[esp.File][]byte{esp.NodeState: nil})
	l = n.boot(t)
	if _, err := l.Read(esp.NodeState); !errors.Is(err, os.ErrNotExist) {
		t.Errorf("Read of a removed file = %v, want it absent", err)
	}
	n.put(t, esp.NodeState, []byte(`{"cluster":"c","node":"n1"}`))
	var r *Refused
	if _, err := l.Read(esp.NodeState); !errors.As(err, &r) {
		t.Errorf("Read of a removed file put back = %v, want it refused", err)
	}
}

// TestWriteUnchanged: writing what a file already holds does not count a
// write, so that callers may write on every change they might have.
func TestWriteUnchanged(t *testing.T) {
	n := newNode(t)
	l := n.boot(t)
	write(t, l, map[esp.File][]byte{esp.UnlockCA: caPEM})
	before, _, err := n.tpm.Count(tpm.LedgerCounter)
	if err != nil {
		t.Fatal(err)
	}
	write(t, l, map[esp.File][]byte{esp.UnlockCA: caPEM})
	if after, _, err := n.tpm.Count(tpm.LedgerCounter); err != nil || after != before {
		t.Errorf("counter after an unchanged write = %d, %v; want %d", after, err, before)
	}
}

// TestUnauthenticated: without a TPM the files are read and written as
// they are.
func TestUnauthenticated(t *testing.T) {
	n := &node{root: t.TempDir()}
	l := Unauthenticated(n.root)
	write(t, l, map[esp.File][]byte{esp.UnlockCRL: crlV1})
	n.put(t, esp.UnlockCRL, crlV2)
	if b, err := l.Read(esp.UnlockCRL); err != nil || string(b) != string(crlV2) {
		t.Errorf("Read = %q, %v", b, err)
	}
	if _, err := os.Stat(esp.Ledger.In(n.root)); !errors.Is(err, os.ErrNotExist) {
		t.Errorf("an unauthenticated ledger wrote %s: %v", esp.Ledger, err)
	}
}

// TestEraseFirst: the owner-recovery record's old contents are
// overwritten where they lie before a new record replaces it, on a node
// with a TPM and on one without, so that a rotation's old owner finds
// them in no freed cluster; other files are replaced as they are.
func TestEraseFirst(t *testing.T) {
	for _, tc := range []struct {
		name string
		file esp.File
		tpm  bool
		gone bool
	}{
		{"the owner-recovery record", esp.OwnerRecovery, true, true},
		{"the owner-recovery record, without a TPM", esp.OwnerRecovery, false, true},
		{"the CA", esp.UnlockCA, true, false},
	} {
		t.Run(tc.name, func(t *testing.T) {
			n := &node{root: t.TempDir()}
			l := Unauthenticated(n.root)
			if tc.tpm {
				n = newNode(t)
				l = n.boot(t)
			}
			old := []byte("sealed to the old owner")
			write(t, l, map[esp.File][]byte{tc.file: old})
			// A second name for the old file's data: what stays of it in
			// the filesystem's freed blocks once the file is replaced.
			blocks := filepath.Join(t.TempDir(), "old-blocks")
			if err := os.Link(tc.file.In(n.root), blocks); err != nil {
				t.Fatal(err)
			}
			write(t, l, map[esp.File][]byte{tc.file: []byte("sealed to the new owner")})
			left, err := os.ReadFile(blocks)
			if err != nil {
				t.Fatal(err)
			}
			if gone := !bytes.Contains(left, old); gone != tc.gone {
				t.Errorf("the old contents' blocks hold %q after the write; erased: %v, want %v", left, gone, tc.gone)
			}
		})
	}
}

// TestConfirm plays someone who runs their own code on the machine
// (Secure Boot off): they seal a key of theirs to the TPM, as the node's
// boot would, and write a ledger with it that lists a CA of theirs. The
// node takes it until its data volume opens (the TPM cannot tell their
// seal from the node's); then Confirm refuses it, and every file with it.
func TestConfirm(t *testing.T) {
	n := newNode(t)
	data := t.TempDir()
	l := n.boot(t)
	write(t, l, map[esp.File][]byte{esp.UnlockCA: caPEM})
	if err := l.Confirm(data); err != nil {
		t.Fatalf("Confirm on the first boot: %v", err)
	}
	l = n.boot(t)
	if err := l.Confirm(data); err != nil || l.Refused() != nil {
		t.Fatalf("Confirm of the node's own key = %v, refused %v", err, l.Refused())
	}

	theirs := &Ledger{key: []byte("a key of the attacker's, 32 byte")}
	sealed, err := (&seals.Book{TPM: n.tpm, Epoch: mustEpoch(t, n.tpm)}).Seal("", theirs.key)
	if err != nil {
		t.Fatal(err)
	}
	count, _, err := n.tpm.Count(tpm.LedgerCounter)
	if err != nil {
		t.Fatal(err)
	}
	forgedCA := []byte("the attacker's CA")
	m := manifest{Version: version, Count: count, Files: map[esp.File][]string{esp.UnlockCA: {digest(forgedCA)}}}
	m.MAC = theirs.mac(&m)
	b, _ := json.Marshal(m)
	n.put(t, esp.LedgerKey, sealed)
	n.put(t, esp.Ledger, b)
	n.put(t, esp.UnlockCA, forgedCA)

	l = n.boot(t)
	if got, err := l.Read(esp.UnlockCA); err != nil || string(got) != string(forgedCA) {
		t.Fatalf("before the volume opens, Read(CA) = %q, %v; the attacker's ledger should pass (the limit this test shows)", got, err)
	}
	if err := l.Confirm(data); err != nil {
		t.Fatal(err)
	}
	if err := l.Refused(); err == nil || !strings.Contains(err.Error(), "not the one the data volume records") {
		t.Errorf("Refused after Confirm = %v, want the key named", err)
	}
	var r *Refused
	if _, err := l.Read(esp.UnlockCA); !errors.As(err, &r) {
		t.Errorf("Read(CA) after Confirm = %v, want it refused", err)
	}
	write(t, l, map[esp.File][]byte{esp.UnlockCA: caPEM})
	l = n.boot(t)
	if err := l.Confirm(data); err != nil || l.Refused() != nil {
		t.Errorf("Confirm at the boot after = %v, refused %v; want the new key confirmed", err, l.Refused())
	}
	if got, err := l.Read(esp.UnlockCA); err != nil || string(got) != string(caPEM) {
		t.Errorf("Read(CA) at the boot after = %q, %v", got, err)
	}
}

func mustEpoch(t *testing.T, tp *tpm.TPM) uint64 {
	t.Helper()
	e, err := tp.Epoch()
	if err != nil {
		t.Fatal(err)
	}
	return e
}
