// Package espledger authenticates the node's state on its ESP, which
// anyone who can write the disk while the machine is off can edit: the
// copies of the cluster CA, the node's certificate and the CRL that let it
// answer its peers before its data volume opens, its escrow, its node
// state record, its member directory and its update record. It is the
// ESP layer of the keys' map (docs/keys.md).
//
// The ledger (esp.Ledger) lists the SHA-256 of each of those files under
// an HMAC whose key is sealed to the TPM (esp.LedgerKey, package seals),
// so that only this node, in the boot it sealed the key to, can write
// one; and it carries the count of its writes, which must match a
// monotonic counter in the TPM's NV memory (tpm.LedgerCounter). A file
// edited, swapped or deleted no longer matches the ledger; an older copy
// of a file, or of the ledger with the files it listed, put back from
// freed FAT clusters or an earlier copy of the disk, no longer matches the
// counter. Read refuses such a file by name, with the reason, and the
// caller uses the authentic copy it has (the data volume's, or the
// running member's) or fails closed; the ledger never changes a file on
// its own. An older ledger put back is still the node's own: what it lists
// is refused where only the latest will do (the CRL) and read where an
// older version grants nothing new (ReadOwn), so that the node still
// unlocks and its member writes the latest back.
//
// A write is crash-safe: the ledger first lists the file's old and new
// contents as both acceptable, then the file is replaced, then the ledger
// lists the new contents alone. Each ledger write is counted before the
// counter moves (count = counter + 1 is accepted once, and settled), so a
// power cut at any step leaves a ledger and files that agree.
//
// Without a TPM nothing on the ESP can be authenticated (a key kept in
// clear there is the attacker's too): Unauthenticated reads and writes
// the files as they are, and the node says so at every boot.
//
// The ledger is written here rather than taken from a library: what it
// needs is a few lines of the standard library's HMAC and SHA-256 around
// the TPM counter and key seal Borough already has, and none of the
// anchors keeps state where an offline attacker can write it.
package espledger

import (
	"crypto/hmac"
	"crypto/rand"
	"crypto/sha256"
	"encoding/hex"
	"encoding/json"
	"errors"
	"fmt"
	"log/slog"
	"os"
	"slices"
	"sync"

	"github.com/borough-os/borough/datavol"
	"github.com/borough-os/borough/esp"
	"github.com/borough-os/borough/internal/atomicfile"
	"github.com/borough-os/borough/internal/seals"
	"github.com/borough-os/borough/internal/tpm"
)

// Covered are the files the ledger authenticates, the ones a node that
// first keeps a ledger adopts as they are.
var Covered = []esp.File{
	esp.UnlockCert, esp.UnlockCA, esp.UnlockCRL, esp.CUKEscrow, esp.OwnerRecovery,
	esp.NodeState, esp.MemberDirectory, esp.UpdateRecord,
}

// version is the ledger format's version.
const version = 1

// absent stands, in an entry, for the file not being there.
const absent = "absent"

// manifest is the ledger as the ESP holds it.
type manifest struct {
	Version int    `json:"version"`
	Count   uint64 `json:"count"`
	// Files maps each file to the contents it may have: the SHA-256 (hex)
	// or absent; two while a write is under way.
	Files map[esp.File][]string `json:"files"`
	// Older maps files to the contents an older ledger, put back, listed
	// for them: this node's own, but perhaps not its latest (Read refuses
	// them, ReadOwn does not), until the node writes them again.
	Older map[esp.File][]string `json:"older,omitempty"`
	MAC   []byte                `json:"mac,omitempty"`
}

// Ledger reads and writes the node's covered ESP files, checking each
// against the ledger. Its methods are safe for concurrent use.
type Ledger struct {
	root    string
	log     *slog.Logger
	key     []byte
	counter *tpm.TPM
	seals   *seals.Book

	mu sync.Mutex
	m  manifest
	// refused says why the ledger on the ESP was not taken, if it was
	// not: every covered file there is refused until it is written again.
	refused error
}

// Unauthenticated returns a ledger that checks nothing, for a node
// without a TPM in use.
func Unauthenticated(root string) *Ledger {
	return &Ledger{root: root}
}

// Refusing returns a ledger that refuses every covered file there is and
// writes none, for a node whose ledger could not be opened (why): its
// key did not unseal, so this boot is not one the node trusts.
func Refusing(root string, why error) *Ledger {
	return &Ledger{root: root, key: []byte{}, refused: why}
}

// Open opens the ledger of the ESP at root, unsealing its key with s or
// making one if there is none. A ledger that is missing, forged or older
// than the TPM's counter is not an error: every covered file is then
// refused (Refused says why) until the node writes it again. A node that
// never kept a ledger (its TPM has no ledger counter) adopts its covered
// files as they are, once, and says so: a node updated from a Borough
// without a ledger, or an attacker who can run code of their own against
// the TPM's owner hierarchy (no Secure Boot) to undefine the counter. A
// power cut between defining the counter and writing the first ledger
// refuses the files the node had, which only a node updated from a
// Borough without a ledger has. Call it before the PCRs are capped.
func Open(root string, book *seals.Book, log *slog.Logger) (*Ledger, error) {
	if book == nil {
		return nil, errors.New("opening the ESP ledger: no TPM in use")
	}
	l := &Ledger{root: root, log: log, counter: book.TPM, seals: book}
	if err := l.openKey(); err != nil {
		return nil, err
	}
	count, first, err := l.counter.Count(tpm.LedgerCounter)
	if err != nil {
		return nil, fmt.Errorf("opening the ESP ledger: %w", err)
	}
	l.mu.Lock()
	defer l.mu.Unlock()
	m, err := l.readManifest(count)
	switch {
	case err == nil:
		l.m = *m
		if m.Count == count {
			return l, nil
		}
		// A write counted, and cut by a power loss before the counter moved.
		return l, l.settle()
	case errors.Is(err, os.ErrNotExist) && first:
		log.Warn("no ledger of the ESP's state yet: adopting the files there as they are", "files", len(Covered))
		l.m = l.adopt()
	case errors.Is(err, errOlder):
		l.refused = err
		log.Error("the ESP's files are this node's own, from an earlier state: refusing each where the node needs "+
			"its latest (the CRL) until it writes it again", "ledger", esp.Ledger, "err", err)
		l.m = manifest{Version: version, Files: map[esp.File][]string{}, Older: older(m)}
	default:
		l.refused = err
		log.Error("refusing every file the ESP's ledger covers until the node writes it again", "ledger", esp.Ledger, "err", err)
		l.m = manifest{Version: version, Files: map[esp.File][]string{}}
	}
	l.m.Count = count
	return l, l.commit()
}

// openKey unseals the ledger's key, or makes and seals one if the ESP has
// none.
func (l *Ledger) openKey() error {
	path := esp.LedgerKey.In(l.root)
	b, err := os.ReadFile(path)
	if err == nil {
		if l.key, err = l.seals.UnsealFile(path, b); err != nil {
			return fmt.Errorf("unsealing the ESP ledger's key %s: %w", esp.LedgerKey, err)
		}
		return nil
	}
	if !errors.Is(err, os.ErrNotExist) {
		return fmt.Errorf("reading the ESP ledger's key: %w", err)
	}
	return l.newKey()
}

// newKey makes and seals a new key: every ledger before it fails its MAC.
func (l *Ledger) newKey() error {
	l.key = make([]byte, 32)
	rand.Read(l.key)
	sealed, err := l.seals.Seal(esp.LedgerKey.In(l.root), l.key)
	if err != nil {
		return fmt.Errorf("sealing the ESP ledger's key: %w", err)
	}
	if err := atomicfile.Write(esp.LedgerKey.In(l.root), sealed, 0o600); err != nil {
		return fmt.Errorf("writing %s: %w", esp.LedgerKey, err)
	}
	return nil
}

// Confirm checks the ledger's key against the data volume mounted at
// dataRoot, which nobody writes without both unlock keys, once it is
// open; the first time, it records it there. The TPM seal is what keeps
// the key from a thief with the disk alone; but whoever can run code of
// their own on the machine (Secure Boot off) can seal a key of theirs to
// the PCR values the node's boot will have, and write a ledger with it.
// That key is not the one the volume records: Confirm then says so, makes
// a new key, and refuses every covered file until the node writes it
// again from the volume or its member.
func (l *Ledger) Confirm(dataRoot string) error {
	if l.seals == nil {
		return nil
	}
	l.mu.Lock()
	defer l.mu.Unlock()
	path := datavol.LedgerKey.In(dataRoot)
	sum := sha256.Sum256(l.key)
	want, err := os.ReadFile(path)
	switch {
	case errors.Is(err, os.ErrNotExist):
		return atomicfile.Write(path, []byte(hex.EncodeToString(sum[:])), 0o600)
	case err != nil:
		return fmt.Errorf("reading the ledger key's digest on the data volume: %w", err)
	case string(want) == hex.EncodeToString(sum[:]):
		return nil
	}
	l.refused = fmt.Errorf("%s was not sealed by this node: its key is not the one the data volume records", esp.LedgerKey)
	l.log.Error("refusing every file the ESP's ledger covers, and the ledger's key: someone ran their own code "+
		"against this machine's TPM; making a new key", "err", l.refused)
	if err := l.newKey(); err != nil {
		return err
	}
	l.m.Files, l.m.Older = map[esp.File][]string{}, nil
	if err := l.commit(); err != nil {
		return err
	}
	sum = sha256.Sum256(l.key)
	return atomicfile.Write(path, []byte(hex.EncodeToString(sum[:])), 0o600)
}

// readManifest reads and checks the ledger against its MAC and the TPM's
// count.
func (l *Ledger) readManifest(count uint64) (*manifest, error) {
	b, err := os.ReadFile(esp.Ledger.In(l.root))
	if errors.Is(err, os.ErrNotExist) {
		return nil, fmt.Errorf("%s is missing, and this node keeps one: %w", esp.Ledger, err)
	}
	if err != nil {
		return nil, fmt.Errorf("reading %s: %w", esp.Ledger, err)
	}
	var m manifest
	if err := json.Unmarshal(b, &m); err != nil {
		return nil, fmt.Errorf("%s does not parse: %w", esp.Ledger, err)
	}
	if !hmac.Equal(m.MAC, l.mac(&m)) {
		return nil, fmt.Errorf("%s is not this node's: its MAC does not match", esp.Ledger)
	}
	if m.Version != version {
		return nil, fmt.Errorf("%s has version %d, this node reads %d", esp.Ledger, m.Version, version)
	}
	if m.Count != count && m.Count != count+1 {
		return &m, fmt.Errorf("%s is %w: it counts %d writes, the TPM %d", esp.Ledger, errOlder, m.Count, count)
	}
	return &m, nil
}

// errOlder says the ledger is authentic, but an older copy put back.
var errOlder = errors.New("an older copy put back")

// older is what an older ledger m lists, for Manifest.Older.
func older(m *manifest) map[esp.File][]string {
	out := map[esp.File][]string{}
	for _, files := range []map[esp.File][]string{m.Files, m.Older} {
		for f, states := range files {
			for _, st := range states {
				if !slices.Contains(out[f], st) {
					out[f] = append(out[f], st)
				}
			}
		}
	}
	return out
}

// adopt lists the covered files as they are.
func (l *Ledger) adopt() manifest {
	m := manifest{Version: version, Files: map[esp.File][]string{}}
	for _, f := range Covered {
		if state, err := l.state(f); err == nil && state != absent {
			m.Files[f] = []string{state}
		}
	}
	return m
}

// mac is the MAC of m, without its MAC field.
func (l *Ledger) mac(m *manifest) []byte {
	c := *m
	c.MAC = nil
	b, err := json.Marshal(c)
	if err != nil {
		panic(err) // a struct of strings and numbers always marshals
	}
	h := hmac.New(sha256.New, l.key)
	h.Write(b)
	return h.Sum(nil)
}

// commit writes the ledger with the next count, then moves the counter
// to it.
func (l *Ledger) commit() error {
	l.m.Count++
	l.m.MAC = l.mac(&l.m)
	b, err := json.Marshal(l.m)
	if err != nil {
		return err
	}
	if err := atomicfile.Write(esp.Ledger.In(l.root), b, 0o600); err != nil {
		return fmt.Errorf("writing %s: %w", esp.Ledger, err)
	}
	return l.settle()
}

// settle moves the TPM's counter to the ledger's count.
func (l *Ledger) settle() error {
	now, err := l.counter.Increment(tpm.LedgerCounter)
	if err != nil {
		return fmt.Errorf("counting a write of %s: %w", esp.Ledger, err)
	}
	if now != l.m.Count {
		return fmt.Errorf("counting a write of %s: the TPM's counter is at %d, the ledger at %d", esp.Ledger, now, l.m.Count)
	}
	return nil
}

// state is what the ledger lists for f as it is on the ESP.
func (l *Ledger) state(f esp.File) (string, error) {
	b, err := os.ReadFile(f.In(l.root))
	if errors.Is(err, os.ErrNotExist) {
		return absent, nil
	}
	if err != nil {
		return "", err
	}
	return digest(b), nil
}

func digest(b []byte) string {
	sum := sha256.Sum256(b)
	return hex.EncodeToString(sum[:])
}

// Refused is the error of a covered file that does not match the ledger.
type Refused struct {
	File   esp.File
	Reason string
}

func (e *Refused) Error() string {
	return fmt.Sprintf("refusing %s: %s", e.File, e.Reason)
}

// Refused says why the ledger on the ESP was not taken at Open, if it
// was not.
func (l *Ledger) Refused() error {
	return l.refused
}

// Read returns f's contents if they are the latest the node wrote. A
// file the ledger lists as absent, or does not list and is not there, is
// os.ErrNotExist; any other that does not match is a *Refused.
func (l *Ledger) Read(f esp.File) ([]byte, error) {
	return l.read(f, false)
}

// ReadOwn is Read, but it also returns contents the node wrote once and
// may have written over since, which an older ledger put back lists: for
// a file that grants nothing newer than what the node had (its CA and
// certificate, its escrow, its peers), not for one whose latest version
// takes something away (the CRL).
func (l *Ledger) ReadOwn(f esp.File) ([]byte, error) {
	return l.read(f, true)
}

func (l *Ledger) read(f esp.File, own bool) ([]byte, error) {
	b, err := os.ReadFile(f.In(l.root))
	if l.key == nil || (err != nil && !errors.Is(err, os.ErrNotExist)) {
		return b, err
	}
	l.mu.Lock()
	defer l.mu.Unlock()
	ok, listed := l.m.Files[f]
	older := err == nil && slices.Contains(l.m.Older[f], digest(b))
	switch {
	case listed && err != nil && slices.Contains(ok, absent):
		return nil, err
	case listed && err != nil:
		return nil, &Refused{File: f, Reason: "the ledger lists it, and it was deleted"}
	case listed && !slices.Contains(ok, digest(b)):
		return nil, &Refused{File: f, Reason: "its contents are not the ones the ledger lists: it was edited, or an older copy put back"}
	case listed, older && own:
		return b, nil
	case older:
		return nil, &Refused{File: f, Reason: "only an older copy of the ledger, put back, lists it: it may not be the latest"}
	case err != nil:
		return nil, err
	case l.refused != nil:
		return nil, &Refused{File: f, Reason: "the ESP's ledger was refused (" + l.refused.Error() + ")"}
	}
	return nil, &Refused{File: f, Reason: "the ledger does not list it: it was put there by someone else"}
}

// Write replaces each file in files with its contents, or removes it if
// they are nil, and lists the new contents in the ledger. Files already
// as given cost nothing: the ledger is not written.
func (l *Ledger) Write(files map[esp.File][]byte) error {
	switch {
	case l.key == nil:
		return writeFiles(l.root, files)
	case l.counter == nil:
		return fmt.Errorf("not writing %d files on the ESP: %w", len(files), l.refused)
	}
	l.mu.Lock()
	defer l.mu.Unlock()
	changed := map[esp.File][]byte{}
	next := map[esp.File]string{}
	for f, b := range files {
		want := absent
		if b != nil {
			want = digest(b)
		}
		if now, err := l.state(f); err == nil && now == want && slices.Equal(l.m.Files[f], []string{want}) {
			continue
		}
		changed[f], next[f] = b, want
	}
	if len(changed) == 0 {
		return nil
	}
	for f, want := range next {
		if !slices.Contains(l.m.Files[f], want) {
			l.m.Files[f] = append(slices.Clone(l.m.Files[f]), want)
		}
	}
	if err := l.commit(); err != nil {
		return err
	}
	if err := writeFiles(l.root, changed); err != nil {
		return err
	}
	for f, want := range next {
		l.m.Files[f] = []string{want}
		delete(l.m.Older, f)
	}
	return l.commit()
}

// erasedFirst are the files whose old contents must not outlive them in
// the ESP's freed clusters, where FAT leaves a replaced file's data as it
// was: the owner-recovery record opens the node's volume to the owner it
// is sealed to, who after a hand-over is the owner no more. writeFiles
// overwrites such a file in place before it replaces it; a power cut
// between the two leaves it missing, and its writer writes it again.
var erasedFirst = []esp.File{esp.OwnerRecovery}

// writeFiles writes or removes each file, durably.
func writeFiles(root string, files map[esp.File][]byte) error {
	for f, b := range files {
		var err error
		if slices.Contains(erasedFirst, f) {
			if err := atomicfile.Erase(f.In(root)); err != nil && !errors.Is(err, os.ErrNotExist) {
				return fmt.Errorf("erasing the old %s: %w", f, err)
			}
		}
		if b == nil {
			err = atomicfile.Remove(f.In(root))
		} else {
			err = atomicfile.Update(f.In(root), b, 0o600)
		}
		if err != nil {
			return fmt.Errorf("writing %s: %w", f, err)
		}
	}
	return nil
}
