package cluster

import (
	"log/slog"
	"net"
	"sync"
	"sync/atomic"

	"github.com/borough-os/borough/datavol"
	"github.com/borough-os/borough/internal/consensus"
	"github.com/borough-os/borough/internal/lifecycle"
	"github.com/borough-os/borough/internal/pki"
	"github.com/borough-os/borough/proto/enrolmentpb"
)

// local is what the way in (Manager) and the running member (Member)
// share: the node's config, logger and lifecycle, the files it keeps of
// its cluster on the data volume and the ESP (its PKI directory, the node
// state records, the member directory, the owner's recovery request), and
// starting etcd from its data, which the way in does once and the member
// again whenever etcd must restart. Each of the two adds only its own.
type local struct {
	log  *slog.Logger
	cfg  Config
	life *lifecycle.Lifecycle
	// retimed says that the member has restarted etcd with the cluster's
	// raft timing (consensus.ErrRetime), so that it never starts alone
	// again this boot.
	retimed atomic.Bool
	// recoverNow wakes a member that starts, or runs, for the owner's
	// recovery; recovering orders a recovery's request and the start it
	// forces (recover.go).
	recoverNow chan struct{}
	recovering sync.Mutex
}

func (l *local) pause(step string) {
	if l.cfg.Pause != nil {
		l.cfg.Pause(step)
	}
}

func (l *local) mark(phase string) {
	if l.cfg.Timeline != nil {
		l.cfg.Timeline.Mark(phase)
	}
}

func (l *local) etcdDir() string { return datavol.Etcd.In(l.cfg.DataRoot) }

func (l *local) pkiFiles() consensus.Files {
	return consensus.Files{Dir: datavol.PKI.In(l.cfg.DataRoot)}
}

func (l *local) consensusConfig(name, cluster string, mode consensus.Mode) consensus.Config {
	c := consensus.Config{
		Name: name, Cluster: cluster,
		DataDir: l.etcdDir(), PKI: l.pkiFiles(), Volume: l.cfg.DataRoot,
		IP: l.cfg.IP, Mode: mode,
		Alone: l.alone(name, mode),
		Log:   l.log.With("service", "consensus"),
	}
	if l.cfg.overrides.listenOnIP {
		c.ListenIP = l.cfg.IP
	}
	c.Snapshots = l.cfg.overrides.snapshots
	c.VolumeSize = l.cfg.VolumeSize
	return c
}

// alone says whether the member name starts in mode as its cluster's only
// member (consensus.Config.Alone): a new cluster's, or one the member
// directory lists alone, unless it has already been restarted with the
// cluster's timing (consensus.ErrRetime).
func (l *local) alone(name string, mode consensus.Mode) bool {
	switch {
	case l.retimed.Load():
		return false
	case mode == consensus.ModeNew:
		return true
	case mode != consensus.ModeRestart:
		return false
	}
	d, err := l.readDirectory()
	if err != nil {
		return false
	}
	_, self := d.Members[name]
	return self && len(d.Members) == 1
}

func (l *local) ips() []net.IP {
	return []net.IP{l.cfg.IP.AsSlice(), net.IPv4(127, 0, 0, 1), net.IPv6loopback}
}

// caFingerprint reads the CA file's fingerprint, for the log.
func (l *local) caFingerprint() string {
	ca, err := l.pkiFiles().LoadCA()
	if err != nil {
		return "unknown"
	}
	return pki.Fingerprint(ca)
}

func (l *local) learnerForGood() bool {
	t := l.cfg.Enrolment.Ticket
	return t != nil && t.GetRole() == enrolmentpb.Role_ROLE_LEARNER
}
