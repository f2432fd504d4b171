// Command etcdfloor is etcd alone as a VM's init: the floor a Borough
// cluster's performance is measured against (boottest's
// BenchmarkAgainstEtcd). It does only what etcd needs of an init: it mounts
// /proc, /sys and /dev, gives the VM's two NICs static addresses, mounts a
// plain ext4 data disk (/dev/vdb, formatted by the host as Borough formats
// its data volume, but with no dm-crypt under it) and runs etcd, of the
// version Borough embeds, from the configuration file it is given. None of
// Borough's layers run: no dm-crypt, no CRL checks, no etcd
// authentication, no escrow, no node API.
//
// etcd runs embedded, as in a Borough member, rather than as etcd's own
// binary, for one reason: its log. etcd's binary writes every info entry
// to the console, sampled at the first 100 a second and one in 100 after;
// a member writes them through internal/etcdlog, sampled far tighter, and
// prints only warnings and errors on its console. Serial output is dear
// under emulation, so a floor logging as etcd's binary does is slower than
// plain etcd has to be, and flattered Borough. The floor's etcd logs
// through the same bridge, sampling and console handler as a member's.
//
// Its configuration arrives as JSON in fw_cfg (the entry Borough's
// enrolment uses), Config below, so that the same image serves every
// member. It powers the VM off when etcd stops.
package main

import (
	"encoding/json"
	"errors"
	"fmt"
	"log/slog"
	"net"
	"os"
	"path/filepath"

	"github.com/vishvananda/netlink"
	"go.etcd.io/etcd/server/v3/embed"
	"go.uber.org/zap/zapcore"
	"golang.org/x/sys/unix"

	"github.com/borough-os/borough/internal/console"
	"github.com/borough-os/borough/internal/etcdlog"
	"github.com/borough-os/borough/internal/fwcfg"
)

// Config is what the host tells a floor VM.
type Config struct {
	// Addresses maps a NIC's MAC address to its address, CIDR.
	Addresses map[string]string `json:"addresses"`
	// Files maps a path to the contents written there before etcd
	// starts: its certificates and keys.
	Files map[string]string `json:"files"`
	// Etcd is etcd's configuration file (embed.ConfigFromFile: the keys
	// of its flags), as JSON, which is YAML too.
	Etcd json.RawMessage `json:"etcd"`
}

// etcdConfig is where etcd's configuration file is written; data is
// where the data disk is mounted.
const (
	etcdConfig = "/etc/etcd/etcd.yaml"
	dataDisk   = "/dev/vdb"
	data       = "/data"
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
	return runEtcd(cfg.Etcd)
}

// runEtcd runs etcd from its configuration file's contents until it
// stops, logging as a Borough member's etcd logs.
func runEtcd(config []byte) error {
	if err := os.MkdirAll(filepath.Dir(etcdConfig), 0o700); err != nil {
		return err
	}
	if err := os.WriteFile(etcdConfig, config, 0o600); err != nil {
		return err
	}
	ec, err := embed.ConfigFromFile(etcdConfig)
	if err != nil {
		return fmt.Errorf("etcd's configuration: %w", err)
	}
	log := slog.New(console.NewHandler(console.Open(os.Stdout))).With(console.ServiceKey, "etcd")
	ec.ZapLoggerBuilder = embed.NewZapLoggerBuilder(etcdlog.New(log, zapcore.InfoLevel))
	fmt.Println("etcdfloor: starting etcd", string(config))
	e, err := embed.StartEtcd(ec)
	if err != nil {
		return fmt.Errorf("starting etcd: %w", err)
	}
	defer e.Close()
	select {
	case <-e.Server.ReadyNotify():
		fmt.Println("etcdfloor: etcd serves clients")
	case <-e.Server.StopNotify():
	}
	select {
	case err := <-e.Err():
		return fmt.Errorf("etcd: %w", err)
	case <-e.Server.StopNotify():
		return errors.New("etcd stopped")
	}
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
