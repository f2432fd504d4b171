// Package clusterkey keeps a node's cluster unlock key (CUK) with the
// cluster, so that the node's data volume opens only with its peers:
// a node taken away alone stays locked (it waits, saying how many shares
// it has), and any majority of a cluster that lost power unlocks all its
// members by itself. The cryptography is package escrow's; the exchange
// package unlock's. This package decides where the CUK is and keeps the
// material on the ESP current: of the cluster layer of the keys' map
// (docs/keys.md), it is the node's side.
//
// Where the CUK is:
//
//   - A node alone, or new in a cluster, keeps it sealed on its own ESP
//     (storage.Escrow), as storage made it.
//   - Once the node is a member of a cluster of V ≥ 2 voters, and every
//     other voter has published its escrow key in etcd
//     (keyspace.EscrowKey: signed with the voter's certificate key and,
//     with an owner, shown with the voter's admission, so that a member
//     that rewrites another's record, though it holds the CA's key, gets
//     no share sealed to a key of its own: published.go), Maintain splits
//     the CUK among them, k = escrow.Threshold(V) of them needed, writes
//     the escrow to the ESP
//     (esp.CUKEscrow), checks that k peers really give it back (a test
//     unlock), and only then deletes the locally sealed CUK.
//   - When the voters change, it splits again under a new epoch, test
//     unlocks, and replaces the escrow; down to one voter, it seals the
//     CUK locally again first.
//
// At boot (Boot, before the data volume is mounted and before the PCRs
// are capped) the node unseals its node key and escrow key from the ESP,
// starts its unlock responder, so that peers can unlock while it waits
// for its own shares, and Get fetches its shares from the members in the
// ESP's member directory. A node that has a locally sealed CUK uses it.
// A node whose holders are gone for good takes the CUK from its owner
// instead, through the node API it serves while it waits (owner.go).
//
// What the node keeps on its ESP for this (esp.Unlock*, esp.EscrowKey):
// copies of its certificate, the CA's and the CRL, refreshed while it
// runs; its node key and escrow key, sealed to the TPM (to this boot's
// PCR values from before they were capped); and the escrow.
package clusterkey
