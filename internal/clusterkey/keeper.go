package clusterkey

import (
	"context"
	"crypto/ecdsa"
	"crypto/elliptic"
	"crypto/tls"
	"crypto/x509"
	"errors"
	"fmt"
	"log/slog"
	"net"
	"net/netip"
	"net/url"
	"os"
	"slices"
	"strconv"
	"sync"
	"sync/atomic"

	"github.com/borough-os/borough/esp"
	"github.com/borough-os/borough/internal/atomicfile"
	"github.com/borough-os/borough/internal/consensus"
	"github.com/borough-os/borough/internal/escrow"
	"github.com/borough-os/borough/internal/espledger"
	"github.com/borough-os/borough/internal/nodestate"
	"github.com/borough-os/borough/internal/pki"
	"github.com/borough-os/borough/internal/ports"
	"github.com/borough-os/borough/internal/seals"
	"github.com/borough-os/borough/internal/storage"
	"github.com/borough-os/borough/internal/tpm"
	"github.com/borough-os/borough/internal/unlock"
	"github.com/borough-os/borough/internal/versioned"
)

// Keeper keeps the node's CUK; it is the storage.ClusterKeys of a node.
type Keeper struct {
	// ESPRoot is where the ESP is mounted.
	ESPRoot string
	// Ledger reads and writes the ESP's files that carry authority
	// (package espledger): the CA, certificate and CRL copies, the
	// escrow, the node state record and the member directory. The CRL
	// must be the latest the node wrote; the others may be older copies
	// of its own (ReadOwn), which let it ask for its key and grant
	// nothing a newer one would not; the member directory only directs
	// (peerAddresses).
	Ledger *espledger.Ledger
	// Local keeps the CUK sealed on the ESP.
	Local storage.Escrow
	// Seals seals the node's keys to its TPM; nil keeps them in clear.
	Seals *seals.Book
	Log   *slog.Logger
	// IP is the node's address in the cluster on this boot, which Get
	// compares with the one its peers know.
	IP netip.Addr
	// WhileLocked, if set, runs while Get waits for the CUK, until its
	// context ends: the node API, through which the owner can unlock the
	// node (owner.go).
	WhileLocked func(context.Context)
	// GiveUp, if set, ends Get's wait for the CUK with an error once it
	// is closed: a boot that tries new network settings and cannot reach
	// its peers with them goes back to the ones it had (package
	// netconfig).
	GiveUp <-chan struct{}

	mu sync.Mutex
	// cuk is the CUK once storage made or got it: Maintain splits it.
	// luk is the local unlock key, for the owner's recovery escrow.
	cuk, luk []byte
	// id is the node's TLS identity; escrowKey its escrow private key.
	id        *unlock.Identity
	escrowKey []byte
	// crl is the newest verified CRL read; espCRLErr why the ESP's copy
	// was not one, if it was not.
	crl       atomic.Pointer[x509.RevocationList]
	espCRLErr error
	// memberPKI are the running member's PKI files, once Maintain has
	// them.
	memberPKI atomic.Pointer[consensus.Files]
	// responder hands the unlock responder, once the node has what it
	// needs, to the goroutine Boot started to run it for the rest of the
	// boot; responding says it was handed over.
	responder  chan *unlock.Server
	responding bool
	// bootErr is why Boot found no identity, if it failed to read one.
	bootErr error
	// saidWaiting says the node said it waits for its admission.
	saidWaiting atomic.Bool
	// waiting is the owner's way in while Get waits for the CUK.
	waiting *wait
}

// Boot reads what the node has on its ESP to unlock and to answer its
// peers, unsealing its keys, and starts the responder if it has both an
// identity and an escrow key. Call it before the PCRs are capped, and
// before storage asks for the CUK. The responder runs until ctx ends,
// whether it starts now or when Maintain first has what it needs: on a
// node's first boot that is under the member's context, which ends
// whenever the member's services restart (etcd restarted to grow past one
// voter, to take a hand-over, at a new address), and a responder started
// under it would stop answering for the rest of the boot.
//
// A key that does not unseal (this boot is not the one it was sealed to)
// is logged and left out: the node then neither answers nor asks its
// peers, and storage, which unseals the local unlock key first, says why.
func (k *Keeper) Boot(ctx context.Context) {
	id, err := k.readIdentity()
	if err != nil {
		k.Log.Warn("not using the node's unlock identity", "err", err)
		k.bootErr = err
	}
	b, err := os.ReadFile(esp.EscrowKey.In(k.ESPRoot))
	switch {
	case errors.Is(err, os.ErrNotExist):
	case err != nil:
		k.Log.Warn("reading the escrow key", "err", err)
	default:
		if k.escrowKey, err = k.Seals.UnsealFile(esp.EscrowKey.In(k.ESPRoot), b); err != nil {
			k.Log.Warn("not answering share requests: unsealing the escrow key", "err", err)
			k.escrowKey = nil
		}
	}
	k.id = id
	k.responder = make(chan *unlock.Server, 1)
	go k.runResponder(ctx)
	k.startResponder()
}

// runResponder runs the responder startResponder hands it until ctx ends.
func (k *Keeper) runResponder(ctx context.Context) {
	select {
	case <-ctx.Done():
	case s := <-k.responder:
		if err := s.Run(ctx); err != nil && ctx.Err() == nil {
			k.Log.Warn("unlock responder stopped", "err", err)
		}
	}
}

// readIdentity reads the node's identity from the ESP; nil if it has none.
func (k *Keeper) readIdentity() (*unlock.Identity, error) {
	certPEM, err := k.Ledger.ReadOwn(esp.UnlockCert)
	if errors.Is(err, os.ErrNotExist) {
		return nil, nil
	}
	if err != nil {
		return nil, err
	}
	caPEM, err := k.Ledger.ReadOwn(esp.UnlockCA)
	if err != nil {
		return nil, err
	}
	ca, err := pki.ParseCertPEM(caPEM)
	if err != nil {
		return nil, fmt.Errorf("%s: %w", esp.UnlockCA, err)
	}
	sealed, err := os.ReadFile(esp.UnlockKey.In(k.ESPRoot))
	if err != nil {
		return nil, err
	}
	raw, err := k.Seals.UnsealFile(esp.UnlockKey.In(k.ESPRoot), sealed)
	if err != nil {
		return nil, fmt.Errorf("unsealing %s: %w", esp.UnlockKey, err)
	}
	key, err := ecdsa.ParseRawPrivateKey(elliptic.P256(), raw)
	clear(raw)
	if err != nil {
		return nil, fmt.Errorf("%s: %w", esp.UnlockKey, err)
	}
	leaf, err := pki.ParseCertPEM(certPEM)
	if err != nil {
		return nil, fmt.Errorf("%s: %w", esp.UnlockCert, err)
	}
	cert := tls.Certificate{Certificate: [][]byte{leaf.Raw}, PrivateKey: key, Leaf: leaf}
	if k.espCRLErr = k.readESPCRL(ca); k.espCRLErr != nil {
		k.Log.Warn("no verified revocation list on the ESP: refusing share requests until the member runs", "file", esp.UnlockCRL, "err", k.espCRLErr)
	}
	return &unlock.Identity{Cert: cert, CA: ca, CRL: k.crlInForce}, nil
}

// readESPCRL reads the ESP's copy of the CRL, checked against ca.
func (k *Keeper) readESPCRL(ca *x509.Certificate) error {
	der, err := k.Ledger.Read(esp.UnlockCRL)
	if err != nil {
		return err
	}
	crl, err := pki.ParseCRL(der, ca)
	if err != nil {
		return fmt.Errorf("%s: %w", esp.UnlockCRL, err)
	}
	return k.storeCRL(crl)
}

// storeCRL puts crl in force unless it is older than the one in force:
// a CRL put back from before a removal does not undo it.
func (k *Keeper) storeCRL(crl *x509.RevocationList) error {
	if cur := k.crl.Load(); cur != nil && crl.Number.Cmp(cur.Number) < 0 {
		return fmt.Errorf("CRL number %v is older than number %v, in force", crl.Number, cur.Number)
	}
	k.crl.Store(crl)
	return nil
}

// crlInForce is the CRL the responder and fetches check peers against:
// once the member runs, its own CRL file, which its CRL watcher replaces
// within seconds of a removal, read again at every call (share requests
// are few: a peer's boot); before that, the copy on the ESP. Maintain
// refreshes the ESP's copy only every maintainEvery, and a removed node
// that booted within that window was given a share. Without a verified
// CRL it returns why: a holder then refuses, for it cannot tell a removed
// node from a member.
func (k *Keeper) crlInForce() (*x509.RevocationList, error) {
	var err error
	if files := k.memberPKI.Load(); files != nil {
		if err = k.loadCRL(*files); err != nil {
			k.Log.Warn("reading the member's CRL: checking peers against the last one read", "err", err)
		}
	} else {
		err = k.espCRLErr
	}
	if crl := k.crl.Load(); crl != nil {
		return crl, nil
	}
	return nil, fmt.Errorf("no verified revocation list: %w", err)
}

// startResponder starts the unlock responder once the node has what it
// needs, and only once, if Boot is there to run it.
func (k *Keeper) startResponder() {
	if k.responder == nil || k.responding || k.id == nil || k.escrowKey == nil {
		return
	}
	leaf, err := x509.ParseCertificate(k.id.Cert.Certificate[0])
	if err != nil {
		k.Log.Warn("the unlock certificate", "err", err)
		return
	}
	rec, err := readRecord(k.Ledger)
	if err != nil {
		k.Log.Warn("not answering share requests: no node state record", "err", err)
		return
	}
	s := &unlock.Server{Cluster: rec.Cluster, Node: leaf.Subject.CommonName, EscrowKey: k.escrowKey,
		Identity: *k.id, Log: k.Log.With("service", "unlock-responder")}
	k.responding = true
	k.responder <- s
	k.Log.Info("answering share requests", "port", ports.Unlock)
}

// New implements storage.ClusterKeys: a new CUK starts sealed on the ESP.
func (k *Keeper) New() ([]byte, error) {
	cuk, err := k.Local.New()
	if err != nil {
		return nil, err
	}
	k.remember(cuk)
	return cuk, nil
}

// Get implements storage.ClusterKeys: the CUK sealed on the ESP if it is
// still there, else from the peers, waiting for them as long as it takes,
// or from the owner (owner.go).
//
// A sealed CUK from an earlier epoch is a copy put back from before the
// cluster took the key (or one a crash left after the epoch moved on): it
// is erased, and the node asks its peers, as it would have without it.
func (k *Keeper) Get(ctx context.Context) ([]byte, error) {
	if _, err := os.Stat(esp.ClusterKeyEscrow.In(k.ESPRoot)); err == nil {
		cuk, err := k.Local.Get(ctx)
		if err == nil {
			k.remember(cuk)
			return cuk, nil
		}
		if !errors.Is(err, tpm.ErrRolledBack) {
			return nil, err
		}
		k.Log.Warn("refused "+string(esp.ClusterKeyEscrow)+": it is from an earlier epoch, a copy put back or left "+
			"by a crash; erasing it and asking the peers", "err", err)
		if err := atomicfile.Erase(esp.ClusterKeyEscrow.In(k.ESPRoot)); err != nil {
			return nil, fmt.Errorf("erasing %s: %w", esp.ClusterKeyEscrow, err)
		}
	}
	e, err := parseEscrow(k.readDirecting(esp.CUKEscrow))
	if err != nil {
		return nil, err
	}
	if k.id == nil {
		if k.bootErr != nil {
			return nil, fmt.Errorf("the cluster holds this node's unlock key, and the node cannot ask for it: %w", k.bootErr)
		}
		return nil, fmt.Errorf("the cluster holds this node's unlock key, but the node's certificate is not on its ESP (%s)", esp.UnlockCert)
	}
	addrs, err := k.peerAddresses()
	if err != nil {
		return nil, err
	}
	k.sayIfMoved(addrs)
	k.Log.Info("asking peers for the cluster unlock key", "needed", e.K, "holders", len(e.Envelopes))
	cuk, err := k.await(ctx, e, addrs)
	if err != nil {
		return nil, err
	}
	k.remember(cuk)
	return cuk, nil
}

// SetLocalKey keeps a copy of the local unlock key (storage.Config's
// LocalKey), which Maintain seals for the owner with the CUK.
func (k *Keeper) SetLocalKey(luk []byte) {
	k.mu.Lock()
	defer k.mu.Unlock()
	k.luk = slices.Clone(luk)
}

func (k *Keeper) remember(cuk []byte) {
	k.mu.Lock()
	defer k.mu.Unlock()
	k.cuk = slices.Clone(cuk)
}

// Place is where a node's CUK is: sealed on its own ESP, or escrowed with
// holders, Needed of which give it back.
type Place struct {
	Local   bool
	Needed  int
	Holders []string
	Epoch   uint64
}

// Place says where the node's CUK is, as its ESP says; nil if neither
// holds it (a node with no data volume yet).
func (k *Keeper) Place() *Place {
	if _, err := os.Stat(esp.ClusterKeyEscrow.In(k.ESPRoot)); err == nil {
		return &Place{Local: true}
	}
	e, err := readEscrow(k.Ledger)
	if err != nil {
		return nil
	}
	p := &Place{Needed: e.K, Epoch: e.Binding.Epoch}
	for _, env := range e.Envelopes {
		p.Holders = append(p.Holders, env.Holder)
	}
	return p
}

// readEscrow reads the escrow on the ESP, as the ledger vouches for it.
func readEscrow(l *espledger.Ledger) (*escrow.Escrow, error) {
	return parseEscrow(l.ReadOwn(esp.CUKEscrow))
}

// parseEscrow parses the escrow read as b, err.
func parseEscrow(b []byte, err error) (*escrow.Escrow, error) {
	if errors.Is(err, os.ErrNotExist) {
		return nil, fmt.Errorf("no cluster unlock key: neither sealed on the ESP (%s) nor escrowed with the peers (%s)",
			esp.ClusterKeyEscrow, esp.CUKEscrow)
	}
	if err != nil {
		return nil, err
	}
	return versioned.Decode(string(esp.CUKEscrow), b, func(e *escrow.Escrow) int { return e.Version }, escrow.Version)
}

// readRecord reads the node state record on the ESP (package nodestate;
// the cluster manager writes it), as the node's own.
func readRecord(l *espledger.Ledger) (*nodestate.Record, error) {
	b, err := l.ReadOwn(esp.NodeState)
	r, err := nodestate.ParseRecord(string(esp.NodeState), b, err)
	if err == nil && r == nil {
		err = fmt.Errorf("%s: %w", esp.NodeState, os.ErrNotExist)
	}
	return r, err
}

// readDirecting reads f, a file that only directs the node's requests
// for its key, even where the ESP's ledger cannot vouch for it (written
// after an older ledger that was put back), with a warning: the member
// directory says where the holders are, the escrow which holders to ask
// and how to check and combine their shares. The node checks each
// holder's certificate against its CA copy and its name against the
// escrow, and a key combined from a forged escrow opens nothing: a forged
// file denies the node its key, as deleting it would, and grants nothing.
func (k *Keeper) readDirecting(f esp.File) ([]byte, error) {
	b, err := k.Ledger.ReadOwn(f)
	if r := (*espledger.Refused)(nil); errors.As(err, &r) {
		k.Log.Warn("using a file the ESP's ledger cannot vouch for, only to ask for the cluster unlock key", "err", err)
		b, err = os.ReadFile(f.In(k.ESPRoot))
	}
	return b, err
}

// peerAddresses returns the unlock responders of the members in the ESP's
// member directory (internal/cluster writes it), by node name, read as
// readDirecting says.
func (k *Keeper) peerAddresses() (map[string]string, error) {
	b, err := k.readDirecting(esp.MemberDirectory)
	if err != nil {
		return nil, fmt.Errorf("reading the member directory: %w", err)
	}
	d, err := nodestate.ParseDirectory(string(esp.MemberDirectory), b)
	if err != nil {
		return nil, err
	}
	return Responders(d.Members), nil
}

// sayIfMoved says, if the node's address is not the one the member
// directory gives its peers (addrs, by name), what that means for a
// cold restart and what to do: peers find each other's shares, and etcd
// its quorum, at the addresses they last knew, so a cluster most of
// whose nodes moved while it was down stays locked.
func (k *Keeper) sayIfMoved(addrs map[string]string) {
	rec, err := readRecord(k.Ledger)
	if err != nil || !k.IP.IsValid() {
		return
	}
	host, _, err := net.SplitHostPort(addrs[rec.Node])
	if err != nil || host == k.IP.String() {
		return
	}
	k.Log.Warn(fmt.Sprintf("this node, %s, was at %s and is now at %s: its peers look for it at %s, for its shares of "+
		"their unlock keys and for etcd's quorum, and will find it once the cluster runs; if most of the cluster's "+
		"nodes moved while it was down, none finds the others and none unlocks: give each node its previous address "+
		"back (a DHCP reservation for its MAC or client identifier, or a static address in its enrolment config) "+
		"and power them up again", rec.Node, host, k.IP, host), "node", rec.Node, "was", host, "now", k.IP)
}

// Responders turns members' peer URLs (by name) into the addresses of
// their unlock responders.
func Responders(members map[string][]string) map[string]string {
	out := make(map[string]string)
	for name, urls := range members {
		for _, u := range urls {
			if pu, err := url.Parse(u); err == nil && pu.Hostname() != "" {
				out[name] = net.JoinHostPort(pu.Hostname(), strconv.Itoa(ports.Unlock))
				break
			}
		}
	}
	return out
}
