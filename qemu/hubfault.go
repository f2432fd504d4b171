package qemu

import (
	"fmt"
	"math/rand/v2"
	"net"
	"time"
)

// Fault is what the hub does to the frames on a link, from one VM's NIC
// to another's: the network faults of a fault-injection run. The zero
// Fault passes every frame at once.
type Fault struct {
	// Drop is the share of frames dropped, from 0 to 1; 1 cuts the link.
	Drop float64
	// Delay holds each frame back this long.
	Delay time.Duration
}

// link is a direction between two NICs, by MAC address.
type link struct{ from, to [6]byte }

// SetFault applies f to frames from the NIC with MAC from to the NIC with
// MAC to, one way; the zero Fault heals that link. Broadcasts count as
// frames to each NIC they reach.
func (h *Hub) SetFault(from, to string, f Fault) error {
	l, err := parseLink(from, to)
	if err != nil {
		return err
	}
	if f.Drop < 0 || f.Drop > 1 || f.Delay < 0 {
		return fmt.Errorf("qemu: a fault drops a share from 0 to 1 and delays by a positive time, not %+v", f)
	}
	h.mu.Lock()
	defer h.mu.Unlock()
	if f == (Fault{}) {
		delete(h.faults, l)
		return nil
	}
	h.faults[l] = f
	return nil
}

// Partition cuts every link between a NIC in a and one in b, both ways.
func (h *Hub) Partition(a, b []string) error {
	for _, x := range a {
		for _, y := range b {
			for _, l := range [][2]string{{x, y}, {y, x}} {
				if err := h.SetFault(l[0], l[1], Fault{Drop: 1}); err != nil {
					return err
				}
			}
		}
	}
	return nil
}

// Heal removes every fault.
func (h *Hub) Heal() {
	h.mu.Lock()
	defer h.mu.Unlock()
	clear(h.faults)
}

// Seed makes the hub's choice of frames to drop repeat from seed.
func (h *Hub) Seed(seed uint64) {
	h.mu.Lock()
	defer h.mu.Unlock()
	h.rand = rand.New(rand.NewPCG(seed, seed))
}

func parseLink(from, to string) (link, error) {
	var l link
	for _, m := range []struct {
		s   string
		dst *[6]byte
	}{{from, &l.from}, {to, &l.to}} {
		hw, err := net.ParseMAC(m.s)
		if err != nil || len(hw) != 6 {
			return l, fmt.Errorf("qemu: %q is not a NIC's MAC address", m.s)
		}
		copy(m.dst[:], hw)
	}
	return l, nil
}

// deliver sends a frame from src to port to, through the link's fault.
// h.mu is held.
func (h *Hub) deliver(src [6]byte, to *hubPort, frame []byte) {
	f, ok := h.faults[link{src, to.mac}]
	switch {
	case !ok || !to.learned:
		send(to, frame)
	case f.Drop > 0 && h.rand.Float64() < f.Drop:
	case f.Delay > 0:
		time.AfterFunc(f.Delay, func() { h.sendLater(to, frame) })
	default:
		send(to, frame)
	}
}

// sendLater sends a delayed frame, unless its port has gone meanwhile.
func (h *Hub) sendLater(to *hubPort, frame []byte) {
	h.mu.Lock()
	defer h.mu.Unlock()
	if h.ports[to] {
		send(to, frame)
	}
}
