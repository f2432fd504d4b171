package consensus

import (
	"bufio"
	"context"
	"crypto/tls"
	"crypto/x509"
	"crypto/x509/pkix"
	"encoding/base64"
	"encoding/json"
	"io"
	"net/http"
	"os"
	"strings"
	"testing"
	"time"

	clientv3 "go.etcd.io/etcd/client/v3"

	"github.com/borough-os/borough/internal/authority"
	"github.com/borough-os/borough/internal/pki"
	"github.com/borough-os/borough/internal/poll"
)

// TestJSONAPI runs a real one-member etcd with authentication on and
// calls its client port as curl and Patroni do, over HTTP/1.1 and JSON:
// the owner and an application credential get in, the credential within
// its prefix only, a stranger and a revoked credential are refused at
// the handshake, a watch streams, and what one API writes the other
// reads.
func TestJSONAPI(t *testing.T) {
	tc := newTestCA(t)
	ctx, cancel := context.WithTimeout(context.Background(), 2*time.Minute)
	defer cancel()
	cfg := tc.member("n1", "127.0.0.13", ModeNew)
	apps, err := authority.NewApplicationsCA(tc.owner.Cert, tc.owner.Key, tc.now)
	if err != nil {
		t.Fatal(err)
	}
	if _, err := cfg.PKI.TrustApplications(apps); err != nil {
		t.Fatal(err)
	}
	app, err := pki.SignClient(apps, tc.owner.Key, pkix.Name{CommonName: "app:billing"}, tc.now.Add(-time.Minute), tc.now.Add(time.Hour))
	if err != nil {
		t.Fatal(err)
	}
	c, _, _ := run(t, ctx, cfg)
	awaitAuth(t, ctx, c)
	for _, step := range []func() error{
		func() error {
			_, err := c.Client.UserAddWithOptions(ctx, "app:billing", "", &clientv3.UserAddOptions{NoPassword: true})
			return err
		},
		func() error { _, err := c.Client.RoleAdd(ctx, "app:billing"); return err },
		func() error {
			_, err := c.Client.RoleGrantPermission(ctx, "app:billing", "/app/", clientv3.GetPrefixRangeEnd("/app/"), clientv3.PermissionType(clientv3.PermReadWrite))
			return err
		},
		func() error { _, err := c.Client.UserGrantRole(ctx, "app:billing", "app:billing"); return err },
		func() error { _, err := c.Client.Put(ctx, "/borough/secret", "s"); return err },
	} {
		if err := step(); err != nil {
			t.Fatal(err)
		}
	}

	other, _ := pki.NewCA("other", tc.now)
	stranger, _ := other.Issue("stranger", nil, nil, tc.now)
	base := "https://127.0.0.13:2379"
	owner, credential := jsonClient(tc, tc.owner), jsonClient(tc, app)
	for _, call := range []struct {
		name   string
		client *http.Client
		path   string
		body   any
		want   int
	}{
		{"owner writes", owner, "/v3/kv/put", kv("/app/a", "1"), http.StatusOK},
		{"owner reads Borough's keys", owner, "/v3/kv/range", kv("/borough/secret", ""), http.StatusOK},
		{"credential writes its prefix", credential, "/v3/kv/put", kv("/app/b", "2"), http.StatusOK},
		{"credential reads its prefix", credential, "/v3/kv/range", kv("/app/a", ""), http.StatusOK},
		{"credential writes outside its prefix", credential, "/v3/kv/put", kv("/other", "x"), http.StatusForbidden},
		{"credential reads Borough's keys", credential, "/v3/kv/range", kv("/borough/secret", ""), http.StatusForbidden},
		{"credential adds a user", credential, "/v3/auth/user/add", map[string]any{"name": "x", "options": map[string]bool{"no_password": true}}, http.StatusForbidden},
		{"credential grants a lease", credential, "/v3/lease/grant", map[string]any{"TTL": 10}, http.StatusOK},
		{"credential reads the member's status", credential, "/v3/maintenance/status", map[string]any{}, http.StatusOK},
		{"credential defragments", credential, "/v3/maintenance/defragment", map[string]any{}, http.StatusForbidden},
		{"owner defragments", owner, "/v3/maintenance/defragment", map[string]any{}, http.StatusOK},
	} {
		status, body, err := post(ctx, call.client, base+call.path, call.body)
		if err != nil {
			t.Fatalf("%s: %v", call.name, err)
		}
		if status != call.want {
			t.Errorf("%s: status %d (%s), want %d", call.name, status, body, call.want)
		}
	}
	if got, err := c.Client.Get(ctx, "/app/b"); err != nil || len(got.Kvs) != 1 || string(got.Kvs[0].Value) != "2" {
		t.Errorf("gRPC read of what JSON wrote: %v, %v", got, err)
	}

	version, err := owner.Get(base + "/version")
	if err != nil {
		t.Fatal(err)
	}
	var v struct{ Etcdserver, Etcdcluster string }
	json.NewDecoder(version.Body).Decode(&v)
	version.Body.Close()
	if v.Etcdserver == "" || v.Etcdcluster == "" {
		t.Errorf("/version says %+v, want etcd's versions", v)
	}

	t.Run("watch", func(t *testing.T) { jsonWatch(t, ctx, c, credential, base) })

	for _, refused := range []struct {
		name string
		cert *pki.Cert
	}{{"stranger", stranger}, {"none", nil}} {
		if _, _, err := post(ctx, jsonClient(tc, refused.cert), base+"/v3/kv/range", kv("/app/a", "")); err == nil {
			t.Errorf("%s: the JSON API answered", refused.name)
		}
	}
	revoked := ownersCRL(t, tc.ca, tc.owner, 2, 2, app.Cert.SerialNumber)
	if err := os.WriteFile(cfg.PKI.CRL(), revoked, 0o600); err != nil {
		t.Fatal(err)
	}
	if _, _, err := post(ctx, jsonClient(tc, app), base+"/v3/kv/range", kv("/app/a", "")); err == nil {
		t.Error("a revoked credential: the JSON API answered")
	}
}

// jsonWatch watches /app/ through the JSON API as the credential, puts
// a key through gRPC, and reads its event from the stream.
func jsonWatch(t *testing.T, ctx context.Context, c *Consensus, client *http.Client, base string) {
	wctx, stop := context.WithTimeout(ctx, 30*time.Second)
	defer stop()
	body := `{"create_request":{"key":"` + b64("/app/") + `","range_end":"` + b64("/app0") + `"}}`
	req, _ := http.NewRequestWithContext(wctx, "POST", base+"/v3/watch", strings.NewReader(body))
	resp, err := client.Do(req)
	if err != nil {
		t.Fatal(err)
	}
	defer resp.Body.Close()
	lines := bufio.NewScanner(resp.Body)
	if !lines.Scan() || !strings.Contains(lines.Text(), `"created":true`) {
		t.Fatalf("the watch did not start: %q %v", lines.Text(), lines.Err())
	}
	if _, err := c.Client.Put(ctx, "/app/watched", "w"); err != nil {
		t.Fatal(err)
	}
	if !lines.Scan() || !strings.Contains(lines.Text(), b64("/app/watched")) {
		t.Fatalf("the watch did not see the put: %q %v", lines.Text(), lines.Err())
	}
}

func awaitAuth(t *testing.T, ctx context.Context, c *Consensus) {
	t.Helper()
	if poll.Until(ctx, time.Minute, 100*time.Millisecond, poll.True(func() bool {
		st, err := c.Client.AuthStatus(ctx)
		return err == nil && st.Enabled
	})) != nil {
		t.Fatal("authentication is not on a minute after the member started")
	}
}

// jsonClient is an HTTP/1.1 client presenting cert, if any, that trusts
// tc's CA.
func jsonClient(tc *testCA, cert *pki.Cert) *http.Client {
	roots := x509.NewCertPool()
	roots.AddCert(tc.ca.Cert)
	cfg := &tls.Config{RootCAs: roots, NextProtos: []string{"http/1.1"}}
	if cert != nil {
		cfg.Certificates = []tls.Certificate{{Certificate: [][]byte{cert.Cert.Raw}, PrivateKey: cert.Key}}
	}
	return &http.Client{Timeout: 10 * time.Second, Transport: &http.Transport{TLSClientConfig: cfg, DisableKeepAlives: true}}
}

func post(ctx context.Context, c *http.Client, url string, body any) (int, string, error) {
	b, err := json.Marshal(body)
	if err != nil {
		return 0, "", err
	}
	req, err := http.NewRequestWithContext(ctx, "POST", url, strings.NewReader(string(b)))
	if err != nil {
		return 0, "", err
	}
	resp, err := c.Do(req)
	if err != nil {
		return 0, "", err
	}
	defer resp.Body.Close()
	out, err := io.ReadAll(resp.Body)
	return resp.StatusCode, string(out), err
}

func kv(key, value string) map[string]string {
	m := map[string]string{"key": b64(key)}
	if value != "" {
		m["value"] = b64(value)
	}
	return m
}

func b64(s string) string { return base64.StdEncoding.EncodeToString([]byte(s)) }
