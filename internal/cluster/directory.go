package cluster

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"net"
	"net/url"
	"os"
	"slices"
	"strconv"
	"time"

	"github.com/borough-os/borough/datavol"
	"github.com/borough-os/borough/esp"
	"github.com/borough-os/borough/internal/atomicfile"
	"github.com/borough-os/borough/internal/consensus"
	"github.com/borough-os/borough/internal/ports"
)

// The member directory is the node's own list of the cluster's members
// and their last peer URLs, kept on the ESP and the data volume while the
// member runs. A node that restarts reads it before etcd can tell it
// anything: to ask its peers whether it is still a member (a node removed
// while it was off must say so, not wait for a cluster that refuses it).

// directory is the member directory.
type directory struct {
	Cluster string `json:"cluster"`
	// Members maps member names to their peer URLs.
	Members map[string][]string `json:"members"`
}

func (mg *Manager) dataDirectory() string {
	return datavol.MemberDirectory.In(mg.cfg.DataRoot)
}

// readDirectory reads the data volume's directory, else the ESP's, which
// the ledger checks (package espledger).
func (mg *Manager) readDirectory() (*directory, error) {
	var errs []error
	for _, read := range []struct {
		name string
		read func() ([]byte, error)
	}{
		{mg.dataDirectory(), func() ([]byte, error) { return os.ReadFile(mg.dataDirectory()) }},
		{string(esp.MemberDirectory), func() ([]byte, error) { return mg.cfg.Ledger.Read(esp.MemberDirectory) }},
	} {
		b, err := read.read()
		if err != nil {
			errs = append(errs, err)
			continue
		}
		var d directory
		if err := json.Unmarshal(b, &d); err != nil {
			errs = append(errs, fmt.Errorf("%s: %w", read.name, err))
			continue
		}
		return &d, nil
	}
	return nil, errors.Join(errs...)
}

// keepDirectory writes the directory whenever the membership changes,
// until ctx ends.
func (mg *Manager) keepDirectory(ctx context.Context, c *consensus.Consensus, cluster string) {
	var last *directory
	for {
		d := &directory{Cluster: cluster, Members: map[string][]string{}}
		for _, m := range c.Members() {
			if m.Name != "" {
				d.Members[m.Name] = slices.Clone(m.PeerURLs)
			}
		}
		if last == nil || !sameDirectory(last, d) {
			if err := mg.writeDirectory(d); err != nil {
				mg.log.Warn("writing the member directory", "err", err)
			} else {
				last = d
			}
		}
		select {
		case <-ctx.Done():
			return
		case <-time.After(5 * time.Second):
		}
	}
}

func sameDirectory(a, b *directory) bool {
	if len(a.Members) != len(b.Members) {
		return false
	}
	for name, urls := range a.Members {
		if !slices.Equal(urls, b.Members[name]) {
			return false
		}
	}
	return true
}

func (mg *Manager) writeDirectory(d *directory) error {
	b, err := json.MarshalIndent(d, "", "  ")
	if err != nil {
		return err
	}
	if err := atomicfile.Write(mg.dataDirectory(), b, 0o600); err != nil {
		return fmt.Errorf("writing the member directory: %w", err)
	}
	return mg.cfg.Ledger.Write(map[esp.File][]byte{esp.MemberDirectory: b})
}

// peerEndpoints are the join endpoints of the directory's members other
// than self.
func (d *directory) peerEndpoints(self string) []string {
	var out []string
	for name, urls := range d.Members {
		if name == self {
			continue
		}
		for _, u := range urls {
			if pu, err := url.Parse(u); err == nil {
				out = append(out, net.JoinHostPort(pu.Hostname(), strconv.Itoa(ports.Join)))
			}
		}
	}
	slices.Sort(out)
	return out
}
