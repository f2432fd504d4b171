// Package network brings up the node's network: the loopback link, then
// either the static configuration from the enrolment config or DHCP on the
// first link with a carrier, and keeps a DHCP lease renewed.
//
// DHCP is github.com/insomniacslk/dhcp's nclient4 and links, addresses and
// routes are set through netlink (github.com/vishvananda/netlink), both
// already in u-root's dependency tree; /etc/resolv.conf is written here.
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

	"github.com/insomniacslk/dhcp/dhcpv4/nclient4"
	"github.com/vishvananda/netlink"

	"github.com/borough-os/borough/internal/enrolment"
)

// carrierTimeout bounds the wait for a link to come up.
const carrierTimeout = 20 * time.Second

// Network is the node's configured network.
type Network struct {
	// Link is the configured link's name; IP its (first) address.
	Link string
	IP   netip.Addr
	log  *slog.Logger
	dhcp *nclient4.Client
	// lease is the current DHCP lease, nil for a static network.
	lease *nclient4.Lease
}

// Up configures the network, by static if set, else by DHCP, and returns
// it once the node has an address.
func Up(ctx context.Context, log *slog.Logger, static *enrolment.Static) (*Network, error) {
	lo, err := netlink.LinkByName("lo")
	if err != nil {
		return nil, fmt.Errorf("finding loopback: %w", err)
	}
	if err := netlink.LinkSetUp(lo); err != nil {
		return nil, fmt.Errorf("bringing up loopback: %w", err)
	}
	want := ""
	if static != nil {
		want = static.Interface
	}
	link, err := firstLink(ctx, want)
	if err != nil {
		return nil, err
	}
	n := &Network{Link: link.Attrs().Name, log: log}
	if static != nil {
		err = n.static(link, static)
	} else {
		err = n.startDHCP(ctx, link)
	}
	if err != nil {
		return nil, err
	}
	return n, nil
}

// firstLink brings up every non-loopback link (or only name, if set) and
// returns the first with a carrier.
func firstLink(ctx context.Context, name string) (netlink.Link, error) {
	links, err := netlink.LinkList()
	if err != nil {
		return nil, fmt.Errorf("listing links: %w", err)
	}
	var candidates []netlink.Link
	for _, l := range links {
		a := l.Attrs()
		if a.Name == "lo" || (name != "" && a.Name != name) {
			continue
		}
		if err := netlink.LinkSetUp(l); err != nil {
			return nil, fmt.Errorf("bringing up %s: %w", a.Name, err)
		}
		candidates = append(candidates, l)
	}
	if len(candidates) == 0 {
		if name != "" {
			return nil, fmt.Errorf("no network link named %s", name)
		}
		return nil, errors.New("no network link")
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
			return nil, fmt.Errorf("no network link came up within %v", carrierTimeout)
		case <-time.After(100 * time.Millisecond):
		}
	}
}

func (n *Network) static(link netlink.Link, s *enrolment.Static) error {
	for _, p := range s.Addresses {
		addr := &netlink.Addr{IPNet: &net.IPNet{IP: p.Addr().AsSlice(), Mask: net.CIDRMask(p.Bits(), p.Addr().BitLen())}}
		if err := netlink.AddrReplace(link, addr); err != nil {
			return fmt.Errorf("adding %s to %s: %w", p, n.Link, err)
		}
	}
	n.IP = s.Addresses[0].Addr()
	for _, gw := range []netip.Addr{s.Gateway4, s.Gateway6} {
		if !gw.IsValid() {
			continue
		}
		if err := netlink.RouteReplace(&netlink.Route{LinkIndex: link.Attrs().Index, Gw: gw.AsSlice()}); err != nil {
			return fmt.Errorf("adding default route via %s: %w", gw, err)
		}
	}
	n.log.Info("network configured", "link", n.Link, "address", s.Addresses[0], "method", "static")
	return writeResolvConf(s.DNS)
}

func (n *Network) startDHCP(ctx context.Context, link netlink.Link) error {
	c, err := nclient4.New(n.Link)
	if err != nil {
		return fmt.Errorf("starting DHCP on %s: %w", n.Link, err)
	}
	n.dhcp = c
	lease, err := c.Request(ctx)
	if err != nil {
		c.Close()
		return fmt.Errorf("DHCP on %s: %w", n.Link, err)
	}
	return n.apply(link, lease)
}

// apply configures the link from a DHCP lease.
func (n *Network) apply(link netlink.Link, lease *nclient4.Lease) error {
	ack := lease.ACK
	ip, ok := netip.AddrFromSlice(ack.YourIPAddr.To4())
	if !ok {
		return fmt.Errorf("DHCP offered no IPv4 address")
	}
	mask := ack.SubnetMask()
	if mask == nil {
		mask = net.CIDRMask(32, 32)
	}
	addr := &netlink.Addr{IPNet: &net.IPNet{IP: ack.YourIPAddr, Mask: mask}}
	if err := netlink.AddrReplace(link, addr); err != nil {
		return fmt.Errorf("adding %s to %s: %w", addr, n.Link, err)
	}
	if routers := ack.Router(); len(routers) > 0 {
		if err := netlink.RouteReplace(&netlink.Route{LinkIndex: link.Attrs().Index, Gw: routers[0]}); err != nil {
			return fmt.Errorf("adding default route via %s: %w", routers[0], err)
		}
	}
	var dns []netip.Addr
	for _, d := range ack.DNS() {
		if a, ok := netip.AddrFromSlice(d.To4()); ok {
			dns = append(dns, a)
		}
	}
	n.IP, n.lease = ip, lease
	n.log.Info("network configured", "link", n.Link, "address", addr.IPNet.String(), "method", "dhcp",
		"lease", ack.IPAddressLeaseTime(time.Hour))
	return writeResolvConf(dns)
}

// Run renews the DHCP lease at half its lifetime until ctx ends. A static
// network has nothing to do.
func (n *Network) Run(ctx context.Context) error {
	if n.lease == nil {
		return nil
	}
	link, err := netlink.LinkByName(n.Link)
	if err != nil {
		return err
	}
	for {
		wait := n.lease.ACK.IPAddressLeaseTime(time.Hour) / 2
		select {
		case <-ctx.Done():
			n.dhcp.Close()
			return ctx.Err()
		case <-time.After(wait):
		}
		lease, err := n.dhcp.Renew(ctx, n.lease)
		if err != nil {
			// Log and retry; the address stays until the lease ends.
			n.log.Warn("renewing DHCP lease", "err", err)
			lease, err = n.dhcp.Request(ctx)
			if err != nil {
				return fmt.Errorf("renewing DHCP lease: %w", err)
			}
		}
		if err := n.apply(link, lease); err != nil {
			return err
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
