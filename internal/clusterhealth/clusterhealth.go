// Package clusterhealth is the owner's view of a cluster's health:
// each member as its client port and its node API describe it, and what
// makes it unhealthy (a port that does not answer, an alarm, a lag, a
// state other than Running, a clock off, an unlock key fewer holders hold
// than it needs). The owner's tool prints it (`borough health`), redraws
// it (`borough dashboard`) and keeps it in support bundles.
package clusterhealth

import (
	"context"
	"fmt"
	"slices"
	"strings"
	"time"

	clientv3 "go.etcd.io/etcd/client/v3"

	"github.com/borough-os/borough/internal/admin"
	"github.com/borough-os/borough/internal/lifecycle"
	"github.com/borough-os/borough/internal/nodeapi"
	"github.com/borough-os/borough/proto/nodepb"
)

// MaxLag is how many entries behind its leader's a member's raft log may
// be before it is unhealthy.
const MaxLag = 1000

// DefaultClockOffset is how far from the owner's a member's clock may be
// before it is unhealthy: etcd's own warning between peers. A machine
// without NTP keeps its RTC's, set to the second.
const DefaultClockOffset = time.Second

// Member is what the owner's tool learns of one member, and what it
// finds wrong with it.
type Member struct {
	Name      string `json:"name"`
	ID        string `json:"id"`
	Learner   bool   `json:"learner"`
	Leader    bool   `json:"leader"`
	Endpoint  string `json:"endpoint,omitempty"`
	RaftIndex uint64 `json:"raft_index"`
	Lag       uint64 `json:"lag"`
	DBSize    int64  `json:"db_size"`
	DBInUse   int64  `json:"db_in_use"`
	// Quota and VolumeFree are what the member last reported of its
	// space (keyspace.SpaceReport): etcd's quota, and what is free on
	// its data volume.
	Quota       int64          `json:"quota,omitempty"`
	VolumeFree  int64          `json:"volume_free,omitempty"`
	Alarms      []string       `json:"alarms,omitempty"`
	API         string         `json:"api,omitempty"`
	Version     string         `json:"version,omitempty"`
	Slot        string         `json:"boot_slot,omitempty"`
	State       string         `json:"state,omitempty"`
	Update      string         `json:"update,omitempty"`
	ClockOffset float64        `json:"clock_offset_seconds"`
	DataUsed    uint64         `json:"data_used"`
	DataSize    uint64         `json:"data_size"`
	Escrow      *nodepb.Escrow `json:"escrow,omitempty"`
	// HoldersUp is how many of its escrow's holders run, as members.
	HoldersUp int      `json:"escrow_holders_up"`
	Problems  []string `json:"problems,omitempty"`
	// URLs are its client URLs, as the cluster lists them.
	URLs []string `json:"-"`
}

// Cluster is what the owner's tool learns of a cluster's members.
type Cluster struct {
	ClusterID string   `json:"cluster_id"`
	Healthy   bool     `json:"healthy"`
	Members   []Member `json:"members"`
}

// Read reads the members and what their client ports among endpoints
// say.
func Read(ctx context.Context, etcd *clientv3.Client, endpoints []string) (*Cluster, error) {
	list, err := etcd.MemberList(ctx)
	if err != nil {
		return nil, err
	}
	status := map[uint64]*clientv3.StatusResponse{}
	endpointOf := map[uint64]string{}
	var leader uint64
	for _, ep := range endpoints {
		st, err := etcd.Status(ctx, "https://"+ep)
		if err != nil {
			continue
		}
		status[st.Header.MemberId], endpointOf[st.Header.MemberId], leader = st, ep, st.Leader
	}
	alarms, err := etcd.AlarmList(ctx)
	if err != nil {
		return nil, err
	}
	space, err := admin.SpaceReports(ctx, etcd)
	if err != nil {
		return nil, err
	}
	h := &Cluster{ClusterID: fmt.Sprintf("%x", list.Header.ClusterId)}
	for _, m := range list.Members {
		mh := Member{Name: m.Name, ID: fmt.Sprintf("%x", m.ID), Learner: m.IsLearner, Leader: m.ID == leader, URLs: m.ClientURLs}
		for _, a := range alarms.Alarms {
			if a.MemberID == m.ID {
				mh.Alarms = append(mh.Alarms, a.Alarm.String())
			}
		}
		if st := status[m.ID]; st != nil {
			mh.Endpoint, mh.RaftIndex, mh.DBSize, mh.DBInUse = endpointOf[m.ID], st.RaftIndex, st.DbSize, st.DbSizeInUse
			if l := status[leader]; l != nil && l.RaftIndex > st.RaftIndex {
				mh.Lag = l.RaftIndex - st.RaftIndex
			}
		} else {
			mh.Problems = append(mh.Problems, "client port: none of ENDPOINTS answers for it")
		}
		if r, ok := space[m.Name]; ok {
			mh.Quota, mh.VolumeFree = r.Quota, r.Free
		}
		h.Members = append(h.Members, mh)
	}
	return h, nil
}

// Ask asks m's node API for what it says of itself.
func (m *Member) Ask(ctx context.Context, c *nodeapi.Client) {
	m.API = c.Addr
	sent := time.Now()
	info, err := c.Info(ctx)
	if err != nil {
		m.Problems = append(m.Problems, "node API: "+err.Error())
		return
	}
	mid := sent.Add(time.Since(sent) / 2)
	m.Version, m.Slot, m.State, m.Update = info.GetVersion(), info.GetBootSlot(), info.GetState(), info.GetUpdate()
	m.ClockOffset = time.Unix(0, info.GetUnixNano()).Sub(mid).Seconds()
	m.DataUsed, m.DataSize, m.Escrow = info.GetDataUsed(), info.GetDataSize(), info.GetEscrow()
}

// Judge adds what makes m unhealthy, beyond a port that did not answer;
// maxClock is how far its clock may be from the owner's.
func (m *Member) Judge(maxClock time.Duration) {
	if len(m.Alarms) > 0 {
		m.Problems = append(m.Problems, "alarms: "+strings.Join(m.Alarms, ",")+m.spaceText())
	}
	if m.Lag > MaxLag {
		m.Problems = append(m.Problems, fmt.Sprintf("raft log %d entries behind its leader's", m.Lag))
	}
	if m.State != "" && m.State != string(lifecycle.Running) {
		m.Problems = append(m.Problems, "state "+m.State)
	}
	if off := time.Duration(m.ClockOffset * float64(time.Second)); m.State != "" && (off > maxClock || off < -maxClock) {
		m.Problems = append(m.Problems, fmt.Sprintf("clock %+.1f s from yours", m.ClockOffset))
	}
}

// spaceText says, for a member with etcd's space alarm, how full it is.
func (m *Member) spaceText() string {
	if !slices.Contains(m.Alarms, "NOSPACE") {
		return ""
	}
	return fmt.Sprintf(" (writes refused: database %s, %s in use, quota %s; %s free on its volume)",
		mib(m.DBSize), mib(m.DBInUse), mib(m.Quota), mib(m.VolumeFree))
}

// Unhealthy names each unhealthy member and why.
func (h *Cluster) Unhealthy() error {
	var bad []string
	for _, m := range h.Members {
		if len(m.Problems) > 0 {
			bad = append(bad, m.Name+" ("+strings.Join(m.Problems, "; ")+")")
		}
	}
	return fmt.Errorf("%d of %d members unhealthy: %s", len(bad), len(h.Members), strings.Join(bad, ", "))
}

// JudgeEscrow counts, for each member whose unlock key its peers hold,
// the holders that run as members: with fewer than it needs, it would
// not unlock at its next boot without its owner.
func (h *Cluster) JudgeEscrow() {
	running := map[string]bool{}
	for _, m := range h.Members {
		running[m.Name] = m.State == string(lifecycle.Running)
	}
	for i := range h.Members {
		m := &h.Members[i]
		if m.Escrow == nil || m.Escrow.GetLocal() {
			continue
		}
		for _, holder := range m.Escrow.GetHolders() {
			if running[holder] {
				m.HoldersUp++
			}
		}
		if needed := int(m.Escrow.GetNeeded()); m.HoldersUp < needed {
			m.Problems = append(m.Problems, fmt.Sprintf("%d of the %d holders of its unlock key run, %d needed: "+
				"it would not unlock at its next boot without its owner", m.HoldersUp, len(m.Escrow.GetHolders()), needed))
		}
	}
}

// Settle says whether every member is healthy, in h.Healthy.
func (h *Cluster) Settle() {
	h.Healthy = true
	for _, m := range h.Members {
		h.Healthy = h.Healthy && len(m.Problems) == 0
	}
}

func mib(n int64) string { return fmt.Sprintf("%.1f MiB", float64(n)/(1<<20)) }

// RoleText is a member's role in words: voter or learner, and leader.
func RoleText(learner, leader bool) string {
	role := "voter"
	if learner {
		role = "learner"
	}
	if leader {
		role += ", leader"
	}
	return role
}
