// Package guestprof samples where a VM's virtual CPU is, through QEMU's
// gdbstub, and reports it by kernel and Go function.
//
// Under TCG a boot is CPU-bound, and the guest's own profilers see little
// of it: QEMU's translation of code run for the first time, its exits for
// device registers and the host's cost of guest memory all happen outside
// the guest's view (Go's profiler saw 0.9 s of a node's 2.2 s). Stopping
// the VM every few milliseconds and reading its instruction pointer
// charges all of that to the guest code that caused it. That is how the
// launcher's TCG machine (qemu.tcgCPU) was found: the HPET reads of
// Linux's clocksource watchdog and byte-wise REP MOVSB/STOSB.
//
// The client speaks the few packets of the GDB remote protocol it needs
// (no Go module of it is served here, and a debugger would stop the VM far
// longer per sample). Samples may lean towards device accesses: there
// the vCPU waits for QEMU's I/O lock, which the gdbstub takes to stop it.
package guestprof

import (
	"bufio"
	"context"
	"encoding/binary"
	"encoding/hex"
	"errors"
	"fmt"
	"io"
	"net"
	"syscall"
	"time"
)

// Sample is where the vCPU was when QEMU stopped it.
type Sample struct {
	// At is the time since recording began.
	At time.Duration
	// RIP is the instruction pointer; CR3 the page table root, which
	// tells one process from another.
	RIP, CR3 uint64
}

// Offsets in hex digits of RIP and CR3 in the reply to 'g' of QEMU's
// x86-64 target: 16 general registers, rip, eflags (4 bytes), six
// segment selectors (4 bytes each), fs_base, gs_base, k_gs_base, cr0,
// cr2, cr3.
const (
	ripOffset = 16 * 16
	cr3Offset = ripOffset + 16 + 8 + 6*8 + 5*16
)

// Record connects to the gdbstub listening on the unix socket path, lets
// the guest run, and stops it every interval to read its registers, until
// ctx ends or QEMU goes. It waits up to a minute for the socket.
func Record(ctx context.Context, path string, interval time.Duration) ([]Sample, error) {
	conn, err := dial(ctx, path)
	if err != nil {
		return nil, err
	}
	// ctx is checked between samples only, while the guest runs: a
	// connection closed in the middle of one would leave it stopped.
	defer conn.Close()
	s := &stub{conn: conn, r: bufio.NewReader(conn)}
	if err := s.start(); err != nil {
		return nil, err
	}
	var samples []Sample
	begin := time.Now()
	for {
		select {
		case <-ctx.Done():
			return samples, nil
		case <-time.After(interval):
		}
		sample, read, err := s.sample()
		if read {
			sample.At = time.Since(begin)
			samples = append(samples, sample)
		}
		switch {
		case err == nil:
		case gone(err):
			return samples, nil
		default:
			return samples, err
		}
	}
}

// gone says whether err means that QEMU closed the connection: the VM
// has ended.
func gone(err error) bool {
	return errors.Is(err, io.EOF) || errors.Is(err, net.ErrClosed) ||
		errors.Is(err, syscall.EPIPE) || errors.Is(err, syscall.ECONNRESET)
}

func dial(ctx context.Context, path string) (net.Conn, error) {
	deadline := time.Now().Add(time.Minute)
	for {
		var d net.Dialer
		conn, err := d.DialContext(ctx, "unix", path)
		if err == nil || time.Now().After(deadline) || ctx.Err() != nil {
			if err != nil {
				return nil, fmt.Errorf("connecting to QEMU's gdbstub: %w", err)
			}
			return conn, nil
		}
		time.Sleep(20 * time.Millisecond)
	}
}

// stub is a connection to a gdbstub in no-ack mode.
type stub struct {
	conn  net.Conn
	r     *bufio.Reader
	noAck bool
}

// start turns acknowledgements off and lets the guest run.
func (s *stub) start() error {
	if _, err := s.call("QStartNoAckMode"); err != nil {
		return fmt.Errorf("gdbstub: %w", err)
	}
	s.noAck = true
	return s.send("c")
}

// sample stops the guest, reads RIP and CR3, and lets it run again; read
// says whether it got the registers, whatever the error.
func (s *stub) sample() (sample Sample, read bool, err error) {
	if _, err := s.conn.Write([]byte{0x03}); err != nil {
		return Sample{}, false, err
	}
	for {
		reply, err := s.packet()
		if err != nil {
			return Sample{}, false, err
		}
		if len(reply) > 0 && (reply[0] == 'T' || reply[0] == 'S') {
			break
		}
	}
	regs, err := s.call("g")
	if err != nil {
		return Sample{}, false, err
	}
	if sample, err = parseRegisters(regs); err != nil {
		return Sample{}, false, err
	}
	return sample, true, s.send("c")
}

// parseRegisters reads RIP and CR3 from a reply to 'g'.
func parseRegisters(regs string) (Sample, error) {
	if len(regs) < cr3Offset+16 {
		return Sample{}, fmt.Errorf("gdbstub: %d hex digits of registers, want at least %d", len(regs), cr3Offset+16)
	}
	rip, err := hex.DecodeString(regs[ripOffset : ripOffset+16])
	if err != nil {
		return Sample{}, fmt.Errorf("gdbstub: rip: %w", err)
	}
	cr3, err := hex.DecodeString(regs[cr3Offset : cr3Offset+16])
	if err != nil {
		return Sample{}, fmt.Errorf("gdbstub: cr3: %w", err)
	}
	return Sample{RIP: binary.LittleEndian.Uint64(rip), CR3: binary.LittleEndian.Uint64(cr3)}, nil
}

func (s *stub) call(cmd string) (string, error) {
	if err := s.send(cmd); err != nil {
		return "", err
	}
	return s.packet()
}

// send writes $cmd#checksum.
func (s *stub) send(cmd string) error {
	_, err := fmt.Fprintf(s.conn, "$%s#%02x", cmd, checksum(cmd))
	return err
}

// packet reads the next packet's payload, skipping acknowledgements, and
// acknowledges it unless in no-ack mode.
func (s *stub) packet() (string, error) {
	if _, err := s.r.ReadString('$'); err != nil {
		return "", err
	}
	body, err := s.r.ReadString('#')
	if err != nil {
		return "", err
	}
	body = body[:len(body)-1]
	var sum [2]byte
	if _, err := io.ReadFull(s.r, sum[:]); err != nil {
		return "", err
	}
	if got := fmt.Sprintf("%02x", checksum(body)); got != string(sum[:]) {
		return "", fmt.Errorf("gdbstub: packet %.20q has checksum %s, want %s", body, sum[:], got)
	}
	if !s.noAck {
		if _, err := s.conn.Write([]byte{'+'}); err != nil {
			return "", err
		}
	}
	return body, nil
}

func checksum(s string) byte {
	var sum byte
	for i := 0; i < len(s); i++ {
		sum += s[i]
	}
	return sum
}
