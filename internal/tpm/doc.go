// Package tpm seals Borough's local unlock key to the machine's TPM 2.0.
//
// # What it protects
//
// The local unlock key is a 32-byte secret that init (PID 1) needs to unlock
// the node's local storage. It is stored on disk only as a [Sealed] blob:
// the TPM's storage root key (SRK) encrypts it, and the TPM releases it only
// in a policy session whose PCR values match the ones it was sealed to. So:
//
//   - A copy of the disk is useless on another machine: the blob is bound to
//     this TPM's storage seed ([ErrWrongTPM]), and clearing the TPM destroys
//     that seed, so a cleared TPM cannot unseal either.
//   - On this machine, the key is released only after the same boot binary
//     was started under the same Secure Boot policy ([ErrPolicy] otherwise).
//
// It does not protect against an attacker who runs code in the booted,
// trusted system (the PCRs are still good there), nor against an active
// interposer on the TPM bus: the SRK is recreated from its template on every
// call and its public key is not pinned, so a fake TPM could stand in for it.
// Against a passive bus sniffer, the secret never crosses the bus in clear:
// Create and Unseal use sessions salted to the SRK with AES-CFB parameter
// encryption.
//
// # Why PCRs 4 and 7
//
// [DefaultPCRs] are 4 and 7, the SHA-256 bank:
//
//   - PCR 4 (boot manager code): the firmware measures every EFI application
//     it starts, as its Authenticode hash. Borough's boot binary is a unified
//     kernel image (UKI) whose PE sections hold the kernel, the initramfs
//     and the kernel command line, so this one measurement covers all three:
//     a changed kernel, init or command line changes PCR 4.
//   - PCR 7 (Secure Boot state): whether Secure Boot is on, and the PK, KEK,
//     db and dbx contents plus the db entry that authorised the boot binary.
//     Turning Secure Boot off or enrolling other keys changes PCR 7.
//
// PCRs 0 to 3 (firmware code and configuration, option ROMs) are left out on
// purpose: firmware updates and hardware changes alter them, which would lock
// the node out for no gain against the threats above.
//
// # Kernel updates
//
// Installing a new boot binary changes PCR 4 on the next boot, so a key
// sealed to the current values would no longer unseal. Before rebooting into
// the new binary, the updater predicts its PCR 4 value by replaying the
// firmware's TCG event log for PCR 4 with the new binary's Authenticode hash
// in place of the current one, then reseals the key to the predicted value
// with [TPM.SealTo] (PCR 7 keeps its current value). Until the new binary has
// booted, keep the old blob too, so a failed update can fall back.
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
package tpm
