package network

import (
	"context"
	"encoding/hex"
	"fmt"
	"log/slog"
	"net"
	"net/netip"
	"os"
	"os/exec"
	"path/filepath"
	"runtime"
	"strings"
	"testing"
	"time"

	"github.com/vishvananda/netlink"
	"github.com/vishvananda/netns"

	"github.com/borough-os/borough/internal/console"
)

// TestDHCPAgain runs a link's DHCP against Debian's dnsmasq, across a
// veth pair between two network namespaces the test makes: the first
// boot gets an address and remembers it; the next boot gets it back with
// one request (INIT-REBOOT); a remembered address the server refuses
// leaves the link asking as a new client, which gets an address all the
// same; and the server keys the lease by the link's client identifier.
func TestDHCPAgain(t *testing.T) {
	dnsmasq, err := exec.LookPath("dnsmasq")
	if err != nil {
		t.Fatal("this test runs Debian's dnsmasq (package dnsmasq-base, which build.sh installs): ", err)
	}
	mac, _ := net.ParseMAC("52:54:00:99:00:01")
	client, dir := testNet(t, dnsmasq, mac)
	leases := &Leases{Path: filepath.Join(dir, "leases.json")}

	first, log := bootLink(t, client, leases)
	if !strings.Contains(log, "network configured") || strings.Contains(log, "previous address") {
		t.Errorf("the first boot, with no address to ask for again, logged:\n%s", log)
	}
	again, log := bootLink(t, client, leases)
	if again != first || !strings.Contains(log, "DHCP gave this link its previous address back") {
		t.Errorf("the next boot got %s, the first %s; it logged:\n%s", again, first, log)
	}
	if err := os.WriteFile(leases.Path, fmt.Appendf(nil, `{%q:"10.99.0.200"}`, mac), 0o600); err != nil {
		t.Fatal(err)
	}
	refused, log := bootLink(t, client, leases)
	if !refused.IsValid() || !strings.Contains(log, "the server refused 10.99.0.200") {
		t.Errorf("with an address the server does not give, the link got %s and logged:\n%s", refused, log)
	}
	if now, _ := leases.previous(mac); now != refused {
		t.Errorf("the link remembers %s after it got %s", now, refused)
	}
	b, err := os.ReadFile(filepath.Join(dir, "dnsmasq.leases"))
	if err != nil {
		t.Fatal(err)
	}
	id := hex.EncodeToString(clientID(mac))
	var colons []string
	for i := 0; i < len(id); i += 2 {
		colons = append(colons, id[i:i+2])
	}
	if !strings.Contains(string(b), strings.Join(colons, ":")) {
		t.Errorf("dnsmasq's leases name no client identifier %s:\n%s", strings.Join(colons, ":"), b)
	}
}

// testNet makes two network namespaces joined by a veth pair, runs
// dnsmasq on the server's end, and returns the client's namespace, whose
// end has MAC mac, and the directory of the leases.
func testNet(t *testing.T, dnsmasq string, mac net.HardwareAddr) (netns.NsHandle, string) {
	t.Helper()
	dir := t.TempDir()
	c, s := fmt.Sprintf("borough-dhcp-c%d", os.Getpid()), fmt.Sprintf("borough-dhcp-s%d", os.Getpid())
	ip := func(args ...string) {
		t.Helper()
		if out, err := exec.Command("ip", args...).CombinedOutput(); err != nil {
			t.Fatalf("ip %s: %v\n%s (this test makes network namespaces: it runs as root)", strings.Join(args, " "), err, out)
		}
	}
	ip("netns", "add", c)
	t.Cleanup(func() { exec.Command("ip", "netns", "del", c).Run() })
	ip("netns", "add", s)
	t.Cleanup(func() { exec.Command("ip", "netns", "del", s).Run() })
	ip("link", "add", "vc", "netns", c, "address", mac.String(), "type", "veth", "peer", "name", "vs", "netns", s)
	ip("-n", s, "addr", "add", "10.99.0.1/24", "dev", "vs")
	ip("-n", s, "link", "set", "vs", "up")
	ip("-n", c, "link", "set", "vc", "up")
	srv := exec.Command("ip", "netns", "exec", s, dnsmasq, "--no-daemon", "--conf-file=/dev/null", "--port=0",
		"--interface=vs", "--bind-interfaces", "--dhcp-authoritative", "--no-ping", "--dhcp-range=10.99.0.10,10.99.0.50,255.255.255.0,1h",
		"--dhcp-leasefile="+filepath.Join(dir, "dnsmasq.leases"), "--pid-file="+filepath.Join(dir, "dnsmasq.pid"))
	var log strings.Builder
	srv.Stdout, srv.Stderr = &log, &log
	if err := srv.Start(); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() {
		srv.Process.Kill()
		srv.Wait()
		if t.Failed() {
			t.Logf("dnsmasq:\n%s", log.String())
		}
	})
	h, err := netns.GetFromName(c)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { h.Close() })
	return h, dir
}

// bootLink runs a link's DHCP in ns as a boot does, its address flushed
// first: start, then the renewal service (run) for a moment; it returns
// the address and what it logged.
func bootLink(t *testing.T, ns netns.NsHandle, leases *Leases) (netip.Addr, string) {
	t.Helper()
	type result struct {
		ip  netip.Addr
		err error
	}
	var log strings.Builder
	done := make(chan result, 1)
	go func() {
		// The goroutine's thread stays in ns, and is thrown away after.
		runtime.LockOSThread()
		if err := netns.Set(ns); err != nil {
			done <- result{err: err}
			return
		}
		nl, err := netlink.LinkByName("vc")
		if err == nil {
			err = flush(nl)
		}
		if err != nil {
			done <- result{err: err}
			return
		}
		d := &dhcpLink{link: nl, log: slog.New(console.NewHandler(&log)), leases: leases}
		defer d.close()
		ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
		defer cancel()
		ip, _, err := d.start(ctx)
		if err == nil {
			// The renewal service starts, remembers the address, and
			// stops with its context.
			stopped, stop := context.WithCancel(ctx)
			stop()
			d.run(stopped)
		}
		done <- result{ip, err}
	}()
	r := <-done
	if r.err != nil {
		t.Fatalf("DHCP: %v\n%s", r.err, log.String())
	}
	return r.ip, log.String()
}

// flush removes every address of l, as a reboot does.
func flush(l netlink.Link) error {
	addrs, err := netlink.AddrList(l, netlink.FAMILY_ALL)
	if err != nil {
		return err
	}
	for _, a := range addrs {
		if err := netlink.AddrDel(l, &a); err != nil {
			return err
		}
	}
	return nil
}
