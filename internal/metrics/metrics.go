// Package metrics is what a node tells Prometheus, and who may ask.
//
// etcd registers its own metrics with client_golang's default registry as
// it starts; the node serves them beside its own (Go's and the process's
// from the same registry) on its node API, at the path Prometheus scrapes
// by default. The node's own metrics are read, at each scrape, from the
// nodepb.Info the node API answers with, so the info, `borough health`
// and the metrics cannot disagree and no part of the node keeps a gauge
// current; the machine's memory is read from /proc/meminfo with
// Prometheus's procfs. A node's clock is given as its time
// (borough_node_time_seconds), as node_exporter does: the offset is
// Prometheus's `borough_node_time_seconds - time()`, against the
// scraper's clock.
//
// Who may scrape: the owner, and a metrics credential (credential.go).
package metrics

import (
	"errors"
	"net/http"
	"time"

	"github.com/prometheus/client_golang/prometheus"
	"github.com/prometheus/client_golang/prometheus/promhttp"
	"github.com/prometheus/procfs"

	"github.com/borough-os/borough/proto/nodepb"
)

// Path is where a node serves its metrics.
const Path = "/metrics"

// Handler serves etcd's metrics, Go's and the process's, and the node's,
// read from info at each scrape.
func Handler(info func() *nodepb.Info) http.Handler {
	reg := prometheus.NewRegistry()
	reg.MustRegister(node{info: info})
	return promhttp.HandlerFor(prometheus.Gatherers{prometheus.DefaultGatherer, reg}, promhttp.HandlerOpts{})
}

var (
	descInfo = prometheus.NewDesc("borough_node_info", "The node: its version, cluster, member, boot slot, Secure Boot and TPM.",
		[]string{"version", "cluster", "member", "boot_slot", "secure_boot", "tpm"}, nil)
	descState  = prometheus.NewDesc("borough_node_state", "The node's state (1 for the one it is in), and why it failed.", []string{"state", "failure"}, nil)
	descUptime = prometheus.NewDesc("borough_node_uptime_seconds", "Time since the node booted.", nil, nil)
	descTime   = prometheus.NewDesc("borough_node_time_seconds", "The node's clock, as Unix time.", nil, nil)
	descPhase  = prometheus.NewDesc("borough_boot_phase_seconds", "When the boot reached each phase, after the kernel started.", []string{"phase"}, nil)
	descUsed   = prometheus.NewDesc("borough_data_used_bytes", "Bytes in use on the data volume's filesystem.", nil, nil)
	descSize   = prometheus.NewDesc("borough_data_size_bytes", "Bytes of the data volume's filesystem.", nil, nil)
	descLocal  = prometheus.NewDesc("borough_escrow_local", "1 if the node's cluster unlock key is sealed on its own ESP, 0 if split among holders.", nil, nil)
	descNeeded = prometheus.NewDesc("borough_escrow_needed", "How many holders' shares give the cluster unlock key back.", nil, nil)
	descHolder = prometheus.NewDesc("borough_escrow_holders", "How many holders keep a share of the cluster unlock key.", nil, nil)
	descEpoch  = prometheus.NewDesc("borough_escrow_epoch", "The escrow's epoch: it grows each time the shares are dealt again.", nil, nil)
	descUpdate = prometheus.NewDesc("borough_update_info", "The node's last update, if any.", []string{"update"}, nil)
	descAlarm  = prometheus.NewDesc("borough_etcd_alarm", "1 for each of etcd's alarms raised on this member (NOSPACE: writes refused). etcd's own metrics give the database's size and quota.", []string{"alarm"}, nil)
	descMem    = prometheus.NewDesc("borough_memory_total_bytes", "The machine's memory.", nil, nil)
	descAvail  = prometheus.NewDesc("borough_memory_available_bytes", "The machine's memory available to start new work.", nil, nil)
)

// node collects the node's metrics from its info.
type node struct{ info func() *nodepb.Info }

func (node) Describe(ch chan<- *prometheus.Desc) {
	for _, d := range []*prometheus.Desc{descInfo, descState, descUptime, descTime, descPhase, descUsed, descSize,
		descLocal, descNeeded, descHolder, descEpoch, descUpdate, descAlarm, descMem, descAvail} {
		ch <- d
	}
}

func (n node) Collect(ch chan<- prometheus.Metric) {
	i := n.info()
	gauge := func(d *prometheus.Desc, v float64, labels ...string) {
		ch <- prometheus.MustNewConstMetric(d, prometheus.GaugeValue, v, labels...)
	}
	gauge(descInfo, 1, i.GetVersion(), i.GetCluster(), i.GetMember(), i.GetBootSlot(), i.GetSecureBoot(), yesNo(i.GetTpm()))
	gauge(descState, 1, i.GetState(), i.GetFailure())
	gauge(descUptime, time.Duration(i.GetUptimeNanos()).Seconds())
	gauge(descTime, float64(i.GetUnixNano())/1e9)
	for _, p := range i.GetTimeline() {
		gauge(descPhase, time.Duration(p.GetAtNanos()).Seconds(), p.GetName())
	}
	if i.GetDataSize() > 0 {
		gauge(descUsed, float64(i.GetDataUsed()))
		gauge(descSize, float64(i.GetDataSize()))
	}
	if e := i.GetEscrow(); e != nil {
		gauge(descLocal, boolValue(e.GetLocal()))
		gauge(descNeeded, float64(e.GetNeeded()))
		gauge(descHolder, float64(len(e.GetHolders())))
		gauge(descEpoch, float64(e.GetEpoch()))
	}
	if u := i.GetUpdate(); u != "" {
		gauge(descUpdate, 1, u)
	}
	for _, a := range i.GetSpace().GetAlarms() {
		gauge(descAlarm, 1, a)
	}
	if m, err := memory(); err == nil {
		gauge(descMem, m.total)
		gauge(descAvail, m.available)
	}
}

type mem struct{ total, available float64 }

// memory reads the machine's memory from /proc/meminfo.
func memory() (mem, error) {
	fs, err := procfs.NewDefaultFS()
	if err != nil {
		return mem{}, err
	}
	m, err := fs.Meminfo()
	if err != nil {
		return mem{}, err
	}
	if m.MemTotalBytes == nil || m.MemAvailableBytes == nil {
		return mem{}, errors.New("/proc/meminfo has no MemTotal or MemAvailable")
	}
	return mem{total: float64(*m.MemTotalBytes), available: float64(*m.MemAvailableBytes)}, nil
}

func yesNo(b bool) string {
	if b {
		return "yes"
	}
	return "no"
}

func boolValue(b bool) float64 {
	if b {
		return 1
	}
	return 0
}
