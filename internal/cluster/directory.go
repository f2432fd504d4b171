package cluster

import (
	"context"
	"errors"
	"fmt"
	"os"
	"slices"
	"time"

	"github.com/borough-os/borough/datavol"
	"github.com/borough-os/borough/esp"
	"github.com/borough-os/borough/internal/atomicfile"
	"github.com/borough-os/borough/internal/consensus"
	"github.com/borough-os/borough/internal/nodestate"
)

// dataDirectory is the member directory's path on the data volume; the
// ESP's copy goes through the ledger.
func (l *local) dataDirectory() string {
	return datavol.MemberDirectory.In(l.cfg.DataRoot)
}

// readDirectory reads the data volume's directory, else the ESP's, which
// the ledger checks (package espledger).
func (l *local) readDirectory() (*nodestate.Directory, error) {
	var errs []error
	for _, read := range []struct {
		name string
		read func() ([]byte, error)
	}{
		{l.dataDirectory(), func() ([]byte, error) { return os.ReadFile(l.dataDirectory()) }},
		{string(esp.MemberDirectory), func() ([]byte, error) { return l.cfg.Ledger.Read(esp.MemberDirectory) }},
	} {
		b, err := read.read()
		if err != nil {
			errs = append(errs, err)
			continue
		}
		d, err := nodestate.ParseDirectory(read.name, b)
		if err != nil {
			errs = append(errs, err)
			continue
		}
		return d, nil
	}
	return nil, errors.Join(errs...)
}

// keepDirectory writes the directory whenever the membership changes,
// until ctx ends.
func (m *Member) keepDirectory(ctx context.Context, c *consensus.Consensus, cluster string) {
	var last *nodestate.Directory
	for {
		d := &nodestate.Directory{Cluster: cluster, Members: map[string][]string{}}
		for _, m := range c.Members() {
			if m.Name != "" {
				d.Members[m.Name] = slices.Clone(m.PeerURLs)
			}
		}
		if last == nil || !last.Same(d) {
			if err := m.writeDirectory(d); err != nil {
				m.log.Warn("writing the member directory", "err", err)
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

// writeDirectory writes d to the data volume, then to the ESP.
func (l *local) writeDirectory(d *nodestate.Directory) error {
	b, err := d.Marshal()
	if err != nil {
		return err
	}
	if err := atomicfile.Write(l.dataDirectory(), b, 0o600); err != nil {
		return fmt.Errorf("writing the member directory: %w", err)
	}
	return l.cfg.Ledger.Write(map[esp.File][]byte{esp.MemberDirectory: b})
}
