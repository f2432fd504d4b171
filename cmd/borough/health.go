package main

import (
	"context"
	"fmt"
	"io"
	"slices"
	"strings"
	"text/tabwriter"
	"time"

	"github.com/spf13/cobra"
	clientv3 "go.etcd.io/etcd/client/v3"

	"github.com/borough-os/borough/internal/admin"
	"github.com/borough-os/borough/internal/lifecycle"
	"github.com/borough-os/borough/internal/nodeapi"
	"github.com/borough-os/borough/proto/nodepb"
)

// maxLag is how many entries behind its leader's a member's raft log may
// be before health calls it unhealthy.
const maxLag = 1000

// defaultClockOffset is how far from the owner's a member's clock may be
// before health calls it unhealthy: etcd's own warning between peers. A
// machine without NTP keeps its RTC's, set to the second.
const defaultClockOffset = time.Second

func healthCommand() *cobra.Command {
	var fingerprint, output string
	var addrs []string
	var timeout, maxClock time.Duration
	c := &cobra.Command{
		Use:   "health ENDPOINTS",
		Short: "Show every member of the cluster at ENDPOINTS (client ports, comma-separated) in one table; exit 1 if one is unhealthy",
		Long: `health asks the cluster for its members and each member for its state: on its
client port (one of ENDPOINTS), its raft index and how far it lags its
leader, its database's size and alarms; on its node API (its client URL's
host, port 7835, or --api NAME=HOST:PORT), its version and boot slot, its
state, its last update, its clock against yours, its data volume's use and
where its unlock key is. A member is unhealthy if either port does not
answer, it has an alarm, it lags by more than 1000 entries, it is not
Running, or its clock is off by more than --max-clock-offset (a second:
etcd's own warning between peers); health then exits with status 1,
naming each and why.`,
		Args: cobra.ExactArgs(1),
		RunE: func(cmd *cobra.Command, args []string) error {
			if err := checkOutput(output); err != nil {
				return err
			}
			given, err := apiAddrs(addrs)
			if err != nil {
				return err
			}
			return health(cmd.OutOrStdout(), strings.Split(args[0], ","), fingerprint, given, timeout, maxClock, output)
		},
	}
	c.Flags().StringVar(&fingerprint, "fingerprint", "", "the cluster CA's fingerprint; needed on first use")
	c.Flags().StringArrayVar(&addrs, "api", nil, "NAME=HOST:PORT: the node API of member NAME (repeat for each)")
	c.Flags().DurationVar(&timeout, "timeout", 10*time.Second, "how long to wait for the cluster and each member")
	c.Flags().DurationVar(&maxClock, "max-clock-offset", defaultClockOffset, "how far a member's clock may be from yours")
	addOutput(c, &output)
	return c
}

// memberHealth is one member's row of `borough health`.
type memberHealth struct {
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
	// urls are its client URLs, as the cluster lists them.
	urls []string
}

// clusterHealth is what `borough health` prints.
type clusterHealth struct {
	ClusterID string         `json:"cluster_id"`
	Healthy   bool           `json:"healthy"`
	Members   []memberHealth `json:"members"`
}

func health(stdout io.Writer, endpoints []string, fingerprint string, given map[string]string, timeout, maxClock time.Duration, output string) error {
	s, err := openSession(endpoints, fingerprint, given)
	if err != nil {
		return err
	}
	defer s.close()
	ctx, cancel := context.WithTimeout(context.Background(), timeout)
	defer cancel()
	h, err := s.health(ctx, maxClock)
	if err != nil {
		return err
	}
	if output == outputJSON {
		err = printJSON(stdout, h)
	} else {
		h.print(stdout)
	}
	if err != nil || h.Healthy {
		return err
	}
	return h.unhealthy()
}

// session is the owner's connection to a cluster: its etcd, and clients
// of its members' node APIs.
type session struct {
	endpoints []string
	etcd      *clientv3.Client
	clients   memberClients
}

// openSession connects to the cluster at endpoints as the owner,
// verifying it against the CA pinned for the first.
func openSession(endpoints []string, fingerprint string, given map[string]string) (*session, error) {
	ca, err := pinnedCA(endpoints[0], fingerprint)
	if err != nil {
		return nil, err
	}
	kp, err := ownerKeyPair()
	if err != nil {
		return nil, err
	}
	etcd, err := admin.Connect(endpoints, ca, kp)
	if err != nil {
		return nil, err
	}
	return &session{endpoints: endpoints, etcd: etcd, clients: memberClients{given: given, owner: kp, ca: ca}}, nil
}

func (s *session) close() { s.etcd.Close() }

// health reads every member's health, on its client port and its node
// API; maxClock is how far its clock may be from the owner's.
func (s *session) health(ctx context.Context, maxClock time.Duration) (*clusterHealth, error) {
	h, err := readHealth(ctx, s.etcd, s.endpoints)
	if err != nil {
		return nil, fmt.Errorf("the cluster at %s does not answer (no quorum, or down): %w", strings.Join(s.endpoints, ","), err)
	}
	for i := range h.Members {
		m := &h.Members[i]
		if c, err := s.clients.client(m.Name, m.urls); err == nil {
			m.ask(ctx, c)
		} else {
			m.Problems = append(m.Problems, "node API: "+err.Error())
		}
		m.judge(maxClock)
	}
	h.judgeEscrow()
	seen := map[string]entry{}
	for _, m := range h.Members {
		seen[m.Name] = entry{Client: m.Endpoint, API: m.API, URLs: m.urls}
	}
	rememberMembers(seen)
	h.Healthy = true
	for _, m := range h.Members {
		h.Healthy = h.Healthy && len(m.Problems) == 0
	}
	return h, nil
}

// readHealth reads the members and what their client ports among
// endpoints say.
func readHealth(ctx context.Context, etcd *clientv3.Client, endpoints []string) (*clusterHealth, error) {
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
	h := &clusterHealth{ClusterID: fmt.Sprintf("%x", list.Header.ClusterId)}
	for _, m := range list.Members {
		mh := memberHealth{Name: m.Name, ID: fmt.Sprintf("%x", m.ID), Learner: m.IsLearner, Leader: m.ID == leader, urls: m.ClientURLs}
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

// ask asks m's node API for what it says of itself.
func (m *memberHealth) ask(ctx context.Context, c *nodeapi.Client) {
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

// judge adds what makes m unhealthy, beyond a port that did not answer;
// maxClock is how far its clock may be from the owner's.
func (m *memberHealth) judge(maxClock time.Duration) {
	if len(m.Alarms) > 0 {
		m.Problems = append(m.Problems, "alarms: "+strings.Join(m.Alarms, ",")+m.spaceText())
	}
	if m.Lag > maxLag {
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
func (m *memberHealth) spaceText() string {
	if !slices.Contains(m.Alarms, "NOSPACE") {
		return ""
	}
	return fmt.Sprintf(" (writes refused: database %s, %s in use, quota %s; %s free on its volume)",
		mib(m.DBSize), mib(m.DBInUse), mib(m.Quota), mib(m.VolumeFree))
}

// print prints h as a table.
func (h *clusterHealth) print(stdout io.Writer) {
	fmt.Fprintf(stdout, "cluster %s: %d members\n", h.ClusterID, len(h.Members))
	w := tabwriter.NewWriter(stdout, 0, 4, 2, ' ', 0)
	fmt.Fprintln(w, "MEMBER\tROLE\tRAFT (LAG)\tDB (IN USE) OF QUOTA\tVERSION\tSTATE\tCLOCK\tDATA\tUNLOCK KEY\tPROBLEMS")
	for _, m := range h.Members {
		role := roleText(m.Learner, m.Leader)
		problems := "-"
		if len(m.Problems) > 0 {
			problems = strings.Join(m.Problems, "; ")
		}
		fmt.Fprintf(w, "%s\t%s\t%d (%d)\t%s (%s) of %s\t%s %s\t%s\t%+.3f s\t%s of %s\t%s\t%s\n", m.Name, role, m.RaftIndex, m.Lag,
			mib(m.DBSize), mib(m.DBInUse), mib(m.Quota), m.Version, m.Slot, m.State, m.ClockOffset, mib(int64(m.DataUsed)), mib(int64(m.DataSize)),
			escrowText(m.Escrow, m.HoldersUp), problems)
	}
	w.Flush()
}

// unhealthy is the error health exits with when a member is unhealthy.
func (h *clusterHealth) unhealthy() error {
	var bad []string
	for _, m := range h.Members {
		if len(m.Problems) > 0 {
			bad = append(bad, m.Name+" ("+strings.Join(m.Problems, "; ")+")")
		}
	}
	return fmt.Errorf("%d of %d members unhealthy: %s", len(bad), len(h.Members), strings.Join(bad, ", "))
}

// judgeEscrow counts, for each member whose unlock key its peers hold,
// the holders that run as members: with fewer than it needs, it would
// not unlock at its next boot without its owner.
func (h *clusterHealth) judgeEscrow() {
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

// escrowText says where a member's unlock key is, and how many of its
// holders run.
func escrowText(e *nodepb.Escrow, up int) string {
	switch {
	case e == nil:
		return "?"
	case e.GetLocal():
		return "sealed on its ESP"
	}
	return fmt.Sprintf("%d of %d holders up, %d needed (epoch %d)", up, len(e.GetHolders()), e.GetNeeded(), e.GetEpoch())
}
