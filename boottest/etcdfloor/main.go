// Command etcdfloor is etcd alone as a VM's init: the floor a Borough
// cluster's performance is measured against (boottest's
// BenchmarkAgainstEtcd). It does only what etcd needs of an init: it mounts
// /proc, /sys and /dev, gives the VM's two NICs static addresses, mounts a
// plain ext4 data disk (/dev/vdb, formatted by the host as Borough formats
// its data volume, but with no dm-crypt under it) and runs the etcd binary
// of the version Borough embeds with the arguments it is given. None of
// Borough's layers run: no dm-crypt, no CRL checks, no etcd
// authentication, no escrow, no node API.
//
// Its configuration arrives as JSON in fw_cfg (the entry Borough's
// enrolment uses), Config below, so that the same image serves every
// member. It powers the VM off when etcd exits.
package main

import (
	"encoding/json"
	"fmt"
	"net"
	"os"
	"os/exec"
	"path/filepath"
	"strings"

	"github.com/vishvananda/netlink"
	"golang.org/x/sys/unix"

	"github.com/borough-os/borough/internal/fwcfg"
)

// Config is what the host tells a floor VM.
type Config struct {
	// Addresses maps a NIC's MAC address to its address, CIDR.
	Addresses map[string]string `json:"addresses"`
	// Files maps a path to the contents written there before etcd
	// starts: its certificates and keys.
	Files map[string]string `json:"files"`
	// Etcd are etcd's command-line arguments.
	Etcd []string `json:"etcd"`
}

// etcd is where the initramfs holds the etcd binary; data is where the
// data disk is mounted.
const (
	etcd     = "/etcd"
	dataDisk = "/dev/vdb"
	data     = "/data"
)

func main() {
	fmt.Println("etcdfloor: init started")
	if err := run(); err != nil {
		fmt.Println("etcdfloor:", err)
	}
	unix.Sync()
	_ = unix.Reboot(unix.LINUX_REBOOT_CMD_POWER_OFF)
	select {}
}

func run() error {
	for _, m := range []struct{ fs, at string }{{"proc", "/proc"}, {"sysfs", "/sys"}, {"devtmpfs", "/dev"}} {
		if err := unix.Mount(m.fs, m.at, m.fs, 0, ""); err != nil {
			return fmt.Errorf("mounting %s at %s: %w", m.fs, m.at, err)
		}
	}
	b, err := fwcfg.Read(fwcfg.Enrolment)
	if err != nil {
		return err
	}
	var cfg Config
	if err := json.Unmarshal(b, &cfg); err != nil {
		return fmt.Errorf("fw_cfg %s: %w", fwcfg.Enrolment, err)
	}
	if err := network(cfg.Addresses); err != nil {
		return err
	}
	if err := unix.Mount(dataDisk, data, "ext4", 0, ""); err != nil {
		return fmt.Errorf("mounting %s at %s: %w", dataDisk, data, err)
	}
	for path, contents := range cfg.Files {
		if err := os.MkdirAll(filepath.Dir(path), 0o700); err != nil {
			return err
		}
		if err := os.WriteFile(path, []byte(contents), 0o600); err != nil {
			return err
		}
	}
	fmt.Println("etcdfloor: starting etcd", strings.Join(cfg.Etcd, " "))
	cmd := exec.Command(etcd, cfg.Etcd...)
	cmd.Stdout, cmd.Stderr = os.Stdout, os.Stderr
	if err := cmd.Run(); err != nil {
		return fmt.Errorf("etcd: %w", err)
	}
	return nil
}

// network brings up the loopback and gives each NIC its address.
func network(addresses map[string]string) error {
	lo, err := netlink.LinkByName("lo")
	if err != nil {
		return fmt.Errorf("the loopback: %w", err)
	}
	if err := netlink.LinkSetUp(lo); err != nil {
		return fmt.Errorf("the loopback: %w", err)
	}
	links, err := netlink.LinkList()
	if err != nil {
		return fmt.Errorf("listing NICs: %w", err)
	}
	for mac, cidr := range addresses {
		if err := configure(links, mac, cidr); err != nil {
			return err
		}
	}
	return nil
}

func configure(links []netlink.Link, mac, cidr string) error {
	hw, err := net.ParseMAC(mac)
	if err != nil {
		return err
	}
	addr, err := netlink.ParseAddr(cidr)
	if err != nil {
		return fmt.Errorf("the address of %s: %w", mac, err)
	}
	for _, l := range links {
		if l.Attrs().HardwareAddr.String() != hw.String() {
			continue
		}
		if err := netlink.AddrAdd(l, addr); err != nil {
			return fmt.Errorf("%s: adding %s: %w", l.Attrs().Name, cidr, err)
		}
		return netlink.LinkSetUp(l)
	}
	return fmt.Errorf("no NIC has MAC address %s", mac)
}
