package qemu

import (
	"bytes"
	"encoding/binary"
	"fmt"
	"io"
	"net"
	"path/filepath"
	"testing"
	"time"

	"github.com/borough-os/borough/internal/poll"
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
	_, vms := connectedHub(t, 3)
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

// mac is the MAC address frame gives source byte src.
func mac(src byte) string { return fmt.Sprintf("52:54:00:00:00:%02x", src) }

// unicast is a framed frame from VM src to VM dst (source bytes).
func unicast(dst, src byte, payload string) []byte {
	f := frame(0x52, src, payload)
	copy(f[4:10], []byte{0x52, 0x54, 0, 0, 0, dst})
	return f
}

// connectedHub starts a hub and connects n VMs to it, closed when the
// test ends.
func connectedHub(t *testing.T, n int) (*Hub, []net.Conn) {
	h, err := StartHub(filepath.Join(t.TempDir(), "lan.sock"))
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { h.Close() })
	vms := make([]net.Conn, n)
	for i := range vms {
		if vms[i], err = net.Dial("unix", h.Path()); err != nil {
			t.Fatal(err)
		}
		t.Cleanup(func() { vms[i].Close() })
	}
	if err := poll.Until(t.Context(), 5*time.Second, 10*time.Millisecond, func() error {
		h.mu.Lock()
		defer h.mu.Unlock()
		if len(h.ports) != n {
			return fmt.Errorf("%d of %d VMs connected", len(h.ports), n)
		}
		return nil
	}); err != nil {
		t.Fatal(err)
	}
	return h, vms
}

// learnedHub starts a hub with n VMs whose MACs it has learned: VM i
// sends from source byte i+1.
func learnedHub(t *testing.T, n int) (*Hub, []net.Conn) {
	h, vms := connectedHub(t, n)
	for i := range vms {
		vms[i].Write(frame(0xff, byte(i+1), "hello"))
		for j := range vms {
			if j != i && receive(t, vms[j]) == nil {
				t.Fatalf("VM %d did not receive VM %d's broadcast", j, i)
			}
		}
	}
	return h, vms
}

// TestHubFaults partitions VMs both ways and one way, delays and drops
// frames, and heals.
func TestHubFaults(t *testing.T) {
	h, vms := learnedHub(t, 3)
	// delivered sends a unicast from VM i to VM j and says whether it came.
	delivered := func(i, j int) bool {
		vms[i].Write(unicast(byte(j+1), byte(i+1), "ping"))
		return receive(t, vms[j]) != nil
	}
	if err := h.Partition([]string{mac(1)}, []string{mac(2)}); err != nil {
		t.Fatal(err)
	}
	for _, tc := range []struct {
		i, j int
		want bool
	}{{0, 1, false}, {1, 0, false}, {0, 2, true}, {2, 1, true}} {
		if got := delivered(tc.i, tc.j); got != tc.want {
			t.Errorf("VM 0 and 1 partitioned: VM %d to %d delivered %v, want %v", tc.i, tc.j, got, tc.want)
		}
	}
	vms[0].Write(frame(0xff, 1, "who has"))
	if receive(t, vms[1]) != nil || receive(t, vms[2]) == nil {
		t.Error("VM 0 and 1 partitioned: VM 0's broadcast did not reach VM 2 alone")
	}
	h.Heal()
	if !delivered(0, 1) || !delivered(1, 0) {
		t.Error("healed: VMs 0 and 1 do not reach each other")
	}
	if err := h.SetFault(mac(2), mac(3), Fault{Drop: 1}); err != nil {
		t.Fatal(err)
	}
	if delivered(1, 2) || !delivered(2, 1) {
		t.Error("one way cut from VM 1 to 2: not cut that way alone")
	}
	h.Heal()
	if err := h.SetFault(mac(1), mac(3), Fault{Delay: 200 * time.Millisecond}); err != nil {
		t.Fatal(err)
	}
	sent := time.Now()
	if !delivered(0, 2) {
		t.Error("delayed frame not delivered")
	} else if d := time.Since(sent); d < 200*time.Millisecond {
		t.Errorf("delayed frame came after %v, want at least 200ms", d)
	}
	h.Heal()
	if err := h.SetFault(mac(1), mac(9), Fault{Drop: 2}); err == nil {
		t.Error("a drop share of 2 was accepted")
	}
	if err := h.SetFault("nonsense", mac(1), Fault{Drop: 1}); err == nil {
		t.Error("a MAC address of \"nonsense\" was accepted")
	}
}

// TestHubLoss drops half of a link's frames, the same ones for the same
// seed.
func TestHubLoss(t *testing.T) {
	count := func(seed uint64) int {
		h, vms := learnedHub(t, 2)
		h.Seed(seed)
		if err := h.SetFault(mac(1), mac(2), Fault{Drop: 0.5}); err != nil {
			t.Fatal(err)
		}
		for range 100 {
			vms[0].Write(unicast(2, 1, "data"))
		}
		n := 0
		for receive(t, vms[1]) != nil {
			n++
		}
		return n
	}
	a, b := count(7), count(7)
	if a < 25 || a > 75 {
		t.Errorf("%d of 100 frames passed a link dropping half", a)
	}
	if a != b {
		t.Errorf("the same seed passed %d and %d frames", a, b)
	}
}
