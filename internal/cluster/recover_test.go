package cluster

import (
	"context"
	"crypto/tls"
	"crypto/x509"
	"os"
	"slices"
	"strings"
	"testing"
	"time"

	clientv3 "go.etcd.io/etcd/client/v3"

	"github.com/borough-os/borough/internal/admin"
	"github.com/borough-os/borough/internal/enrolment"
)

// lostQuorum is a cluster of three voters that lost two for good: its
// survivor waits for its quorum.
type lostQuorum struct {
	survivor *member
	ca       *x509.Certificate
	owner    tls.Certificate
	// lost are the names of the nodes lost, sorted.
	lost []string
	// mint is an enrolment config with a ticket minted through cl.
	mint func(cl *clientv3.Client) *enrolment.Enrolment
	// founder is the survivor's enrolment config.
	founder *enrolment.Enrolment
}

// loseQuorum starts members first to first+2, a cluster of three voters
// holding the key "before", checks that the first refuses a recovery
// while it has a leader, stops all three and starts the first alone again,
// until it says it waits.
func loseQuorum(tb testing.TB, ctx context.Context, first int) lostQuorum {
	tb.Helper()
	ownerCert, owner := ownerIdentity(tb)
	a, ca, cl := firstMember(tb, ctx, first, "unit", ownerCert, owner)
	q := lostQuorum{ca: ca, owner: owner, founder: &enrolment.Enrolment{ClusterName: "unit", Owner: ownerCert}}
	q.mint = func(cl *clientv3.Client) *enrolment.Enrolment {
		tk, err := admin.MintTicket(ctx, cl, admin.TicketParams{}, owner)
		if err != nil {
			tb.Fatal(err)
		}
		return &enrolment.Enrolment{ClusterName: "unit", Ticket: tk, Owner: ownerCert}
	}
	b := start(tb, ctx, first+1, q.mint(cl), "")
	b.wait(tb, "node running cluster=unit")
	c := start(tb, ctx, first+2, q.mint(cl), "")
	c.wait(tb, "node running cluster=unit")
	b.wait(tb, "promoted to voter")
	if err := a.mgr.Recover(); err == nil || !strings.Contains(err.Error(), "has a leader") {
		tb.Errorf("Recover of a member with a leader = %v, want a refusal", err)
	}
	if _, err := cl.Put(ctx, "before", "kept"); err != nil {
		tb.Fatal(err)
	}
	q.lost = []string{b.mgr.nodeName(tb), c.mgr.nodeName(tb)}
	slices.Sort(q.lost)
	for _, m := range []*member{a, b, c} {
		m.stop()
		<-m.done
	}
	q.survivor = start(tb, ctx, first, q.founder, a.dir)
	q.survivor.wait(tb, "etcd is not ready yet")
	return q
}

// TestRecoverInProcess: of a cluster of three voters (real etcd members),
// two are lost for good. The survivor, restarted, waits for its quorum as
// long as it takes; it refuses to be recovered while it has a leader, and
// the owner's recovery makes it the cluster's only member with its data,
// once (recorded done). The lost nodes are then the ones the records
// count in that are no member, the owner removes them, and a new node
// joins with a new ticket. A request recorded before a power cut, not yet
// done, forces the member at its next start.
func TestRecoverInProcess(t *testing.T) {
	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	q := loseQuorum(t, ctx, 21)
	a, ca, owner, lost, mint, founder := q.survivor, q.ca, q.owner, q.lost, q.mint, q.founder
	if err := a.mgr.Recover(); err != nil {
		t.Fatal(err)
	}
	a.wait(t, "recovered: this member is its cluster's only member")
	rc, err := admin.Connect([]string{"127.0.0.21:2379"}, ca, owner)
	if err != nil {
		t.Fatal(err)
	}
	defer rc.Close()
	if got, err := rc.Get(ctx, "before"); err != nil || len(got.Kvs) != 1 {
		t.Fatalf("the recovered member's data: %v, %v", got, err)
	}
	if r, err := a.mgr.readRecovery(); err != nil || r == nil || r.Done.IsZero() {
		t.Errorf("the recovery's record = %+v, %v; want it done", r, err)
	}
	if got, err := admin.LostNodes(ctx, rc); err != nil || !slices.Equal(got, lost) {
		t.Errorf("LostNodes = %v, %v; want %v", got, err, lost)
	}
	for _, name := range lost {
		if _, err := admin.RemoveNode(ctx, rc, name, owner, nil); err != nil {
			t.Fatal(err)
		}
	}
	if got, err := admin.LostNodes(ctx, rc); err != nil || len(got) != 0 {
		t.Errorf("LostNodes after their removal = %v, %v", got, err)
	}
	d := start(t, ctx, 24, mint(rc), "")
	d.wait(t, "node running cluster=unit")

	// A power cut between the request and the forced start.
	d.stop()
	<-d.done
	a.stop()
	<-a.done
	if err := a.mgr.writeRecovery(&recovery{Requested: time.Now()}); err != nil {
		t.Fatal(err)
	}
	a = start(t, ctx, 21, founder, a.dir)
	a.wait(t, "recovered: this member is its cluster's only member")
	a.stop()
	<-a.done
	if _, err := os.Stat(a.mgr.recoveryFile()); err != nil {
		t.Error(err)
	}
}

// BenchmarkRecover measures, on in-process members with real etcd, the
// time from the owner's recovery of a survivor that waits for its lost
// quorum until it takes a write as its cluster's only member: the work's
// floor on this machine (under emulation a node restarts etcd slower).
func BenchmarkRecover(b *testing.B) {
	for i := range b.N {
		ctx, cancel := context.WithCancel(context.Background())
		q := loseQuorum(b, ctx, 31+3*i)
		rc, err := admin.Connect([]string{q.survivor.ip.String() + ":2379"}, q.ca, q.owner)
		if err != nil {
			b.Fatal(err)
		}
		began := time.Now()
		if err := q.survivor.mgr.Recover(); err != nil {
			b.Fatal(err)
		}
		// Each try waits a moment only: a put sent while etcd restarts
		// waits out its whole timeout, which would be the figure.
		for deadline := time.Now().Add(time.Minute); ; time.Sleep(10 * time.Millisecond) {
			pctx, pcancel := context.WithTimeout(ctx, 100*time.Millisecond)
			_, err := rc.Put(pctx, "after", "taken")
			pcancel()
			if err == nil {
				break
			}
			if time.Now().After(deadline) {
				b.Fatalf("no write a minute after the recovery: %v", err)
			}
		}
		b.ReportMetric(time.Since(began).Seconds(), "recover-s")
		rc.Close()
		cancel()
		<-q.survivor.done
	}
}
