package network

import (
	"encoding/json"
	"errors"
	"fmt"
	"net"
	"net/netip"
	"os"
	"sync"

	"github.com/borough-os/borough/internal/atomicfile"
)

// Leases remember the address DHCP last gave each link, by MAC, in a file
// (on the ESP: the data volume is not open when the network comes up),
// so that the next boot asks for the same one (INIT-REBOOT, RFC 2131
// 4.3.2): a whole cluster powered up again keeps its peer addresses
// wherever the server still holds the leases. The file directs a request
// and nothing more: the server decides.
type Leases struct {
	// Path is the file.
	Path string

	mu sync.Mutex
}

// previous is the address mac was last given, if the file says one.
func (l *Leases) previous(mac net.HardwareAddr) (netip.Addr, error) {
	if l == nil {
		return netip.Addr{}, nil
	}
	l.mu.Lock()
	defer l.mu.Unlock()
	m, err := l.read()
	if err != nil {
		return netip.Addr{}, err
	}
	return m[mac.String()], nil
}

// remember records that mac was given ip, if it is not recorded already.
func (l *Leases) remember(mac net.HardwareAddr, ip netip.Addr) error {
	if l == nil {
		return nil
	}
	l.mu.Lock()
	defer l.mu.Unlock()
	m, err := l.read()
	if err != nil {
		m = map[string]netip.Addr{}
	}
	if m[mac.String()] == ip {
		return nil
	}
	m[mac.String()] = ip
	b, err := json.Marshal(m)
	if err != nil {
		return err
	}
	if err := atomicfile.Update(l.Path, b, 0o600); err != nil {
		return fmt.Errorf("remembering the DHCP lease: %w", err)
	}
	return nil
}

// read reads the file; a missing one is empty.
func (l *Leases) read() (map[string]netip.Addr, error) {
	m := map[string]netip.Addr{}
	b, err := os.ReadFile(l.Path)
	if errors.Is(err, os.ErrNotExist) {
		return m, nil
	}
	if err != nil {
		return m, err
	}
	if err := json.Unmarshal(b, &m); err != nil {
		return map[string]netip.Addr{}, fmt.Errorf("%s: %w", l.Path, err)
	}
	return m, nil
}
