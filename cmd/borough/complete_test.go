package main

import (
	"os"
	"path/filepath"
	"strings"
	"testing"

	"github.com/spf13/cobra"

	"github.com/borough-os/borough/internal/ownerkey"
)

// TestCompletion: shell completion offers the pinned addresses for a
// NODE, the members health saw for a MEMBER and --api, and -o's formats,
// through cobra's hidden __complete command, as a shell calls it.
func TestCompletion(t *testing.T) {
	dir := t.TempDir()
	configDir = dir
	pin := filepath.Join(dir, "clusters", "127.0.0.1_2379")
	if err := os.MkdirAll(pin, 0o700); err != nil {
		t.Fatal(err)
	}
	if err := os.WriteFile(filepath.Join(pin, "ca.pem"), nil, 0o600); err != nil {
		t.Fatal(err)
	}
	rememberMembers(map[string]entry{"node-b": {}, "node-a": {}})
	for _, tc := range []struct {
		args      []string
		want, not []string
	}{
		{[]string{"status", ""}, []string{"127.0.0.1:2379"}, []string{"node-a"}},
		{[]string{"logs", ""}, []string{"127.0.0.1:2379"}, nil},
		{[]string{"node", "remove", "127.0.0.1:2379", ""}, []string{"node-a", "node-b"}, []string{"127.0.0.1:2379"}},
		{[]string{"status", "-o", ""}, []string{"text", "json"}, nil},
		{[]string{"health", "--api", ""}, []string{"node-a=", "node-b="}, nil},
		{[]string{"update", "--cluster", ""}, []string{"127.0.0.1:2379"}, nil},
		{[]string{"owner", "metrics-credential", ""}, nil, []string{"node-a", "127.0.0.1:2379"}},
	} {
		t.Run(strings.Join(tc.args, " "), func(t *testing.T) {
			var out strings.Builder
			if err := run(append([]string{"--config", dir, "__complete"}, tc.args...), &out, &out); err != nil {
				t.Fatal(err)
			}
			lines := strings.Split(out.String(), "\n")
			for _, w := range tc.want {
				if !hasCandidate(lines, w) {
					t.Errorf("no %q among:\n%s", w, out.String())
				}
			}
			for _, w := range tc.not {
				if hasCandidate(lines, w) {
					t.Errorf("%q among:\n%s", w, out.String())
				}
			}
		})
	}
}

func hasCandidate(lines []string, w string) bool {
	for _, l := range lines {
		if strings.SplitN(l, "\t", 2)[0] == w {
			return true
		}
	}
	return false
}

// TestResolveNodes: a NODE given by a member's name, or at the other
// port's default, is the address of the port its command asks; a
// forwarded port is taken as given.
func TestResolveNodes(t *testing.T) {
	configDir = t.TempDir()
	t.Setenv(ownerkey.PassphraseEnv, "the owner's passphrase")
	clear(unlocked)
	if err := ownerInit(&strings.Builder{}, "me", false); err != nil {
		t.Fatal(err)
	}
	rememberMembers(map[string]entry{
		"node-a": {Client: "127.0.0.1:41000", API: "127.0.0.1:42000"},
		"node-b": {URLs: []string{"https://10.0.0.2:2379"}},
	})
	for _, tc := range []struct {
		node, api, client string
	}{
		{"node-a", "127.0.0.1:42000", "127.0.0.1:41000"},
		{"node-b", "10.0.0.2:7835", "10.0.0.2:2379"},
		{"10.0.0.9:2379", "10.0.0.9:7835", "10.0.0.9:2379"},
		{"10.0.0.9:7835", "10.0.0.9:7835", "10.0.0.9:2379"},
		{"127.0.0.1:41000", "127.0.0.1:41000", "127.0.0.1:41000"},
		{"node-unknown", "node-unknown", "node-unknown"},
	} {
		if got := apiAddr(tc.node); got != tc.api {
			t.Errorf("apiAddr(%s) = %s, want %s", tc.node, got, tc.api)
		}
		if got := clientAddr(tc.node); got != tc.client {
			t.Errorf("clientAddr(%s) = %s, want %s", tc.node, got, tc.client)
		}
	}
	// Through the commands: none has a pinned CA for the address, and
	// says which address it looked for.
	for _, tc := range []struct {
		args []string
		want string
	}{
		{[]string{"status", "node-a"}, "127.0.0.1:41000"},
		{[]string{"logs", "node-a"}, "127.0.0.1:42000"},
		{[]string{"node", "info", "10.0.0.9:2379"}, "10.0.0.9:7835"},
		{[]string{"cluster", "credential", "list", "--cluster", "node-b"}, "10.0.0.2:2379"},
	} {
		var out strings.Builder
		err := run(append([]string{"--config", configDir}, tc.args...), &out, &out)
		if err == nil || !strings.Contains(err.Error(), tc.want) {
			t.Errorf("borough %s: %v, want an error naming %s", strings.Join(tc.args, " "), err, tc.want)
		}
	}
}

// TestResolveUpdate: update takes a NODE's node API, or with --cluster
// ENDPOINTS, client ports.
func TestResolveUpdate(t *testing.T) {
	dir := t.TempDir()
	for _, tc := range []struct {
		cluster bool
		want    string
	}{{false, "127.0.0.1:42000"}, {true, "127.0.0.1:41000"}} {
		// The tree sets configDir to its flag's default.
		update, _, err := commandTree().Find([]string{"update"})
		if err != nil {
			t.Fatal(err)
		}
		configDir = dir
		rememberMembers(map[string]entry{"node-a": {Client: "127.0.0.1:41000", API: "127.0.0.1:42000"}})
		if tc.cluster {
			if err := update.Flags().Set("cluster", "true"); err != nil {
				t.Fatal(err)
			}
		}
		args := []string{"node-a", "image.img"}
		if err := resolveNodes(update, args); err != nil || args[0] != tc.want {
			t.Errorf("update (--cluster %v) node-a: %v, %v; want %s", tc.cluster, args, err, tc.want)
		}
	}
}

// TestNodeCommandPaths: every command resolveNodes names is one.
func TestNodeCommandPaths(t *testing.T) {
	paths := map[string]bool{}
	var walk func(*cobra.Command)
	walk = func(c *cobra.Command) {
		paths[c.CommandPath()] = true
		for _, sub := range c.Commands() {
			walk(sub)
		}
	}
	walk(commandTree())
	for path := range nodeArg {
		if !paths[path] {
			t.Errorf("nodeArg names %q, which is no command", path)
		}
	}
	for _, path := range clusterFlag {
		if !paths[path] {
			t.Errorf("clusterFlag names %q, which is no command", path)
		}
	}
}
