package qemu

import (
	"encoding/binary"
	"fmt"
	"io"
	"math/rand/v2"
	"net"
	"sync"
)

// Hub is a learning Ethernet switch between VMs that never touches the
// host's network: each VM's NIC is a QEMU "stream" netdev connected to the
// hub's unix socket, and frames travel in QEMU's stream framing (a 4-byte
// big-endian length, then the frame). The hub learns which connection
// each source MAC address came from, sends unicast frames only there, and
// floods broadcasts and unknown destinations to every other connection.
//
// A VM whose QEMU restarts connects again and is learned again by its
// first frame. A slow VM drops frames rather than stalling the others, as
// a switch port with a full queue does. Links between NICs can be given
// faults (SetFault, Partition: drops, delays) and healed.
type Hub struct {
	path string
	l    net.Listener
	mu   sync.Mutex
	// ports are the connected VMs; macs maps a learned MAC to its port.
	ports map[*hubPort]bool
	macs  map[[6]byte]*hubPort
	// faults are the links' faults; rand draws the frames they drop.
	faults map[link]Fault
	rand   *rand.Rand
	wg     sync.WaitGroup
}

// hubPort is one VM's connection, and the MAC address its frames come
// from once learned.
type hubPort struct {
	conn    net.Conn
	out     chan []byte
	mac     [6]byte
	learned bool
}

// maxFrame bounds a frame: QEMU's NICs send at most 64 KiB with offloads.
const maxFrame = 65536 + 64

// portQueue is how many frames wait for a VM before the hub drops more.
const portQueue = 256

// StartHub starts a hub listening on the unix socket at path.
func StartHub(path string) (*Hub, error) {
	l, err := net.Listen("unix", path)
	if err != nil {
		return nil, fmt.Errorf("qemu: starting the LAN hub: %w", err)
	}
	h := &Hub{path: path, l: l, ports: map[*hubPort]bool{}, macs: map[[6]byte]*hubPort{},
		faults: map[link]Fault{}, rand: rand.New(rand.NewPCG(1, 1))}
	h.wg.Add(1)
	go h.accept()
	return h, nil
}

// Path is the hub's socket, for Options.LAN.
func (h *Hub) Path() string { return h.path }

// Close stops the hub and disconnects every VM.
func (h *Hub) Close() error {
	err := h.l.Close()
	h.mu.Lock()
	for p := range h.ports {
		p.conn.Close()
	}
	h.mu.Unlock()
	h.wg.Wait()
	return err
}

func (h *Hub) accept() {
	defer h.wg.Done()
	for {
		c, err := h.l.Accept()
		if err != nil {
			return
		}
		p := &hubPort{conn: c, out: make(chan []byte, portQueue)}
		h.mu.Lock()
		h.ports[p] = true
		h.mu.Unlock()
		h.wg.Add(2)
		go h.read(p)
		go h.write(p)
	}
}

// read forwards p's frames until its connection ends, then forgets p.
func (h *Hub) read(p *hubPort) {
	defer h.wg.Done()
	defer h.drop(p)
	var hdr [4]byte
	for {
		if _, err := io.ReadFull(p.conn, hdr[:]); err != nil {
			return
		}
		n := binary.BigEndian.Uint32(hdr[:])
		if n > maxFrame {
			return
		}
		frame := make([]byte, 4+n)
		copy(frame, hdr[:])
		if _, err := io.ReadFull(p.conn, frame[4:]); err != nil {
			return
		}
		if n >= 14 {
			h.forward(p, frame)
		}
	}
}

// forward learns the frame's source and sends it on.
func (h *Hub) forward(from *hubPort, frame []byte) {
	var dst, src [6]byte
	copy(dst[:], frame[4:10])
	copy(src[:], frame[10:16])
	h.mu.Lock()
	defer h.mu.Unlock()
	if src[0]&1 == 0 {
		h.macs[src] = from
		from.mac, from.learned = src, true
	}
	if to, ok := h.macs[dst]; ok && dst[0]&1 == 0 {
		if to != from {
			h.deliver(src, to, frame)
		}
		return
	}
	for p := range h.ports {
		if p != from {
			h.deliver(src, p, frame)
		}
	}
}

// send queues a frame for p, dropping it if p's queue is full.
func send(p *hubPort, frame []byte) {
	select {
	case p.out <- frame:
	default:
	}
}

func (h *Hub) write(p *hubPort) {
	defer h.wg.Done()
	for frame := range p.out {
		if _, err := p.conn.Write(frame); err != nil {
			p.conn.Close()
			for range p.out {
			}
			return
		}
	}
}

// drop forgets a disconnected port and what was learned through it.
func (h *Hub) drop(p *hubPort) {
	h.mu.Lock()
	defer h.mu.Unlock()
	if !h.ports[p] {
		return
	}
	delete(h.ports, p)
	for mac, q := range h.macs {
		if q == p {
			delete(h.macs, mac)
		}
	}
	p.conn.Close()
	close(p.out)
}
