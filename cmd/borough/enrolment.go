package main

import (
	"bytes"
	"crypto/x509"
	"errors"
	"fmt"
	"io"
	"os"
	"strings"
	"time"

	"github.com/spf13/cobra"
	"google.golang.org/protobuf/encoding/prototext"
	"google.golang.org/protobuf/proto"

	"github.com/borough-os/borough/internal/admin"
	"github.com/borough-os/borough/internal/enrolment"
	"github.com/borough-os/borough/internal/pki"
	"github.com/borough-os/borough/internal/ticket"
	"github.com/borough-os/borough/proto/enrolmentpb"
)

func enrolmentCommand() *cobra.Command {
	c := &cobra.Command{Use: "enrolment", Short: "Write and read enrolment configs"}
	c.AddCommand(enrolmentBootstrapCommand(), enrolmentJoinCommand(), enrolmentShowCommand())
	return c
}

// nodeFlags set what every node's config has: storage and network.
type nodeFlags struct {
	noOwnerRecovery   bool
	from, out, policy string
	networkFlags
}

// networkFlags set a node's network.
type networkFlags struct {
	iface, gw4, gw6 string
	addresses, dns  []string
	links, ntp      []string
}

func (f *nodeFlags) add(c *cobra.Command) {
	c.Flags().StringVar(&f.from, "from", "", "prototext config to start from")
	c.Flags().StringVar(&f.out, "out", "enrolment.pb", "file to write")
	c.Flags().StringVar(&f.policy, "storage-policy", "", "TPM use for the data volume: best-effort, required or disabled")
	c.Flags().BoolVar(&f.noOwnerRecovery, "no-owner-recovery", false,
		"do not seal the node's unlock keys to the cluster owner's key (then nobody can open its disk alone)")
	f.networkFlags.add(c)
}

func (f *networkFlags) add(c *cobra.Command) {
	c.Flags().StringVar(&f.iface, "interface", "", "static network: the link to configure")
	c.Flags().StringSliceVar(&f.addresses, "address", nil, "static network: address with prefix length, e.g. 192.0.2.10/24 (repeatable)")
	c.Flags().StringVar(&f.gw4, "gateway4", "", "static network: IPv4 default gateway")
	c.Flags().StringVar(&f.gw6, "gateway6", "", "static network: IPv6 default gateway")
	c.Flags().StringSliceVar(&f.dns, "dns", nil, "static network: name server (repeatable)")
	c.Flags().StringSliceVar(&f.ntp, "ntp", nil, "NTP server, host or host:port, that sets the node's clock (repeatable; default: those DHCP offers)")
	c.Flags().StringArrayVar(&f.links, "link", nil, "one of several links: name=IFACE|mac=MAC, then dhcp or address=ADDR/LEN[,gateway4=GW], and advertise on exactly one; e.g. mac=52:54:00:0b:00:01,address=10.77.0.1/24,advertise (repeatable)")
}

var policies = map[string]enrolmentpb.StoragePolicy{
	"best-effort": enrolmentpb.StoragePolicy_STORAGE_POLICY_TPM_BEST_EFFORT,
	"required":    enrolmentpb.StoragePolicy_STORAGE_POLICY_TPM_REQUIRED,
	"disabled":    enrolmentpb.StoragePolicy_STORAGE_POLICY_TPM_DISABLED,
}

// start reads --from, if given.
func (f *nodeFlags) start() (*enrolmentpb.Config, error) {
	c := &enrolmentpb.Config{}
	if f.from != "" {
		b, err := os.ReadFile(f.from)
		if err != nil {
			return nil, err
		}
		if err := prototext.Unmarshal(b, c); err != nil {
			return nil, fmt.Errorf("%s: %w", f.from, err)
		}
	}
	c.Version = enrolment.Version
	return c, nil
}

// apply sets the storage and network fields the flags give.
func (f *nodeFlags) apply(c *enrolmentpb.Config) error {
	if f.policy != "" {
		p, ok := policies[f.policy]
		if !ok {
			return fmt.Errorf("--storage-policy %q: want best-effort, required or disabled", f.policy)
		}
		c.StoragePolicy = p
	}
	n, err := f.network()
	if err != nil {
		return err
	}
	switch {
	case n == nil:
	case n.GetConfig() == nil && len(n.GetInterfaces()) == 0 && c.Network != nil:
		// --ntp alone keeps the links of --from.
		c.Network.NtpServers = n.GetNtpServers()
	default:
		c.Network = n
	}
	if f.noOwnerRecovery {
		c.NoOwnerRecovery = true
	}
	return nil
}

// network returns the network the flags give; nil if they give none.
func (f *networkFlags) network() (*enrolmentpb.Network, error) {
	if len(f.addresses) > 0 && len(f.links) > 0 {
		return nil, fmt.Errorf("--address and --link are two forms of the network config: give one")
	}
	if len(f.addresses) == 0 {
		for _, fl := range []struct {
			name string
			set  bool
		}{{"--interface", f.iface != ""}, {"--gateway4", f.gw4 != ""}, {"--gateway6", f.gw6 != ""}, {"--dns", len(f.dns) > 0}} {
			if fl.set {
				return nil, fmt.Errorf("%s sets the static network, which needs --address: give it, or drop %s", fl.name, fl.name)
			}
		}
	}
	var n *enrolmentpb.Network
	if len(f.addresses) > 0 {
		n = &enrolmentpb.Network{Config: &enrolmentpb.Network_Static{Static: &enrolmentpb.Static{
			Interface: f.iface, Addresses: f.addresses, Gateway4: f.gw4, Gateway6: f.gw6, Dns: f.dns,
		}}}
	}
	if len(f.links) > 0 {
		n = &enrolmentpb.Network{}
		for _, spec := range f.links {
			l, err := parseLink(spec)
			if err != nil {
				return nil, err
			}
			n.Interfaces = append(n.Interfaces, l)
		}
	}
	if len(f.ntp) > 0 {
		if n == nil {
			n = &enrolmentpb.Network{}
		}
		n.NtpServers = f.ntp
	}
	return n, nil
}

// parseLink parses a --link value.
func parseLink(spec string) (*enrolmentpb.Interface, error) {
	l := &enrolmentpb.Interface{}
	var static *enrolmentpb.Static
	for _, part := range strings.Split(spec, ",") {
		k, v, _ := strings.Cut(part, "=")
		switch k {
		case "name":
			l.Name = v
		case "mac":
			l.Mac = v
		case "dhcp":
			if static != nil {
				return nil, fmt.Errorf("--link %q: dhcp and a static address (address=, gateway4=, dns=) contradict each other", spec)
			}
			l.Config = &enrolmentpb.Interface_Dhcp{Dhcp: &enrolmentpb.DHCP{}}
		case "address", "gateway4", "dns":
			if l.GetDhcp() != nil {
				return nil, fmt.Errorf("--link %q: dhcp and a static address (address=, gateway4=, dns=) contradict each other", spec)
			}
			if static == nil {
				static = &enrolmentpb.Static{}
				l.Config = &enrolmentpb.Interface_Static{Static: static}
			}
			switch k {
			case "address":
				static.Addresses = append(static.Addresses, v)
			case "gateway4":
				static.Gateway4 = v
			case "dns":
				static.Dns = append(static.Dns, v)
			}
		case "advertise":
			l.Advertise = true
		default:
			return nil, fmt.Errorf("--link %q: unknown part %q (want name=, mac=, dhcp, address=, gateway4=, dns=, advertise)", spec, part)
		}
	}
	return l, nil
}

// write checks c as a node would and writes it to --out.
func (f *nodeFlags) write(stdout io.Writer, c *enrolmentpb.Config) error {
	if _, err := enrolment.Check(c, time.Now()); err != nil {
		return fmt.Errorf("the config would be refused: %w", err)
	}
	out, err := proto.Marshal(c)
	if err != nil {
		return err
	}
	if err := os.WriteFile(f.out, out, 0o600); err != nil {
		return err
	}
	fmt.Fprintf(stdout, "wrote %s\n", f.out)
	return nil
}

type bootstrapFlags struct {
	nodeFlags
	cluster, owner, restore string
	noOwner                 bool
}

func enrolmentBootstrapCommand() *cobra.Command {
	var f bootstrapFlags
	c := &cobra.Command{
		Use:   "bootstrap",
		Short: "Write an enrolment config that bootstraps a new cluster",
		Long: `bootstrap writes a binary enrolment config (--out) for a node that creates
a new cluster owned by you. Flags set every field; --from starts from a
human-editable prototext file (see proto/enrolment.proto), which flags then
override. The config is checked as a node would check it before it is
written. Put it in a node with 'borough image enrol' or QEMU's --fw-cfg.`,
		Args: cobra.NoArgs,
		RunE: func(cmd *cobra.Command, _ []string) error {
			return writeBootstrap(cmd.OutOrStdout(), f)
		},
	}
	f.add(c)
	c.Flags().StringVar(&f.cluster, "cluster", "", "cluster name (a-z, 0-9, '-')")
	c.Flags().StringVar(&f.owner, "owner", "", "owner certificate, PEM (default: the one from 'borough owner init')")
	c.Flags().BoolVar(&f.noOwner, "no-owner", false, "a cluster without an owner: only local clients")
	c.Flags().StringVar(&f.restore, "restore", "", "a backup (borough cluster backup) for the node to start the cluster from; send it with borough node restore once the node waits")
	return c
}

func writeBootstrap(stdout io.Writer, f bootstrapFlags) error {
	c, err := f.start()
	if err != nil {
		return err
	}
	b := c.GetBootstrap()
	if b == nil {
		b = &enrolmentpb.Bootstrap{}
		c.Mode = &enrolmentpb.Config_Bootstrap{Bootstrap: b}
	}
	if f.cluster != "" {
		b.ClusterName = f.cluster
	}
	var restore *checkedBackup
	if f.restore != "" {
		if restore, err = restoredCluster(b, f.restore); err != nil {
			return err
		}
	}
	if b.ClusterName == "" {
		return errors.New("--cluster is required: the new cluster's name (a-z, 0-9 and '-', starting with a letter)")
	}
	switch {
	case f.noOwner && f.owner != "":
		return fmt.Errorf("--no-owner and --owner %s contradict each other: give one", f.owner)
	case f.noOwner:
		b.OwnerCertificate, b.OwnerTicket, b.TicketSecret = nil, nil, nil
	case f.owner != "" || len(b.OwnerCertificate) == 0:
		cert, err := loadOwnerCert(f.owner)
		if err != nil {
			return err
		}
		b.OwnerCertificate = cert.Raw
		if err := signFounder(stdout, b, cert); err != nil {
			return err
		}
	}
	if err := f.apply(c); err != nil {
		return err
	}
	if restore != nil {
		if err := restoreFrom(stdout, b, restore, f.restore); err != nil {
			return err
		}
	}
	return f.write(stdout, c)
}

// restoredCluster checks the backup at path with the owner's key, and
// has the bootstrap b create its cluster.
func restoredCluster(b *enrolmentpb.Bootstrap, path string) (*checkedBackup, error) {
	meta, err := checkBackupFile(path)
	if err != nil {
		return nil, fmt.Errorf("--restore: %w", err)
	}
	switch b.GetClusterName() {
	case "":
		b.ClusterName = meta.Cluster
	case meta.Cluster:
	default:
		return nil, fmt.Errorf("--restore %s: the backup is of cluster %q, not %q (--cluster)", path, meta.Cluster, b.GetClusterName())
	}
	return &meta, nil
}

// restoreFrom has the bootstrap b restore the backup meta describes, at
// path: it puts in b what the node checks the backup against. The backup
// itself stays here, and so does any key to it: it holds the CA's key,
// and a config lies on an ESP in clear.
func restoreFrom(stdout io.Writer, b *enrolmentpb.Bootstrap, meta *checkedBackup, path string) error {
	if len(b.GetOwnerCertificate()) == 0 {
		return fmt.Errorf("--restore %s: a cluster restored from a backup has an owner, who sends the node the backup; drop --no-owner", path)
	}
	owner, err := pki.ParseCertPEM(meta.Owner)
	if err != nil || !bytes.Equal(owner.Raw, b.GetOwnerCertificate()) {
		return fmt.Errorf("--restore %s: the backup was made for another owner than the config's", path)
	}
	b.Restore = &enrolmentpb.Restore{
		CaFingerprint: meta.caFingerprint, SnapshotSha256: meta.SnapshotSHA256, SnapshotSize: meta.SnapshotSize,
		Revision: meta.Revision,
	}
	fmt.Fprintf(stdout, "the node restores cluster %s from %s (taken %s at revision %d, %d key revisions); "+
		"once it waits for it, send it with: borough node restore NODE %s --enrolment CONFIG --node-key KEY-ON-ITS-CONSOLE\n",
		meta.Cluster, path, meta.Taken.Format(time.RFC3339), meta.Revision, meta.keys, path)
	return nil
}

// signFounder puts in b the first node's ticket, signed with the key of
// owner, its owner, if this machine holds it (borough owner init): the
// node's admission by its owner from its first boot. Without the key, the
// owner's first ticket admits the node.
func signFounder(stdout io.Writer, b *enrolmentpb.Bootstrap, owner *x509.Certificate) error {
	b.OwnerTicket, b.TicketSecret = nil, nil
	unsigned := func(why string) error {
		fmt.Fprintf(stdout, "the first node's ticket is not signed (%s): your first `borough cluster ticket` admits the node\n", why)
		return nil
	}
	if !exists(ownerKeyPath()) && !exists(clearKeyPath()) {
		return unsigned("no owner key in " + configDir)
	}
	if cert, err := loadOwnerCert(""); err != nil || !cert.Equal(owner) {
		return unsigned("the owner identity in " + configDir + " is not the owner certificate given")
	}
	kp, err := ownerKeyPair()
	if err != nil {
		return err
	}
	t, statement, err := admin.FounderTicket(kp, b.GetClusterName())
	if err != nil {
		return fmt.Errorf("signing the first node's ticket: %w", err)
	}
	b.OwnerTicket, b.TicketSecret = statement, t.GetSecret()
	return nil
}

type joinFlags struct {
	nodeFlags
	ticket string
}

func enrolmentJoinCommand() *cobra.Command {
	var f joinFlags
	c := &cobra.Command{
		Use:   "join",
		Short: "Write an enrolment config that joins a cluster with a ticket",
		Long: `join writes a binary enrolment config (--out) for a node that joins the
cluster of --ticket (from 'borough cluster ticket'). It names the owner
(borough owner init), whom the node then trusts, and no other: it refuses
to join a cluster whose members name another. The ticket's storage policy
applies unless --storage-policy says otherwise; the network flags are
bootstrap's. The node makes its own key: the config holds no private key,
but its ticket admits one node, so keep it as you would a password until it
is used or expires.`,
		Args: cobra.NoArgs,
		RunE: func(cmd *cobra.Command, _ []string) error {
			return writeJoin(cmd.OutOrStdout(), f)
		},
	}
	f.add(c)
	c.Flags().StringVar(&f.ticket, "ticket", "", "the join ticket (required)")
	c.MarkFlagRequired("ticket")
	return c
}

func writeJoin(stdout io.Writer, f joinFlags) error {
	b, err := os.ReadFile(f.ticket)
	if err != nil {
		return err
	}
	t, err := ticket.Parse(b)
	if err != nil {
		var c enrolmentpb.Config
		if proto.Unmarshal(b, &c) == nil && c.GetMode() != nil {
			return fmt.Errorf("--ticket %s is an enrolment config, not a ticket: give the file borough cluster ticket wrote", f.ticket)
		}
		return fmt.Errorf("--ticket %s is not a ticket (borough cluster ticket writes one): %w", f.ticket, err)
	}
	if time.Now().Unix() >= t.GetExpires() {
		return fmt.Errorf("%s expired at %s; mint another with 'borough cluster ticket'", f.ticket, time.Unix(t.GetExpires(), 0).Format(time.RFC3339))
	}
	c, err := f.start()
	if err != nil {
		return err
	}
	join := &enrolmentpb.Join{Ticket: b}
	if owner, err := loadOwnerCert(""); err == nil {
		join.OwnerCertificate = owner.Raw
	} else {
		fmt.Fprintf(stdout, "no owner identity here (%v): the node will take the owner the cluster names\n", err)
	}
	c.Mode = &enrolmentpb.Config_Join{Join: join}
	c.StoragePolicy = t.GetStoragePolicy()
	if err := f.apply(c); err != nil {
		return err
	}
	return f.write(stdout, c)
}

func enrolmentShowCommand() *cobra.Command {
	return &cobra.Command{
		Use:   "show FILE",
		Short: "Print a binary enrolment config as prototext, and whether a node would accept it",
		Args:  cobra.ExactArgs(1),
		RunE: func(cmd *cobra.Command, args []string) error {
			return showEnrolment(cmd.OutOrStdout(), args[0])
		},
	}
}

func showEnrolment(stdout io.Writer, path string) error {
	b, err := os.ReadFile(path)
	if err != nil {
		return err
	}
	var c enrolmentpb.Config
	if err := proto.Unmarshal(b, &c); err != nil {
		return fmt.Errorf("%s is not an enrolment config: %w", path, err)
	}
	fmt.Fprint(stdout, prototext.MarshalOptions{Multiline: true}.Format(withoutBlobs(&c)))
	e, err := enrolment.Parse(b, path, time.Now())
	if err != nil {
		return err
	}
	if e.Owner != nil {
		fmt.Fprintf(stdout, "# owner: %s %s, valid until %s\n", e.Owner.Subject.CommonName, pki.Fingerprint(e.Owner),
			e.Owner.NotAfter.UTC().Format(time.RFC3339))
	}
	if t := e.Ticket; t != nil {
		fmt.Fprintf(stdout, "# ticket: joins cluster %s (CA %s) through %s as a %s, until %s; secret %s\n",
			t.GetClusterName(), t.GetCaFingerprint(), strings.Join(t.GetJoinEndpoints(), ", "), roleName(t.GetRole()),
			time.Unix(t.GetExpires(), 0).UTC().Format(time.RFC3339), secretState(len(t.GetSecret()) > 0))
	}
	if e.FounderTicket != nil {
		fmt.Fprintln(stdout, "# first node's ticket: signed by the owner; secret set")
	}
	if r := e.Restore; r != nil {
		fmt.Fprintf(stdout, "# restores a backup taken at revision %d: snapshot of %d bytes, SHA-256 %s, CA %s%s\n",
			r.Revision, r.SnapshotSize, r.SnapshotSHA256, r.CAFingerprint, map[bool]string{true: "; restored already"}[e.Spent()])
	}
	if err := checkTicketLife(e, time.Now()); err != nil {
		return fmt.Errorf("%s: %w", path, err)
	}
	fmt.Fprintln(stdout, "# a node accepts this config")
	return nil
}

// withoutBlobs is c with its certificates, tickets and secrets left out,
// which prototext prints as escaped bytes: showEnrolment describes them.
func withoutBlobs(c *enrolmentpb.Config) *enrolmentpb.Config {
	c = proto.Clone(c).(*enrolmentpb.Config)
	if b := c.GetBootstrap(); b != nil {
		b.OwnerCertificate, b.OwnerTicket, b.TicketSecret = nil, nil, nil
		if r := b.GetRestore(); r != nil {
			r.TransferIdentity = ""
		}
	}
	if j := c.GetJoin(); j != nil {
		j.Ticket, j.OwnerCertificate = nil, nil
	}
	return c
}

// checkTicketLife refuses a config whose join ticket has expired: the
// cluster would refuse it.
func checkTicketLife(e *enrolment.Enrolment, now time.Time) error {
	if t := e.Ticket; t != nil && now.Unix() >= t.GetExpires() {
		return fmt.Errorf("its ticket expired at %s: the cluster refuses it (mint another with borough cluster ticket)",
			time.Unix(t.GetExpires(), 0).UTC().Format(time.RFC3339))
	}
	return nil
}

func roleName(r enrolmentpb.Role) string {
	if r == enrolmentpb.Role_ROLE_LEARNER {
		return "learner"
	}
	return "voter"
}

func secretState(set bool) string {
	if set {
		return "set (keep this file as a password until the node has used it)"
	}
	return "erased: spent"
}

// exists says whether path names a file.
func exists(path string) bool {
	_, err := os.Stat(path)
	return err == nil
}
