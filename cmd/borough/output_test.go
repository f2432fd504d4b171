package main

import (
	"context"
	"crypto/tls"
	"crypto/x509"
	"encoding/json"
	"errors"
	"log/slog"
	"net"
	"strings"
	"testing"

	"github.com/borough-os/borough/internal/nodeapi"
	"github.com/borough-os/borough/proto/nodepb"
)

// TestOutput: `node info -o json` prints the node's answer as one JSON
// object, with the fields named as in the API; a format that is neither
// text nor json is refused by name before anything is asked.
func TestOutput(t *testing.T) {
	owner, _, _ := twoOwners(t)
	s := &nodeapi.Server{
		Owner:    func() *x509.Certificate { return owner.Leaf },
		Identity: func() (*tls.Certificate, error) { return nil, errors.New("none yet") },
		Info: func() *nodepb.Info {
			return &nodepb.Info{Version: "1.2.3", State: "Running", Cluster: "prod", Member: "node-00000001"}
		},
		Log: slog.New(slog.DiscardHandler),
	}
	l, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	go s.Serve(ctx, l)
	var out strings.Builder
	if err := run([]string{"--config", configDir, "node", "info", l.Addr().String(), "--unverified", "-o", "json"}, &out, &out); err != nil {
		t.Fatal(err)
	}
	var info map[string]any
	if err := json.Unmarshal([]byte(out.String()), &info); err != nil {
		t.Fatalf("node info -o json printed %q: %v", out.String(), err)
	}
	if info["version"] != "1.2.3" || info["state"] != "Running" || info["member"] != "node-00000001" {
		t.Errorf("node info -o json = %v", info)
	}
	for _, args := range [][]string{
		{"node", "info", l.Addr().String(), "--unverified", "-o", "yaml"},
		{"status", "127.0.0.1:1", "-o", "yaml"},
	} {
		err := run(append([]string{"--config", configDir}, args...), &out, &out)
		if err == nil || !strings.Contains(err.Error(), `-o "yaml": want text or json`) {
			t.Errorf("%s = %v, want a refusal of the format", strings.Join(args, " "), err)
		}
	}
}
