// Package entropy makes sure the kernel's random number generator is
// initialised early in every boot, on machines without a hardware RNG
// device too.
//
// Until the kernel has credited 256 bits of entropy to its pool,
// getrandom() blocks, and with it every key, TLS handshake and DHCP
// transaction ID in the node. Without an RNG device (a VM with no
// virtio-rng, much older hardware) that took minutes in a tested guest.
// Borough credits these sources, in this order, and says which did it:
//
//   - The CPU's RDRAND and the seed the firmware's EFI RNG protocol hands
//     the kernel's EFI stub, credited by the kernel itself
//     (CONFIG_RANDOM_TRUST_CPU, CONFIG_RANDOM_TRUST_BOOTLOADER in
//     kernel/borough.config). Trusting them is the kernel's default and
//     Debian's; a backdoored CPU or firmware could break far more than
//     this.
//   - The TPM's generator, 256 bits read from it (package tpm) and
//     credited with RNDADDENTROPY. Borough already trusts the TPM with its
//     unlock keys.
//   - A seed file on the ESP (esp.RandomSeed), as systemd keeps one. It is
//     credited only after a successor derived from it is durably written,
//     so a seed is never credited twice, even when the boot crashes; once
//     the pool is ready, a fresh seed from the kernel replaces the
//     successor. The first boot has none. A disk cloned after its first
//     boot shares one seed with its clone; mixing (never replacing) keeps
//     the pool as good as its other inputs then.
//
// Whatever is credited is also mixed in; nothing here can make the pool
// worse. No library covers this: it is two ioctls and a file, written
// here.
package entropy

import (
	"crypto/rand"
	"crypto/sha512"
	"encoding/binary"
	"errors"
	"fmt"
	"log/slog"
	"os"
	"strings"
	"unsafe"

	"golang.org/x/sys/unix"

	"github.com/borough-os/borough/esp"
	"github.com/borough-os/borough/internal/atomicfile"
)

// seedSize is the size of the seed file: 512 bits, twice what the pool
// needs, as a hash of it is what the next boot gets.
const seedSize = 64

// Generator is a random source the node trusts, the TPM.
type Generator interface {
	Random(n int) ([]byte, error)
}

// Seed credits the kernel's pool from gen (if not nil) and the seed file
// on the ESP mounted at espRoot, and logs what it credited and whether
// the pool was ready before. It credits even a ready pool: more entropy
// never hurts, and every boot replaces its seed file the same way. It
// returns a function that writes a fresh seed file; call it once the node
// can wait for the pool, as it blocks until the pool is ready.
func Seed(log *slog.Logger, espRoot string, gen Generator) (refresh func()) {
	path := esp.RandomSeed.In(espRoot)
	before := Ready()
	var credited []string
	if gen != nil {
		if err := creditGenerator(gen); err != nil {
			log.Warn("crediting the TPM's random numbers", "err", err)
		} else {
			credited = append(credited, "TPM")
		}
	}
	switch ok, err := creditSeedFile(path); {
	case err != nil:
		log.Warn("using the random seed on the ESP", "err", err)
	case ok:
		credited = append(credited, "seed file")
	}
	if Ready() {
		log.Info("random pool seeded", "credited", strings.Join(credited, ","), "ready_before", before)
	} else {
		log.Warn("random pool NOT ready: no CPU or firmware RNG, no RNG device, no TPM and no seed file; " +
			"the kernel collects entropy from timing until it is, which can take minutes")
	}
	return func() { writeFresh(log, path) }
}

// Ready says whether the kernel's pool is initialised, that is whether
// getrandom() would not block.
func Ready() bool {
	var b [1]byte
	_, err := unix.Getrandom(b[:], unix.GRND_NONBLOCK)
	return err == nil
}

func creditGenerator(gen Generator) error {
	b, err := gen.Random(32)
	if err != nil {
		return err
	}
	defer clear(b)
	return credit(b)
}

// creditSeedFile credits the seed at path, after replacing it with its
// successor. It reports whether it credited anything; a missing file is
// no error, a short or unreadable one is not credited.
func creditSeedFile(path string) (bool, error) {
	seed, err := os.ReadFile(path)
	if errors.Is(err, os.ErrNotExist) {
		return false, nil
	}
	if err != nil {
		return false, err
	}
	defer clear(seed)
	if len(seed) != seedSize {
		return false, fmt.Errorf("%s is %d bytes, want %d; not crediting it", path, len(seed), seedSize)
	}
	next := successor(seed)
	defer clear(next)
	if err := atomicfile.Write(path, next, 0o600); err != nil {
		return false, fmt.Errorf("replacing %s before crediting it: %w", path, err)
	}
	return true, credit(seed)
}

// successor is the seed the next boot gets if this one never writes a
// fresh one: a one-way function of seed, so it reveals nothing of what
// this boot credited.
func successor(seed []byte) []byte {
	h := sha512.New()
	h.Write([]byte("Borough random seed successor\x00"))
	h.Write(seed)
	return h.Sum(nil)
}

// writeFresh replaces the seed file with bytes from the kernel's pool,
// waiting for it to be ready.
func writeFresh(log *slog.Logger, path string) {
	seed := make([]byte, seedSize)
	defer clear(seed)
	if _, err := rand.Read(seed); err != nil {
		log.Warn("reading a fresh random seed", "err", err)
		return
	}
	if err := atomicfile.Write(path, seed, 0o600); err != nil {
		log.Warn("writing a fresh random seed", "path", path, "err", err)
	}
}

// credit mixes b into the kernel's pool and credits it with 8 bits per
// byte (RNDADDENTROPY, which needs CAP_SYS_ADMIN).
func credit(b []byte) error {
	f, err := os.OpenFile("/dev/urandom", os.O_WRONLY, 0)
	if err != nil {
		return err
	}
	defer f.Close()
	// struct rand_pool_info { int entropy_count; int buf_size; __u32 buf[]; }
	info := make([]byte, 8+len(b))
	defer clear(info)
	binary.NativeEndian.PutUint32(info[0:], uint32(8*len(b)))
	binary.NativeEndian.PutUint32(info[4:], uint32(len(b)))
	copy(info[8:], b)
	_, _, errno := unix.Syscall(unix.SYS_IOCTL, f.Fd(), unix.RNDADDENTROPY, uintptr(unsafe.Pointer(&info[0])))
	if errno != 0 {
		return fmt.Errorf("RNDADDENTROPY: %w", errno)
	}
	return nil
}
