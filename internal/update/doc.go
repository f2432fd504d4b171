// Package update installs a new Borough version beside the running one,
// boots it once on trial, and keeps it only once it has proved itself;
// anything else returns the machine to the version it ran. It is the A/B
// mechanism and its record, which both sides share: the node's service
// is package updater, the owner's tool's rollout package rollout.
//
// # Slots
//
// The ESP holds two boot slots. Slot A's boot binary is at the removable
// media path (esp.BootBinary), where the image puts it and where firmware
// looks without any boot entry; slot B's is esp.BootBinaryB. Each boot
// binary's initramfs names its node payload by hash (esp.NodePayload), so
// the two payloads sit side by side and init needs no slot. An update
// installs into the slot that is not running, and the next update into
// the other: the running system is never written.
//
// # The try boot
//
// The node writes NVRAM boot entries for both slots and arms the new one
// with BootNext, which the firmware consumes when it boots it: it boots
// the new slot once, and any later boot goes by BootOrder. This is what
// Monogon does, and it needs no boot loader of Borough's own; the
// alternative, a boot counter on the ESP read by a first stage, needs a
// first stage that is never updated, and systemd-boot is not on the image.
// The new system confirms itself by putting its entry first in BootOrder,
// and only once it runs: `node running` and, in a cluster, a linearizable
// read answered by etcd (a quorum). Until then:
//
//   - a failure before that is fatal to the node, which reboots: BootNext
//     is spent, so the firmware boots the old slot;
//   - a hang is ended by the hardware watchdog (package watchdog), which
//     the try boot arms and stops feeding after Deadline;
//   - a power cut boots the old slot for the same reason as a failure.
//
// The old system finds the record of an update it did not confirm and
// says the update was rolled back. The record (esp.UpdateRecord) is
// written before BootNext is armed, so a crash between the two is a try
// boot that never happened, and reads as one that was rolled back.
//
// A machine whose firmware loses its NVRAM boot entries boots slot A from
// the removable path, whichever slot was confirmed.
package update
