// Package cluster is the node's cluster manager: the one object that owns
// the node's lifecycle, from New to Running (or Failed). It bootstraps a
// new cluster (bootstrap.go), joins a running one with a ticket
// (join.go), or restarts into the cluster the node already belongs to
// (restart.go); then it runs the member and its join endpoint.
//
//	New ──▶ CreatingCluster ──▶ Running
//	  │ ──▶ Joining ──────────▶   ▲
//	  │ ──▶ Restarting ──────────┘
//	  └───────────────▶ Failed ◀── (from any state; from Running only when
//	                                 the cluster removed the node)
//
// A node state record (Record), written atomically to the ESP and to the
// data volume, tells a fresh node from one that must restart into its
// cluster, so that a node never bootstraps or joins twice:
//
//   - "bootstrapping": a crash during bootstrap; the next boot starts the
//     bootstrap over, from an empty etcd directory, because no other node
//     can have seen that cluster yet.
//   - "joining": a crash during a join; the next boot asks again with the
//     same name and key (kept on the data volume), which the join
//     protocol admits again (package join), and finishes.
//   - "member": the node restarts into its cluster.
//   - "removed": the cluster removed the node; it stays Failed, saying so,
//     whatever its enrolment config says.
//
// A joining node is Running once it is a voter, or a learner that stays
// one: a learner for good (its ticket said so), or the second node of a
// cluster, which the promotion policy keeps a learner until a third joins
// (see package consensus); it says which.
package cluster
