// Package boottest boots real Borough images under OVMF in QEMU and checks
// what init prints on the serial console. Its tests carry the "boot" build
// tag, so that `go test ./...` stays fast; `make test` runs them with
// BOROUGH_OUT pointing at the build output (out/ of ./build.sh).
//
// Each test builds its own image from the built kernel and initramfs, with
// test parameters appended to the kernel command line, and boots it in a
// fresh VM state directory.
package boottest
