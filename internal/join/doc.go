// Package join is the join protocol: how a node holding a ticket becomes a
// member of a running cluster without any private key travelling.
//
//	node (ticket, own key)                       member (join endpoint, :7834)
//	  │── TLS: pins the CA by the ticket's fingerprint ──▶│
//	  │── POST /v1/check {ticket id, secret} ────────────▶│ ticket.Admit, no claim
//	  │   (before the node touches its data partition)    │
//	  │── POST /v1/join {ticket id, secret, CSR} ────────▶│ 1. claim the ticket for the
//	  │                                                   │    CSR's key (etcd txn)
//	  │                                                   │ 2. sign the CSR with the CA
//	  │                                                   │ 3. MemberAddAsLearner
//	  │                                                   │ 4. record the node (serial, role)
//	  │◀── certificate, CA, CRL, owner, members ──────────│
//
// Every member serves the endpoint, with its node certificate, so any one
// of the ticket's endpoints will do. Each step is safe to repeat: a node
// that lost power anywhere in the join asks again with the same key, the
// ticket (claimed by that key) admits it again, and a member already added
// shows up as etcd's ErrPeerURLExist, which finds the member instead of
// failing. A ticket claimed by one key admits no other.
//
// A refusal (unknown, forged, expired or used ticket; a bad request) is
// final and comes back as a *Refusal with the member's reason; anything
// else (no member reachable, no quorum) is worth retrying.
package join
