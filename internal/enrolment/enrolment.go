// Package enrolment reads and checks a node's enrolment config: whether it
// bootstraps a cluster (and whose it is) or joins one, its network, and
// its storage policy. The schema is proto/enrolment.proto.
//
// Load looks in QEMU's fw_cfg first, then on the ESP; with neither, the
// node bootstraps a cluster with no owner. What a node applied on its
// first boot it keeps on the data volume, and an established node trusts
// the ESP's copy only once Confirm has matched it to that one (applied.go). Parse turns the protobuf into
// an Enrolment only if every field makes sense; otherwise it returns a
// *FieldError naming the field and what is wrong with it. A node with a bad
// config must not touch its data partition.
package enrolment

import (
	"crypto/x509"
	"errors"
	"fmt"
	"net"
	"net/netip"
	"os"
	"regexp"
	"slices"
	"strconv"
	"time"

	"google.golang.org/protobuf/proto"

	"github.com/borough-os/borough/esp"
	"github.com/borough-os/borough/internal/fwcfg"
	"github.com/borough-os/borough/internal/keyfile"
	"github.com/borough-os/borough/internal/pki"
	"github.com/borough-os/borough/internal/protostrict"
	"github.com/borough-os/borough/internal/ticket"
	"github.com/borough-os/borough/proto/enrolmentpb"
)

// Version is the config version this node reads.
const Version = 1

// DefaultClusterName names a cluster bootstrapped without a config.
const DefaultClusterName = "borough"

// Enrolment is a checked enrolment config.
type Enrolment struct {
	// Source says where the config came from, for the log.
	Source string
	// ClusterName is the cluster to bootstrap or join.
	ClusterName string
	// Owner is the owner's certificate, or nil for a cluster without one
	// (and for a joining node, which learns it from the cluster).
	Owner *x509.Certificate
	// AwaitsConfig says that the node was reset by Owner and has no
	// config: it waits for one from Owner, through its node API.
	AwaitsConfig bool
	// Ticket is set when the node joins a cluster; its form is checked,
	// its validity is the cluster's to judge.
	Ticket *enrolmentpb.Ticket
	// FounderTicket and FounderStatement are a first node's ticket and
	// the owner's signed word for it (ticket.OpenFounder), if its
	// bootstrap config carries them: the node claims it for its key.
	FounderTicket    *enrolmentpb.Ticket
	FounderStatement []byte
	// Restore is the backup a first node starts its cluster from, if its
	// bootstrap config names one.
	Restore *Restore
	// StoragePolicy is how the data volume's key is protected.
	StoragePolicy keyfile.TPMPolicy
	// Interfaces are the links to configure; none means DHCP on the
	// first link that comes up, advertised.
	Interfaces []Interface
	// NTPServers (host or host:port) set the clock; none means those
	// DHCP offers.
	NTPServers []string
	// OwnerRecovery says the node seals its unlock keys to the cluster
	// owner's key, if the cluster has an owner.
	OwnerRecovery bool

	// provisional says the config was read from the ESP (or fw_cfg) of an
	// established node, where nobody authenticates it: until Confirm has
	// checked it against the data volume's record, nothing in it that
	// grants authority may be trusted.
	provisional bool
	// applied is the config as the records hold it (none: the default).
	applied []byte
	// refused says why the ESP's record was not read, if it was not.
	refused error
}

// Interface configures one link.
type Interface struct {
	// Name or MAC matches the link; neither matches the first link that
	// comes up.
	Name, MAC string
	// Static is nil for DHCP.
	Static *Static
	// Advertise makes this link's address the node's address in the
	// cluster.
	Advertise bool
}

// Static is a fixed network configuration.
type Static struct {
	Addresses []netip.Prefix
	Gateway4  netip.Addr
	Gateway6  netip.Addr
	DNS       []netip.Addr
}

// FieldError is a config field with a bad value.
type FieldError struct {
	// Field is the field's path in the schema, e.g. "bootstrap.cluster_name".
	Field   string
	Problem string
}

func (e *FieldError) Error() string {
	return fmt.Sprintf("field %s: %s", e.Field, e.Problem)
}

func fieldErr(field, format string, args ...any) error {
	return &FieldError{Field: field, Problem: fmt.Sprintf(format, args...)}
}

// sourceNone is the source of the default config.
const sourceNone = "none"

// Unconfigured says that the node found no enrolment config (fw_cfg, the
// ESP or the owner's node API) and e is the default: a cluster of its own
// with no owner, or, after a reset, none until its owner sends a config
// (AwaitsConfig).
func (e *Enrolment) Unconfigured() bool { return e.Source == sourceNone }

// read returns where the config comes from and its bytes: the one the
// owner sent through the node API (the owner's latest word: it comes
// before the machine's fw_cfg, which may still hold a config the node
// spent before a reset), else fw_cfg, else the ESP, else sourceNone and no
// bytes.
func read(espRoot string) (string, []byte, error) {
	b, err := os.ReadFile(esp.PushedEnrolment.In(espRoot))
	if err == nil {
		return "the owner's node API (ESP " + string(esp.PushedEnrolment) + ")", b, nil
	}
	if !errors.Is(err, os.ErrNotExist) {
		return "", nil, fmt.Errorf("reading the enrolment config the owner sent: %w", err)
	}
	b, err = fwcfg.Read(fwcfg.Enrolment)
	if err == nil {
		return "fw_cfg " + fwcfg.Enrolment, b, nil
	}
	if !errors.Is(err, os.ErrNotExist) {
		return "", nil, err
	}
	b, err = os.ReadFile(esp.EnrolmentConfig.In(espRoot))
	if err == nil {
		return "ESP " + string(esp.EnrolmentConfig), b, nil
	}
	if !errors.Is(err, os.ErrNotExist) {
		return "", nil, fmt.Errorf("reading enrolment config: %w", err)
	}
	return sourceNone, nil, nil
}

// parse is Parse, with no bytes meaning the default config.
func parse(b []byte, source string, now time.Time) (*Enrolment, error) {
	if len(b) == 0 {
		return &Enrolment{Source: sourceNone, ClusterName: DefaultClusterName, OwnerRecovery: true}, nil
	}
	return Parse(b, source, now)
}

// Parse decodes and checks a binary enrolment config; source names where
// it came from in errors. A zero now skips the checks of validity periods.
func Parse(b []byte, source string, now time.Time) (*Enrolment, error) {
	var c enrolmentpb.Config
	if err := proto.Unmarshal(b, &c); err != nil {
		return nil, fmt.Errorf("enrolment config from %s is not a valid config: %w", source, err)
	}
	e, err := Check(&c, now)
	if err != nil {
		return nil, fmt.Errorf("enrolment config from %s: %w", source, err)
	}
	e.Source = source
	return e, nil
}

// Check validates c at time now and returns it as an Enrolment. A zero
// now skips the checks of validity periods.
func Check(c *enrolmentpb.Config, now time.Time) (*Enrolment, error) {
	if path, ok := protostrict.Unknown(c); ok {
		if path == "" {
			path = "(unknown)"
		}
		return nil, fieldErr(path, "has fields this node does not know; the config may be for a newer version")
	}
	if c.GetVersion() != Version {
		return nil, fieldErr("version", "is %d; this node reads version %d", c.GetVersion(), Version)
	}
	e := &Enrolment{}
	switch m := c.GetMode().(type) {
	case nil:
		return nil, fieldErr("mode", "neither bootstrap nor join is set")
	case *enrolmentpb.Config_Join:
		t, err := ticket.Parse(m.Join.GetTicket())
		if err != nil {
			return nil, fieldErr("join.ticket", "%v", err)
		}
		e.Ticket, e.ClusterName = t, t.GetClusterName()
		if e.Owner, err = checkOwner("join.owner_certificate", m.Join.GetOwnerCertificate()); err != nil {
			return nil, err
		}
		if e.Owner != nil && !now.IsZero() {
			if err := e.CheckClock(now); err != nil {
				return nil, err
			}
		}
	case *enrolmentpb.Config_Bootstrap:
		if err := checkBootstrap(e, m.Bootstrap, now); err != nil {
			return nil, err
		}
	}
	policy, err := storagePolicy(c.GetStoragePolicy())
	if err != nil {
		return nil, err
	}
	e.StoragePolicy = policy
	if e.Interfaces, e.NTPServers, err = CheckNetwork(c.GetNetwork()); err != nil {
		return nil, err
	}
	e.OwnerRecovery = !c.GetNoOwnerRecovery()
	return e, nil
}

// ntpHost matches a DNS name, the form of an NTP server's host that is
// not an IP address. Its length is isNTPHost's to check (see
// pki.IsClusterName).
var ntpHost = regexp.MustCompile(`^[A-Za-z0-9]([A-Za-z0-9.-]*[A-Za-z0-9])?$`)

// maxNTPHost is the longest DNS name.
const maxNTPHost = 254

// isNTPHost says whether host is an NTP server's DNS name.
func isNTPHost(host string) bool { return len(host) <= maxNTPHost && ntpHost.MatchString(host) }

// checkNTP checks NTP servers, each host or host:port.
func checkNTP(servers []string) ([]string, error) {
	for i, s := range servers {
		field := fmt.Sprintf("network.ntp_servers[%d]", i)
		host := s
		if h, port, err := net.SplitHostPort(s); err == nil {
			if n, err := strconv.Atoi(port); err != nil || n < 1 || n > 65535 {
				return nil, fieldErr(field, "%q has port %q; want 1 to 65535", s, port)
			}
			host = h
		}
		if _, err := netip.ParseAddr(host); err != nil && !isNTPHost(host) {
			return nil, fieldErr(field, "%q is not an IP address or host name, with an optional :port", s)
		}
	}
	return servers, nil
}

// CheckNetwork checks network settings, of a config or of the owner's
// change to a running node's (package netconfig), and returns the links
// and NTP servers they give.
func CheckNetwork(n *enrolmentpb.Network) ([]Interface, []string, error) {
	ifaces, err := checkNetwork(n)
	if err != nil {
		return nil, nil, err
	}
	ntp, err := checkNTP(n.GetNtpServers())
	if err != nil {
		return nil, nil, err
	}
	return ifaces, ntp, nil
}

// checkNetwork checks either form of the network config.
func checkNetwork(n *enrolmentpb.Network) ([]Interface, error) {
	if len(n.GetInterfaces()) > 0 {
		if n.GetConfig() != nil {
			return nil, fieldErr("network.interfaces", "is set together with network.dhcp or network.static; give one form")
		}
		return checkInterfaces(n.GetInterfaces())
	}
	s := n.GetStatic()
	if s == nil {
		return nil, nil
	}
	st, err := checkStatic("network.static", s)
	if err != nil {
		return nil, err
	}
	return []Interface{{Name: s.GetInterface(), Static: st, Advertise: true}}, nil
}

func checkInterfaces(list []*enrolmentpb.Interface) ([]Interface, error) {
	var out []Interface
	advertised := 0
	seen := map[string]bool{}
	for i, in := range list {
		field := fmt.Sprintf("network.interfaces[%d]", i)
		ifc := Interface{Name: in.GetName(), Advertise: in.GetAdvertise()}
		switch {
		case (ifc.Name == "") == (in.GetMac() == ""):
			return nil, fieldErr(field, "needs exactly one of name and mac")
		case in.GetMac() != "":
			mac, err := net.ParseMAC(in.GetMac())
			if err != nil || len(mac) != 6 {
				return nil, fieldErr(field+".mac", "%q is not a MAC address like 52:54:00:12:34:56", in.GetMac())
			}
			ifc.MAC = mac.String()
		}
		if key := ifc.Name + ifc.MAC; seen[key] {
			return nil, fieldErr(field, "matches %s, as an earlier interface does", key)
		} else {
			seen[key] = true
		}
		if s := in.GetStatic(); s != nil {
			if s.GetInterface() != "" {
				return nil, fieldErr(field+".static.interface", "is set; name the link in %s.name", field)
			}
			st, err := checkStatic(field+".static", s)
			if err != nil {
				return nil, err
			}
			ifc.Static = st
		}
		if ifc.Advertise {
			advertised++
		}
		out = append(out, ifc)
	}
	if advertised != 1 {
		return nil, fieldErr("network.interfaces", "%d interfaces advertise; exactly one must (its address is the node's in the cluster)", advertised)
	}
	return out, nil
}

func checkBootstrap(e *Enrolment, b *enrolmentpb.Bootstrap, now time.Time) error {
	if !pki.IsClusterName(b.GetClusterName()) {
		return fieldErr("bootstrap.cluster_name", "%q is not 1 to 63 characters of a-z, 0-9 and '-' starting with a letter", b.GetClusterName())
	}
	e.ClusterName = b.GetClusterName()
	var err error
	if e.Owner, err = checkOwner("bootstrap.owner_certificate", b.GetOwnerCertificate()); err != nil {
		return err
	}
	if err := checkFounder(e, b); err != nil {
		return err
	}
	if err := checkRestore(e, b.GetRestore()); err != nil || e.Owner == nil || now.IsZero() {
		return err
	}
	return e.CheckClock(now)
}

// checkFounder checks the first node's ticket a bootstrap config carries,
// if any: the owner's, for this cluster and this secret.
func checkFounder(e *Enrolment, b *enrolmentpb.Bootstrap) error {
	switch {
	case len(b.GetOwnerTicket()) == 0 && len(b.GetTicketSecret()) == 0:
		return nil
	case e.Owner == nil:
		return fieldErr("bootstrap.owner_ticket", "is set in a cluster without an owner")
	case len(b.GetOwnerTicket()) == 0 || len(b.GetTicketSecret()) == 0:
		return fieldErr("bootstrap.owner_ticket", "and bootstrap.ticket_secret go together; one is missing")
	}
	t, err := ticket.OpenFounder(e.ClusterName, b.GetTicketSecret(), b.GetOwnerTicket(), e.Owner)
	if err != nil {
		return fieldErr("bootstrap.owner_ticket", "%v", err)
	}
	e.FounderTicket, e.FounderStatement = t, b.GetOwnerTicket()
	return nil
}

// checkOwner parses der, the owner certificate in field, if any.
func checkOwner(field string, der []byte) (*x509.Certificate, error) {
	if len(der) == 0 {
		return nil, nil
	}
	if len(der) > 10 && string(der[:10]) == "-----BEGIN" {
		return nil, fieldErr(field, "is PEM; give the DER form (borough enrolment bootstrap|join converts it)")
	}
	cert, err := x509.ParseCertificate(der)
	if err != nil {
		return nil, fieldErr(field, "is not an X.509 certificate: %v", err)
	}
	switch {
	case cert.Version != 3:
		return nil, fieldErr(field, "is an X.509 v%d certificate; the owner's must be v3, with its key usages (borough owner init makes one)", cert.Version)
	case !slices.Contains(cert.ExtKeyUsage, x509.ExtKeyUsageClientAuth):
		return nil, fieldErr(field, "does not allow client authentication (extended key usage clientAuth), which is what the owner uses it for")
	case cert.IsCA:
		return nil, fieldErr(field, "is a CA certificate; give the owner's own (leaf) certificate, since the cluster trusts it as a root")
	}
	return cert, nil
}

// CheckClock checks, at time now, what has a validity period: the owner's
// certificate. A fresh node checks it once its clock is set (timesync).
func (e *Enrolment) CheckClock(now time.Time) error {
	field := "bootstrap.owner_certificate"
	if e.Ticket != nil {
		field = "join.owner_certificate"
	}
	switch {
	case e.Owner == nil:
	case now.Before(e.Owner.NotBefore):
		return fieldErr(field, "is not valid before %s (the node's clock says %s)",
			e.Owner.NotBefore.UTC().Format(time.RFC3339), now.UTC().Format(time.RFC3339))
	case now.After(e.Owner.NotAfter):
		return fieldErr(field, "expired on %s", e.Owner.NotAfter.UTC().Format(time.RFC3339))
	}
	return nil
}

func storagePolicy(p enrolmentpb.StoragePolicy) (keyfile.TPMPolicy, error) {
	switch p {
	case enrolmentpb.StoragePolicy_STORAGE_POLICY_UNSPECIFIED, enrolmentpb.StoragePolicy_STORAGE_POLICY_TPM_BEST_EFFORT:
		return keyfile.TPMBestEffort, nil
	case enrolmentpb.StoragePolicy_STORAGE_POLICY_TPM_REQUIRED:
		return keyfile.TPMRequired, nil
	case enrolmentpb.StoragePolicy_STORAGE_POLICY_TPM_DISABLED:
		return keyfile.TPMDisabled, nil
	}
	return 0, fieldErr("storage_policy", "%d is not a known policy", int32(p))
}

func checkStatic(field string, s *enrolmentpb.Static) (*Static, error) {
	n := &Static{}
	if len(s.GetAddresses()) == 0 {
		return nil, fieldErr(field+".addresses", "is empty; a static network needs at least one address")
	}
	var has4, has6 bool
	for i, a := range s.GetAddresses() {
		p, err := netip.ParsePrefix(a)
		if err != nil {
			return nil, fieldErr(fmt.Sprintf("%s.addresses[%d]", field, i), "%q is not an address with a prefix length, like 192.0.2.10/24", a)
		}
		has4, has6 = has4 || p.Addr().Is4(), has6 || p.Addr().Is6()
		n.Addresses = append(n.Addresses, p)
	}
	var err error
	if n.Gateway4, err = gateway(field+".gateway4", s.GetGateway4(), true, has4); err != nil {
		return nil, err
	}
	if n.Gateway6, err = gateway(field+".gateway6", s.GetGateway6(), false, has6); err != nil {
		return nil, err
	}
	for i, d := range s.GetDns() {
		a, err := netip.ParseAddr(d)
		if err != nil {
			return nil, fieldErr(fmt.Sprintf("%s.dns[%d]", field, i), "%q is not an IP address", d)
		}
		n.DNS = append(n.DNS, a)
	}
	return n, nil
}

func gateway(field, s string, v4, haveFamily bool) (netip.Addr, error) {
	if s == "" {
		return netip.Addr{}, nil
	}
	a, err := netip.ParseAddr(s)
	family := map[bool]string{true: "IPv4", false: "IPv6"}[v4]
	switch {
	case err != nil:
		return a, fieldErr(field, "%q is not an IP address", s)
	case a.Is4() != v4:
		return a, fieldErr(field, "%s is not an %s address", s, family)
	case !haveFamily:
		return a, fieldErr(field, "is set, but no address is %s: the config contradicts itself", family)
	}
	return a, nil
}
