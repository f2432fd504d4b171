package network

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"net"
	"net/netip"
	"time"

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
}

// start gets a first lease and applies it.
func (d *dhcpLink) start(ctx context.Context) (netip.Addr, []netip.Addr, error) {
	name := d.link.Attrs().Name
	c, err := nclient4.New(name)
	if err != nil {
		return netip.Addr{}, nil, fmt.Errorf("starting DHCP on %s: %w", name, err)
	}
	d.client = c
	lease, err := c.Request(ctx)
	if err != nil {
		return netip.Addr{}, nil, fmt.Errorf("DHCP on %s: %w", name, err)
	}
	return d.apply(lease)
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
	for {
		t1, t2, expiry := times(d.lease)
		now := time.Now()
		var wait time.Duration
		var attempt func() (*nclient4.Lease, error)
		switch age := now.Sub(d.got); {
		case age < t1:
			wait = t1 - age
			attempt = func() (*nclient4.Lease, error) { return d.client.Renew(ctx, d.lease) }
		case age < t2:
			wait = retryAfter(now, d.got.Add(t2))
			attempt = func() (*nclient4.Lease, error) { return d.client.Renew(ctx, d.lease) }
		case age < expiry:
			wait = retryAfter(now, d.got.Add(expiry))
			attempt = func() (*nclient4.Lease, error) { return d.client.Request(ctx) }
		default:
			d.expire()
			wait = minRetry
			attempt = func() (*nclient4.Lease, error) { return d.client.Request(ctx) }
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
