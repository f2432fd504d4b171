// Package tpm seals Borough's unlock keys to the machine's TPM 2.0.
// It is the device layer of the keys' map (docs/keys.md): every other
// package reaches the TPM through it.
//
// # What it protects
//
// The local unlock key is a 32-byte secret that the node process needs to
// unlock the node's data volume at boot. It is stored on disk only as a [Sealed] blob:
// the TPM's storage root key (SRK) encrypts it, and the TPM releases it only
// in a policy session whose PCR values match the ones it was sealed to. So:
//
//   - A copy of the disk is useless on another machine: the blob is bound to
//     this TPM's storage seed ([ErrWrongTPM]), and clearing the TPM destroys
//     that seed, so a cleared TPM cannot unseal either.
//   - On this machine, the key is released only after the same boot binary
//     was started with the same command line under the same Secure Boot
//     policy ([ErrPolicy] otherwise, naming the PCRs that changed).
//
// It does not protect against an attacker who runs code in the booted,
// trusted system before the keys are unsealed. After that, Borough caps the
// PCRs ([TPM.Cap]): it extends them with a fixed event, so that the
// values sealed to cannot recur until the next reboot, and code that
// breaks into the running node later cannot unseal the keys again.
//
// The SRK is recreated from its template once each time the TPM is
// opened, and kept loaded until Close or the next reset, rather than
// persisted; its name is pinned: [Sealed] records the name of the SRK it
// was sealed under, and Unseal refuses a TPM whose SRK has another name
// before it salts a session to that key ([ErrWrongTPM]). Without
// the pin, an interposer on the TPM bus could answer with an SRK of its
// own and read what is sent to it. The first seal trusts the TPM it finds.
// Against a passive bus sniffer, the secret never crosses the bus in
// clear: Create and Unseal use sessions salted to the SRK with AES-CFB
// parameter encryption.
//
// # Why PCRs 4, 7 and 12
//
// [DefaultPCRs] are 4, 7 and 12, the SHA-256 bank:
//
//   - PCR 4 (boot manager code): the firmware measures every EFI application
//     it starts, as its Authenticode hash. Borough's boot binary is a unified
//     kernel image (UKI) whose PE sections hold the kernel, the initramfs
//     and the kernel command line, so this one measurement covers all three
//     as built.
//   - PCR 7 (Secure Boot state): whether Secure Boot is on, and the PK, KEK,
//     db and dbx contents plus the db entry that authorised the boot binary.
//     Turning Secure Boot off or enrolling other keys changes PCR 7.
//   - PCR 12: with Secure Boot off, the UKI's stub (systemd-stub) takes the
//     kernel command line from the boot entry's load options when it has
//     any, instead of the UKI's own, and measures it into PCR 12, not PCR 4.
//     A boot entry for the same binary with rdinit=, init= or root= of an
//     attacker's choosing leaves PCRs 4 and 7 as they were; it changes PCR
//     12. The stub also measures credentials it passes to the kernel there.
//     A normal boot passes none of these, so PCR 12 is the same on every
//     boot of a machine.
//
// The command line is not made unchangeable in the kernel itself
// (CONFIG_CMDLINE_OVERRIDE): boot tests build images with extra
// parameters in the UKI's command line, and the kernel is built once and
// cached for all of them. Sealing to PCR 12 keeps the keys from any boot
// whose command line differs from the sealed one, which is what matters.
//
// PCRs 0 to 3 (firmware code and configuration, option ROMs) are left out on
// purpose: firmware updates and hardware changes alter them, which would lock
// the node out for no gain against the threats above.
//
// # Updates
//
// Installing a new boot binary changes PCR 4 on the next boot, so a key
// sealed to the current values would no longer unseal. An update seals
// each key again with [TPM.SealTo], to the new binary's PCR 4 as package
// measure predicts it from the firmware's event log and PCRs 7 and 12 as
// this boot had them before the cap, and keeps the old seal until the new
// binary has booted and confirmed itself (package seals).
//
// # Epochs
//
// A sealed blob stays valid as long as the PCRs match, so a copy of an
// older one, put back on the disk, unseals as well as the current one.
// [TPM.SealTo] can also bind a seal to an epoch: a monotonic counter in
// the TPM's NV memory ([TPM.Epoch]), checked with TPM2_PolicyNV before
// the PCR policy. [TPM.Advance] moves it on, and every seal of an earlier
// epoch fails with [ErrRolledBack]. The counter takes the empty owner
// auth, like the SRK: whoever holds the machine can advance it (locking
// the keys, which they can do anyway) or define it again, which a TPM
// starts at the highest value any counter on it ever had, never lower.
//
// # Usage
//
//	t, err := tpm.Open()
//	if err != nil { ... } // errors.Is(err, tpm.ErrNoTPM): no TPM
//	defer t.Close()
//	key, err := t.Random(32)
//	sealed, err := t.Seal(key, tpm.DefaultPCRs)
//	b, err := sealed.Marshal() // store b on disk
//	...
//	sealed, err = tpm.UnmarshalSealed(b)
//	key, err = t.Unseal(sealed) // ErrPolicy: boot state changed
//	err = t.Cap(tpm.DefaultPCRs) // once every key is unsealed
package tpm
