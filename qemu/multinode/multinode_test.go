package multinode

import (
	"context"
	"crypto/tls"
	"errors"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/borough-os/borough/internal/pki"
)

// TestLaunchSetupErrors: a launch that fails before any VM starts says
// why, returns no cluster, and leaves no LAN socket behind.
func TestLaunchSetupErrors(t *testing.T) {
	o, err := pki.NewOwner("owner", time.Now())
	if err != nil {
		t.Fatal(err)
	}
	owner := tls.Certificate{Certificate: [][]byte{o.Cert.Raw}, PrivateKey: o.Key, Leaf: o.Cert}
	for _, tc := range []struct {
		name  string
		image func(dir string) string
		owner tls.Certificate
		want  string
	}{
		{"no image", func(dir string) string { return filepath.Join(dir, "borough.img") }, owner, "./build.sh builds"},
		{"an image that does not copy", func(dir string) string { return dir }, owner, "is a directory"},
		{"no owner", func(dir string) string { return dir }, tls.Certificate{}, "holds no certificate"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			state := t.TempDir()
			c, err := Launch(context.Background(), Options{Nodes: 1, Image: tc.image(t.TempDir()), StateDir: state, Owner: tc.owner})
			if c != nil || err == nil || !strings.Contains(err.Error(), tc.want) {
				t.Errorf("Launch = %v, %v; want no cluster and an error saying %q", c, err, tc.want)
			}
			if _, err := os.Stat(filepath.Join(state, "lan.sock")); !errors.Is(err, os.ErrNotExist) {
				t.Errorf("the LAN's socket is left behind: %v", err)
			}
		})
	}
}
