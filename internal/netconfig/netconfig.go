// Package netconfig changes a running node's network settings for its
// owner, safely: a change the node cannot reach its cluster with goes
// back by itself.
//
// The owner's change (borough node network) is written to the ESP as a
// trial (esp.NetworkTrial) and the node reboots into it: the network is
// brought up once, at boot, so a change applies as a whole or not at all.
// Before the trial boot brings its network up, it marks the trial tried;
// once the node runs in its cluster again on the new network (a
// linearizable read: a quorum answers it), the change is kept
// (esp.Network) and stands for the enrolment config's network at every
// boot. If the node has not reached its cluster within Window of the trial
// boot, it reboots; a boot that finds a tried trial (that one, or a power
// cut during the trial) drops it and comes up on the network it had. This
// is Talos's try mode, with a reboot: Borough's network, its address in
// its certificate and its peers' member list follow from a boot (package
// cluster gives a node that moved a new certificate and tells its peers).
//
// Without a change of the owner's, a boot brings up the network of the
// enrolment config the node's data volume confirmed at an earlier boot
// (esp.NetworkConfirmed, written by Confirm): the network comes up before
// the volume opens, and the ESP's copy of the config is not authenticated,
// so someone who edits it must not choose the node's addresses or its NTP
// server (a clock set back revives expired credentials). Only a node's
// first boot, or its first after an update from a Borough that kept no
// such record, brings up the ESP config's network.
//
// All three files go through the ESP's ledger (package espledger): a
// network written by someone with the disk, not by the node, is refused;
// the enrolment config's network stands for a refused change, and DHCP
// for a refused record.
package netconfig

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"log/slog"
	"os"
	"sync"
	"time"

	"google.golang.org/protobuf/proto"

	"github.com/borough-os/borough/esp"
	"github.com/borough-os/borough/internal/enrolment"
	"github.com/borough-os/borough/internal/espledger"
	"github.com/borough-os/borough/proto/enrolmentpb"
)

// Window is how long a trial boot has to reach its cluster.
const Window = time.Minute

// FromEnrolment is Settings.From for the enrolment config's network.
const FromEnrolment = "the enrolment config"

// record is a network on the ESP: the owner's settings, and for a trial
// whether a boot has tried them.
type record struct {
	Network []byte    `json:"network"`
	Asked   time.Time `json:"asked"`
	Tried   bool      `json:"tried,omitempty"`
}

// Settings are the network a boot brings up.
type Settings struct {
	Interfaces []enrolment.Interface
	NTPServers []string
	// From says where they come from: the enrolment config, the owner's
	// kept change, or a trial.
	From string
	// Trial says that this boot tries the owner's change.
	Trial bool

	ledger *espledger.Ledger
	trial  *record
	// mu guards Trial once the node runs.
	mu      sync.Mutex
	expired chan struct{}
}

// Propose checks n and writes it as the trial of the node's next boot;
// it refuses while this boot tries another.
func (s *Settings) Propose(n *enrolmentpb.Network) error {
	s.mu.Lock()
	defer s.mu.Unlock()
	if s.Trial {
		return errors.New("the node is trying network settings now: wait until it keeps them or goes back")
	}
	if _, _, err := enrolment.CheckNetwork(n); err != nil {
		return err
	}
	raw, err := proto.Marshal(n)
	if err != nil {
		return err
	}
	b, err := json.Marshal(record{Network: raw, Asked: time.Now().UTC()})
	if err != nil {
		return err
	}
	if err := s.ledger.Write(map[esp.File][]byte{esp.NetworkTrial: b}); err != nil {
		return fmt.Errorf("writing the network to try: %w", err)
	}
	return nil
}

// Load returns the network this boot brings up: a trial not yet tried,
// marked tried first; else the owner's kept change; else e's. A tried
// trial is dropped, saying so.
func Load(log *slog.Logger, l *espledger.Ledger, e *enrolment.Enrolment) (*Settings, error) {
	s := &Settings{Interfaces: e.Interfaces, NTPServers: e.NTPServers, From: FromEnrolment, ledger: l, expired: make(chan struct{})}
	trial, err := read(l.Read, esp.NetworkTrial)
	switch {
	case err != nil:
		log.Warn("ignoring the network to try", "err", err)
	case trial != nil && trial.Tried:
		log.Warn("the node did not reach its cluster on the network the owner asked it to try " +
			"(or lost power trying): dropping it and going back to the network it had")
		if err := l.Write(map[esp.File][]byte{esp.NetworkTrial: nil}); err != nil {
			return nil, fmt.Errorf("dropping the tried network: %w", err)
		}
	case trial != nil:
		trial.Tried = true
		b, err := json.Marshal(trial)
		if err != nil {
			return nil, err
		}
		if err := l.Write(map[esp.File][]byte{esp.NetworkTrial: b}); err != nil {
			return nil, fmt.Errorf("marking the network to try tried: %w", err)
		}
		s.trial, s.Trial, s.From = trial, true, "the owner's change, on trial"
		return s, s.use(log, trial)
	}
	kept, err := read(l.Read, esp.Network)
	if err != nil {
		log.Warn("ignoring the owner's network; the enrolment config's stands", "err", err)
	}
	if kept != nil {
		s.From = "the owner's change"
		return s, s.use(log, kept)
	}
	// The node's own record, from an older ledger put back too: it grants
	// nothing the node did not have, and a node whose ESP was rolled back
	// must still reach its peers to get its latest state back.
	confirmed, err := read(l.ReadOwn, esp.NetworkConfirmed)
	switch {
	case err != nil:
		log.Warn("ignoring the record of the node's confirmed network: DHCP for this boot", "err", err)
		s.Interfaces, s.NTPServers, s.From = nil, nil, "DHCP, for want of a network record the node wrote"
	case confirmed != nil:
		s.From = "the enrolment config the data volume confirmed"
		return s, s.use(log, confirmed)
	}
	return s, nil
}

// Confirm records, through the ledger, the network of e, the enrolment
// config the data volume confirmed, for later boots to bring up (the
// package doc). A record as it was is not written again.
func Confirm(l *espledger.Ledger, e *enrolment.Enrolment) error {
	n, err := e.Network()
	if err != nil {
		return err
	}
	b, err := json.Marshal(record{Network: n})
	if err != nil {
		return err
	}
	if err := l.Write(map[esp.File][]byte{esp.NetworkConfirmed: b}); err != nil {
		return fmt.Errorf("recording the confirmed network: %w", err)
	}
	return nil
}

// use takes r's network, saying so.
func (s *Settings) use(log *slog.Logger, r *record) error {
	log.Info("network settings from " + s.From)
	var n enrolmentpb.Network
	if err := proto.Unmarshal(r.Network, &n); err != nil {
		return fmt.Errorf("the owner's network: %w", err)
	}
	ifaces, ntp, err := enrolment.CheckNetwork(&n)
	if err != nil {
		return fmt.Errorf("the owner's network: %w", err)
	}
	s.Interfaces, s.NTPServers = ifaces, ntp
	return nil
}

// read reads a network record f with a ledger's reader; nil if there is
// none.
func read(readLedger func(esp.File) ([]byte, error), f esp.File) (*record, error) {
	b, err := readLedger(f)
	if errors.Is(err, os.ErrNotExist) {
		return nil, nil
	}
	if err != nil {
		return nil, err
	}
	var r record
	if err := json.Unmarshal(b, &r); err != nil {
		return nil, fmt.Errorf("%s: %w", f, err)
	}
	return &r, nil
}

// Watch, on a trial boot, waits until healthy says the node runs in its
// cluster and keeps the trial's network; if window passes first, it
// closes Expired and calls rollBack. On any other boot it returns at once.
// It runs from the moment the network is up, beside the boot: a node
// that cannot reach its peers on the new network may never get as far as
// its services (it waits for its unlock shares), and must go back all the
// same.
func (s *Settings) Watch(ctx context.Context, log *slog.Logger, window time.Duration, healthy func(context.Context) error, rollBack func()) {
	if !s.Trial {
		return
	}
	deadline := time.Now().Add(window)
	for {
		hctx, cancel := context.WithTimeout(ctx, 10*time.Second)
		err := healthy(hctx)
		cancel()
		if err == nil {
			break
		}
		if time.Now().After(deadline) {
			log.Warn(fmt.Sprintf("the node did not reach its cluster within %v on the owner's new network: "+
				"rebooting onto the network it had", window), "err", err)
			close(s.expired)
			rollBack()
			return
		}
		select {
		case <-ctx.Done():
			return
		case <-time.After(time.Second):
		}
	}
	if err := s.keep(); err != nil {
		log.Warn("keeping the owner's new network: the next boot goes back to the network the node had", "err", err)
		return
	}
	log.Info("the node runs in its cluster on the owner's new network: keeping it")
}

// Expired is closed once a trial boot gives up on its network.
func (s *Settings) Expired() <-chan struct{} { return s.expired }

// keep makes the trial's network the one the node boots with.
func (s *Settings) keep() error {
	kept, err := json.Marshal(record{Network: s.trial.Network, Asked: s.trial.Asked})
	if err != nil {
		return err
	}
	s.mu.Lock()
	defer s.mu.Unlock()
	if err := s.ledger.Write(map[esp.File][]byte{esp.Network: kept, esp.NetworkTrial: nil}); err != nil {
		return err
	}
	s.Trial = false
	return nil
}
