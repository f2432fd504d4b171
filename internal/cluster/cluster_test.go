package cluster

import (
	"bytes"
	"context"
	"crypto"
	"crypto/ecdsa"
	"crypto/elliptic"
	"crypto/rand"
	"crypto/tls"
	"crypto/x509"
	"crypto/x509/pkix"
	"encoding/json"
	"errors"
	"log/slog"
	"math/big"
	"net"
	"net/netip"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"go.etcd.io/etcd/api/v3/etcdserverpb"
	clientv3 "go.etcd.io/etcd/client/v3"

	"google.golang.org/protobuf/proto"

	"github.com/borough-os/borough/internal/admin"
	"github.com/borough-os/borough/internal/authority"
	"github.com/borough-os/borough/internal/console"
	"github.com/borough-os/borough/internal/enrolment"
	"github.com/borough-os/borough/internal/espledger"
	"github.com/borough-os/borough/internal/join"
	"github.com/borough-os/borough/internal/keyspace"
	"github.com/borough-os/borough/internal/lifecycle"
	"github.com/borough-os/borough/internal/nodestate"
	"github.com/borough-os/borough/internal/pki"
	"github.com/borough-os/borough/internal/poll"
	"github.com/borough-os/borough/internal/ticket"
	"github.com/borough-os/borough/proto/authoritypb"
	"github.com/borough-os/borough/proto/enrolmentpb"
	"github.com/borough-os/borough/proto/joinpb"
)

// logBuffer is a log that tests read while members write it.
type logBuffer struct {
	mu sync.Mutex
	b  bytes.Buffer
}

func (l *logBuffer) Write(p []byte) (int, error) {
	l.mu.Lock()
	defer l.mu.Unlock()
	return l.b.Write(p)
}

func (l *logBuffer) String() string {
	l.mu.Lock()
	defer l.mu.Unlock()
	return l.b.String()
}

// member is one in-process node of the test cluster.
type member struct {
	// mgr is nil for a member whose Preflight failed it (life says so).
	mgr  *Manager
	life *lifecycle.Lifecycle
	log  *logBuffer
	ip   netip.Addr
	dir  string
	stop context.CancelFunc
	done chan error
}

// wait waits for a line containing s in the member's log.
func (m *member) wait(t testing.TB, s string) {
	t.Helper()
	if poll.Until(t.Context(), 2*time.Minute, 50*time.Millisecond, poll.True(func() bool { return strings.Contains(m.log.String(), s) })) != nil {
		t.Fatalf("member %s did not log %q:\n%s", m.ip, s, m.log.String())
	}
}

// start runs a member at 127.0.0.n with enrolment e, in dir (a new one
// if empty).
func start(t testing.TB, ctx context.Context, n int, e *enrolment.Enrolment, dir string) *member {
	return startWith(t, ctx, n, e, dir, overrides{listenOnIP: true, ticketClock: ticketClock})
}

// ticketSkew is how far ahead of the wall clock the members that start
// starts check tickets, for a test to see a ticket expire without
// waiting for it.
var ticketSkew atomic.Int64

func ticketClock() time.Time { return time.Now().Add(time.Duration(ticketSkew.Load())) }

// startWith is start with test seams ov.
func startWith(t testing.TB, ctx context.Context, n int, e *enrolment.Enrolment, dir string, ov overrides) *member {
	fresh := dir == ""
	if fresh {
		dir = t.TempDir()
	}
	ctx, stop := context.WithCancel(ctx)
	m := &member{log: &logBuffer{}, ip: netip.AddrFrom4([4]byte{127, 0, 0, byte(n)}), dir: dir, stop: stop, done: make(chan error, 1)}
	log := slog.New(console.NewHandler(m.log))
	m.life = lifecycle.Start(log)
	if err := Preflight(ctx, log, filepath.Join(dir, "esp"), e); err != nil {
		m.life.Fail(err)
		return m
	}
	m.mgr = New(log, Config{
		Enrolment: e, FreshData: fresh, IP: m.ip,
		ESPRoot: filepath.Join(dir, "esp"), Ledger: espledger.Unauthenticated(filepath.Join(dir, "esp")), DataRoot: filepath.Join(dir, "data"),
		VolumeSize: testVolume, overrides: ov,
	}, m.life)
	go func() { m.done <- m.mgr.Run(ctx) }()
	t.Cleanup(func() {
		if t.Failed() {
			t.Logf("log of %s:\n%s", m.ip, m.log.String())
		}
	})
	return m
}

// ownerIdentity makes an owner certificate and key.
func ownerIdentity(t testing.TB) (*x509.Certificate, tls.Certificate) {
	o, err := pki.NewOwner("owner", time.Now())
	if err != nil {
		t.Fatal(err)
	}
	return o.Cert, tls.Certificate{Certificate: [][]byte{o.Cert.Raw}, PrivateKey: o.Key, Leaf: o.Cert}
}

// TestJoinInProcess runs three members with real etcd on loopback
// addresses: one bootstraps, two join with tickets the owner mints; the
// second stays a learner until the third joins, then both vote (once the
// first has restarted its etcd with the cluster's raft timing); a used
// ticket admits nobody else.
func TestJoinInProcess(t *testing.T) {
	for _, ip := range []string{"127.0.0.2", "127.0.0.3"} {
		l, err := net.Listen("tcp", ip+":0")
		if err != nil {
			t.Fatalf("this host has no loopback address %s: %v", ip, err)
		}
		l.Close()
	}
	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	ownerCert, owner := ownerIdentity(t)
	a, ca, cl := firstMember(t, ctx, 1, "unit", ownerCert, owner)
	mint := func(ttl time.Duration) *enrolmentpb.Ticket {
		tctx, tcancel := context.WithTimeout(ctx, 30*time.Second)
		defer tcancel()
		tk, err := admin.MintTicket(tctx, cl, admin.TicketParams{TTL: ttl}, owner)
		if err != nil {
			t.Fatal(err)
		}
		return tk
	}

	// B's ticket expires soon after it is used: the removed B replays it
	// after its expiry, C before.
	tb := mint(15 * time.Second)
	// A ticket nobody claims before it expires.
	unclaimed := mint(time.Second)
	// B's enrolment config names the owner (C's, from before Borough
	// carried it, does not: C takes the cluster's word).
	b := start(t, ctx, 2, &enrolment.Enrolment{ClusterName: "unit", Ticket: tb, Owner: ownerCert}, "")
	b.wait(t, "this node stays a learner until a third node joins")
	b.wait(t, "node running cluster=unit")

	// The ticket B used admits no other key, and a fresh node's check says so.
	key, _ := ecdsa.GenerateKey(elliptic.P256(), rand.Reader)
	csr, _ := pki.NewCSR("node-00000bad", []net.IP{net.IPv4(127, 0, 0, 9)}, key)
	from := netip.MustParseAddr("127.0.0.9")
	var refusal *join.Refusal
	if _, err := join.Join(ctx, tb, csr, from, false); !errors.As(err, &refusal) || !strings.Contains(err.Error(), ticket.ErrUsed.Error()) {
		t.Errorf("a replayed ticket: %v, want a refusal saying it was used", err)
	}
	if err := join.Check(ctx, tb); !errors.As(err, &refusal) {
		t.Errorf("checking a used ticket: %v, want a refusal", err)
	}
	// A caller without a valid ticket learns nothing: not the cluster's
	// name, nor whether the ticket exists, nor who used it.
	for what, forge := range map[string]func(*enrolmentpb.Ticket){
		"a wrong secret":       func(f *enrolmentpb.Ticket) { f.Secret[0] ^= 1 },
		"another cluster":      func(f *enrolmentpb.Ticket) { f.ClusterName = "other" },
		"an unknown ticket ID": func(f *enrolmentpb.Ticket) { f.Id[0] ^= 1 },
	} {
		forged := proto.Clone(tb).(*enrolmentpb.Ticket)
		forge(forged)
		_, err := join.Join(ctx, forged, csr, from, false)
		if !errors.As(err, &refusal) || strings.Contains(err.Error(), "unit") || strings.Contains(err.Error(), "node-") {
			t.Errorf("a ticket with %s: %v; want a refusal that names neither the cluster nor a node", what, err)
		}
	}

	rogueTickets(t, ctx, cl, tb)

	tc := mint(0)
	c := start(t, ctx, 3, &enrolment.Enrolment{ClusterName: "unit", Ticket: tc}, "")
	c.wait(t, "node running cluster=unit")
	// A bootstrapped alone, with short raft timing, which it leaves
	// before it promotes anyone (consensus.ErrRetime).
	a.wait(t, "restarting etcd with the cluster's raft timing")
	b.wait(t, "promoted to voter")
	for deadline := time.Now().Add(time.Minute); ; time.Sleep(200 * time.Millisecond) {
		list, err := cl.MemberList(ctx)
		if err != nil {
			t.Fatal(err)
		}
		voters := 0
		for _, m := range list.Members {
			if !m.IsLearner {
				voters++
			}
		}
		if voters == 3 {
			break
		}
		if time.Now().After(deadline) {
			t.Fatalf("%d voters a minute after the third node joined", voters)
		}
	}
	if _, err := cl.Put(ctx, "k", "v"); err != nil {
		t.Fatal(err)
	}
	for _, m := range []*member{a, b, c} {
		m.admitted(t, ctx, cl, ownerCert)
	}
	appCredential(t, ctx, cl, ca, owner)
	backUpUnderLoad(t, ctx, cl, ca, owner)
	admitOld(t, ctx, cl, owner, ownerCert, b)
	cc, err := admin.Connect([]string{"127.0.0.3:2379"}, ca, owner)
	if err != nil {
		t.Fatal(err)
	}
	defer cc.Close()
	if get, err := cc.Get(ctx, "k"); err != nil || len(get.Kvs) != 1 {
		t.Errorf("get through the third member = %v, %v", get, err)
	}

	promotedThenCut(t, ctx, cl, owner, mint(0))

	// The owner removes C while it is down: when it starts again, its
	// peers tell it, and it stays down.
	name := c.mgr.nodeName(t)
	c.stop()
	<-c.done
	removal, err := admin.RemoveNode(ctx, cl, name, owner, nil)
	if err != nil {
		t.Fatal(err)
	}
	c = start(t, ctx, 3, &enrolment.Enrolment{ClusterName: "unit", Ticket: tc}, c.dir)
	c.wait(t, "state New -> Restarting")
	c.wait(t, "node failed: removed from cluster unit")
	replayRemoved(t, ctx, c, tc, mint)
	rogueCRLs(t, ctx, cl, a, b)

	// The owner removes B: its peers tell it so when it asks.
	statusOf := func(m *member) (bool, error) {
		f := m.mgr.pkiFiles()
		cert, err := tls.LoadX509KeyPair(f.Cert(), f.Key())
		if err != nil {
			t.Fatal(err)
		}
		return join.Status(ctx, []string{"127.0.0.1:7834"}, ca, ownerCert, cert)
	}
	if removed, err := statusOf(b); removed || err != nil {
		t.Errorf("status of a member = %v, %v; want not removed", removed, err)
	}
	// etcd's CRL is now the rogue's last: the owner's removal builds on
	// the CRL the owner's tool remembers making.
	if _, err := admin.RemoveNode(ctx, cl, b.mgr.nodeName(t), owner, nil); err == nil ||
		!strings.Contains(err.Error(), "does not carry the owner's revocations") {
		t.Errorf("a removal built on the rogue's CRL: %v", err)
	}
	removal, err = admin.RemoveNode(ctx, cl, b.mgr.nodeName(t), owner, removal.CRL)
	if err != nil {
		t.Fatal(err)
	}
	b.wait(t, "node failed: removed from cluster unit")
	if removed, err := statusOf(b); !removed || err != nil {
		t.Errorf("status of a removed member = %v, %v; want removed", removed, err)
	}
	ticketSkew.Store(int64(time.Until(time.Unix(tb.GetExpires(), 0)) + time.Second))
	replayRemoved(t, ctx, b, tb, mint)
	if err := join.Check(ctx, unclaimed); !errors.As(err, &refusal) || !strings.Contains(err.Error(), "expired") {
		t.Errorf("checking an expired ticket: %v, want a refusal saying it expired", err)
	}
	ticketSkew.Store(0)

	// A node whose enrolment config names another owner refuses the
	// cluster its ticket admits it to.
	otherOwner, _ := ownerIdentity(t)
	d := start(t, ctx, 4, &enrolment.Enrolment{ClusterName: "unit", Ticket: mint(0), Owner: otherOwner}, "")
	d.wait(t, "names the owner "+pki.Fingerprint(ownerCert)+", its enrolment config "+pki.Fingerprint(otherOwner)+
		": refusing a cluster of another owner")
	handOver(t, ctx, a, ca, cl, owner, removal.CRL)

	cancel()
	<-d.done
	for _, m := range []*member{a, b, c} {
		if err := <-m.done; err != nil && !errors.Is(err, context.Canceled) {
			t.Errorf("member %s: %v", m.ip, err)
		}
	}
}

// admitted checks that the cluster's record of m holds its admission by
// owner, of the key of m's certificate: the joiners' from their tickets,
// the first node's from the owner's first ticket.
func (m *member) admitted(t *testing.T, ctx context.Context, cl *clientv3.Client, owner *x509.Certificate) {
	t.Helper()
	name := m.mgr.nodeName(t)
	rec, err := keyspace.ReadNode(ctx, cl, name)
	if err != nil {
		t.Fatal(err)
	}
	if err := ticket.CheckAdmission(rec.Admission, owner, "unit", name, keyHashOf(t, m.mgr.pkiFiles().Cert())); err != nil {
		t.Errorf("the cluster's record of node %s: %v", name, err)
	}
}

// promotedThenCut joins a fourth node with tk to the cluster of three
// voters cl reaches, lets the cluster promote it, then cuts its power so
// that its database loses what it had not flushed (the member among it):
// started again, it asks to replace its member, and the cluster removes
// the voter and admits the node as a new member, which runs. The owner
// then removes it.
func promotedThenCut(t *testing.T, ctx context.Context, cl *clientv3.Client, owner tls.Certificate, tk *enrolmentpb.Ticket) {
	t.Helper()
	dir := t.TempDir()
	node := startJoiner(t, dir, "127.0.0.5", tk, JoinStarted)
	node.wait(t, "paused after "+JoinStarted)
	rec, err := nodestate.ReadRecord(dataRecordIn(dir))
	if err != nil || rec == nil {
		t.Fatalf("the joining node's record: %v, %v", rec, err)
	}
	if poll.Until(ctx, time.Minute, 200*time.Millisecond, poll.True(func() bool { return isVoter(t, ctx, cl, rec.MemberID) })) != nil {
		t.Fatalf("member %s is no voter a minute after it started", rec.MemberID)
	}
	node.kill()
	loseUnflushed(t, filepath.Join(dir, "data", "etcd", "member", "snap", "db"), rec.MemberID)
	node = startJoiner(t, dir, "127.0.0.5", tk, "")
	node.wait(t, "node running cluster=unit")
	node.kill()
	again, err := nodestate.ReadRecord(dataRecordIn(dir))
	if err != nil || again == nil || again.MemberID == rec.MemberID {
		t.Fatalf("the node's record after it started again: %+v, %v; want a new member", again, err)
	}
	list, err := cl.MemberList(ctx)
	if err != nil {
		t.Fatal(err)
	}
	for _, m := range list.Members {
		if nodestate.HexID(m.ID) == rec.MemberID {
			t.Errorf("the lost voter %s is still a member", rec.MemberID)
		}
	}
	if _, err := admin.RemoveNode(ctx, cl, rec.Node, owner, nil); err != nil {
		t.Fatal(err)
	}
}

// isVoter says whether the member with hex ID id votes.
func isVoter(t *testing.T, ctx context.Context, cl *clientv3.Client, id string) bool {
	t.Helper()
	list, err := cl.MemberList(ctx)
	if err != nil {
		t.Fatal(err)
	}
	return slices.ContainsFunc(list.Members, func(m *etcdserverpb.Member) bool { return nodestate.HexID(m.ID) == id && !m.IsLearner })
}

// replayRemoved tries what a removed node m, which joined with tk, can
// try to come back: its own ticket with its own key, a new ticket with its
// old key under a new name, and a new key under its old name. Each is
// refused as a removed node's.
func replayRemoved(t *testing.T, ctx context.Context, m *member, tk *enrolmentpb.Ticket, mint func(time.Duration) *enrolmentpb.Ticket) {
	t.Helper()
	b, err := os.ReadFile(m.mgr.pkiFiles().Key())
	if err != nil {
		t.Fatal(err)
	}
	old, err := pki.ParseKeyPEM(b)
	if err != nil {
		t.Fatal(err)
	}
	fresh, _ := ecdsa.GenerateKey(elliptic.P256(), rand.Reader)
	name := m.mgr.nodeName(t)
	ip := net.IP(m.ip.AsSlice())
	for _, tc := range []struct {
		what   string
		ticket *enrolmentpb.Ticket
		name   string
		key    crypto.Signer
	}{
		{"its own ticket, its own key", tk, name, old},
		{"a new ticket, its old key, a new name", mint(0), "node-0000beef", old},
		{"a new ticket, a new key, its old name", mint(0), name, fresh},
	} {
		csr, err := pki.NewCSR(tc.name, []net.IP{ip}, tc.key)
		if err != nil {
			t.Fatal(err)
		}
		var refusal *join.Refusal
		_, err = join.Join(ctx, tc.ticket, csr, m.ip, false)
		if !errors.As(err, &refusal) || !refusal.Removed {
			t.Errorf("removed node %s tried %s: %v; want a refusal saying it was removed", name, tc.what, err)
		}
	}
}

// nodeName reads the node's name from its record.
func (mg *Manager) nodeName(t testing.TB) string {
	r, err := nodestate.ReadRecord(mg.dataRecord())
	if err != nil || r == nil {
		t.Fatalf("reading the node state record: %v", err)
	}
	return r.Node
}

// rogueCRLs plays a member compromised while running, which holds the
// cluster CA's key: it signs and publishes a CRL that revokes every
// member, then one that gives the removed node back its standing. No
// member puts either in force: neither goes with the owner's signed
// revocations. The owner's next removal still works (TestJoinInProcess).
func rogueCRLs(t *testing.T, ctx context.Context, cl *clientv3.Client, members ...*member) {
	t.Helper()
	ca, err := keyspace.ReadCA(ctx, cl)
	if err != nil {
		t.Fatal(err)
	}
	resp, err := cl.Get(ctx, keyspace.Nodes, clientv3.WithPrefix())
	if err != nil {
		t.Fatal(err)
	}
	var everyone []*big.Int
	for _, kv := range resp.Kvs {
		var r keyspace.NodeRecord
		if err := json.Unmarshal(kv.Value, &r); err != nil {
			t.Fatal(err)
		}
		for _, h := range r.Serials {
			s, _ := new(big.Int).SetString(h, 16)
			everyone = append(everyone, s)
		}
	}
	before := map[*member][]byte{}
	for _, m := range members {
		if before[m], err = os.ReadFile(m.mgr.pkiFiles().CRL()); err != nil {
			t.Fatal(err)
		}
	}
	// The owner's revocations in force, which a member can copy.
	get, err := cl.Get(ctx, keyspace.CRL)
	if err != nil || len(get.Kvs) == 0 {
		t.Fatalf("reading the CRL: %v", err)
	}
	current, err := x509.ParseRevocationList(get.Kvs[0].Value)
	if err != nil {
		t.Fatal(err)
	}
	i := slices.IndexFunc(current.Extensions, func(e pkix.Extension) bool { return e.Id.Equal(authority.RevocationsExtension) })
	if i < 0 {
		t.Fatal("the owner's CRL carries no revocations of the owner's")
	}
	owners := current.Extensions[i]
	for i, tc := range []struct {
		name    string
		revoked []*big.Int
		ext     []pkix.Extension
		refusal string
	}{
		{"revoking every member", everyone, nil, "changes what is revoked, and carries no revocations of the owner's"},
		{"revoking nobody", nil, nil, "changes what is revoked, and carries no revocations of the owner's"},
		{"revoking every member, with the owner's revocations copied", everyone, []pkix.Extension{owners},
			"the owner's revocations number " + current.Number.String()},
	} {
		number := int64(100 + i)
		der, err := ca.CRL(number, tc.revoked, time.Now(), tc.ext...)
		if err != nil {
			t.Fatal(err)
		}
		if _, err := cl.Put(ctx, keyspace.CRL, string(der)); err != nil {
			t.Fatal(err)
		}
		for _, m := range members {
			m.wait(t, tc.refusal)
			if now, err := os.ReadFile(m.mgr.pkiFiles().CRL()); err != nil || !bytes.Equal(now, before[m]) {
				t.Errorf("a rogue CRL %s: member %s put it in force (%v)", tc.name, m.ip, err)
			}
		}
	}
}

// rogueTickets plays a member compromised while running, which can write
// etcd: it stores the record of a ticket of its own making, without the
// owner's word and then with a stranger's, and the record of a ticket the
// owner signed with a longer expiry. The join endpoint admits none, and
// answers each as it does a ticket it does not know.
func rogueTickets(t *testing.T, ctx context.Context, cl *clientv3.Client, like *enrolmentpb.Ticket) {
	t.Helper()
	_, stranger := ownerIdentity(t)
	for _, tc := range []struct {
		name string
		sign func(*enrolmentpb.Ticket, *joinpb.TicketRecord)
	}{
		{"no owner's word", func(*enrolmentpb.Ticket, *joinpb.TicketRecord) {}},
		{"a stranger's word", func(tk *enrolmentpb.Ticket, rec *joinpb.TicketRecord) {
			stmt, err := authority.Sign(stranger.Leaf, stranger.PrivateKey.(crypto.Signer), authority.KindTicket, &authoritypb.Ticket{
				Cluster: tk.GetClusterName(), Id: tk.GetId(), ClaimKey: rec.GetClaimKey(), Expires: rec.GetExpires()})
			if err != nil {
				t.Fatal(err)
			}
			rec.OwnerStatement = stmt
		}},
	} {
		tk, rec, err := ticket.Mint(ticket.Params{Cluster: like.GetClusterName(), CAFingerprint: like.GetCaFingerprint(),
			Endpoints: like.GetJoinEndpoints()}, time.Now())
		if err != nil {
			t.Fatal(err)
		}
		tc.sign(tk, rec)
		b, _ := proto.Marshal(rec)
		if _, err := cl.Put(ctx, ticket.Key(tk.GetId()), string(b)); err != nil {
			t.Fatal(err)
		}
		var refusal *join.Refusal
		if err := join.Check(ctx, tk); !errors.As(err, &refusal) || !strings.Contains(err.Error(), "no such ticket") {
			t.Errorf("a ticket minted by a member, with %s: %v; want it refused as unknown", tc.name, err)
		}
	}

	// The owner's ticket like, its expiry moved an hour on; then put back.
	key := ticket.Key(like.GetId())
	resp, err := cl.Get(ctx, key)
	if err != nil || len(resp.Kvs) != 1 {
		t.Fatalf("reading the record of an owner's ticket: %v", err)
	}
	var rec joinpb.TicketRecord
	if err := proto.Unmarshal(resp.Kvs[0].Value, &rec); err != nil {
		t.Fatal(err)
	}
	rec.Expires += 3600
	b, _ := proto.Marshal(&rec)
	if _, err := cl.Put(ctx, key, string(b)); err != nil {
		t.Fatal(err)
	}
	var refusal *join.Refusal
	if err := join.Check(ctx, like); !errors.As(err, &refusal) || !strings.Contains(err.Error(), "no such ticket") {
		t.Errorf("an owner's ticket whose record a member changed: %v; want it refused as unknown", err)
	}
	if _, err := cl.Put(ctx, key, string(resp.Kvs[0].Value)); err != nil {
		t.Fatal(err)
	}
}

// testVolume is the size the tests' data volumes count as: a node's
// default disk's, so that a ballast and a quota of that size are what
// the tests run with, not the host disk's.
const testVolume = 1 << 30
