package network

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"net"
	"net/netip"
	"time"

	"github.com/insomniacslk/dhcp/dhcpv4"
	"github.com/insomniacslk/dhcp/dhcpv4/nclient4"
	"github.com/vishvananda/netlink"
)

// Bounds of the wait between two failed attempts to renew or get a lease.
// RFC 2131 (4.4.5) waits half the time left until T2 (or the expiry),
// but at least a minute; a minimum of 10 s gets a flapping server's
// lease back sooner at little cost.
const (
	minRetry = 10 * time.Second
	maxRetry = 5 * time.Minute
)

// dhcpLink holds one link's lease and renews it.
type dhcpLink struct {
	link   netlink.Link
	log    *slog.Logger
	client *nclient4.Client
	lease  *nclient4.Lease
	// got is when the lease was granted; ip is the address it gave.
	got time.Time
	ip  netip.Addr
	// advertised says the link's address is the node's in the cluster.
	advertised bool
	// leases remember the link's last address, to ask for again.
	leases *Leases
}

// rebootWait bounds the wait for an answer to INIT-REBOOT's request: a
// server that knows nothing of the address may stay silent (RFC 2131
// 4.3.2), and the node then asks as a new client.
const rebootWait = 2 * time.Second

// start gets a first lease, the link's previous address if the server
// gives it back, and applies it.
func (d *dhcpLink) start(ctx context.Context) (netip.Addr, []netip.Addr, error) {
	name := d.link.Attrs().Name
	c, err := nclient4.New(name)
	if err != nil {
		return netip.Addr{}, nil, fmt.Errorf("starting DHCP on %s: %w", name, err)
	}
	d.client = c
	lease, err := d.reboot(ctx)
	if lease == nil {
		if err != nil {
			d.log.Warn("DHCP did not give this link its previous address back; asking for any", "err", err)
		}
		if lease, err = c.Request(ctx, d.identified()...); err != nil {
			return netip.Addr{}, nil, fmt.Errorf("DHCP on %s: %w", name, err)
		}
	}
	return d.apply(lease)
}

// identified are the modifiers of every message the link sends: its
// client identifier.
func (d *dhcpLink) identified() []dhcpv4.Modifier {
	return []dhcpv4.Modifier{dhcpv4.WithOption(dhcpv4.OptClientIdentifier(clientID(d.link.Attrs().HardwareAddr)))}
}

// clientID is a link's DHCP client identifier (RFC 4361): type 255, an
// IAID (the MAC's last four bytes) and a DUID-LL of the MAC. It is the
// link's for good, so a server that keys its leases by client identifier
// finds the node's lease at every boot, as one keyed by MAC does.
func clientID(mac net.HardwareAddr) []byte {
	id := []byte{255}
	iaid := make([]byte, 4)
	copy(iaid[max(0, 4-len(mac)):], mac[max(0, len(mac)-4):])
	id = append(id, iaid...)
	id = append(id, 0, 3, 0, 1) // DUID-LL, Ethernet
	return append(id, mac...)
}

// reboot asks for the link's previous address, if it has one, as RFC
// 2131's INIT-REBOOT does: one broadcast request naming it, no server.
// It returns no lease, and why if there is a reason to say, when the
// server refuses it or does not answer within rebootWait.
func (d *dhcpLink) reboot(ctx context.Context) (*nclient4.Lease, error) {
	mac := d.link.Attrs().HardwareAddr
	prev, err := d.leases.previous(mac)
	if err != nil || !prev.IsValid() {
		return nil, err
	}
	req, err := dhcpv4.New(append([]dhcpv4.Modifier{
		dhcpv4.WithHwAddr(mac),
		dhcpv4.WithMessageType(dhcpv4.MessageTypeRequest),
		dhcpv4.WithBroadcast(true),
		dhcpv4.WithOption(dhcpv4.OptRequestedIPAddress(prev.AsSlice())),
		dhcpv4.WithOption(dhcpv4.OptMaxMessageSize(nclient4.MaxMessageSize)),
		dhcpv4.WithRequestedOptions(dhcpv4.OptionSubnetMask, dhcpv4.OptionRouter, dhcpv4.OptionDomainName, dhcpv4.OptionDomainNameServer),
	}, d.identified()...)...)
	if err != nil {
		return nil, err
	}
	rctx, cancel := context.WithTimeout(ctx, rebootWait)
	defer cancel()
	resp, err := d.client.SendAndRead(rctx, nclient4.DefaultServers, req,
		nclient4.IsMessageType(dhcpv4.MessageTypeAck, dhcpv4.MessageTypeNak))
	switch {
	case err != nil:
		return nil, fmt.Errorf("asking for %s again: %w", prev, err)
	case resp.MessageType() == dhcpv4.MessageTypeNak:
		return nil, fmt.Errorf("the server refused %s: %s", prev, resp.Message())
	}
	d.log.Info("DHCP gave this link its previous address back", "address", prev)
	return &nclient4.Lease{Offer: resp, ACK: resp, CreationTime: time.Now()}, nil
}

func (d *dhcpLink) close() {
	if d.client != nil {
		d.client.Close()
	}
}

// times are a lease's renewal (T1), rebinding (T2) and expiry, from when
// it was granted.
func times(lease *nclient4.Lease) (t1, t2, expiry time.Duration) {
	expiry = lease.ACK.IPAddressLeaseTime(time.Hour)
	t1 = lease.ACK.IPAddressRenewalTime(expiry / 2)
	t2 = lease.ACK.IPAddressRebindingTime(expiry * 7 / 8)
	if t1 <= 0 || t1 > expiry {
		t1 = expiry / 2
	}
	if t2 < t1 || t2 > expiry {
		t2 = expiry * 7 / 8
	}
	return t1, t2, expiry
}

// retryAfter is how long to wait after a failed attempt at now, with
// deadline the next point (T2, the expiry) at which the attempt changes.
func retryAfter(now, deadline time.Time) time.Duration {
	wait := deadline.Sub(now) / 2
	return min(max(wait, minRetry), maxRetry)
}

// run renews the lease until ctx ends: a unicast renewal from T1, a new
// request (broadcast) from T2, each retried with backoff; at expiry the
// kernel drops the address (its lifetime is the lease's) and the link
// keeps asking for a lease.
func (d *dhcpLink) run(ctx context.Context) error {
	d.remember()
	for {
		t1, t2, expiry := times(d.lease)
		now := time.Now()
		var wait time.Duration
		var attempt func() (*nclient4.Lease, error)
		switch age := now.Sub(d.got); {
		case age < t1:
			wait = t1 - age
			attempt = func() (*nclient4.Lease, error) { return d.client.Renew(ctx, d.lease, d.identified()...) }
		case age < t2:
			wait = retryAfter(now, d.got.Add(t2))
			attempt = func() (*nclient4.Lease, error) { return d.client.Renew(ctx, d.lease, d.identified()...) }
		case age < expiry:
			wait = retryAfter(now, d.got.Add(expiry))
			attempt = func() (*nclient4.Lease, error) { return d.client.Request(ctx, d.identified()...) }
		default:
			d.expire()
			wait = minRetry
			attempt = func() (*nclient4.Lease, error) { return d.client.Request(ctx, d.identified()...) }
		}
		select {
		case <-ctx.Done():
			return ctx.Err()
		case <-time.After(wait):
		}
		lease, err := attempt()
		if err != nil {
			if ctx.Err() != nil {
				return ctx.Err()
			}
			d.log.Warn("renewing DHCP lease", "err", err, "lease_left", (expiry - time.Since(d.got)).Round(time.Second))
			continue
		}
		was := d.ip
		if _, _, err := d.apply(lease); err != nil {
			d.log.Error("applying renewed DHCP lease", "err", err)
			continue
		}
		d.remember()
		if d.advertised && was.IsValid() && was != d.ip {
			return fmt.Errorf("the advertised address changed from %s to %s: the node restarts into its cluster at the new one", was, d.ip)
		}
	}
}

// expire notes, once, that the lease ended: the kernel has dropped the
// address at the end of its lifetime, which apply set to the lease's.
func (d *dhcpLink) expire() {
	if !d.ip.IsValid() {
		return
	}
	d.log.Error("DHCP lease expired: address gone; asking for a new lease", "address", d.ip)
	d.ip = netip.Addr{}
}

// apply configures the link from a lease and returns its address and name
// servers. The address's lifetime is the lease's.
func (d *dhcpLink) apply(lease *nclient4.Lease) (netip.Addr, []netip.Addr, error) {
	name := d.link.Attrs().Name
	ack := lease.ACK
	ip, ok := netip.AddrFromSlice(ack.YourIPAddr.To4())
	if !ok {
		return ip, nil, errors.New("DHCP offered no IPv4 address")
	}
	mask := ack.SubnetMask()
	if mask == nil {
		mask = net.CIDRMask(32, 32)
	}
	_, _, expiry := times(lease)
	secs := int(expiry / time.Second)
	addr := &netlink.Addr{IPNet: &net.IPNet{IP: ack.YourIPAddr, Mask: mask}, ValidLft: secs, PreferedLft: secs}
	if err := netlink.AddrReplace(d.link, addr); err != nil {
		return ip, nil, fmt.Errorf("adding %s to %s: %w", addr.IPNet, name, err)
	}
	if routers := ack.Router(); len(routers) > 0 {
		if err := netlink.RouteReplace(&netlink.Route{LinkIndex: d.link.Attrs().Index, Gw: routers[0]}); err != nil {
			return ip, nil, fmt.Errorf("adding default route via %s: %w", routers[0], err)
		}
	}
	var dns []netip.Addr
	for _, s := range ack.DNS() {
		if a, ok := netip.AddrFromSlice(s.To4()); ok {
			dns = append(dns, a)
		}
	}
	if d.ip.IsValid() && d.ip != ip {
		d.log.Warn("DHCP gave another address", "was", d.ip, "now", ip)
	}
	first := d.lease == nil
	d.lease, d.got, d.ip = lease, time.Now(), ip
	if first {
		d.log.Info("network configured", "address", addr.IPNet.String(), "method", "dhcp", "lease", expiry)
	}
	return ip, dns, nil
}

// remember records the lease's address for the next boot to ask for
// again. run does it, not apply: a changed address costs the ESP two
// syncs, which a first boot need not wait for.
func (d *dhcpLink) remember() {
	if err := d.leases.remember(d.link.Attrs().HardwareAddr, d.ip); err != nil {
		d.log.Warn("the next boot will not ask for this address again", "err", err)
	}
}
