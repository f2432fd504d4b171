// Package join is the join protocol: how a node holding a ticket becomes a
// member of a running cluster without any private key travelling.
//
//	node (ticket, own key)                       member (join endpoint, :7834)
//	  │── TLS: pins the CA by the ticket's fingerprint ──▶│
//	  │── POST /v1/check {ticket id, claim} ─────────────▶│ ticket.Admit, no claim
//	  │   (before the node touches its data partition)    │
//	  │── POST /v1/join {ticket id, claim, CSR} ─────────▶│ 1. claim the ticket for the
//	  │                                                   │    CSR's key (etcd txn)
//	  │                                                   │ 2. sign the CSR with the CA
//	  │                                                   │ 3. MemberAddAsLearner
//	  │                                                   │ 4. record the node (serial, role,
//	  │                                                   │    member ID, admission)
//	  │◀── certificate, CA, CRL, owner, members, ID, ─────│
//	  │    admission                                      │
//
// The claim is signed with the ticket's claim key (package ticket), over
// the node's name and key: the ticket's secret never travels, so the
// member that serves the request learns nothing that claims the ticket
// for another key. In a cluster with an owner, the claim and the owner's
// signed ticket are the node's admission, which the node checks before it
// writes anything and its peers check before they believe its key.
//
// Every member serves the endpoint, with its node certificate, so any one
// of the ticket's endpoints will do. Each step is safe to repeat: a node
// that lost power anywhere in the join asks again with the same key, the
// ticket (claimed by that key) admits it again, with the member ID the
// cluster recorded for it, and a member added by an attempt that stopped
// before the record shows up as etcd's ErrPeerURLExist (or ErrMemberExist
// within the same second), which finds the member instead of failing. A
// ticket claimed by one key admits no other. A node the owner removed
// (its record is a tombstone) is refused for good, even with its own
// claimed ticket.
//
// A refusal (unknown, forged, expired or used ticket; a bad request; a
// removed node, as HTTP 410 and Refusal.Removed) is final and comes back
// as a *Refusal with the member's reason; anything else (no member
// reachable, no quorum) is worth retrying. A removed node's refusal, and
// a member's status answer that a node was removed, carry the member's
// CRL in force: in a cluster with an owner, a node believes it was
// removed only if the owner's revocations in that CRL say so
// (Refusal.CheckRemoved, Status), for any member can say anything, and a
// removed node stays out for good.
package join
