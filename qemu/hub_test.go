package qemu

import (
	"bytes"
	"encoding/binary"
	"io"
	"net"
	"path/filepath"
	"testing"
	"time"
)

// frame builds a framed Ethernet frame from src to dst.
func frame(dst, src byte, payload string) []byte {
	eth := append([]byte{dst, 0, 0, 0, 0, dst, 0x52, 0x54, 0, 0, 0, src, 0x08, 0x00}, payload...)
	if dst == 0xff {
		copy(eth[:6], bytes.Repeat([]byte{0xff}, 6))
	}
	out := binary.BigEndian.AppendUint32(nil, uint32(len(eth)))
	return append(out, eth...)
}

// receive reads one frame or returns nil after a short wait.
func receive(t *testing.T, c net.Conn) []byte {
	t.Helper()
	c.SetReadDeadline(time.Now().Add(300 * time.Millisecond))
	var hdr [4]byte
	if _, err := io.ReadFull(c, hdr[:]); err != nil {
		return nil
	}
	b := make([]byte, binary.BigEndian.Uint32(hdr[:]))
	if _, err := io.ReadFull(c, b); err != nil {
		t.Fatal(err)
	}
	return b
}

func TestHub(t *testing.T) {
	h, err := StartHub(filepath.Join(t.TempDir(), "lan.sock"))
	if err != nil {
		t.Fatal(err)
	}
	defer h.Close()
	var vms [3]net.Conn
	for i := range vms {
		if vms[i], err = net.Dial("unix", h.Path()); err != nil {
			t.Fatal(err)
		}
		defer vms[i].Close()
	}
	time.Sleep(50 * time.Millisecond)
	// VM 0 broadcasts: VMs 1 and 2 get it, VM 0 does not.
	vms[0].Write(frame(0xff, 1, "who has"))
	for i, want := range []bool{false, true, true} {
		if got := receive(t, vms[i]) != nil; got != want {
			t.Errorf("broadcast: VM %d received %v, want %v", i, got, want)
		}
	}
	// VM 1 answers VM 0 (learned): only VM 0 gets it, and VM 1 is learned.
	vms[1].Write(frame(0x52, 2, "is at"))
	// A frame to an address nobody has sent from yet is flooded.
	for i, want := range []bool{true, false, true} {
		got := receive(t, vms[i])
		if (got != nil) != want {
			t.Errorf("unknown unicast: VM %d received %v, want %v", i, got != nil, want)
		}
	}
	// Now VM 0 writes to VM 1's MAC (52:54:00:00:00:02): only VM 1.
	f := frame(0x52, 1, "hello")
	copy(f[4:10], []byte{0x52, 0x54, 0, 0, 0, 2})
	vms[0].Write(f)
	for i, want := range []bool{false, true, false} {
		got := receive(t, vms[i])
		if (got != nil) != want {
			t.Errorf("learned unicast: VM %d received %v, want %v", i, got != nil, want)
		}
		if want && !bytes.HasSuffix(got, []byte("hello")) {
			t.Errorf("VM %d received %q", i, got)
		}
	}
}
