package nodeapi

import (
	"bufio"
	"bytes"
	"cmp"
	"context"
	"crypto/tls"
	"crypto/x509"
	"encoding/base64"
	"errors"
	"fmt"
	"io"
	"net"
	"net/http"
	"strings"
	"sync"
	"time"

	dto "github.com/prometheus/client_model/go"
	"github.com/prometheus/common/expfmt"
	"github.com/prometheus/common/model"
	"google.golang.org/protobuf/encoding/protodelim"
	"google.golang.org/protobuf/proto"

	"github.com/borough-os/borough/internal/metrics"
	"github.com/borough-os/borough/internal/pki"
	"github.com/borough-os/borough/internal/ticket"
	"github.com/borough-os/borough/proto/enrolmentpb"
	"github.com/borough-os/borough/proto/nodepb"
)

// Client calls one node's API as its owner (or, for Metrics, as a
// metrics credential). Its fields are read at its first call, which
// connects; later calls reuse the connection (one handshake for a
// dashboard's many calls), so a client's fields are not changed once it is
// used.
type Client struct {
	// Addr is the node API's "host:port".
	Addr  string
	Owner tls.Certificate
	// CA is the cluster CA the node's certificate must chain to (for the
	// address in Addr).
	CA *x509.Certificate
	// ServerName is the name the node's certificate must have: a member's
	// name, for an address that could be any machine. Empty means the
	// host in Addr.
	ServerName string
	// NodeKey, without a CA, is the fingerprint of the key a node without
	// a cluster presents (Server.NodeKey), as its console printed it.
	NodeKey string
	// Unverified, without a CA or a NodeKey, believes any node: it reads
	// what a failed node says, and sends it nothing secret (Enrol and
	// Restore refuse).
	Unverified bool

	transportOnce sync.Once
	transport     *http.Transport
	transportErr  error
}

// errUnverified refuses to send a secret to a node nobody checked.
var errUnverified = errors.New("nodeapi: a config or a backup goes only to a node checked against its cluster CA " +
	"or its own key (the node prints it on its console: --node-key)")

// requestTimeout bounds a request that is not a follow; updateTimeout an
// update, which sends some 20 MiB and has the node write them.
const (
	requestTimeout = 30 * time.Second
	updateTimeout  = 5 * time.Minute
)

// http returns an HTTP client of timeout over the client's one transport.
func (c *Client) http(timeout time.Duration) (*http.Client, error) {
	c.transportOnce.Do(func() {
		conf, err := c.tlsConfig()
		c.transport, c.transportErr = &http.Transport{TLSClientConfig: conf}, err
	})
	if c.transportErr != nil {
		return nil, c.transportErr
	}
	return &http.Client{Timeout: timeout, Transport: c.transport}, nil
}

// tlsConfig is how the client proves it is the owner and checks the node.
func (c *Client) tlsConfig() (*tls.Config, error) {
	conf := &tls.Config{MinVersion: tls.VersionTLS13, Certificates: []tls.Certificate{c.Owner}}
	switch {
	case c.CA != nil:
		host, _, err := net.SplitHostPort(c.Addr)
		if err != nil {
			return nil, fmt.Errorf("node API address %q: %w", c.Addr, err)
		}
		conf.RootCAs = x509.NewCertPool()
		conf.RootCAs.AddCert(c.CA)
		conf.ServerName = cmp.Or(c.ServerName, host)
	case c.NodeKey != "":
		conf.InsecureSkipVerify = true
		conf.VerifyPeerCertificate = c.checkNodeKey
	case c.Unverified:
		conf.InsecureSkipVerify = true
	default:
		return nil, errors.New("nodeapi: a client needs the cluster CA, the node's key or Unverified")
	}
	return conf, nil
}

// checkNodeKey checks that the node presents the key NodeKey names.
func (c *Client) checkNodeKey(raw [][]byte, _ [][]*x509.Certificate) error {
	if len(raw) == 0 {
		return errors.New("the node presented no certificate")
	}
	cert, err := x509.ParseCertificate(raw[0])
	if err != nil {
		return fmt.Errorf("the node's certificate: %w", err)
	}
	if got := keyFingerprint(cert.RawSubjectPublicKeyInfo); got != c.NodeKey {
		return fmt.Errorf("the node at %s presents key %s, not %s: another machine answers at its address, "+
			"or the node rebooted (it makes a key each boot: read its console again)", c.Addr, got, c.NodeKey)
	}
	return nil
}

// verified says whether the client checks who answers.
func (c *Client) verified() bool { return c.CA != nil || c.NodeKey != "" }

// call posts req to path and returns the response, whose body the caller
// closes; a refusal is an error with the node's reason.
func (c *Client) call(ctx context.Context, timeout time.Duration, path string, req proto.Message) (*http.Response, error) {
	body, err := proto.Marshal(req)
	if err != nil {
		return nil, err
	}
	return c.post(ctx, timeout, path, bytes.NewReader(body))
}

// post posts body to path, as call.
func (c *Client) post(ctx context.Context, timeout time.Duration, path string, body io.Reader) (*http.Response, error) {
	return c.do(ctx, timeout, http.MethodPost, path, body)
}

// do makes a request of method to path, as call.
func (c *Client) do(ctx context.Context, timeout time.Duration, method, path string, body io.Reader) (*http.Response, error) {
	hc, err := c.http(timeout)
	if err != nil {
		return nil, err
	}
	hreq, err := http.NewRequestWithContext(ctx, method, "https://"+c.Addr+path, body)
	if err != nil {
		return nil, err
	}
	resp, err := hc.Do(hreq)
	if err != nil {
		return nil, fmt.Errorf("node API at %s: %w", c.Addr, err)
	}
	if err := c.checkAdmission(path, resp); err != nil {
		resp.Body.Close()
		return nil, fmt.Errorf("node API at %s: %w", c.Addr, err)
	}
	if resp.StatusCode != http.StatusOK {
		defer resp.Body.Close()
		msg, _ := io.ReadAll(io.LimitReader(resp.Body, 4<<10))
		return nil, fmt.Errorf("node API at %s: %s", c.Addr, strings.TrimSpace(string(msg)))
	}
	return resp, nil
}

// checkAdmission checks, for a node checked against its cluster CA, that
// its answer carries its admission by the owner of the key of the
// certificate it presented, under the name that certificate names. A
// locked node's admission is on its locked volume: Locked's caller checks
// the node's key against the node's record sealed to the owner instead,
// and Unlock sends only a key sealed to the key a checked node gave. The
// metrics are read by metrics credentials too, whose holders (a
// Prometheus) check no admission, and carry nothing a client acts on.
func (c *Client) checkAdmission(path string, resp *http.Response) error {
	if c.CA == nil || resp.TLS == nil || len(resp.TLS.PeerCertificates) == 0 || path == pathLocked || path == pathUnlock || path == metrics.Path {
		return nil
	}
	if len(c.Owner.Certificate) == 0 {
		return errors.New("the client has no owner certificate to check the node's admission against")
	}
	owner, err := x509.ParseCertificate(c.Owner.Certificate[0])
	if err != nil {
		return fmt.Errorf("the owner's certificate: %w", err)
	}
	peer := resp.TLS.PeerCertificates[0]
	name := peer.Subject.CommonName
	b, err := base64.StdEncoding.DecodeString(resp.Header.Get(AdmissionHeader))
	if err != nil {
		return fmt.Errorf("node %s's admission is not base64: %w", name, err)
	}
	if err := ticket.CheckAdmission(b, owner, "", name, pki.KeyHash(peer)); err != nil {
		return fmt.Errorf("refusing node %s, whose certificate the owner did not admit: %w "+
			"(a cluster's first node bootstrapped without the owner's key is admitted by the owner's first ticket; "+
			"a node that joined before Borough checked admissions has none until `borough cluster admit`)", name, err)
	}
	return nil
}

func (c *Client) unary(ctx context.Context, path string, req, resp proto.Message) error {
	timeout := requestTimeout
	if path == pathUpdate {
		timeout = updateTimeout
	}
	r, err := c.call(ctx, timeout, path, req)
	if err != nil {
		return err
	}
	return c.answer(r, resp)
}

// answer reads r's body into resp and closes it.
func (c *Client) answer(r *http.Response, resp proto.Message) error {
	defer r.Body.Close()
	b, err := io.ReadAll(io.LimitReader(r.Body, 1<<20))
	if err != nil {
		return fmt.Errorf("node API at %s: %w", c.Addr, err)
	}
	if err := proto.Unmarshal(b, resp); err != nil {
		return fmt.Errorf("node API at %s: the answer: %w", c.Addr, err)
	}
	return nil
}

// maxMetrics bounds the metrics a node may send: some 200 KiB today.
const maxMetrics = 16 << 20

// Metrics returns the node's Prometheus metrics, by name.
func (c *Client) Metrics(ctx context.Context) (map[string]*dto.MetricFamily, error) {
	r, err := c.do(ctx, requestTimeout, http.MethodGet, metrics.Path, nil)
	if err != nil {
		return nil, err
	}
	defer r.Body.Close()
	parser := expfmt.NewTextParser(model.UTF8Validation)
	families, err := parser.TextToMetricFamilies(io.LimitReader(r.Body, maxMetrics))
	if err != nil {
		return nil, fmt.Errorf("node API at %s: its metrics: %w", c.Addr, err)
	}
	return families, nil
}

// Info returns what the node says about itself.
func (c *Client) Info(ctx context.Context) (*nodepb.Info, error) {
	var info nodepb.Info
	return &info, c.unary(ctx, pathInfo, &nodepb.InfoRequest{}, &info)
}

// Power asks the node to reboot or power off.
func (c *Client) Power(ctx context.Context, a nodepb.PowerRequest_Action) error {
	return c.unary(ctx, pathPower, &nodepb.PowerRequest{Action: a}, &nodepb.PowerResponse{})
}

// Update sends an update; the node installs it and reboots into it.
func (c *Client) Update(ctx context.Context, req *nodepb.UpdateRequest) (*nodepb.UpdateResponse, error) {
	var resp nodepb.UpdateResponse
	return &resp, c.unary(ctx, pathUpdate, req, &resp)
}

// Reset asks the node to erase itself at a reboot it starts at once and
// come back to its first boot; force resets a node still in its cluster.
func (c *Client) Reset(ctx context.Context, force bool) error {
	return c.unary(ctx, pathReset, &nodepb.ResetRequest{Force: force}, &nodepb.ResetResponse{})
}

// Restore sends a first node the backup it waits for, resealed to its
// transfer key (backup.Reseal), from body; the node answers once it has
// checked the backup, and restores it after. No timeout but ctx's: a
// backup's size has no bound.
func (c *Client) Restore(ctx context.Context, body io.Reader) (*nodepb.RestoreResponse, error) {
	if !c.verified() {
		return nil, errUnverified
	}
	r, err := c.post(ctx, 0, pathRestore, body)
	if err != nil {
		return nil, err
	}
	var resp nodepb.RestoreResponse
	return &resp, c.answer(r, &resp)
}

// Locked asks a node that waits for its cluster unlock key for what its
// owner needs to send it, and returns it with the certificate the node
// presented, whose key the caller must check against the record.
func (c *Client) Locked(ctx context.Context) (*nodepb.Locked, *x509.Certificate, error) {
	r, err := c.call(ctx, requestTimeout, pathLocked, &nodepb.LockedRequest{})
	if err != nil {
		return nil, nil, err
	}
	if r.TLS == nil || len(r.TLS.PeerCertificates) == 0 {
		r.Body.Close()
		return nil, nil, fmt.Errorf("node API at %s: no certificate", c.Addr)
	}
	peer := r.TLS.PeerCertificates[0]
	var resp nodepb.Locked
	return &resp, peer, c.answer(r, &resp)
}

// Unlock sends the node the cluster unlock key, sealed to the key Locked
// gave.
func (c *Client) Unlock(ctx context.Context, sealed []byte) error {
	return c.unary(ctx, pathUnlock, &nodepb.UnlockRequest{Sealed: sealed}, &nodepb.UnlockResponse{})
}

// Recover asks a member whose cluster lost its quorum for good to become
// its only member, with its data.
func (c *Client) Recover(ctx context.Context) error {
	return c.unary(ctx, pathRecover, &nodepb.RecoverRequest{}, &nodepb.RecoverResponse{})
}

// Network sends the node network settings to try at a reboot it starts,
// and returns how long the trial boot has to reach the cluster before the
// node goes back to the settings it had.
func (c *Client) Network(ctx context.Context, n *enrolmentpb.Network) (time.Duration, error) {
	var resp nodepb.NetworkResponse
	if err := c.unary(ctx, pathNetwork, &nodepb.NetworkRequest{Network: n}, &resp); err != nil {
		return 0, err
	}
	return time.Duration(resp.GetWindowSeconds()) * time.Second, nil
}

// Enrol sends a node that has no data volume an enrolment config, which
// it takes at a reboot it starts.
func (c *Client) Enrol(ctx context.Context, config []byte) error {
	if !c.verified() {
		return errUnverified
	}
	return c.unary(ctx, pathEnrol, &nodepb.EnrolRequest{Config: config}, &nodepb.EnrolResponse{})
}

// Logs calls f with each entry req selects, and with follow each new one,
// until the node ends the stream (nil) or ctx ends (ctx's error).
func (c *Client) Logs(ctx context.Context, req *nodepb.LogsRequest, f func(*nodepb.LogEntry)) error {
	timeout := requestTimeout
	if req.GetFollow() {
		timeout = 0
	}
	r, err := c.call(ctx, timeout, pathLogs, req)
	if err != nil {
		return err
	}
	defer r.Body.Close()
	br := bufio.NewReader(r.Body)
	for {
		var e nodepb.LogEntry
		err := protodelim.UnmarshalFrom(br, &e)
		switch {
		// First: once ctx has ended, the stream may end in a clean EOF
		// as well as in an error, and the caller must learn that it was
		// cut short.
		case err != nil && ctx.Err() != nil:
			return ctx.Err()
		case errors.Is(err, io.EOF):
			return nil
		case err != nil:
			return fmt.Errorf("node API at %s: the log stream: %w", c.Addr, err)
		}
		f(&e)
	}
}
