// Package measure predicts what the firmware measures into PCR 4 when it
// starts a boot binary, so that keys sealed to PCR 4 can be sealed ahead
// of time to a boot binary that has not booted yet (an update's).
//
// The firmware measures each EFI application it starts into PCR 4 as its
// Authenticode digest: a SHA-256 of the PE image without its checksum,
// its certificate table entry and the certificate table itself, so a
// signature added or changed leaves it as it was. PCR 4 is then the
// replay of this boot's TCG event log for PCR 4 (the firmware's event
// log, /sys/kernel/security/tpm0/binary_bios_measurements) with the new
// binary's digest where the running binary's stands.
//
// The event log is parsed by go-attestation, which knows the log formats
// and firmware quirks. The Authenticode digest is computed here: the Go
// libraries that do it (go-uefi's authenticode) are not served by this
// project's module proxy, and the algorithm is a short walk over the PE
// headers (Microsoft's PE/COFF specification, "Calculating the PE Image
// Hash"); a unit test checks it against osslsigncode.
package measure
