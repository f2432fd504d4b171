package main

import (
	"encoding/json"
	"net"
	"net/url"
	"os"
	"path/filepath"
	"slices"
	"strconv"
	"strings"

	"github.com/spf13/cobra"

	"github.com/borough-os/borough/internal/atomicfile"
	"github.com/borough-os/borough/internal/ports"
)

// A NODE is a node, however it is given: its member name, its etcd client
// port or its node API (HOST:PORT). Each command asks the port it needs:
// `status` a client port, `logs` a node API. A member's name is looked up
// in the directory of members the tool has seen (`borough health` keeps
// it: each member's client endpoint and node API as the owner reaches
// them, forwarded ports included); an address at the other port's
// default is the same host at this one's. Any other address is taken as
// given: a forwarded port says nothing of its kind, and an old entry for
// it could name another node since.

// entry is what the directory knows of a member.
type entry struct {
	// Client is the client endpoint the owner reached it at, API its node
	// API; URLs its client URLs as the cluster lists them.
	Client string   `json:"client,omitempty"`
	API    string   `json:"api,omitempty"`
	URLs   []string `json:"urls,omitempty"`
}

func directoryPath() string { return filepath.Join(configDir, "members.json") }

// loadDirectory reads the directory of members; empty if there is none.
func loadDirectory() map[string]entry {
	d := map[string]entry{}
	if b, err := os.ReadFile(directoryPath()); err == nil {
		_ = json.Unmarshal(b, &d)
	}
	return d
}

// rememberMembers adds members to the directory; a failure to write it
// costs names as NODE and their completion only.
func rememberMembers(members map[string]entry) {
	d := loadDirectory()
	for name, e := range members {
		d[name] = e
	}
	if b, err := json.MarshalIndent(d, "", "  "); err == nil {
		_ = os.MkdirAll(configDir, 0o700)
		_ = atomicfile.Write(directoryPath(), b, 0o600)
	}
}

// apiAddr is the node API of node.
func apiAddr(node string) string {
	if e, ok := loadDirectory()[node]; ok {
		switch {
		case e.API != "":
			return e.API
		case len(e.URLs) > 0:
			return samePlace(hostOfURL(e.URLs[0]), ports.NodeAPI, node)
		}
	}
	return otherDefault(node, ports.Client, ports.NodeAPI)
}

// clientAddr is the etcd client endpoint of node.
func clientAddr(node string) string {
	if e, ok := loadDirectory()[node]; ok {
		switch {
		case e.Client != "":
			return e.Client
		case len(e.URLs) > 0:
			return samePlace(hostOfURL(e.URLs[0]), ports.Client, node)
		}
	}
	return otherDefault(node, ports.NodeAPI, ports.Client)
}

// otherDefault is node at port want if it is an address at port other,
// the other kind's default; else node.
func otherDefault(node string, other, want int) string {
	host, port, err := net.SplitHostPort(node)
	if err != nil || port != strconv.Itoa(other) {
		return node
	}
	return net.JoinHostPort(host, strconv.Itoa(want))
}

// samePlace is host at port, or fallback without a host.
func samePlace(host string, port int, fallback string) string {
	if host == "" {
		return fallback
	}
	return net.JoinHostPort(host, strconv.Itoa(port))
}

func hostOfURL(u string) string {
	p, err := url.Parse(u)
	if err != nil {
		return ""
	}
	return p.Hostname()
}

// nodeArg says which port a command's first argument, a NODE or
// ENDPOINTS, is: the command paths that take one.
var nodeArg = map[string]func(string) string{
	"borough status": clientAddr, "borough etcd env": clientAddr, "borough cluster ticket": clientAddr,
	"borough cluster admit": clientAddr, "borough cluster backup": clientAddr, "borough node remove": clientAddr,
	"borough owner rotate": clientAddr, "borough health": clientAddr, "borough support": clientAddr,
	"borough dashboard": clientAddr,
	"borough logs":      apiAddr, "borough node info": apiAddr, "borough node reboot": apiAddr,
	"borough node poweroff": apiAddr, "borough node reset": apiAddr, "borough node unlock": apiAddr,
	"borough node network": apiAddr, "borough node enrol": apiAddr, "borough node restore": apiAddr,
	"borough cluster recover": apiAddr, "borough update": apiAddr,
}

// clusterFlag are the commands whose --cluster is client ports.
var clusterFlag = []string{"borough cluster credential", "borough cluster credential revoke", "borough cluster credential list",
	"borough cluster recover", "borough node reset", "borough node restore"}

// resolveNodes, run before every command, makes its NODE or ENDPOINTS
// (the first argument) and its --cluster the addresses of the port it
// asks, from names and the other port's default (apiAddr, clientAddr).
func resolveNodes(cmd *cobra.Command, args []string) error {
	path := cmd.CommandPath()
	resolve, ok := nodeArg[path]
	if path == "borough update" {
		if all, _ := cmd.Flags().GetBool("cluster"); all {
			resolve = clientAddr
		}
	}
	if ok && len(args) > 0 {
		args[0] = resolveEach(args[0], resolve)
	}
	if f := cmd.Flags().Lookup("cluster"); f != nil && f.Changed && slices.Contains(clusterFlag, path) {
		return f.Value.Set(resolveEach(f.Value.String(), clientAddr))
	}
	return nil
}

// resolveEach resolves each of a comma-separated list.
func resolveEach(list string, resolve func(string) string) string {
	parts := strings.Split(list, ",")
	for i, p := range parts {
		parts[i] = resolve(p)
	}
	return strings.Join(parts, ",")
}
