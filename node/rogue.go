//go:build boroughtest

package main

import (
	"context"
	"crypto/ecdh"
	"crypto/rand"
	"crypto/tls"
	"crypto/x509"
	"encoding/base64"
	"encoding/json"
	"errors"
	"fmt"
	"log/slog"
	"math/big"
	"strings"
	"sync"
	"sync/atomic"
	"time"

	clientv3 "go.etcd.io/etcd/client/v3"
	"google.golang.org/protobuf/proto"

	"github.com/borough-os/borough/internal/authority"
	"github.com/borough-os/borough/internal/cluster"
	"github.com/borough-os/borough/internal/clusterkey"
	"github.com/borough-os/borough/internal/escrow"
	"github.com/borough-os/borough/internal/keyspace"
	"github.com/borough-os/borough/internal/pki"
	"github.com/borough-os/borough/internal/unlock"
	"github.com/borough-os/borough/proto/authoritypb"
)

// The rogue-member hook: on a test's command, this node plays a member
// compromised while running, which holds the cluster CA's key and can
// write etcd, and tries what issue 26 says such a member must not get
// away with. It is in the test build only (make check-release checks the
// release binaries name no borough.test hook); each attempt says what it
// did, and the test checks the cluster's answer on the other nodes.
//
//	rogue crl           signs a CRL revoking every member, numbered 100
//	                    past etcd's, and puts it in etcd.
//	rogue share ESCROW  signs itself a certificate, with a key of its own,
//	                    in the name of the node whose escrow ESCROW
//	                    (base64 of its JSON) is, and asks that node's
//	                    holders for its shares, for rogueShareFor.
//	rogue escrowkey NODE  signs itself a certificate in NODE's name, with a
//	                    key of its own, and publishes with it an escrow key
//	                    of its own as NODE's, with NODE's admission; it puts
//	                    it back whenever NODE does, until rogue release
//	                    (at most rogueHoldFor).
//	rogue release       stops rogue escrowkey and says how often it
//	                    published.
//	rogue nodeapi NODE  signs itself a certificate in NODE's name, with a
//	                    key of its own and its own addresses, and presents
//	                    it on its node API, with NODE's admission, for
//	                    rogueAPIFor.
//	rogue owner         makes an owner key of its own and publishes a
//	                    hand-over of the cluster to it, as the owner's:
//	                    naming the owner's certificate as its signer.

// rogueShareFor is how long rogue share asks the holders: four rounds of
// unlock.Fetch; rogueHoldFor the longest rogue escrowkey holds its record
// in etcd, until the test has seen a peer refuse it and releases it (a
// peer's clusterkey.Maintain round can take a minute when it re-splits
// its escrow: fixed holds of 12 and 25 s were each missed by a peer);
// rogueAPIFor how long rogue nodeapi poses, time for the owner's tool to
// be refused once.
const (
	rogueShareFor = 8 * time.Second
	rogueHoldFor  = 3 * time.Minute
	rogueAPIFor   = 10 * time.Second
)

// rogueHold is the rogue escrowkey that holds its record, while one does.
var rogueHold struct {
	sync.Mutex
	stop context.CancelFunc
	done chan string
}

// rogueCluster is the cluster manager the hook acts through.
var rogueCluster atomic.Pointer[cluster.Manager]

// exposeToRogue lets the hook act through mg.
func exposeToRogue(mg *cluster.Manager) { rogueCluster.Store(mg) }

// rogue runs a rogue command and says what it did.
func rogue(arg string) string {
	mg := rogueCluster.Load()
	if mg == nil || mg.Client() == nil {
		return "error: rogue: this node's member does not run"
	}
	ctx, cancel := context.WithTimeout(context.Background(), rogueShareFor+30*time.Second)
	defer cancel()
	verb, rest, _ := strings.Cut(arg, " ")
	var (
		said string
		err  error
	)
	switch verb {
	case "crl":
		said, err = rogueCRL(ctx, mg.Client())
	case "share":
		said, err = rogueShare(ctx, mg.Client(), rest)
	case "escrowkey":
		said, err = rogueEscrowKey(ctx, mg.Client(), rest)
	case "release":
		said, err = rogueRelease()
	case "nodeapi":
		said, err = rogueNodeAPI(ctx, mg, rest)
	case "owner":
		said, err = rogueOwner(ctx, mg)
	default:
		err = fmt.Errorf("unknown attempt %q (want: crl, share ESCROW, escrowkey NODE, release, nodeapi NODE, owner)", verb)
	}
	if err != nil {
		return "error: rogue " + verb + ": " + err.Error()
	}
	return "ok: rogue " + verb + ": " + said
}

// rogueCRL publishes a CRL, signed with the CA key, that revokes every
// member.
func rogueCRL(ctx context.Context, c *clientv3.Client) (string, error) {
	ca, err := keyspace.ReadCA(ctx, c)
	if err != nil {
		return "", err
	}
	resp, err := c.Get(ctx, keyspace.Nodes, clientv3.WithPrefix())
	if err != nil {
		return "", err
	}
	var everyone []*big.Int
	for _, kv := range resp.Kvs {
		r, err := keyspace.ParseNodeRecord(kv.Value)
		if err != nil {
			return "", err
		}
		for _, h := range r.Serials {
			if s, ok := new(big.Int).SetString(h, 16); ok {
				everyone = append(everyone, s)
			}
		}
	}
	cur, err := c.Get(ctx, keyspace.CRL)
	if err != nil || len(cur.Kvs) == 0 {
		return "", fmt.Errorf("reading etcd's CRL: %v", err)
	}
	current, err := x509.ParseRevocationList(cur.Kvs[0].Value)
	if err != nil {
		return "", err
	}
	number := current.Number.Int64() + 100
	der, err := ca.CRL(number, everyone, time.Now())
	if err != nil {
		return "", err
	}
	if _, err := c.Put(ctx, keyspace.CRL, string(der)); err != nil {
		return "", err
	}
	return fmt.Sprintf("published CRL number %d revoking %d certificates", number, len(everyone)), nil
}

// rogueShare asks the holders of the escrow in b64 for its shares with a
// certificate in its node's name and a key of the rogue's own.
func rogueShare(ctx context.Context, c *clientv3.Client, b64 string) (string, error) {
	b, err := base64.StdEncoding.DecodeString(b64)
	if err != nil {
		return "", fmt.Errorf("the escrow is not base64: %w", err)
	}
	var e escrow.Escrow
	if err := json.Unmarshal(b, &e); err != nil {
		return "", fmt.Errorf("the escrow: %w", err)
	}
	ca, err := keyspace.ReadCA(ctx, c)
	if err != nil {
		return "", err
	}
	// A key of the rogue's own, in the node's name.
	forged, err := ca.Issue(e.Binding.Node, nil, []string{e.Binding.Node}, time.Now())
	if err != nil {
		return "", err
	}
	addrs, err := rogueHolders(ctx, c)
	if err != nil {
		return "", err
	}
	id := unlock.Identity{Cert: forged.TLS(), CA: ca.Cert}
	fctx, cancel := context.WithTimeout(ctx, rogueShareFor)
	defer cancel()
	var log strings.Builder
	cuk, err := unlock.Fetch(fctx, slog.New(slog.NewTextHandler(&log, nil)), id, &e, addrs)
	if err == nil {
		return fmt.Sprintf("GOT the unlock key of %s (%d bytes)", e.Binding.Node, len(cuk)), nil
	}
	return fmt.Sprintf("no key of %s: %v", e.Binding.Node, err), nil
}

// rogueHolders are the unlock responders of the members, by name.
func rogueHolders(ctx context.Context, c *clientv3.Client) (map[string]string, error) {
	list, err := c.MemberList(ctx)
	if err != nil {
		return nil, err
	}
	urls := map[string][]string{}
	for _, m := range list.Members {
		if m.Name != "" {
			urls[m.Name] = m.PeerURLs
		}
	}
	addrs := clusterkey.Responders(urls)
	if len(addrs) == 0 {
		return nil, errors.New("no member has a peer URL")
	}
	return addrs, nil
}

// rogueEscrowKey publishes an escrow key of its own as node's, signed
// with a certificate it minted in node's name, with node's admission
// copied, and keeps it there until rogueRelease (at most rogueHoldFor).
func rogueEscrowKey(ctx context.Context, c *clientv3.Client, node string) (string, error) {
	ca, err := keyspace.ReadCA(ctx, c)
	if err != nil {
		return "", err
	}
	cluster, err := c.Get(ctx, keyspace.Cluster)
	if err != nil || len(cluster.Kvs) != 1 {
		return "", fmt.Errorf("reading the cluster's name: %v", err)
	}
	rec, err := keyspace.ReadNode(ctx, c, node)
	if err != nil {
		return "", err
	}
	forged, err := ca.Issue(node, nil, []string{node}, time.Now())
	if err != nil {
		return "", err
	}
	mine, err := ecdh.X25519().GenerateKey(rand.Reader)
	if err != nil {
		return "", err
	}
	b, err := keyspace.SignEscrowKey(forged.Key, forged.Cert.Raw, string(cluster.Kvs[0].Value), node, mine.PublicKey().Bytes(), rec.Admission)
	if err != nil {
		return "", err
	}
	rogueHold.Lock()
	defer rogueHold.Unlock()
	if rogueHold.stop != nil {
		return "", errors.New("already holding an escrow key: rogue release first")
	}
	hold, stop := context.WithTimeout(context.Background(), rogueHoldFor)
	rogueHold.stop, rogueHold.done = stop, make(chan string, 1)
	go func() { rogueHold.done <- holdEscrowKey(hold, c, keyspace.EscrowKeys+node, b) }()
	return "holding an escrow key of its own as " + node + "'s", nil
}

// holdEscrowKey puts b at key whenever something else is there, until ctx
// ends, and says how often it did.
func holdEscrowKey(ctx context.Context, c *clientv3.Client, key string, b []byte) string {
	puts := 0
	for ctx.Err() == nil {
		cur, err := c.Get(ctx, key)
		if err == nil && (len(cur.Kvs) != 1 || string(cur.Kvs[0].Value) != string(b)) {
			if _, err = c.Put(ctx, key, string(b)); err == nil {
				puts++
			}
		}
		select {
		case <-ctx.Done():
		case <-time.After(500 * time.Millisecond):
		}
	}
	return fmt.Sprintf("published an escrow key of its own %d times", puts)
}

// rogueRelease stops rogue escrowkey and says what it did.
func rogueRelease() (string, error) {
	rogueHold.Lock()
	defer rogueHold.Unlock()
	if rogueHold.stop == nil {
		return "", errors.New("holding no escrow key")
	}
	rogueHold.stop()
	said := <-rogueHold.done
	rogueHold.stop, rogueHold.done = nil, nil
	return said, nil
}

// rogueAPI is what the node API presents while rogue nodeapi holds: a
// certificate in another node's name and that node's admission.
type rogueAPI struct {
	cert      tls.Certificate
	admission []byte
}

// posing is the rogue node API's identity, nil while it presents its own.
var posing atomic.Pointer[rogueAPI]

// apiIdentity is what the node API presents: the node's own identity and
// admission, or those rogue nodeapi poses with.
func apiIdentity(ph *atomic.Pointer[phase]) (func() (*tls.Certificate, error), func() []byte) {
	identity := func() (*tls.Certificate, error) {
		if p := posing.Load(); p != nil {
			return &p.cert, nil
		}
		return ph.Load().memberIdentity()
	}
	admission := func() []byte {
		if p := posing.Load(); p != nil {
			return p.admission
		}
		return ph.Load().admission()
	}
	return identity, admission
}

// rogueNodeAPI has the node API present a certificate in node's name,
// with the node's admission, for rogueAPIFor.
func rogueNodeAPI(ctx context.Context, mg *cluster.Manager, node string) (string, error) {
	c := mg.Client()
	ca, err := keyspace.ReadCA(ctx, c)
	if err != nil {
		return "", err
	}
	rec, err := keyspace.ReadNode(ctx, c, node)
	if err != nil {
		return "", err
	}
	own, err := mg.Identity()
	if err != nil {
		return "", err
	}
	leaf, err := x509.ParseCertificate(own.Certificate[0])
	if err != nil {
		return "", err
	}
	forged, err := ca.Issue(node, leaf.IPAddresses, leaf.DNSNames, time.Now())
	if err != nil {
		return "", err
	}
	cert := tls.Certificate{Certificate: [][]byte{forged.Cert.Raw, ca.Cert.Raw}, PrivateKey: forged.Key, Leaf: forged.Cert}
	posing.Store(&rogueAPI{cert: cert, admission: rec.Admission})
	time.AfterFunc(rogueAPIFor, func() { posing.Store(nil) })
	return fmt.Sprintf("the node API presents %s's name for %v", node, rogueAPIFor), nil
}

// rogueOwner publishes a hand-over of the cluster to an owner key of its
// own, signed with that key but naming the owner as its signer, numbered
// after the last hand-over in etcd.
func rogueOwner(ctx context.Context, mg *cluster.Manager) (string, error) {
	owner := mg.Owner()
	if owner == nil {
		return "", errors.New("the cluster has no owner")
	}
	c := mg.Client()
	resp, err := c.Txn(ctx).Then(clientv3.OpGet(keyspace.Cluster),
		clientv3.OpGet(keyspace.Successions, clientv3.WithPrefix(), clientv3.WithKeysOnly())).Commit()
	if err != nil {
		return "", err
	}
	number := uint64(len(resp.Responses[1].GetResponseRange().Kvs)) + 1
	mallory, err := pki.NewOwner("owner", time.Now())
	if err != nil {
		return "", err
	}
	b, err := authority.SignSuccession(mallory.Cert, mallory.Key, string(keyspace.Value(resp, 0)), number, mallory.Cert)
	if err != nil {
		return "", err
	}
	var s authoritypb.Signed
	if err := proto.Unmarshal(b, &s); err != nil {
		return "", err
	}
	var body authoritypb.Succession
	if err := proto.Unmarshal(s.GetBody(), &body); err != nil {
		return "", err
	}
	body.Previous = pki.Fingerprint(owner)
	if s.Body, err = proto.Marshal(&body); err != nil {
		return "", err
	}
	s.Signer = pki.Fingerprint(owner)
	if b, err = proto.Marshal(&s); err != nil {
		return "", err
	}
	if _, err := c.Put(ctx, keyspace.SuccessionKey(number), string(b)); err != nil {
		return "", err
	}
	return fmt.Sprintf("published hand-over %d to owner %s, as %s's", number, pki.Fingerprint(mallory.Cert), pki.Fingerprint(owner)), nil
}
