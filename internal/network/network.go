// Package network brings up the node's network: the loopback link, then
// each configured interface (static or DHCP), or, with no interfaces
// configured, DHCP on the first link with a carrier; and it keeps DHCP
// leases renewed.
//
// One interface is advertised: its address is the node's address in the
// cluster. A cluster machine often has two links (a cluster LAN and a
// management or uplink network); which one peers must use is the owner's
// decision, written in the enrolment config, not something to guess.
//
// DHCP is github.com/insomniacslk/dhcp's nclient4 and links, addresses and
// routes are set through netlink (github.com/vishvananda/netlink), both
// already in u-root's dependency tree; /etc/resolv.conf is written here.
// Lease timing (renewal at T1, rebinding at T2, expiry) is in dhcp.go;
// each link asks for its previous address first (leases.go), with a
// client identifier of its own for good.
package network

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"net"
	"net/netip"
	"os"
	"strings"
	"time"

	"github.com/vishvananda/netlink"

	"github.com/borough-os/borough/internal/enrolment"
	"github.com/borough-os/borough/internal/supervisor"
)

// carrierTimeout bounds the wait for a link to come up, carrierPoll is
// how often findLink looks.
const (
	carrierTimeout = 20 * time.Second
	carrierPoll    = 10 * time.Millisecond
)

// Network is the node's configured network.
type Network struct {
	// Link is the advertised link's name; IP its (first) address.
	Link  string
	IP    netip.Addr
	log   *slog.Logger
	links []*link
	// leases remember what DHCP gave each link (nil: nothing).
	leases *Leases
}

// link is one configured link.
type link struct {
	name string
	nl   netlink.Link
	// dhcp is nil for a static link.
	dhcp *dhcpLink
}

// NTPServers returns the NTP servers the DHCP leases offer, in the order
// of the links.
func (n *Network) NTPServers() []string {
	var out []string
	for _, l := range n.links {
		if l.dhcp == nil || l.dhcp.lease == nil {
			continue
		}
		for _, ip := range l.dhcp.lease.ACK.NTPServers() {
			out = append(out, ip.String())
		}
	}
	return out
}

// Up configures every interface and returns once each has an address.
// With no interfaces, it runs DHCP on the first link that comes up.
func Up(ctx context.Context, log *slog.Logger, ifaces []enrolment.Interface, leases *Leases) (*Network, error) {
	lo, err := netlink.LinkByName("lo")
	if err != nil {
		return nil, fmt.Errorf("finding loopback: %w", err)
	}
	if err := netlink.LinkSetUp(lo); err != nil {
		return nil, fmt.Errorf("bringing up loopback: %w", err)
	}
	if len(ifaces) == 0 {
		ifaces = []enrolment.Interface{{Advertise: true}}
	}
	n := &Network{log: log, leases: leases}
	var dns []netip.Addr
	for _, ifc := range ifaces {
		l, ip, servers, err := n.configure(ctx, ifc)
		if err != nil {
			n.close()
			return nil, err
		}
		n.links = append(n.links, l)
		dns = append(dns, servers...)
		if ifc.Advertise {
			n.Link, n.IP = l.name, ip
		}
	}
	if err := writeResolvConf(dns); err != nil {
		n.close()
		return nil, err
	}
	return n, nil
}

// configure finds the link ifc matches, waits for its carrier and gives
// it its address; it returns the address and name servers.
func (n *Network) configure(ctx context.Context, ifc enrolment.Interface) (*link, netip.Addr, []netip.Addr, error) {
	nl, err := findLink(ctx, ifc)
	if err != nil {
		return nil, netip.Addr{}, nil, err
	}
	l := &link{name: nl.Attrs().Name, nl: nl}
	if ifc.Static != nil {
		ip, err := static(nl, ifc.Static)
		if err != nil {
			return nil, ip, nil, err
		}
		n.log.Info("network configured", "link", l.name, "address", ifc.Static.Addresses[0], "method", "static",
			"advertised", ifc.Advertise)
		return l, ip, ifc.Static.DNS, nil
	}
	l.dhcp = &dhcpLink{link: nl, log: n.log.With("link", l.name), advertised: ifc.Advertise, leases: n.leases}
	ip, dns, err := l.dhcp.start(ctx)
	if err != nil {
		return nil, ip, nil, err
	}
	return l, ip, dns, nil
}

// matches says whether a link is the one ifc names; an interface that
// names none matches every link.
func matches(a *netlink.LinkAttrs, ifc enrolment.Interface) bool {
	switch {
	case ifc.Name != "":
		return a.Name == ifc.Name
	case ifc.MAC != "":
		return a.HardwareAddr.String() == ifc.MAC
	}
	return true
}

func describe(ifc enrolment.Interface) string {
	switch {
	case ifc.Name != "":
		return "named " + ifc.Name
	case ifc.MAC != "":
		return "with MAC " + ifc.MAC
	}
	return ""
}

// ErrNoLink says the machine has no network link an interface matches,
// or none that came up.
var ErrNoLink = errors.New("no network link")

// findLink brings up the links ifc matches and returns the first with a
// carrier.
//
// It polls the carriers every carrierPoll. A virtual NIC's carrier is up
// within milliseconds of the link, so a longer interval is a delay of
// every boot; the kernel's link notifications would need a subscription
// whose goroutine, in vishvananda/netlink, cannot be stopped reliably.
func findLink(ctx context.Context, ifc enrolment.Interface) (netlink.Link, error) {
	links, err := netlink.LinkList()
	if err != nil {
		return nil, fmt.Errorf("listing links: %w", err)
	}
	var candidates []netlink.Link
	for _, l := range links {
		a := l.Attrs()
		if a.Name == "lo" || !matches(a, ifc) {
			continue
		}
		if err := netlink.LinkSetUp(l); err != nil {
			return nil, fmt.Errorf("bringing up %s: %w", a.Name, err)
		}
		candidates = append(candidates, l)
	}
	if len(candidates) == 0 {
		if d := describe(ifc); d != "" {
			return nil, fmt.Errorf("%w %s", ErrNoLink, d)
		}
		return nil, ErrNoLink
	}
	ctx, cancel := context.WithTimeout(ctx, carrierTimeout)
	defer cancel()
	for {
		for _, l := range candidates {
			b, err := os.ReadFile("/sys/class/net/" + l.Attrs().Name + "/carrier")
			if err == nil && strings.TrimSpace(string(b)) == "1" {
				return l, nil
			}
		}
		select {
		case <-ctx.Done():
			return nil, fmt.Errorf("%w %s", ErrNoLink, strings.TrimSpace(describe(ifc)+" came up within "+carrierTimeout.String()))
		case <-time.After(carrierPoll):
		}
	}
}

// static gives a link its fixed addresses and gateways and returns its
// first address.
func static(link netlink.Link, s *enrolment.Static) (netip.Addr, error) {
	name := link.Attrs().Name
	for _, p := range s.Addresses {
		addr := &netlink.Addr{IPNet: &net.IPNet{IP: p.Addr().AsSlice(), Mask: net.CIDRMask(p.Bits(), p.Addr().BitLen())}}
		if err := netlink.AddrReplace(link, addr); err != nil {
			return netip.Addr{}, fmt.Errorf("adding %s to %s: %w", p, name, err)
		}
	}
	for _, gw := range []netip.Addr{s.Gateway4, s.Gateway6} {
		if !gw.IsValid() {
			continue
		}
		if err := netlink.RouteReplace(&netlink.Route{LinkIndex: link.Attrs().Index, Gw: gw.AsSlice()}); err != nil {
			return netip.Addr{}, fmt.Errorf("adding default route via %s on %s: %w", gw, name, err)
		}
	}
	return s.Addresses[0].Addr(), nil
}

// Run keeps every DHCP lease renewed until ctx ends. A new address on the
// advertised link is fatal: the node reboots and restarts into its
// cluster at the new address (package cluster gives it a certificate for
// it and tells its peers), which is simpler and surer than moving a
// running etcd member. A static network has nothing to do.
func (n *Network) Run(ctx context.Context) error {
	defer n.close()
	errs := make(chan error, len(n.links))
	running := 0
	for _, l := range n.links {
		if l.dhcp != nil {
			running++
			go func() { errs <- l.dhcp.run(ctx) }()
		}
	}
	if running == 0 {
		<-ctx.Done()
		return ctx.Err()
	}
	err := <-errs
	if ctx.Err() != nil {
		return ctx.Err()
	}
	return supervisor.Fatal(err)
}

func (n *Network) close() {
	for _, l := range n.links {
		if l.dhcp != nil {
			l.dhcp.close()
		}
	}
}

func writeResolvConf(servers []netip.Addr) error {
	var b strings.Builder
	for _, s := range servers {
		fmt.Fprintf(&b, "nameserver %s\n", s)
	}
	if err := os.WriteFile("/etc/resolv.conf", []byte(b.String()), 0o644); err != nil {
		return fmt.Errorf("writing /etc/resolv.conf: %w", err)
	}
	return nil
}
