package cluster

import (
	"context"
	"os"
	"slices"
	"strings"
	"testing"
	"time"

	clientv3 "go.etcd.io/etcd/client/v3"

	"github.com/borough-os/borough/internal/admin"
	"github.com/borough-os/borough/internal/enrolment"
)

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
	ownerCert, owner := ownerIdentity(t)
	a, ca, cl := firstMember(t, ctx, 21, "unit", ownerCert, owner)
	mint := func(cl *clientv3.Client) *enrolment.Enrolment {
		tk, err := admin.MintTicket(ctx, cl, admin.TicketParams{}, owner)
		if err != nil {
			t.Fatal(err)
		}
		return &enrolment.Enrolment{ClusterName: "unit", Ticket: tk, Owner: ownerCert}
	}
	founder := &enrolment.Enrolment{ClusterName: "unit", Owner: ownerCert}
	b := start(t, ctx, 22, mint(cl), "")
	b.wait(t, "node running cluster=unit")
	c := start(t, ctx, 23, mint(cl), "")
	c.wait(t, "node running cluster=unit")
	b.wait(t, "promoted to voter")
	if err := a.mgr.Recover(); err == nil || !strings.Contains(err.Error(), "has a leader") {
		t.Errorf("Recover of a member with a leader = %v, want a refusal", err)
	}
	if _, err := cl.Put(ctx, "before", "kept"); err != nil {
		t.Fatal(err)
	}
	lost := []string{b.mgr.nodeName(t), c.mgr.nodeName(t)}
	slices.Sort(lost)
	for _, m := range []*member{a, b, c} {
		m.stop()
		<-m.done
	}

	a = start(t, ctx, 21, founder, a.dir)
	a.wait(t, "etcd is not ready yet")
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
