// Package cluster brings the node into its cluster and runs its member.
// It is in two parts, which share what the node keeps of its cluster
// (local.go: its PKI directory, the node state records (record.go), the
// member directory (directory.go), and starting etcd from its data
// (start.go)):
//
//   - the way in, Manager: it bootstraps a new cluster (bootstrap.go),
//     restores one from the owner's backup (restore.go), joins a running
//     one with a ticket (join.go), or restarts into the cluster the node
//     already belongs to (restart.go), moving the node's lifecycle as it
//     goes, and hands back the running member;
//
//   - the running Member (member.go): etcd and the long-running services
//     around it, each a named supervised service: the join endpoint, the
//     removal watch (removal.go), the member directory (directory.go), the
//     owner's hand-overs (handover.go) and applications CA
//     (applications.go), the owner's recovery (recover.go) and the node's
//     unlock key with the cluster (package clusterkey).
//
//     New ──▶ CreatingCluster ──▶ Running
//     │ ──▶ Joining ──────────▶   ▲
//     │ ──▶ Restarting ──────────┘
//     └───────────────▶ Failed ◀── (from any state; from Running only when
//     the cluster removed the node)
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
