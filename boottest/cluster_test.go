//go:build boot

package boottest

import (
	"bytes"
	"context"
	"crypto/ecdsa"
	"crypto/elliptic"
	"crypto/rand"
	"crypto/tls"
	"crypto/x509"
	"crypto/x509/pkix"
	"encoding/pem"
	"errors"
	"fmt"
	"math/big"
	"os"
	"os/exec"
	"path/filepath"
	"regexp"
	"strconv"
	"strings"
	"testing"
	"time"

	clientv3 "go.etcd.io/etcd/client/v3"

	"github.com/borough-os/borough/esp"
	"github.com/borough-os/borough/internal/cmdline"
	"github.com/borough-os/borough/internal/ownerkey"
	"github.com/borough-os/borough/internal/pki"
	"github.com/borough-os/borough/qemu"
)

const running = "borough: node running"

// freePort returns a TCP port on loopback for a VM's forward
// (qemu.FreePort).
func freePort(t testing.TB) int {
	t.Helper()
	p, err := qemu.FreePort()
	if err != nil {
		t.Fatal(err)
	}
	return p
}

// owner makes an owner identity in a fresh config directory and returns
// the directory. Its key is encrypted with testPassphrase.
func owner(t testing.TB) string {
	t.Helper()
	dir := t.TempDir()
	cli(t, "--config", dir, "owner", "init", "--name", "test-owner")
	return dir
}

// testPassphrase encrypts the test owners' keys; the borough commands
// the tests run take it from the environment (TestMain).
const testPassphrase = "the boot tests' owner passphrase"

// ownerPair is the owner's identity in config, its key decrypted.
func ownerPair(t testing.TB, config string) tls.Certificate {
	t.Helper()
	certPEM := read(t, filepath.Join(config, "owner.pem"))
	kp, err := tls.X509KeyPair(certPEM, ownerKeyPEM(t, config))
	if err != nil {
		t.Fatal(err)
	}
	return kp
}

// ownerKeyPEM is the owner's key in config, decrypted.
func ownerKeyPEM(t testing.TB, config string) []byte {
	t.Helper()
	keyPEM, err := ownerkey.Open(read(t, filepath.Join(config, "owner-key.age")), testPassphrase)
	if err != nil {
		t.Fatal(err)
	}
	return keyPEM
}

// ownerKeyFile is the owner's key in config, decrypted into a file of the
// test's, for tools that take a file.
func ownerKeyFile(t testing.TB, config string) string {
	t.Helper()
	path := filepath.Join(t.TempDir(), "owner-key.pem")
	if err := os.WriteFile(path, ownerKeyPEM(t, config), 0o600); err != nil {
		t.Fatal(err)
	}
	return path
}

// bootstrapped makes an owner and a bootstrap enrolment config for a
// cluster of that name, and returns the owner's config directory and the
// config's file.
func bootstrapped(t testing.TB, cluster string) (config, file string) {
	t.Helper()
	config = owner(t)
	file = filepath.Join(t.TempDir(), "enrolment.pb")
	cli(t, "--config", config, "enrolment", "bootstrap", "--cluster", cluster, "--out", file)
	return config, file
}

// fingerprint returns the CA fingerprint the node printed.
func fingerprint(t testing.TB, vm *qemu.VM) string {
	t.Helper()
	m := regexp.MustCompile(`ca_fingerprint=(sha256:[0-9a-f]{64})`).FindStringSubmatch(vm.Console())
	if m == nil {
		t.Fatal("the node printed no CA fingerprint")
	}
	return m[1]
}

// nodeKey waits for the key a node without a cluster prints on its
// console (node_key=sha256:...) after the console's first from bytes,
// and returns it: the node makes one each boot.
func nodeKey(t testing.TB, vm *qemu.VM, from int) string {
	t.Helper()
	re := regexp.MustCompile(`node_key=(sha256:[0-9a-f]{64})`)
	var key string
	err := waitUntil(stepTimeout, func() error {
		m := re.FindAllStringSubmatch(vm.Console()[from:], -1)
		if m == nil {
			return errors.New("the node printed no key of its own")
		}
		key = m[len(m)-1][1]
		return nil
	})
	if err != nil {
		t.Fatalf("%v\n%s", err, vm.Tail(20))
	}
	return key
}

// etcdEnv runs `borough etcd env` and returns its settings.
func etcdEnv(t testing.TB, config, node, fp string) map[string]string {
	t.Helper()
	env := map[string]string{}
	for _, line := range strings.Split(strings.TrimSpace(cli(t, "--config", config, "etcd", "env", node, "--fingerprint", fp)), "\n") {
		k, v, _ := strings.Cut(strings.TrimPrefix(line, "export "), "=")
		env[k] = v
	}
	return env
}

// client connects as etcdctl would with the settings, using cert and key
// (empty: no client certificate).
func client(t testing.TB, env map[string]string, cert, key string) *clientv3.Client {
	t.Helper()
	roots := x509.NewCertPool()
	b, err := os.ReadFile(env["ETCDCTL_CACERT"])
	if err != nil {
		t.Fatal(err)
	}
	roots.AppendCertsFromPEM(b)
	cfg := &tls.Config{RootCAs: roots}
	if cert != "" {
		kp, err := tls.LoadX509KeyPair(cert, key)
		if err != nil {
			t.Fatal(err)
		}
		cfg.Certificates = []tls.Certificate{kp}
	}
	c, err := clientv3.New(clientv3.Config{Endpoints: []string{env["ETCDCTL_ENDPOINTS"]}, TLS: cfg, DialTimeout: 10 * time.Second})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { c.Close() })
	return c
}

// strangerCert writes a self-signed client certificate from no CA the
// cluster knows, and returns its files.
func strangerCert(t *testing.T) (string, string) {
	t.Helper()
	dir := t.TempDir()
	key, _ := ecdsa.GenerateKey(elliptic.P256(), rand.Reader)
	tmpl := &x509.Certificate{SerialNumber: big.NewInt(7), Subject: pkix.Name{CommonName: "stranger"},
		NotBefore: time.Now().Add(-time.Hour), NotAfter: time.Now().Add(time.Hour), BasicConstraintsValid: true,
		ExtKeyUsage: []x509.ExtKeyUsage{x509.ExtKeyUsageClientAuth}}
	der, _ := x509.CreateCertificate(rand.Reader, tmpl, tmpl, &key.PublicKey, key)
	keyDER, _ := x509.MarshalPKCS8PrivateKey(key)
	cert, keyFile := filepath.Join(dir, "c.pem"), filepath.Join(dir, "k.pem")
	os.WriteFile(cert, pemBlock("CERTIFICATE", der), 0o600)
	os.WriteFile(keyFile, pemBlock("PRIVATE KEY", keyDER), 0o600)
	return cert, keyFile
}

// TestCluster bootstraps a node through fw_cfg, uses it from the host as
// its owner (etcd and the node API), checks that strangers are refused,
// and reboots it through its API, following its log, into the same
// cluster with its data and the log of the boot before, warning that
// fw_cfg still holds its config.
func TestCluster(t *testing.T) {
	t.Parallel()
	config, cfgFile := bootstrapped(t, "test")
	img := nodeImage(t, cmdline.PoweroffOnFatal)
	state := t.TempDir()
	port, apiPort := freePort(t), freePort(t)
	api := "127.0.0.1:" + strconv.Itoa(apiPort)
	opts := qemu.Options{Image: img, StateDir: state, FwCfg: cfgFile, TPM: true,
		Forwards: []qemu.Forward{{Host: port, Guest: 2379}, {Host: apiPort, Guest: 7835}}}
	vm := boot(t, opts)
	expect(t, vm, bootTimeout, "borough: enrolment config source=\"fw_cfg opt/borough/enrolment\" cluster=test",
		"borough: state New -> CreatingCluster", "borough: cluster created", "borough: state CreatingCluster -> Running", running)

	node := "127.0.0.1:" + strconv.Itoa(port)
	env := etcdEnv(t, config, node, fingerprint(t, vm))
	if !strings.Contains(env["ETCDCTL_CERT"], "borough-session-") || env["ETCDCTL_ENDPOINTS"] != "https://"+node {
		t.Errorf("etcd env = %v, want an owner session", env)
	}
	if key, err := os.ReadFile(env["ETCDCTL_KEY"]); err != nil || bytes.Equal(key, ownerKeyPEM(t, config)) {
		t.Errorf("etcd env's key file %s: %v; want a session's own key, not the owner's", env["ETCDCTL_KEY"], err)
	}
	c := client(t, env, env["ETCDCTL_CERT"], env["ETCDCTL_KEY"])
	ctx, cancel := context.WithTimeout(context.Background(), 60*time.Second)
	defer cancel()
	put, err := c.Put(ctx, "greeting", "hello from the owner")
	if err != nil {
		t.Fatalf("put as the owner: %v", err)
	}
	clusterID := put.Header.ClusterId

	for name, files := range map[string][2]string{"no certificate": {}, "a stranger's certificate": func() [2]string {
		c, k := strangerCert(t)
		return [2]string{c, k}
	}()} {
		bad := client(t, env, files[0], files[1])
		sctx, scancel := context.WithTimeout(context.Background(), 10*time.Second)
		if _, err := bad.Get(sctx, "greeting"); err == nil {
			t.Errorf("a client with %s read the cluster", name)
		}
		scancel()
	}
	if out := cli(t, "--config", config, "status", node); !strings.Contains(out, "member") {
		t.Errorf("status printed:\n%s", out)
	}

	checkNodeAPI(t, config, api, fingerprint(t, vm), "test")
	followed := followReboot(t, config, api)
	contains(t, "the log followed through a reboot", followed, "node-api: the owner asked for a reboot", "node: stopping services")
	expect(t, vm, stepTimeout, "borough: rebooting")
	expect(t, vm, bootTimeout, unlocked, "borough: state New -> Restarting", "borough: state Restarting -> Running", running)
	sawLine(t, vm, "still holds this node's enrolment config", stepTimeout)
	contains(t, "the previous boot's log", cli(t, "--config", config, "logs", api, "--boot", "-1"),
		"node: node running", "node-api: the owner asked for a reboot", "node: stopping services")
	c = client(t, env, env["ETCDCTL_CERT"], env["ETCDCTL_KEY"])
	ctx, cancel = context.WithTimeout(context.Background(), 60*time.Second)
	defer cancel()
	get, err := c.Get(ctx, "greeting")
	if err != nil {
		t.Fatalf("get after reboot: %v", err)
	}
	if len(get.Kvs) != 1 || string(get.Kvs[0].Value) != "hello from the owner" {
		t.Errorf("after reboot, greeting = %v", get.Kvs)
	}
	if get.Header.ClusterId != clusterID {
		t.Errorf("cluster ID %x after reboot, was %x", get.Header.ClusterId, clusterID)
	}
	powerOff(t, vm)

	// An established node runs from what it applied on its first boot:
	// a clock in 2001, before the owner's certificate is valid, and
	// another config in fw_cfg do not stop it, and it takes nothing from
	// that config.
	other := filepath.Join(t.TempDir(), "other.pb")
	cli(t, "--config", config, "enrolment", "bootstrap", "--cluster", "other", "--out", other)
	skewed := opts
	skewed.FwCfg, skewed.RTCBase = other, "2001-01-01"
	vm = boot(t, skewed)
	expect(t, vm, bootTimeout, "ignoring the enrolment config in fw_cfg",
		unlocked, "borough: state Restarting -> Running", running)
	powerOff(t, vm)

	// A torn node state record on the ESP: the data volume's decides,
	// and the ESP's is written again.
	writeESPFile(t, img, esp.NodeState, []byte(`{"version":1,"pha`))
	vm = boot(t, opts)
	expect(t, vm, bootTimeout, "the node state record on the ESP is damaged; the data volume's record decides",
		"borough: state Restarting -> Running", running)
	powerOff(t, vm)
	if rec := readESPFile(t, img, esp.NodeState); !strings.Contains(string(rec), `"phase": "member"`) {
		t.Errorf("the ESP's node state record was not repaired: %q", rec)
	}

	forgedRecord(t, img, opts, config, env, api)
	forgedState(t, img, opts)
}

// forgedState plays someone who swaps the CRL copy on the ESP of the TPM
// node of TestCluster while it is off, so that a node the cluster removed
// could get its share, and who marks the node for a reset, to have it
// erase itself and wait for a config from their key: the ledger refuses
// the copy by name (the node answers no share request until its member
// runs) and the mark, which the node removes, the node runs with its
// data, and its member puts the authentic copy back.
func forgedState(t *testing.T, img string, opts qemu.Options) {
	genuine := readESPFile(t, img, esp.UnlockCRL)
	writeESPFile(t, img, esp.UnlockCRL, readESPFile(t, img, esp.UnlockCA))
	attacker, err := pki.NewOwner("attacker", time.Now())
	if err != nil {
		t.Fatal(err)
	}
	writeESPFile(t, img, esp.ResetRequest, pki.CertPEM(attacker.Cert))
	vm := boot(t, opts)
	expect(t, vm, bootTimeout, "the ESP's ledger checks out",
		"refusing "+string(esp.UnlockCRL)+": its contents are not the ones the ledger lists",
		"borough: state Restarting -> Running", running)
	sawLine(t, vm, "reset: refused and removed the reset mark on the ESP", stepTimeout)
	// The member's identity is copied to the ESP as soon as it runs, and
	// then every 10 s.
	if err := waitUntil(time.Minute, func() error {
		crl, err := exec.Command("mtype", "-i", espTarget(t, img), "::/"+string(esp.UnlockCRL)).Output()
		if err == nil && !bytes.Equal(crl, genuine) {
			err = fmt.Errorf("%d bytes, want the genuine %d", len(crl), len(genuine))
		}
		return err
	}); err != nil {
		t.Errorf("the running node did not put the ESP's CRL copy back: %v", err)
	}
	powerOff(t, vm)
	if crl := readESPFile(t, img, esp.UnlockCRL); !bytes.Equal(crl, genuine) {
		t.Errorf("the ESP's CRL copy was not put back: %d bytes, want the genuine %d", len(crl), len(genuine))
	}
}

// forgedRecord plays someone who can write the disk of the TPM node of
// TestCluster while it is off and wants to become its owner: (a) the
// record of the applied config rewritten with another owner and the TPM
// disabled; (b) the record deleted, and a config of theirs put on the
// ESP. Each time the node unlocks as its keys are kept, refuses the
// record by name, runs with its data and its real owner, refuses the
// forged owner on its node API, and puts the genuine record back.
func forgedRecord(t *testing.T, img string, opts qemu.Options, config string, env map[string]string, api string) {
	genuine := readESPFile(t, img, esp.AppliedEnrolment)
	forger := owner(t)
	forgedFile := filepath.Join(t.TempDir(), "forged.pb")
	cli(t, "--config", forger, "enrolment", "bootstrap", "--cluster", "test", "--storage-policy", "disabled", "--out", forgedFile)
	forged, err := os.ReadFile(forgedFile)
	if err != nil {
		t.Fatal(err)
	}
	fromESP := opts
	fromESP.FwCfg = ""
	for _, tc := range []struct {
		name    string
		forge   func()
		opts    qemu.Options
		refused string
	}{
		{"(a) another owner, TPM disabled", func() { writeESPFile(t, img, esp.AppliedEnrolment, forged) }, opts,
			"it differs from the data volume's record in the owner"},
		{"(b) record deleted, another config", func() {
			removeESPFile(t, img, esp.AppliedEnrolment)
			writeESPFile(t, img, esp.EnrolmentConfig, forged)
		}, fromESP, "it is missing"},
	} {
		t.Logf("forged enrolment record %s", tc.name)
		tc.forge()
		vm := boot(t, tc.opts)
		expect(t, vm, bootTimeout, "provisional=true", "borough: storage: data volume unlocked",
			"borough: error: refused "+string(esp.AppliedEnrolment)+": "+tc.refused,
			"enrolment record confirmed by the data volume", "borough: state Restarting -> Running", running)
		if strings.Contains(vm.Console(), "IN CLEAR") {
			t.Errorf("%s: the node took the forged storage policy", tc.name)
		}
		contains(t, tc.name+": the forged owner on the node API",
			cliFails(t, "--config", forger, "node", "info", api, "--unverified"), "certificate")
		contains(t, tc.name+": the real owner on the node API", cli(t, "--config", config, "node", "info", api), "cluster      test")
		ctx, cancel := context.WithTimeout(context.Background(), 60*time.Second)
		get, err := client(t, env, env["ETCDCTL_CERT"], env["ETCDCTL_KEY"]).Get(ctx, "greeting")
		cancel()
		if err != nil || len(get.Kvs) != 1 {
			t.Errorf("%s: the real owner's greeting: %v, %v", tc.name, get, err)
		}
		powerOff(t, vm)
		if rec := readESPFile(t, img, esp.AppliedEnrolment); !bytes.Equal(rec, genuine) {
			t.Errorf("%s: the ESP's record was not put back: %d bytes, want the genuine %d", tc.name, len(rec), len(genuine))
		}
	}
}

// TestClusterESP enrols an image on its ESP (`borough image enrol`), with
// a static network (QEMU's user network, without its DHCP) and the TPM
// disabled by policy although the VM has one.
func TestClusterESP(t *testing.T) {
	t.Parallel()
	config := owner(t)
	cfgFile := filepath.Join(t.TempDir(), "enrolment.pb")
	cli(t, "--config", config, "enrolment", "bootstrap", "--cluster", "from-esp", "--storage-policy", "disabled",
		"--address", "10.0.2.15/24", "--gateway4", "10.0.2.2", "--dns", "10.0.2.3", "--out", cfgFile)
	img := nodeImage(t, cmdline.PoweroffOnFatal)
	cli(t, "image", "enrol", img, cfgFile)
	vm := boot(t, qemu.Options{Image: img, TPM: true})
	expect(t, vm, bootTimeout, "borough: enrolment config source=\"ESP EFI/Borough/enrolment.pb\" cluster=from-esp",
		"storage_policy=disabled", "borough: network: network configured link=eth0 address=10.0.2.15/24 method=static",
		"the local unlock key is stored IN CLEAR", running)
	powerOff(t, vm)
}

// TestBadConfig gives a node a config it must refuse: the node goes to
// Failed, says why, and leaves the data partition as it was.
func TestBadConfig(t *testing.T) {
	t.Parallel()
	bad := filepath.Join(t.TempDir(), "bad.pb")
	// Field 1 (version) = 7.
	if err := os.WriteFile(bad, []byte{0x08, 0x07}, 0o644); err != nil {
		t.Fatal(err)
	}
	img := nodeImage(t, cmdline.PoweroffOnFatal)
	before := dataHash(t, img)
	vm := boot(t, qemu.Options{Image: img, FwCfg: bad})
	expect(t, vm, bootTimeout, "borough: state New -> Failed",
		"borough: node failed: enrolment config from fw_cfg opt/borough/enrolment: field version: is 7; this node reads version 1",
		ready)
	powerOff(t, vm)
	if strings.Contains(vm.Console(), "data volume") {
		t.Error("the node touched the data volume despite the bad config")
	}
	if dataHash(t, img) != before {
		t.Error("the data partition changed")
	}
}

func pemBlock(typ string, der []byte) []byte {
	return pem.EncodeToMemory(&pem.Block{Type: typ, Bytes: der})
}
