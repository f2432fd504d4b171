package main

import (
	"context"
	"time"

	"github.com/borough-os/borough/datavol"
	"github.com/borough-os/borough/internal/console"
	"github.com/borough-os/borough/internal/kmsg"
	"github.com/borough-os/borough/internal/logtree"
	"github.com/borough-os/borough/internal/storage"
	"github.com/borough-os/borough/internal/supervisor"
	"github.com/borough-os/borough/internal/timeline"
)

// The log tree's and journal's bounds: 2048 lines or 256 KiB of text a
// service in memory (make bench: under 1 MiB a service, full), and 8 MiB
// × 5 boots on the data volume.
const (
	logsPerService = 2048
	logBytes       = 256 << 10
	journalBoots   = 5
	journalBytes   = 8 << 20
)

// logs is the node's log: the tree in memory and the journal of the
// last boots.
type logs struct {
	tree    *logtree.Tree
	journal *logtree.Journal
}

func newLogs() *logs {
	return &logs{
		tree:    logtree.New(logsPerService, logBytes),
		journal: &logtree.Journal{Dir: datavol.Logs.In(storage.DataRoot), Keep: journalBoots, MaxBytes: journalBytes},
	}
}

// sink feeds the console handler's records, debug and up, to the tree.
func (l *logs) sink(r console.Record) {
	service := r.Service
	if service == "" {
		service = "node"
	}
	l.tree.Append(logtree.Entry{Time: r.Time, SinceBoot: r.SinceBoot, Service: service, Level: r.Level, Text: r.Text})
}

// kernel feeds the kernel's log to the tree.
func (l *logs) kernel() supervisor.Service {
	return supervisor.Service{Name: "kernel-log", Run: func(ctx context.Context) error {
		boot := time.Now().Add(-timeline.SinceBoot())
		return kmsg.Follow(ctx, kmsg.Path, func(r kmsg.Record) {
			l.tree.Append(logtree.Entry{Time: boot.Add(r.SinceBoot), SinceBoot: r.SinceBoot, Service: "kernel",
				Level: r.Level, Text: r.Text})
		})
	}}
}

// journalService writes this boot's log to the data volume, once mounted.
func (l *logs) journalService() supervisor.Service {
	return supervisor.Service{Name: "journal", Run: func(ctx context.Context) error {
		return l.journal.Run(ctx, l.tree)
	}}
}
