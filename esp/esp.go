// Package esp declares the layout of Borough's EFI system partition (ESP):
// every file Borough keeps there has one name, here. The image builder
// writes the boot binary and the node payload; init (process 1) runs the
// payload from it; the node process reads and writes the others. Both
// mount it with Mount.
//
// Paths are relative to the ESP's root and use forward slashes, as both
// FAT tooling (go-diskfs) and the mounted filesystem accept them.
package esp

import "path"

// File is the path of a file on the ESP, relative to its root.
type File string

// The files Borough keeps on the ESP.
const (
	// BootBinary is the unified kernel image of boot slot A, the one the
	// image is built with. It sits at the removable media path, so
	// firmware boots it with no boot entry in NVRAM.
	BootBinary File = "EFI/BOOT/BOOTX64.EFI"
	// BootBinaryB is the boot binary of slot B, where the first update
	// installs; the next goes to A again (internal/update).
	BootBinaryB File = Dir + "/B/BOOTX64.EFI"
	// UpdateRecord says which slot an update installed and whether its
	// try boot was confirmed (internal/update).
	UpdateRecord File = Dir + "/update.json"
	// SlotRedirect names the slot a node rebooted into because the
	// firmware had started the other (its boot entries lost or
	// reordered): a second wrong start goes on rather than loop
	// (internal/update). It grants nothing: the seals decide what opens.
	SlotRedirect File = Dir + "/slot-redirect"
	// EnrolmentConfig is the node's enrolment config, when it was put on
	// the ESP rather than passed through QEMU's fw_cfg.
	EnrolmentConfig File = Dir + "/enrolment.pb"
	// PushedEnrolment is an enrolment config the owner sent a node that
	// has no data volume yet through its node API (borough node enrol):
	// it comes before fw_cfg's and the ESP's.
	PushedEnrolment File = Dir + "/enrolment-pushed.pb"
	// AppliedEnrolment is the enrolment config the node applied on its
	// first boot, which it runs from on every later boot; empty when it
	// had none (internal/enrolment).
	AppliedEnrolment File = Dir + "/enrolment-applied.pb"
	// SealedLocalKey is the data partition's local unlock key, sealed to
	// the TPM (or in clear without one).
	SealedLocalKey File = Dir + "/local-key.sealed"
	// ClusterKeyEscrow holds the cluster unlock key until the cluster
	// keeps it.
	ClusterKeyEscrow File = Dir + "/cluster-key.sealed"
	// NodeState records how far the node got, so that it never
	// bootstraps a cluster twice.
	NodeState File = Dir + "/node-state.json"
	// RandomSeed is a random seed for the kernel's generator, replaced on
	// every boot (internal/entropy).
	RandomSeed File = Dir + "/random-seed"
	// ReleaseStatement, on an image, is the owner's signed statement that
	// lets its boot binary and node payload onto their nodes as an update
	// (internal/update, SignRelease); the node does not read it.
	ReleaseStatement File = Dir + "/release.sig"
	// Ledger lists the SHA-256 of the files here that carry authority
	// and no key of their own (espledger.Covered), under a MAC, with the
	// count of its writes: nothing trusts one of those files that does
	// not match it (internal/espledger).
	Ledger File = Dir + "/ledger.json"
	// LedgerKey is the ledger's MAC key, sealed to the TPM.
	LedgerKey File = Dir + "/ledger-key.sealed"
	// MemberDirectory lists the cluster's members and their last peer
	// URLs, for a node that restarts while etcd cannot yet tell it.
	MemberDirectory File = Dir + "/members.json"
	// DHCPLeases are the addresses DHCP last gave each link, by MAC
	// (JSON): the node asks for them again at its next boot. They grant
	// nothing: a server checks the request against its own leases.
	DHCPLeases File = Dir + "/dhcp-leases.json"
	// Network is the network the owner set on the running node (package
	// netconfig, JSON), kept once the node reached its cluster with it:
	// it stands for the enrolment config's network settings.
	Network File = Dir + "/network.json"
	// NetworkTrial is a network the owner asked the node to try at its
	// next boot (package netconfig, JSON), until it reaches its cluster
	// with it or goes back.
	NetworkTrial File = Dir + "/network-trial.json"
	// NetworkConfirmed is the network of the enrolment config the node's
	// data volume confirmed (package netconfig, JSON), which later boots
	// bring up before the volume opens, in place of the ESP's copy of the
	// config, which nobody authenticates.
	NetworkConfirmed File = Dir + "/network-confirmed.json"
	// ResetOwner is the certificate of the owner who reset the node
	// (PEM): a node reset without an enrolment config in fw_cfg or on its
	// ESP waits for one from that owner, through its node API, rather
	// than found a cluster of its own with no owner (package reset).
	ResetOwner File = Dir + "/reset-owner.pem"
	// ResetRequest says the owner asked the node to erase itself and come
	// back to its first boot (package reset); it goes once that is done.
	ResetRequest File = Dir + "/reset-requested"
)

// NodePayload is the node's software for the boot binary whose
// initramfs holds the payload's SHA-256 sha (hex): an LZ4 squashfs image
// of the node binary (bin/node) and the tools it runs, with its dm-verity
// tree appended. init mounts it through dm-verity, with the root hash in
// the same initramfs, and runs the node from it. The name is the hash's
// start, so that the two boot slots' payloads sit side by side and each
// boot binary finds its own without knowing its slot.
func NodePayload(sha string) File {
	if len(sha) > 16 {
		sha = sha[:16]
	}
	return File(Dir + "/node-" + sha + payloadExt)
}

// payloadExt ends every node payload's name; NodePayloads matches them
// all.
const (
	payloadExt   = ".squashfs"
	NodePayloads = Dir + "/node-*" + payloadExt
)

// SecureBootUpdate is the signed update of Secure Boot variable key
// (db, KEK or PK) that the node enrols when the firmware is in setup
// mode (internal/secureboot).
func SecureBootUpdate(key string) File {
	return File(Dir + "/secureboot/" + key + ".auth")
}

// The node's unlock material (internal/clusterkey): what it needs before
// its data volume is mounted to get its cluster unlock key from its
// peers, and to answer theirs.
const (
	// UnlockCert, UnlockCA and UnlockCRL are copies of the node's
	// certificate, the cluster CA's and the CRL.
	UnlockCert File = Dir + "/unlock/node.pem"
	UnlockCA   File = Dir + "/unlock/ca.pem"
	UnlockCRL  File = Dir + "/unlock/crl.der"
	// UnlockKey is the node certificate's private key, sealed to the TPM.
	UnlockKey File = Dir + "/unlock/node-key.sealed"
	// EscrowKey is the node's escrow private key (X25519), sealed to the
	// TPM: it opens the shares the node holds for its peers.
	EscrowKey File = Dir + "/unlock/escrow-key.sealed"
	// CUKEscrow is the node's cluster unlock key, split among its peers
	// (escrow.Escrow, JSON).
	CUKEscrow File = Dir + "/unlock/cuk.escrow"
	// OwnerRecovery is the node's two unlock keys sealed to the cluster
	// owner's key (escrow.OwnerRecovery, JSON), for borough recovery.
	OwnerRecovery File = Dir + "/owner-recovery.json"
)

// Dir is the directory of Borough's own files.
const Dir = "EFI/Borough"

// In returns f's path under root, where the ESP is mounted.
func (f File) In(root string) string {
	return path.Join(root, string(f))
}

// Size is the size of the ESP in the image: room for two boot binaries and
// node payloads (an update writes the new ones beside the old), and above
// 260 MiB, beyond which FAT32 is formatted (by go-diskfs, as by mkfs.fat)
// with 4 KiB clusters rather than 512-byte ones. Reading a file means
// following its chain of clusters through the FAT, a chain eight times
// as long with 512-byte clusters (docs/decisions.md, "The ESP's
// clusters").
const Size = 300 << 20

// VolumeLabel is the ESP's FAT volume label.
const VolumeLabel = "BOROUGH-ESP"
