//go:build boot

package boottest

import (
	"encoding/base64"
	"os/exec"
	"path/filepath"
	"strings"
	"testing"
)

// applications uses the cluster as applications that speak etcd's
// HTTP/JSON API do (Patroni, tooz, scripts), with curl: an application
// credential over /service/ reaches its prefix on every member's client
// port and nothing else, what it writes through JSON etcdctl reads
// through gRPC, the owner reaches everything, and a client without a
// certificate the cluster trusts is refused at the handshake, and one
// that speaks plain HTTP to the TLS port is closed on, the node saying why.
func (m *multi) applications(t *testing.T) {
	eps := m.endpoints()
	cert, key := m.credential(t, "patroni", "/service/")
	app := []string{"--cert", cert, "--key", key}
	owner := []string{"--cert", filepath.Join(m.config, "owner.pem"), "--key", ownerKeyFile(t, m.config)}
	b64 := func(k string) string { return base64.StdEncoding.EncodeToString([]byte(k)) }
	for i, ep := range eps {
		version := m.curl(t, app, ep, "/version", "")
		contains(t, "GET /version", version, `"etcdserver":"3.7.`, `"etcdcluster":"3.7.`)
		put := m.curl(t, app, ep, "/v3/kv/put", `{"key":"`+b64("/service/demo/leader")+`","value":"`+b64(eps[i])+`"}`)
		contains(t, "a put in the credential's prefix", put, `"revision":`)
		contains(t, "a put outside the credential's prefix",
			m.curl(t, app, ep, "/v3/kv/put", `{"key":"`+b64("/other")+`","value":"eA=="}`), "permission denied")
		contains(t, "a read of Borough's keys with the credential",
			m.curl(t, app, ep, "/v3/kv/range", `{"key":"`+b64("/borough/pki/ca-key")+`"}`), "permission denied")
		contains(t, "the owner's read of the credential's key",
			m.curl(t, owner, ep, "/v3/kv/range", `{"key":"`+b64("/service/demo/leader")+`"}`), b64(eps[i]))
		if out, err := exec.Command("curl", "--silent", "--show-error", "--cacert", m.c.CAFile,
			"https://"+ep+"/version").CombinedOutput(); err == nil {
			t.Errorf("curl without a client certificate got an answer from %s: %s", ep, out)
		}
	}
	// An application given http:// for the TLS port (Patroni's
	// etcd3.protocol left at http) gets no answer; the node says why.
	if out, err := exec.Command("curl", "--silent", "--show-error", "http://"+eps[0]+"/version").CombinedOutput(); err == nil {
		t.Errorf("curl over plain HTTP got an answer from %s: %s", eps[0], out)
	}
	sawLine(t, m.c.Nodes[0].VM, `client port: closed a connection before TLS`, stepTimeout)
	if !strings.Contains(m.c.Nodes[0].VM.Console(), `err="not a TLS handshake"`) {
		t.Errorf("node %s did not say the plain HTTP connection was not TLS", m.c.Nodes[0].Name)
	}
	out, err := m.etcdctl(t, eps[:1], "get", "/service/demo/leader", "--print-value-only")
	if err != nil || strings.TrimSpace(out) != eps[len(eps)-1] {
		t.Errorf("etcdctl's read of what JSON wrote: %v %q", err, out)
	}
	cli(t, "--config", m.config, "cluster", "credential", "revoke", "patroni", "--cluster", eps[0], "--fingerprint", m.c.Fingerprint)
}

// endpoints are the client ports of the cluster's first three nodes.
func (m *multi) endpoints() []string {
	var eps []string
	for _, n := range m.c.Nodes[:3] {
		eps = append(eps, n.Endpoint())
	}
	return eps
}

// credential has the owner mint an application credential name over
// prefix, and returns its certificate and key files.
func (m *multi) credential(t *testing.T, name, prefix string) (cert, key string) {
	t.Helper()
	dir := t.TempDir()
	cli(t, "--config", m.config, "cluster", "credential", name, "--cluster", strings.Join(m.endpoints(), ","),
		"--prefix", prefix, "--out", dir, "--fingerprint", m.c.Fingerprint)
	return filepath.Join(dir, name+".pem"), filepath.Join(dir, name+"-key.pem")
}

// curl POSTs body (or GETs, without one) to path on the client port ep
// with the client certificate args, trusting the cluster's CA, and
// returns what the server said; it fails the test if curl cannot reach
// the server.
func (m *multi) curl(t *testing.T, args []string, ep, path, body string) string {
	t.Helper()
	cmd := append([]string{"--silent", "--show-error", "--max-time", "30", "--cacert", m.c.CAFile, "https://" + ep + path}, args...)
	if body != "" {
		cmd = append(cmd, "--data", body)
	}
	out, err := exec.Command("curl", cmd...).CombinedOutput()
	if err != nil {
		t.Fatalf("curl %s: %v\n%s", strings.Join(cmd, " "), err, out)
	}
	return string(out)
}
