package consensus

import (
	"strconv"

	"github.com/prometheus/client_golang/prometheus"
)

// connectedPeers are the members this member has a live raft connection
// to, read from etcd's own gauge of them (etcd_network_active_peers,
// labelled by the local and the remote member), which etcd keeps in
// the process's default registry: etcd's server has no call that says
// it, and the gauge is what its own quorum checks watch.
func (c *Consensus) connectedPeers() map[uint64]bool {
	// Gather returns what it could gather beside any collector's error,
	// and etcd's gauge is all this needs of it.
	families, _ := prometheus.DefaultGatherer.Gather()
	self := strconv.FormatUint(c.MemberID(), 16)
	peers := map[uint64]bool{}
	for _, f := range families {
		if f.GetName() != "etcd_network_active_peers" {
			continue
		}
		for _, m := range f.GetMetric() {
			labels := map[string]string{}
			for _, l := range m.GetLabel() {
				labels[l.GetName()] = l.GetValue()
			}
			id, err := strconv.ParseUint(labels["Remote"], 16, 64)
			if labels["Local"] == self && err == nil && m.GetGauge().GetValue() > 0 {
				peers[id] = true
			}
		}
	}
	return peers
}
