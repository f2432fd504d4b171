//go:build boot

package boottest

import (
	"context"
	"encoding/json"
	"fmt"
	"net/http"
	"os"
	"os/exec"
	"os/user"
	"path/filepath"
	"strconv"
	"strings"
	"sync"
	"syscall"
	"testing"
	"time"
)

// Patroni's DCS timing (bootstrap.dcs): the leader key's TTL, the loop,
// and how long Patroni retries its DCS before its leader steps down.
const (
	patroniTTL   = 30
	patroniLoop  = 5
	patroniRetry = 10
)

// patroni is a PostgreSQL cluster run by Debian's Patroni on this host,
// its DCS a Borough cluster reached through etcd's HTTP/JSON API with an
// application credential over /service/. Its members run as the user
// postgres (PostgreSQL refuses root); a watcher polls each member's REST
// API every second and keeps what it saw.
type patroni struct {
	dir     string
	members []*pgMember
	uid     uint32
	gid     uint32

	mu      sync.Mutex
	history []pgSeen
	stop    chan struct{}
	watched sync.WaitGroup
}

// pgMember is one Patroni member and its PostgreSQL.
type pgMember struct {
	name     string
	dir      string
	restPort int
	cmd      *exec.Cmd
	log      *os.File
}

// pgSeen is one look at one member through its REST API.
type pgSeen struct {
	at       time.Time
	member   string
	role     string
	timeline int
	// streaming is how many replicas the member, as a leader, streams to.
	streaming int
}

// pgStatus is what Patroni's REST API says at /patroni.
type pgStatus struct {
	State       string `json:"state"`
	Role        string `json:"role"`
	Timeline    int    `json:"timeline"`
	Replication []struct {
		ApplicationName string `json:"application_name"`
		State           string `json:"state"`
	} `json:"replication"`
}

// startPatroni starts n Patroni members against the client ports eps,
// with the CA and credential files given; they run until life ends.
func startPatroni(t, life *testing.T, n int, eps []string, ca, cert, key string) *patroni {
	t.Helper()
	pg, err := user.Lookup("postgres")
	if err != nil {
		t.Fatalf("Patroni runs PostgreSQL as the user postgres (Debian's postgresql-15): %v", err)
	}
	uid, _ := strconv.ParseUint(pg.Uid, 10, 32)
	gid, _ := strconv.ParseUint(pg.Gid, 10, 32)
	dir, err := os.MkdirTemp("", "patroni-")
	if err != nil {
		t.Fatal(err)
	}
	p := &patroni{dir: dir, uid: uint32(uid), gid: uint32(gid), stop: make(chan struct{})}
	life.Cleanup(func() {
		p.shutdown()
		if life.Failed() {
			p.printLogs(life)
		}
		os.RemoveAll(dir)
	})
	creds := map[string]string{"ca.pem": ca, "client.pem": cert, "client-key.pem": key}
	for name, src := range creds {
		p.copyFile(t, src, name)
	}
	p.chown(t, dir)
	for i := range n {
		m := &pgMember{name: fmt.Sprintf("pg%d", i+1), dir: filepath.Join(dir, fmt.Sprintf("pg%d", i+1)), restPort: freePort(t)}
		if err := os.Mkdir(m.dir, 0o700); err != nil {
			t.Fatal(err)
		}
		p.chown(t, m.dir)
		p.writeConfig(t, m, freePort(t), eps)
		p.members = append(p.members, m)
		p.start(t, m)
	}
	p.watched.Add(1)
	go p.watch()
	return p
}

// writeConfig writes member m's Patroni configuration.
func (p *patroni) writeConfig(t *testing.T, m *pgMember, pgPort int, eps []string) {
	t.Helper()
	cfg := fmt.Sprintf(`scope: borough-test
namespace: /service/
name: %[1]s
restapi:
  listen: 127.0.0.1:%[2]d
  connect_address: 127.0.0.1:%[2]d
etcd3:
  hosts: %[3]s
  protocol: https
  cacert: %[4]s/ca.pem
  cert: %[4]s/client.pem
  key: %[4]s/client-key.pem
  use_proxies: true
bootstrap:
  dcs:
    ttl: %[7]d
    loop_wait: %[8]d
    retry_timeout: %[9]d
    maximum_lag_on_failover: 1048576
    postgresql:
      use_pg_rewind: true
      parameters:
        wal_log_hints: "on"
  initdb:
    - encoding: UTF8
postgresql:
  listen: 127.0.0.1:%[5]d
  connect_address: 127.0.0.1:%[5]d
  data_dir: %[6]s/data
  bin_dir: /usr/lib/postgresql/15/bin
  pgpass: %[6]s/pgpass
  authentication:
    superuser: {username: postgres, password: borough-test}
    replication: {username: replicator, password: borough-test}
    rewind: {username: rewinder, password: borough-test}
  parameters:
    unix_socket_directories: %[6]s
  pg_hba:
    - local all all trust
    - host all all 127.0.0.1/32 md5
    - host replication replicator 127.0.0.1/32 md5
`, m.name, m.restPort, strings.Join(eps, ","), p.dir, pgPort, m.dir, patroniTTL, patroniLoop, patroniRetry)
	path := filepath.Join(m.dir, "patroni.yml")
	if err := os.WriteFile(path, []byte(cfg), 0o600); err != nil {
		t.Fatal(err)
	}
	p.chown(t, path)
}

// start starts member m's Patroni, in a process group of its own, its
// output appended to its log.
func (p *patroni) start(t *testing.T, m *pgMember) {
	t.Helper()
	log, err := os.OpenFile(filepath.Join(m.dir, "patroni.log"), os.O_CREATE|os.O_APPEND|os.O_WRONLY, 0o644)
	if err != nil {
		t.Fatal(err)
	}
	cmd := exec.Command("patroni", filepath.Join(m.dir, "patroni.yml"))
	cmd.Dir, cmd.Stdout, cmd.Stderr = m.dir, log, log
	cmd.Env = []string{"PATH=/usr/bin:/bin", "HOME=" + m.dir, "LANG=C.UTF-8"}
	cmd.SysProcAttr = &syscall.SysProcAttr{Setpgid: true, Credential: &syscall.Credential{Uid: p.uid, Gid: p.gid}}
	if err := cmd.Start(); err != nil {
		t.Fatalf("starting Patroni %s: %v", m.name, err)
	}
	m.cmd, m.log = cmd, log
}

// kill kills member m as a power cut would: Patroni and its PostgreSQL,
// which Patroni starts in a session of its own.
func (p *patroni) kill(m *pgMember) {
	if m.cmd == nil {
		return
	}
	syscall.Kill(-m.cmd.Process.Pid, syscall.SIGKILL)
	if pid, err := os.ReadFile(filepath.Join(m.dir, "data", "postmaster.pid")); err == nil {
		first, _, _ := strings.Cut(string(pid), "\n")
		if n, err := strconv.Atoi(strings.TrimSpace(first)); err == nil {
			syscall.Kill(-n, syscall.SIGKILL)
			syscall.Kill(n, syscall.SIGKILL)
		}
	}
	m.cmd.Wait()
	m.log.Close()
	m.cmd = nil
}

// shutdown stops the watcher and kills every member.
func (p *patroni) shutdown() {
	select {
	case <-p.stop:
	default:
		close(p.stop)
	}
	p.watched.Wait()
	for _, m := range p.members {
		p.kill(m)
	}
}

// watch polls each member's REST API every second until shutdown.
func (p *patroni) watch() {
	defer p.watched.Done()
	hc := &http.Client{Timeout: 2 * time.Second}
	tick := time.NewTicker(time.Second)
	defer tick.Stop()
	for {
		select {
		case <-p.stop:
			return
		case <-tick.C:
		}
		for _, m := range p.members {
			seen := pgSeen{at: time.Now(), member: m.name, role: "down"}
			if st, err := status(hc, m.restPort); err == nil {
				seen.role, seen.timeline = st.Role, st.Timeline
				for _, r := range st.Replication {
					if r.State == "streaming" {
						seen.streaming++
					}
				}
			}
			p.mu.Lock()
			p.history = append(p.history, seen)
			p.mu.Unlock()
		}
	}
}

// status asks the member at restPort for its status.
func status(hc *http.Client, restPort int) (pgStatus, error) {
	var st pgStatus
	resp, err := hc.Get("http://127.0.0.1:" + strconv.Itoa(restPort) + "/patroni")
	if err != nil {
		return st, err
	}
	defer resp.Body.Close()
	return st, json.NewDecoder(resp.Body).Decode(&st)
}

// leading says whether a role is a PostgreSQL leader's.
func leading(role string) bool { return role == "master" || role == "primary" }

// since is what the watcher saw from t on.
func (p *patroni) since(from time.Time) []pgSeen {
	p.mu.Lock()
	defer p.mu.Unlock()
	var seen []pgSeen
	for _, s := range p.history {
		if !s.at.Before(from) {
			seen = append(seen, s)
		}
	}
	return seen
}

// latest is the last look at each member.
func (p *patroni) latest() map[string]pgSeen {
	p.mu.Lock()
	defer p.mu.Unlock()
	last := map[string]pgSeen{}
	for _, s := range p.history {
		last[s.member] = s
	}
	return last
}

// awaitLeader waits until one member leads and streams to want replicas,
// and returns it.
func (p *patroni) awaitLeader(t *testing.T, want int, timeout time.Duration) *pgMember {
	t.Helper()
	var leader *pgMember
	err := waitUntil(timeout, func() error {
		leader = nil
		for name, s := range p.latest() {
			if leading(s.role) && s.streaming >= want {
				leader = p.member(name)
			}
		}
		if leader == nil {
			return fmt.Errorf("no PostgreSQL leader streaming to %d replicas: %v", want, p.latest())
		}
		return nil
	})
	if err != nil {
		t.Fatal(err)
	}
	return leader
}

func (p *patroni) member(name string) *pgMember {
	for _, m := range p.members {
		if m.name == name {
			return m
		}
	}
	return nil
}

// changes lists, from the watcher's history since from, each change of a
// member's role or timeline, and any moment two members led at once.
func (p *patroni) changes(from time.Time) (changes []string, twoLeaders bool) {
	last := map[string]pgSeen{}
	leaders := map[string]bool{}
	for _, s := range p.since(from) {
		if prev, ok := last[s.member]; ok && (prev.role != s.role || prev.timeline != s.timeline) && s.role != "down" {
			changes = append(changes, fmt.Sprintf("%s at %s: %s (timeline %d) -> %s (timeline %d)",
				s.member, s.at.Format("15:04:05"), prev.role, prev.timeline, s.role, s.timeline))
		}
		last[s.member] = s
		leaders[s.member] = leading(s.role)
		n := 0
		for _, l := range leaders {
			if l {
				n++
			}
		}
		twoLeaders = twoLeaders || n > 1
	}
	return changes, twoLeaders
}

// copyFile copies src into the cluster's directory as name.
func (p *patroni) copyFile(t *testing.T, src, name string) {
	t.Helper()
	b, err := os.ReadFile(src)
	if err != nil {
		t.Fatal(err)
	}
	path := filepath.Join(p.dir, name)
	if err := os.WriteFile(path, b, 0o600); err != nil {
		t.Fatal(err)
	}
	p.chown(t, path)
}

func (p *patroni) chown(t *testing.T, path string) {
	t.Helper()
	if err := os.Chown(path, int(p.uid), int(p.gid)); err != nil {
		t.Fatal(err)
	}
}

// printLogs prints the tail of each member's Patroni log.
func (p *patroni) printLogs(t *testing.T) {
	for _, m := range p.members {
		b, _ := os.ReadFile(filepath.Join(m.dir, "patroni.log"))
		lines := strings.Split(strings.TrimSpace(string(b)), "\n")
		t.Logf("Patroni %s's log, the last lines:\n%s", m.name, strings.Join(lines[max(0, len(lines)-25):], "\n"))
	}
}

// realApplications runs PostgreSQL under Patroni with the cluster as
// its DCS, as its users do: two members through the HTTP/JSON API of all three
// client ports, with an application credential over /service/. One
// leads and streams to the other; its Patroni and PostgreSQL killed, the
// other takes over, and the killed one comes back as a replica; then the
// Borough leader's power is cut, and PostgreSQL's leader stays leader
// (Borough takes writes again within Patroni's retry_timeout). A Go
// application on clientv3 (goApp) runs its election and watches across
// the same power cut. Both run on through the rolling update
// (applicationsThroughUpdate).
func (m *multi) realApplications(t *testing.T) {
	eps := m.endpoints()
	cert, key := m.credential(t, "postgres-ha", "/service/")
	p := startPatroni(t, m.t, 2, eps, m.c.CAFile, cert, key)
	start := time.Now()
	first := p.awaitLeader(t, 1, 5*time.Minute)
	t.Logf("PostgreSQL's leader %s streams to its replica %.0f s after Patroni started", first.name, time.Since(start).Seconds())

	killed := time.Now()
	p.kill(first)
	var second *pgMember
	if err := waitUntil(time.Duration(patroniTTL+2*patroniLoop)*time.Second+time.Minute, func() error {
		for name, s := range p.latest() {
			if name != first.name && leading(s.role) {
				second = p.member(name)
				return nil
			}
		}
		return fmt.Errorf("no member took over from %s: %v", first.name, p.latest())
	}); err != nil {
		t.Fatal(err)
	}
	t.Logf("%s took over %.0f s after %s was killed (leader key TTL %d s)", second.name, time.Since(killed).Seconds(), first.name, patroniTTL)
	p.start(t, first)
	if l := p.awaitLeader(t, 1, 4*time.Minute); l != second {
		t.Fatalf("after %s came back, %s leads; want %s", first.name, l.name, second.name)
	}
	if _, two := p.changes(start); two {
		t.Errorf("two PostgreSQL leaders at once: %v", p.since(start))
	}

	cert, key = m.credential(t, "elector", "/election/")
	m.app = startGoApp(t, m.t, 3, 2, "/election/", eps, m.c.CAFile, cert, key)
	time.Sleep(10 * time.Second)

	cut := time.Now()
	leader := m.leader(t)
	t.Logf("pulling the plug of Borough's leader, node%d (%s), under PostgreSQL's leader %s", leader.Index+1, leader.Name, second.name)
	leader.VM.Kill()
	if err := m.c.Restart(context.Background(), leader); err != nil {
		t.Fatal(err)
	}
	if err := m.c.WaitRunning(leader); err != nil {
		t.Fatal(err)
	}
	time.Sleep(2 * patroniLoop * time.Second)
	if changes, two := p.changes(cut); len(changes) > 0 || two {
		t.Errorf("PostgreSQL's members changed across Borough's leader power cut (two leaders: %v):\n%s", two, strings.Join(changes, "\n"))
	}
	m.pg, m.pgSince = p, time.Now()
}

// applicationsThroughUpdate checks that Patroni's cluster, running
// through the power cut and the rolling update of every Borough member,
// kept its leader (no failover, no new timeline, never two leaders), and
// that the Go application's election never had two leaders and its
// watchers saw every revision once, in order.
func (m *multi) applicationsThroughUpdate(t *testing.T) {
	if m.pg == nil || m.app == nil {
		t.Fatal("the applications are not running: the case \"patroni and clientv3\" failed")
	}
	m.pg.awaitLeader(t, 1, time.Minute)
	changes, two := m.pg.changes(m.pgSince)
	if len(changes) > 0 || two {
		t.Errorf("PostgreSQL's members changed during Borough's rolling update (two leaders: %v):\n%s", two, strings.Join(changes, "\n"))
	}
	t.Logf("PostgreSQL's leader kept through the rolling update: %d looks at its members, no change", len(m.pg.since(m.pgSince)))
	m.pg.shutdown()
	m.app.check(t, m.client(t, m.c.Nodes[:3]...))
}
