package main

import (
	"fmt"
	"io"
	"os"
	"time"

	"github.com/spf13/cobra"
	"google.golang.org/protobuf/encoding/prototext"
	"google.golang.org/protobuf/proto"

	"github.com/borough-os/borough/internal/enrolment"
	"github.com/borough-os/borough/internal/pki"
	"github.com/borough-os/borough/proto/enrolmentpb"
)

func enrolmentCommand() *cobra.Command {
	c := &cobra.Command{Use: "enrolment", Short: "Write and read enrolment configs"}
	c.AddCommand(enrolmentBootstrapCommand(), enrolmentShowCommand())
	return c
}

type bootstrapFlags struct {
	from, out, cluster, owner, policy string
	noOwner                           bool
	iface, gw4, gw6                   string
	addresses, dns                    []string
}

var policies = map[string]enrolmentpb.StoragePolicy{
	"best-effort": enrolmentpb.StoragePolicy_STORAGE_POLICY_TPM_BEST_EFFORT,
	"required":    enrolmentpb.StoragePolicy_STORAGE_POLICY_TPM_REQUIRED,
	"disabled":    enrolmentpb.StoragePolicy_STORAGE_POLICY_TPM_DISABLED,
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
			return writeBootstrap(cmd, f)
		},
	}
	c.Flags().StringVar(&f.from, "from", "", "prototext config to start from")
	c.Flags().StringVar(&f.out, "out", "enrolment.pb", "file to write")
	c.Flags().StringVar(&f.cluster, "cluster", "", "cluster name (a-z, 0-9, '-')")
	c.Flags().StringVar(&f.owner, "owner", "", "owner certificate, PEM (default: the one from `borough owner init`)")
	c.Flags().BoolVar(&f.noOwner, "no-owner", false, "a cluster without an owner: only local clients")
	c.Flags().StringVar(&f.policy, "storage-policy", "", "TPM use for the data volume: best-effort, required or disabled")
	c.Flags().StringVar(&f.iface, "interface", "", "static network: the link to configure")
	c.Flags().StringSliceVar(&f.addresses, "address", nil, "static network: address with prefix length, e.g. 192.0.2.10/24 (repeatable)")
	c.Flags().StringVar(&f.gw4, "gateway4", "", "static network: IPv4 default gateway")
	c.Flags().StringVar(&f.gw6, "gateway6", "", "static network: IPv6 default gateway")
	c.Flags().StringSliceVar(&f.dns, "dns", nil, "static network: name server (repeatable)")
	return c
}

func writeBootstrap(cmd *cobra.Command, f bootstrapFlags) error {
	c := &enrolmentpb.Config{}
	if f.from != "" {
		b, err := os.ReadFile(f.from)
		if err != nil {
			return err
		}
		if err := prototext.Unmarshal(b, c); err != nil {
			return fmt.Errorf("%s: %w", f.from, err)
		}
	}
	c.Version = enrolment.Version
	b := c.GetBootstrap()
	if b == nil {
		b = &enrolmentpb.Bootstrap{}
		c.Mode = &enrolmentpb.Config_Bootstrap{Bootstrap: b}
	}
	if f.cluster != "" {
		b.ClusterName = f.cluster
	}
	switch {
	case f.noOwner:
		b.OwnerCertificate = nil
	case f.owner != "" || len(b.OwnerCertificate) == 0:
		cert, err := loadOwnerCert(f.owner)
		if err != nil {
			return err
		}
		b.OwnerCertificate = cert.Raw
	}
	if f.policy != "" {
		p, ok := policies[f.policy]
		if !ok {
			return fmt.Errorf("--storage-policy %q: want best-effort, required or disabled", f.policy)
		}
		c.StoragePolicy = p
	}
	if len(f.addresses) > 0 {
		c.Network = &enrolmentpb.Network{Config: &enrolmentpb.Network_Static{Static: &enrolmentpb.Static{
			Interface: f.iface, Addresses: f.addresses, Gateway4: f.gw4, Gateway6: f.gw6, Dns: f.dns,
		}}}
	}
	if _, err := enrolment.Check(c, time.Now()); err != nil {
		return fmt.Errorf("the config would be refused: %w", err)
	}
	out, err := proto.Marshal(c)
	if err != nil {
		return err
	}
	if err := os.WriteFile(f.out, out, 0o644); err != nil {
		return err
	}
	fmt.Fprintf(cmd.OutOrStdout(), "wrote %s\n", f.out)
	return nil
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
	fmt.Fprint(stdout, prototext.MarshalOptions{Multiline: true}.Format(&c))
	e, err := enrolment.Parse(b, path)
	if err != nil {
		return err
	}
	if e.Owner != nil {
		fmt.Fprintf(stdout, "# owner: %s %s\n", e.Owner.Subject.CommonName, pki.Fingerprint(e.Owner))
	}
	fmt.Fprintln(stdout, "# a node accepts this config")
	return nil
}
