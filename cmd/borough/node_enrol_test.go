package main

import (
	"context"
	"crypto/tls"
	"crypto/x509"
	"errors"
	"log/slog"
	"net"
	"path/filepath"
	"strings"
	"sync/atomic"
	"testing"

	"github.com/borough-os/borough/internal/nodeapi"
	"github.com/borough-os/borough/proto/nodepb"
)

// TestEnrolOnlyToItsKey poses as a node that waits for a config, as a
// machine at the node's address would: the config, whose ticket makes a
// member of whoever holds it, goes to nobody unverified, and to nobody
// presenting another key than the one the node printed.
func TestEnrolOnlyToItsKey(t *testing.T) {
	owner, _, _ := twoOwners(t)
	cfg := filepath.Join(t.TempDir(), "first.pb")
	var out strings.Builder
	if err := run([]string{"--config", configDir, "enrolment", "bootstrap", "--cluster", "prod", "--out", cfg}, &out, &out); err != nil {
		t.Fatalf("%v\n%s", err, out.String())
	}
	node, impostor := waitingNode(t, owner), waitingNode(t, owner)
	key, err := node.NodeKey()
	if err != nil {
		t.Fatal(err)
	}
	for _, tc := range []struct {
		name    string
		server  *waiting
		flags   []string
		wantErr string
	}{
		{"unverified", node, []string{"--unverified"}, "goes only to a node checked"},
		{"no key, no CA pinned", node, nil, "--node-key"},
		{"a malformed key", node, []string{"--node-key", "sha256:XYZ"}, `--node-key: node key "sha256:XYZ"`},
		{"another machine at the node's address", impostor, []string{"--node-key", key}, "not " + key},
		{"the node", node, []string{"--node-key", key}, ""},
	} {
		t.Run(tc.name, func(t *testing.T) {
			before := tc.server.configs.Load()
			args := append([]string{"--config", configDir, "node", "enrol", tc.server.addr, cfg}, tc.flags...)
			err := run(args, &out, &out)
			got := tc.server.configs.Load() - before
			if tc.wantErr != "" {
				if err == nil || !strings.Contains(err.Error(), tc.wantErr) {
					t.Errorf("enrol = %v, want an error saying %q", err, tc.wantErr)
				}
				if got != 0 {
					t.Errorf("the config reached the node API at %s", tc.server.addr)
				}
				return
			}
			if err != nil || got != 1 {
				t.Errorf("enrol = %v; the node took %d configs", err, got)
			}
		})
	}
}

// waiting is a node API of a node without a cluster, which counts the
// configs it is sent.
type waiting struct {
	*nodeapi.Server
	addr    string
	configs atomic.Int32
}

func waitingNode(t *testing.T, owner tls.Certificate) *waiting {
	t.Helper()
	w := &waiting{}
	w.Server = &nodeapi.Server{
		Owner:    func() *x509.Certificate { return owner.Leaf },
		Identity: func() (*tls.Certificate, error) { return nil, errors.New("no cluster yet") },
		Enrol:    func([]byte) error { w.configs.Add(1); return nil },
		Power:    func(nodepb.PowerRequest_Action) {},
		Log:      slog.New(slog.DiscardHandler),
	}
	l, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	w.addr = l.Addr().String()
	ctx, cancel := context.WithCancel(context.Background())
	t.Cleanup(cancel)
	go w.Serve(ctx, l)
	return w
}
