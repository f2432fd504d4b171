package main

import (
	"os/exec"
	"path/filepath"
	"runtime"
	"strings"
	"testing"
)

// TestLinksNoNodeMachinery keeps the owner's tool apart from the node's
// machinery: it reads state names and ports from leaf packages, and must
// link neither etcd's server nor the code that runs a member, opens a
// volume or talks to a TPM.
func TestLinksNoNodeMachinery(t *testing.T) {
	out, err := exec.Command(filepath.Join(runtime.GOROOT(), "bin", "go"), "list", "-deps", ".").Output()
	if err != nil {
		t.Fatalf("go list -deps: %v", err)
	}
	deps := strings.Fields(string(out))
	for _, forbidden := range []string{
		"go.etcd.io/etcd/server/v3/etcdserver",
		"go.etcd.io/etcd/server/v3/embed",
		"github.com/borough-os/borough/internal/consensus",
		"github.com/borough-os/borough/internal/cluster",
		"github.com/borough-os/borough/internal/clusterkey",
		"github.com/borough-os/borough/internal/storage",
		"github.com/borough-os/borough/internal/tpm",
		"github.com/borough-os/borough/internal/seals",
		"github.com/borough-os/borough/internal/espledger",
	} {
		for _, d := range deps {
			if d == forbidden {
				t.Errorf("the owner's tool links %s", forbidden)
			}
		}
	}
}
