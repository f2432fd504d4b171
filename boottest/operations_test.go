//go:build boot

package boottest

import (
	"archive/tar"
	"bytes"
	"context"
	"crypto"
	"crypto/ecdsa"
	"crypto/x509"
	"encoding/base64"
	"encoding/pem"
	"fmt"
	"io"
	"net"
	"os"
	"path/filepath"
	"regexp"
	"slices"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/klauspost/compress/zstd"
	"go.etcd.io/etcd/api/v3/etcdserverpb"
	clientv3 "go.etcd.io/etcd/client/v3"

	"github.com/borough-os/borough/internal/keyspace"
	"github.com/borough-os/borough/internal/pki"
	"github.com/borough-os/borough/internal/ports"
	"github.com/borough-os/borough/internal/ticket"
	"github.com/borough-os/borough/qemu"
)

func (m *multi) newAddress(t *testing.T) {
	n := m.c.Nodes[2]
	const moved = "10.77.0.33"
	out := cli(t, "--config", m.config, "node", "network", n.API(), "--fingerprint", m.c.Fingerprint,
		"--link", "mac="+qemu.UserMAC+",dhcp", "--link", "mac="+n.MAC()+",address="+moved+"/24,advertise")
	contains(t, "node network", out, "reboots to try the new network", "if it does not within 1m0s")
	expect(t, n.VM, bootTimeout, "network settings from the owner's change, on trial", "borough: state New -> Restarting",
		"the node's address changed; gave it a new certificate", "told the cluster the node's new address address="+moved)
	if err := m.c.WaitRunning(n); err != nil {
		t.Fatal(err)
	}
	expect(t, n.VM, bootTimeout, "on the owner's new network: keeping it")
	// Settings whose link is not there: the trial boot goes back.
	cli(t, "--config", m.config, "node", "network", n.API(), "--fingerprint", m.c.Fingerprint,
		"--link", "mac=52:54:00:ff:ff:ff,address=10.77.0.34/24,advertise")
	expect(t, n.VM, bootTimeout, "the owner's new network does not come up: rebooting onto the network the node had",
		"dropping it and going back to the network it had")
	if err := m.c.WaitRunning(n); err != nil {
		t.Fatal(err)
	}
	list, err := m.client(t, m.c.Nodes[0]).MemberList(timeout(t, 30*time.Second))
	if err != nil {
		t.Fatal(err)
	}
	i := slices.IndexFunc(list.Members, func(mb *etcdserverpb.Member) bool { return mb.Name == n.Name })
	switch {
	case i < 0:
		t.Errorf("%s is not in the member list after its move", n.Name)
	case strings.Join(list.Members[i].PeerURLs, ",") != "https://"+net.JoinHostPort(moved, strconv.Itoa(ports.Peer)):
		t.Errorf("%s's peer URLs are %v after its move", n.Name, list.Members[i].PeerURLs)
	}
	ctx := timeout(t, time.Minute)
	if _, err := m.client(t, n).Put(ctx, "moved", "yes"); err != nil {
		t.Fatalf("put through the moved node: %v", err)
	}
	if get, err := m.client(t, m.c.Nodes[0]).Get(ctx, "moved"); err != nil || len(get.Kvs) != 1 {
		t.Fatalf("get on node 1 of a put through the moved node = %v, %v", get, err)
	}
}

// electionBound is the longest a client may go without a write through a
// rolling update: a leadership transfer or an election (1 s timeout) and
// a request that timed out on a member going down (5 s). A member's
// reboot takes over 15 s here, so a cluster that lost quorum to one
// would show as a longer gap.
const electionBound = 10 * time.Second

// rollingUpdate updates every member from 1.0.0 to 1.1.0 with `borough
// update --cluster` while the owner writes through all three: the
// followers go first and the leader last, each confirms itself, the writes
// never stop for longer than an election, and none is lost. A node API
// address given for the wrong member is refused by its certificate first.
func (m *multi) rollingUpdate(t *testing.T) {
	nodes := m.c.Nodes[:3]
	next := signedImage(t, m.config, "1.1.0")
	var eps []string
	for _, n := range nodes {
		eps = append(eps, n.Endpoint())
	}
	args := []string{"--config", m.config, "update", "--cluster", strings.Join(eps, ","), next, "--fingerprint", m.c.Fingerprint}
	swapped := append(slices.Clone(args), "--settle", "30s", "--api", nodes[0].Name+"="+nodes[1].API(),
		"--api", nodes[1].Name+"="+nodes[0].API(), "--api", nodes[2].Name+"="+nodes[2].API())
	out := cliFails(t, swapped...)
	contains(t, "node API addresses of two members swapped", out, "x509: certificate is valid for node-")
	if strings.Contains(out, "sending") {
		t.Errorf("update --cluster sent the update through a swapped address:\n%s", out)
	}
	for _, n := range nodes {
		args = append(args, "--api", n.Name+"="+n.API())
	}
	leader := m.leader(t)
	w := startWriter(t, m.client(t, nodes...))
	out = cli(t, args...)
	acked, gap := w.stop(), w.longestGap()
	t.Logf("%d writes acknowledged through the rolling update, the longest without one %.1f s:\n%s", len(acked), gap.Seconds(), out)
	contains(t, "update --cluster", out, "all 3 members run 1.1.0; 3 updated")
	updating := regexp.MustCompile(`updating (\S+) \((\w+),`).FindAllStringSubmatch(out, -1)
	if len(updating) != 3 || updating[2][1] != leader.Name || updating[2][2] != "leader" {
		t.Errorf("update --cluster updated %v; want the two followers, then the leader %s", updating, leader.Name)
	}
	for _, n := range nodes {
		expect(t, n.VM, stepTimeout, "update confirmed: slot B runs 1.1.0 and boots by default")
	}
	if gap > electionBound {
		t.Errorf("the writes stopped for %.1f s during the rolling update; want at most %v", gap.Seconds(), electionBound)
	}
	m.checkWrites(t, nodes[0], acked, "after the rolling update")
}

// supportBundle writes a support bundle of the cluster and looks in it:
// each member's info, metrics and logs of this boot and the one before
// (the rolling update rebooted each), the cluster's health and members,
// and none of the keys the owner can read of the cluster (its CA's, the
// tickets' records) nor the owner's own.
func (m *multi) supportBundle(t *testing.T) {
	nodes := m.c.Nodes[:3]
	path := filepath.Join(t.TempDir(), "bundle.tar.zst")
	args := []string{"--config", m.config, "support", "--out", path, "--boots", "2"}
	var eps []string
	for _, n := range nodes {
		eps = append(eps, n.Endpoint())
		args = append(args, "--api", n.Name+"="+n.API())
	}
	t.Log(cli(t, append(args, strings.Join(eps, ","))...))
	files := readBundle(t, path)
	for _, name := range []string{"cluster/health.json", "cluster/members.json", "MANIFEST"} {
		if len(files[name]) == 0 {
			t.Errorf("the bundle has no %s", name)
		}
	}
	for _, n := range nodes {
		for _, f := range []string{"info.json", "metrics.txt", "log-boot0.txt", "log-boot-1.txt"} {
			if len(files["nodes/"+n.Name+"/"+f]) == 0 {
				t.Errorf("the bundle has no %s of %s; its MANIFEST:\n%s", f, n.Name, files["MANIFEST"])
			}
		}
		contains(t, n.Name+"'s metrics in the bundle", string(files["nodes/"+n.Name+"/metrics.txt"]), "etcd_server_has_leader")
	}
	for what, secret := range m.secrets(t) {
		for name, b := range files {
			if bytes.Contains(b, secret) {
				t.Errorf("the bundle's %s holds %s", name, what)
			}
		}
	}
}

// secrets are the keys the owner can read of the cluster, and the
// owner's, in each form a file could hold them: raw, base64 (whole, and
// each line of its PEM but the first, which is the same header for every
// P-256 key), and a private key's scalar in hex and base64.
func (m *multi) secrets(t *testing.T) map[string][]byte {
	t.Helper()
	out := map[string][]byte{}
	addForms := func(what string, raw []byte) {
		out[what] = raw
		out[what+" (base64)"] = []byte(base64.StdEncoding.EncodeToString(raw))
		b := pem.EncodeToMemory(&pem.Block{Type: "X", Bytes: raw})
		for i, line := range strings.Split(string(b), "\n") {
			if i > 1 && len(line) >= 32 && !strings.HasPrefix(line, "-----") {
				out[fmt.Sprintf("%s (PEM line %d)", what, i)] = []byte(line)
			}
		}
	}
	addKey := func(what string, key crypto.Signer) {
		der, err := x509.MarshalPKCS8PrivateKey(key)
		if err != nil {
			t.Fatal(err)
		}
		addForms(what, der)
		if k, ok := key.(*ecdsa.PrivateKey); ok {
			d := k.D.FillBytes(make([]byte, 32))
			out[what+"'s scalar (hex)"] = []byte(fmt.Sprintf("%x", d))
			out[what+"'s scalar (base64)"] = []byte(base64.StdEncoding.EncodeToString(d))
		}
	}
	kvs, err := m.client(t, m.c.Nodes[0]).Get(context.Background(), keyspace.CAKey)
	if err != nil || len(kvs.Kvs) != 1 {
		t.Fatalf("reading the CA key: %v", err)
	}
	caKey, err := pki.ParseKeyPEM(kvs.Kvs[0].Value)
	if err != nil {
		t.Fatal(err)
	}
	addKey("the CA key", caKey)
	tickets, err := m.client(t, m.c.Nodes[0]).Get(context.Background(), ticket.KeyPrefix, clientv3.WithPrefix())
	if err != nil {
		t.Fatal(err)
	}
	for _, kv := range tickets.Kvs {
		addForms("ticket record "+string(kv.Key), kv.Value)
	}
	addKey("the owner key", m.owner(t).PrivateKey.(crypto.Signer))
	return out
}

// readBundle reads a support bundle's files.
func readBundle(t *testing.T, path string) map[string][]byte {
	t.Helper()
	f, err := os.Open(path)
	if err != nil {
		t.Fatal(err)
	}
	defer f.Close()
	zr, err := zstd.NewReader(f)
	if err != nil {
		t.Fatal(err)
	}
	defer zr.Close()
	files := map[string][]byte{}
	tr := tar.NewReader(zr)
	for {
		hdr, err := tr.Next()
		if err == io.EOF {
			return files
		}
		if err != nil {
			t.Fatalf("reading the bundle: %v", err)
		}
		if files[hdr.Name], err = io.ReadAll(tr); err != nil {
			t.Fatal(err)
		}
	}
}

// dashboard prints two looks of `borough dashboard` as plain lines while
// a client writes: every member shows its write rate, and its log.
func (m *multi) dashboard(t *testing.T) {
	nodes := m.c.Nodes[:3]
	args := []string{"--config", m.config, "dashboard", "--count", "2", "--interval", "3s"}
	var eps []string
	for _, n := range nodes {
		eps = append(eps, n.Endpoint())
		args = append(args, "--api", n.Name+"="+n.API())
	}
	w := startWriter(t, m.client(t, nodes...))
	out := cli(t, append(args, strings.Join(eps, ","))...)
	w.stop()
	looks := strings.Split(out, "borough dashboard, ")
	if len(looks) != 3 {
		t.Fatalf("borough dashboard --count 2 printed %d looks:\n%s", len(looks)-1, out)
	}
	for _, n := range nodes {
		row := regexp.MustCompile(`(?m)^` + n.Name + `\s.*Running\s+([0-9.]+)\s`).FindStringSubmatch(looks[2])
		if row == nil || row[1] == "0.0" {
			t.Errorf("the dashboard's second look shows no writes on %s:\n%s", n.Name, looks[2])
		}
		contains(t, "the dashboard's log of "+n.Name, looks[2], "\n"+n.Name+":\n  ")
	}
}
