package main

import (
	"context"
	"crypto/x509"
	"fmt"
	"io"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"time"

	"github.com/spf13/cobra"
	clientv3 "go.etcd.io/etcd/client/v3"

	"github.com/borough-os/borough/internal/admin"
	"github.com/borough-os/borough/internal/clusterhealth"
	"github.com/borough-os/borough/internal/pki"
)

// The owner learns a cluster's CA by trust on first use, checked: the
// node prints the CA's fingerprint on its console when it creates the
// cluster; the owner passes it with --fingerprint the first time, the CLI
// checks the CA the node presents against it and pins that CA under the
// config directory. Later commands verify the node against the pinned CA.

func etcdCommand() *cobra.Command {
	c := &cobra.Command{Use: "etcd", Short: "Reach a cluster's etcd with the standard tools"}
	var fingerprint string
	var ttl time.Duration
	env := &cobra.Command{
		Use:   "env NODE",
		Short: "Print the ETCDCTL_* settings for etcdctl to reach NODE (HOST:PORT) as the owner, for hours",
		Long: `env prints the ETCDCTL_* settings for etcdctl to reach NODE as the owner:
an owner session, a key made for it and a certificate your owner key signs,
etcd's root until --ttl passes, in a directory of its own that only you can
read (in $XDG_RUNTIME_DIR where it is set). Your owner key itself never
lies in clear on disk. borough removes expired sessions; remove the
directory to end one here sooner. The cluster's first session (or
application credential) restarts each member's etcd once, to trust it.`,
		Args: cobra.ExactArgs(1),
		RunE: func(cmd *cobra.Command, args []string) error {
			return etcdEnv(cmd.OutOrStdout(), args[0], fingerprint, ttl)
		},
	}
	env.Flags().StringVar(&fingerprint, "fingerprint", "", "the cluster CA's fingerprint (sha256:...), from the node's console; needed on first use")
	env.Flags().DurationVar(&ttl, "ttl", 8*time.Hour, "how long the owner session is valid")
	c.AddCommand(env)
	return c
}

func statusCommand() *cobra.Command {
	var fingerprint, output string
	var timeout time.Duration
	c := &cobra.Command{
		Use:   "status NODE",
		Short: "Show the cluster's members and the status of NODE (HOST:PORT)",
		Args:  cobra.ExactArgs(1),
		RunE: func(cmd *cobra.Command, args []string) error {
			if err := checkOutput(output); err != nil {
				return err
			}
			return status(cmd.OutOrStdout(), args[0], fingerprint, timeout, output)
		},
	}
	c.Flags().StringVar(&fingerprint, "fingerprint", "", "the cluster CA's fingerprint; needed on first use")
	c.Flags().DurationVar(&timeout, "timeout", 10*time.Second, "how long to wait for NODE to answer")
	addOutput(c, &output)
	return c
}

func caPath(node string) string {
	return filepath.Join(configDir, "clusters", strings.NewReplacer(":", "_", "/", "_", "[", "", "]", "").Replace(node), "ca.pem")
}

// pinCA returns the path of node's pinned cluster CA, pinning it first if
// this is the first use of node: to the CA of --fingerprint, or without
// one, to a CA pinned for another address, if node presents its chain.
// A pin is kept by address, and trust is by cluster: another name or
// port of a node of a known cluster (localhost:2379 beside
// 127.0.0.1:2379, the node API beside the client port) needs no
// fingerprint again.
func pinCA(node, fingerprint string) (string, error) {
	path := caPath(node)
	if b, err := os.ReadFile(path); err == nil {
		ca, err := pki.ParseCertPEM(b)
		if err != nil {
			return "", fmt.Errorf("%s: %w", path, err)
		}
		if fingerprint != "" && pki.Fingerprint(ca) != fingerprint {
			return "", fmt.Errorf("the pinned CA of %s has fingerprint %s, not %s; remove %s to pin another", node, pki.Fingerprint(ca), fingerprint, path)
		}
		return path, nil
	}
	known := []string{fingerprint}
	if fingerprint == "" {
		if known = pinnedFingerprints(); len(known) == 0 {
			return "", fmt.Errorf("first use of %s: give --fingerprint with the cluster CA's fingerprint from the node's console (ca_fingerprint=sha256:...)", node)
		}
	}
	kp, err := ownerKeyPair()
	if err != nil {
		return "", err
	}
	ca, err := admin.FetchKnownCA(node, known, kp)
	if err != nil && fingerprint == "" {
		return "", fmt.Errorf("first use of %s, which is a node of no cluster pinned here: give --fingerprint with its cluster CA's fingerprint (%w)", node, err)
	}
	if err != nil {
		return "", err
	}
	if err := os.MkdirAll(filepath.Dir(path), 0o700); err != nil {
		return "", err
	}
	return path, os.WriteFile(path, pki.CertPEM(ca), 0o644)
}

// pinnedFingerprints are the fingerprints of the cluster CAs pinned here,
// each once, in order.
func pinnedFingerprints() []string {
	paths, _ := filepath.Glob(filepath.Join(configDir, "clusters", "*", "ca.pem"))
	var fps []string
	for _, path := range paths {
		b, err := os.ReadFile(path)
		if err != nil {
			continue
		}
		if ca, err := pki.ParseCertPEM(b); err == nil && !slices.Contains(fps, pki.Fingerprint(ca)) {
			fps = append(fps, pki.Fingerprint(ca))
		}
	}
	return fps
}

func etcdEnv(stdout io.Writer, node, fingerprint string, ttl time.Duration) error {
	caFile, err := pinCA(node, fingerprint)
	if err != nil {
		return err
	}
	ca, err := pki.ReadCertPEM(caFile)
	if err != nil {
		return err
	}
	s, err := ownerSession(stdout, node, ca, ttl)
	if err != nil {
		return err
	}
	sessionEnv(stdout, s, []string{"https://" + node}, caFile)
	return nil
}

// ownerClient connects to node as the owner, verifying it against its
// pinned CA.
func ownerClient(node, fingerprint string) (*clientv3.Client, error) {
	ca, err := pinnedCA(node, fingerprint)
	if err != nil {
		return nil, err
	}
	kp, err := ownerKeyPair()
	if err != nil {
		return nil, err
	}
	return admin.Connect([]string{node}, ca, kp)
}

// pinnedCA is the CA pinned for node (pinCA), parsed.
func pinnedCA(node, fingerprint string) (*x509.Certificate, error) {
	path, err := pinCA(node, fingerprint)
	if err != nil {
		return nil, err
	}
	return pki.ReadCertPEM(path)
}

// asOwner runs fn with a client of node's cluster, as the owner, and a
// context that ends after 30 s.
func asOwner(node, fingerprint string, fn func(context.Context, *clientv3.Client) error) error {
	return asOwnerFor(node, fingerprint, 30*time.Second, fn)
}

// asOwnerFor is asOwner with a context that ends after timeout, and an
// error that says so if it did: etcd's client retries a node that does
// not answer until then, silently.
func asOwnerFor(node, fingerprint string, timeout time.Duration, fn func(context.Context, *clientv3.Client) error) error {
	c, err := ownerClient(node, fingerprint)
	if err != nil {
		return err
	}
	defer c.Close()
	ctx, cancel := context.WithTimeout(context.Background(), timeout)
	defer cancel()
	err = fn(ctx, c)
	if ctx.Err() != nil {
		return fmt.Errorf("%s did not answer within %v (is it up, and is this its client port? --timeout waits longer): %w", node, timeout, err)
	}
	return err
}

func status(stdout io.Writer, node, fingerprint string, timeout time.Duration, output string) error {
	return asOwnerFor(node, fingerprint, timeout, func(ctx context.Context, c *clientv3.Client) error {
		st, err := readStatus(ctx, c, node)
		if err != nil {
			return err
		}
		if output == outputJSON {
			return printJSON(stdout, st)
		}
		st.print(stdout)
		return nil
	})
}

// clusterStatus is what `borough status` prints.
type clusterStatus struct {
	Node      string         `json:"node"`
	ClusterID string         `json:"cluster_id"`
	Version   string         `json:"etcd_version"`
	Leader    string         `json:"leader"`
	RaftIndex uint64         `json:"raft_index"`
	DBSize    int64          `json:"db_size"`
	Errors    []string       `json:"errors"`
	Members   []memberStatus `json:"members"`
}

// memberStatus is one member of a clusterStatus.
type memberStatus struct {
	ID         string   `json:"id"`
	Name       string   `json:"name"`
	Learner    bool     `json:"learner"`
	Leader     bool     `json:"leader"`
	PeerURLs   []string `json:"peer_urls"`
	ClientURLs []string `json:"client_urls"`
}

// readStatus asks node, through c, for its status and the members.
func readStatus(ctx context.Context, c *clientv3.Client, node string) (*clusterStatus, error) {
	st, err := c.Status(ctx, "https://"+node)
	if err != nil {
		return nil, fmt.Errorf("asking %s for its status: %w", node, err)
	}
	members, err := c.MemberList(ctx)
	if err != nil {
		return nil, err
	}
	out := &clusterStatus{Node: node, ClusterID: fmt.Sprintf("%x", st.Header.ClusterId), Version: st.Version,
		Leader: fmt.Sprintf("%x", st.Leader), RaftIndex: st.RaftIndex, DBSize: st.DbSize, Errors: st.Errors}
	for _, m := range members.Members {
		if m.ID == st.Leader {
			out.Leader = m.Name
		}
		out.Members = append(out.Members, memberStatus{ID: fmt.Sprintf("%x", m.ID), Name: m.Name, Learner: m.IsLearner,
			Leader: m.ID == st.Leader, PeerURLs: m.PeerURLs, ClientURLs: m.ClientURLs})
	}
	return out, nil
}

// print prints st for people.
func (st *clusterStatus) print(stdout io.Writer) {
	health := "healthy"
	if len(st.Errors) > 0 {
		health = "unhealthy: " + strings.Join(st.Errors, "; ")
	}
	fmt.Fprintf(stdout, "cluster %s, etcd %s, leader %s, raft index %d, database %d bytes; %s is %s\n",
		st.ClusterID, st.Version, st.Leader, st.RaftIndex, st.DBSize, st.Node, health)
	for _, m := range st.Members {
		role := clusterhealth.RoleText(m.Learner, m.Leader)
		name := m.Name
		if name == "" {
			name = "(not started)"
		}
		fmt.Fprintf(stdout, "member %s %s (%s) peers %s clients %s\n", m.ID, name, role,
			strings.Join(m.PeerURLs, ","), strings.Join(m.ClientURLs, ","))
	}
}
