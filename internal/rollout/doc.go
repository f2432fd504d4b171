// Package rollout drives updates from the owner's side: one node through
// its try boot to a confirmed update or a rollback (Node), and a whole
// cluster one member at a time (Cluster), the way an owner would do it by
// hand, but without the mistakes a hand makes at 3 a.m.
//
// # Quorum
//
// A member that reboots into an update is out of the cluster for a boot,
// and one whose update fails is out for two. The cluster keeps quorum
// through that only if every other voter is up: so a rollout updates one
// member at a time, and starts on the next only once every member runs
// and etcd answers a linearizable read (a quorum agreed). A cluster of
// fewer than three voters loses quorum whenever one of them reboots; the
// rollout refuses it rather than take it down, and says how to update it
// by hand, accepting the outage.
//
// # Order
//
// Learners go first (they never count for quorum), then the followers,
// and the leader last, so the cluster elects at most once. Each step
// picks the next member afresh from the membership and leader of that
// moment: a leader that moved, or a rollout run again after one stopped,
// needs no bookkeeping. A member already running the version is done.
//
// # Failure
//
// A member that rolls back stops the rollout: the cluster is left with
// the members updated so far on the new version and the rest on the old,
// every one of them running, and the owner reads the failed try boot's log
// (borough logs NODE --boot -1) before trying again.
//
// The members are reached through their node APIs. Each must present its
// cluster certificate for its own member name (chained to the CA the owner
// pinned), so an address mapped to the wrong machine is refused rather
// than updated.
package rollout
