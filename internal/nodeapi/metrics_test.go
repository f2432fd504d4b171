package nodeapi

import (
	"context"
	"crypto"
	"crypto/tls"
	"crypto/x509"
	"crypto/x509/pkix"
	"encoding/json"
	"fmt"
	"io"
	"net"
	"net/http"
	"net/url"
	"os"
	"os/exec"
	"path/filepath"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/borough-os/borough/internal/authority"
	"github.com/borough-os/borough/internal/metrics"
	"github.com/borough-os/borough/internal/pki"
	"github.com/borough-os/borough/internal/poll"
)

// credential mints a metrics credential of owner, valid for ttl from at.
func credential(t *testing.T, owner tls.Certificate, ttl time.Duration, at time.Time) tls.Certificate {
	t.Helper()
	c, err := metrics.Mint(owner.Leaf, owner.PrivateKey.(crypto.Signer), "prometheus", ttl, at)
	if err != nil {
		t.Fatal(err)
	}
	return keyPair(c)
}

// TestMetricsAccess: the owner and the owner's metrics credentials read a
// node's metrics; a credential reads nothing else, and one expired or of
// another owner is refused at the handshake.
func TestMetricsAccess(t *testing.T) {
	n := startNode(t, true)
	ctx := context.Background()
	families, err := n.client(n.owner).Metrics(ctx)
	if err != nil {
		t.Fatalf("the owner's scrape: %v", err)
	}
	if families["borough_node_state"] == nil {
		t.Fatalf("the owner's scrape has no borough_node_state: %d families", len(families))
	}
	if _, err := n.client(credential(t, n.owner, time.Hour, time.Now())).Metrics(ctx); err != nil {
		t.Fatalf("a metrics credential's scrape through the client: %v", err)
	}
	stranger, _ := pki.NewOwner("owner", time.Now())
	now := time.Now()
	apps, err := authority.NewApplicationsCA(n.owner.Leaf, n.owner.PrivateKey.(crypto.Signer), now)
	if err != nil {
		t.Fatal(err)
	}
	app, err := pki.SignClient(apps, n.owner.PrivateKey.(crypto.Signer), pkix.Name{CommonName: "app:billing"}, now, now.Add(time.Hour))
	if err != nil {
		t.Fatal(err)
	}
	for _, tc := range []struct {
		name     string
		cert     tls.Certificate
		method   string
		path     string
		status   int
		shakeErr string
	}{
		{"a credential reads the metrics", credential(t, n.owner, time.Hour, now), "GET", metrics.Path, 200, ""},
		{"a credential asks for the info", credential(t, n.owner, time.Hour, now), "POST", pathInfo, 403, ""},
		{"a credential asks for a reboot", credential(t, n.owner, time.Hour, now), "POST", pathPower, 403, ""},
		{"an expired credential", credential(t, n.owner, time.Hour, now.Add(-2*time.Hour)), "GET", metrics.Path, 0, "certificate"},
		{"another owner's credential", credential(t, keyPair(stranger), time.Hour, now), "GET", metrics.Path, 0, "certificate"},
		{"an application's etcd credential", keyPair(app), "GET", metrics.Path, 0, "certificate"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			status, body, err := n.request(tc.cert, tc.method, tc.path)
			if tc.shakeErr != "" {
				if err == nil || !strings.Contains(err.Error(), tc.shakeErr) {
					t.Fatalf("got %d, %v; want refused at the handshake", status, err)
				}
				return
			}
			if err != nil || status != tc.status {
				t.Fatalf("got %d %q, %v; want %d", status, body, err, tc.status)
			}
		})
	}
}

// TestMetricsAfterHandOver: a metrics credential of an owner the node no
// longer has is refused, on a resumed TLS session too (which skips the
// handshake's check).
func TestMetricsAfterHandOver(t *testing.T) {
	n := startNode(t, true)
	roots := x509.NewCertPool()
	roots.AddCert(n.ca.Cert)
	hc := &http.Client{Timeout: 10 * time.Second, Transport: &http.Transport{DisableKeepAlives: true, TLSClientConfig: &tls.Config{
		RootCAs: roots, ServerName: "127.0.0.1", ClientSessionCache: tls.NewLRUClientSessionCache(4),
		Certificates: []tls.Certificate{credential(t, n.owner, time.Hour, time.Now())}}}}
	get := func() (int, bool) {
		resp, err := hc.Get("https://" + n.addr + metrics.Path)
		if err != nil {
			t.Fatal(err)
		}
		resp.Body.Close()
		return resp.StatusCode, resp.TLS.DidResume
	}
	if status, _ := get(); status != http.StatusOK {
		t.Fatalf("the credential's first scrape: %d", status)
	}
	n.handedOver.Store(true)
	status, resumed := get()
	if !resumed {
		t.Fatal("the second connection did not resume its TLS session: the test checks nothing")
	}
	if status != http.StatusForbidden {
		t.Errorf("a credential of the owner before the hand-over, on a resumed session: %d, want %d", status, http.StatusForbidden)
	}
}

// request makes a request of the node with cert, checking the node against
// its CA, and returns the status and body.
func (n *node) request(cert tls.Certificate, method, path string) (int, string, error) {
	roots := x509.NewCertPool()
	roots.AddCert(n.ca.Cert)
	hc := &http.Client{Timeout: 10 * time.Second, Transport: &http.Transport{TLSClientConfig: &tls.Config{
		RootCAs: roots, Certificates: []tls.Certificate{cert}, ServerName: "127.0.0.1"}}}
	req, err := http.NewRequest(method, "https://"+n.addr+path, nil)
	if err != nil {
		return 0, "", err
	}
	resp, err := hc.Do(req)
	if err != nil {
		return 0, "", err
	}
	defer resp.Body.Close()
	b, err := io.ReadAll(resp.Body)
	return resp.StatusCode, string(b), err
}

// TestPrometheusScrapes runs Debian's Prometheus against a node's API with
// a metrics credential, as an owner's would, and asks it for the node's
// state.
func TestPrometheusScrapes(t *testing.T) {
	bin, err := exec.LookPath("prometheus")
	if err != nil {
		t.Fatal("Debian's prometheus is not installed (build.sh installs it): ", err)
	}
	n := startNode(t, true)
	dir := t.TempDir()
	cred := credential(t, n.owner, time.Hour, time.Now())
	keyPEM, err := pki.KeyPEM(cred.PrivateKey.(crypto.Signer))
	if err != nil {
		t.Fatal(err)
	}
	files := map[string][]byte{"ca.pem": pki.CertPEM(n.ca.Cert), "cred.pem": pki.CertPEM(cred.Leaf), "cred-key.pem": keyPEM,
		"prometheus.yml": fmt.Appendf(nil, `scrape_configs:
  - job_name: borough
    scheme: https
    scrape_interval: 1s
    tls_config: {ca_file: %[1]s/ca.pem, cert_file: %[1]s/cred.pem, key_file: %[1]s/cred-key.pem}
    static_configs: [{targets: ["%[2]s"]}]
`, dir, n.addr)}
	for name, b := range files {
		if err := os.WriteFile(filepath.Join(dir, name), b, 0o600); err != nil {
			t.Fatal(err)
		}
	}
	web := freeAddr(t)
	ctx, cancel := context.WithCancel(context.Background())
	cmd := exec.CommandContext(ctx, bin, "--config.file="+filepath.Join(dir, "prometheus.yml"),
		"--storage.tsdb.path="+filepath.Join(dir, "data"), "--web.listen-address="+web)
	log, err := os.Create(filepath.Join(dir, "prometheus.log"))
	if err != nil {
		t.Fatal(err)
	}
	cmd.Stdout, cmd.Stderr = log, log
	if err := cmd.Start(); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() {
		cancel()
		_ = cmd.Wait()
	})
	query := `borough_node_state{job="borough",state="Running"} * on(instance) up{job="borough"}`
	if err := poll.Until(t.Context(), time.Minute, 250*time.Millisecond, func() error {
		v, err := promQuery(web, query)
		if err == nil && v != "1" {
			err = fmt.Errorf("the query gives %q", v)
		}
		return err
	}); err != nil {
		b, _ := os.ReadFile(filepath.Join(dir, "prometheus.log"))
		t.Fatalf("Prometheus has not scraped the node's state: %v; its log:\n%s", err, b)
	}
}

// promQuery asks Prometheus at web for query's one value.
func promQuery(web, query string) (string, error) {
	resp, err := http.Get("http://" + web + "/api/v1/query?query=" + url.QueryEscape(query))
	if err != nil {
		return "", err
	}
	defer resp.Body.Close()
	var r struct {
		Data struct {
			Result []struct {
				Value [2]any `json:"value"`
			} `json:"result"`
		} `json:"data"`
	}
	if err := json.NewDecoder(resp.Body).Decode(&r); err != nil {
		return "", err
	}
	if len(r.Data.Result) != 1 {
		return "", fmt.Errorf("%d results", len(r.Data.Result))
	}
	v, _ := r.Data.Result[0].Value[1].(string)
	return v, nil
}

// freeAddr is a loopback address with a port free now.
func freeAddr(t *testing.T) string {
	t.Helper()
	l, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	defer l.Close()
	return net.JoinHostPort("127.0.0.1", strconv.Itoa(l.Addr().(*net.TCPAddr).Port))
}
