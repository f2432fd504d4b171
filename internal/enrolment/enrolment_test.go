package enrolment

import (
	"bytes"
	"crypto/ecdsa"
	"crypto/elliptic"
	"crypto/rand"
	"crypto/x509"
	"crypto/x509/pkix"
	"encoding/pem"
	"errors"
	"log/slog"
	"math/big"
	"net/netip"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"testing"
	"time"

	"filippo.io/age"

	"github.com/google/go-cmp/cmp"
	"github.com/google/go-cmp/cmp/cmpopts"
	"google.golang.org/protobuf/encoding/protowire"
	"google.golang.org/protobuf/proto"
	"google.golang.org/protobuf/testing/protocmp"

	"github.com/borough-os/borough/esp"
	"github.com/borough-os/borough/internal/authority"
	"github.com/borough-os/borough/internal/keyfile"
	"github.com/borough-os/borough/internal/pki"
	"github.com/borough-os/borough/internal/ticket"
	"github.com/borough-os/borough/proto/enrolmentpb"
)

var now = time.Date(2026, 11, 29, 12, 0, 0, 0, time.UTC)

// cert makes a self-signed certificate valid from notBefore for a year.
func cert(t testing.TB, isCA bool, notBefore time.Time) []byte {
	t.Helper()
	return certUsage(t, isCA, notBefore, x509.ExtKeyUsageClientAuth)
}

// certUsage is cert with the given extended key usages.
func certUsage(t testing.TB, isCA bool, notBefore time.Time, usage ...x509.ExtKeyUsage) []byte {
	t.Helper()
	key, err := ecdsa.GenerateKey(elliptic.P256(), rand.Reader)
	if err != nil {
		t.Fatal(err)
	}
	tmpl := &x509.Certificate{
		SerialNumber:          big.NewInt(1),
		Subject:               pkix.Name{CommonName: "owner"},
		NotBefore:             notBefore,
		NotAfter:              notBefore.AddDate(1, 0, 0),
		BasicConstraintsValid: true,
		IsCA:                  isCA,
		ExtKeyUsage:           usage,
	}
	der, err := x509.CreateCertificate(rand.Reader, tmpl, tmpl, &key.PublicKey, key)
	if err != nil {
		t.Fatal(err)
	}
	return der
}

func readFile(t testing.TB, path string) []byte {
	t.Helper()
	b, err := os.ReadFile(path)
	if err != nil {
		t.Fatal(err)
	}
	return b
}

// validRestore is a restore of a 1 MiB snapshot.
func validRestore() *enrolmentpb.Restore {
	return &enrolmentpb.Restore{
		CaFingerprint: "sha256:" + strings.Repeat("ab", 32), SnapshotSha256: strings.Repeat("cd", 32),
		SnapshotSize: 1 << 20, Revision: 42,
	}
}

func bootstrap(name string, owner []byte) *enrolmentpb.Config {
	return &enrolmentpb.Config{Version: 1, Mode: &enrolmentpb.Config_Bootstrap{
		Bootstrap: &enrolmentpb.Bootstrap{ClusterName: name, OwnerCertificate: owner},
	}}
}

func ntp(servers ...string) *enrolmentpb.Config {
	c := bootstrap("prod", nil)
	c.Network = &enrolmentpb.Network{NtpServers: servers}
	return c
}

func static(s *enrolmentpb.Static) *enrolmentpb.Config {
	c := bootstrap("prod", nil)
	c.Network = &enrolmentpb.Network{Config: &enrolmentpb.Network_Static{Static: s}}
	return c
}

func interfaces(list ...*enrolmentpb.Interface) *enrolmentpb.Config {
	c := bootstrap("prod", nil)
	c.Network = &enrolmentpb.Network{Interfaces: list}
	return c
}

func join(ticket []byte) *enrolmentpb.Config {
	return joinOwned(ticket, nil)
}

func joinOwned(ticket, owner []byte) *enrolmentpb.Config {
	return &enrolmentpb.Config{Version: 1, Mode: &enrolmentpb.Config_Join{Join: &enrolmentpb.Join{Ticket: ticket, OwnerCertificate: owner}}}
}

func validTicket(t testing.TB) []byte {
	t.Helper()
	b, err := proto.Marshal(&enrolmentpb.Ticket{
		Version: 1, ClusterName: "prod", CaFingerprint: "sha256:" + strings.Repeat("ab", 32),
		JoinEndpoints: []string{"192.0.2.1:7834"}, Id: make([]byte, 16), Secret: make([]byte, 32),
		Expires: now.Unix(),
	})
	if err != nil {
		t.Fatal(err)
	}
	return b
}

func TestCheck(t *testing.T) {
	owner := cert(t, false, now.AddDate(0, -1, 0))
	ownerCert, _ := x509.ParseCertificate(owner)
	withUnknown := bootstrap("prod", nil)
	withUnknown.ProtoReflect().SetUnknown(protowire.AppendVarint(protowire.AppendTag(nil, 99, protowire.VarintType), 1))
	nestedUnknown := bootstrap("prod", nil)
	nestedUnknown.GetBootstrap().ProtoReflect().SetUnknown(protowire.AppendVarint(protowire.AppendTag(nil, 99, protowire.VarintType), 1))
	policy := func(p enrolmentpb.StoragePolicy) *enrolmentpb.Config {
		c := bootstrap("prod", nil)
		c.StoragePolicy = p
		return c
	}
	transfer, err := age.GenerateX25519Identity()
	if err != nil {
		t.Fatal(err)
	}
	restore := func(owner []byte, edit func(*enrolmentpb.Restore)) *enrolmentpb.Config {
		c := bootstrap("prod", owner)
		c.GetBootstrap().Restore = validRestore()
		if edit != nil {
			edit(c.GetBootstrap().Restore)
		}
		return c
	}
	for _, tc := range []struct {
		name      string
		config    *enrolmentpb.Config
		want      *Enrolment
		wantField string
		wantText  string
	}{
		{name: "bootstrap with owner", config: bootstrap("prod-1", owner),
			want: &Enrolment{ClusterName: "prod-1", Owner: ownerCert}},
		{name: "restore", config: restore(owner, nil), want: &Enrolment{ClusterName: "prod", Owner: ownerCert,
			Restore: &Restore{CAFingerprint: "sha256:" + strings.Repeat("ab", 32), SnapshotSHA256: strings.Repeat("cd", 32),
				SnapshotSize: 1 << 20, Revision: 42}}},
		// A config of an earlier release carries a transfer key, which the
		// node leaves alone: it makes its own.
		{name: "restore with an earlier release's transfer key", config: restore(owner, func(r *enrolmentpb.Restore) { r.TransferIdentity = transfer.String() }),
			want: &Enrolment{ClusterName: "prod", Owner: ownerCert,
				Restore: &Restore{CAFingerprint: "sha256:" + strings.Repeat("ab", 32), SnapshotSHA256: strings.Repeat("cd", 32),
					SnapshotSize: 1 << 20, Revision: 42}}},
		{name: "restore without an owner", config: restore(nil, nil), wantField: "bootstrap.restore", wantText: "without an owner"},
		{name: "restore of a bad CA fingerprint", config: restore(owner, func(r *enrolmentpb.Restore) { r.CaFingerprint = "ab" }),
			wantField: "bootstrap.restore.ca_fingerprint"},
		{name: "restore of a short checksum", config: restore(owner, func(r *enrolmentpb.Restore) { r.SnapshotSha256 = "cd" }),
			wantField: "bootstrap.restore.snapshot_sha256"},
		{name: "restore of nothing", config: restore(owner, func(r *enrolmentpb.Restore) { r.SnapshotSize = 0 }),
			wantField: "bootstrap.restore.snapshot_size"},
		{name: "restore at no revision", config: restore(owner, func(r *enrolmentpb.Restore) { r.Revision = -1 }),
			wantField: "bootstrap.restore.revision"},
		{name: "bootstrap without owner", config: bootstrap("a", nil), want: &Enrolment{ClusterName: "a"}},
		{name: "required TPM", config: policy(enrolmentpb.StoragePolicy_STORAGE_POLICY_TPM_REQUIRED),
			want: &Enrolment{ClusterName: "prod", StoragePolicy: keyfile.TPMRequired}},
		{name: "NTP servers", config: ntp("pool.ntp.org", "10.0.2.2:12300", "[2001:db8::1]:123", "2001:db8::2"),
			want: &Enrolment{ClusterName: "prod", NTPServers: []string{"pool.ntp.org", "10.0.2.2:12300", "[2001:db8::1]:123", "2001:db8::2"}}},
		{name: "disabled TPM", config: policy(enrolmentpb.StoragePolicy_STORAGE_POLICY_TPM_DISABLED),
			want: &Enrolment{ClusterName: "prod", StoragePolicy: keyfile.TPMDisabled}},
		{name: "static network", config: static(&enrolmentpb.Static{
			Interface: "eth0", Addresses: []string{"192.0.2.10/24", "2001:db8::10/64"},
			Gateway4: "192.0.2.1", Gateway6: "2001:db8::1", Dns: []string{"192.0.2.53"},
		}), want: &Enrolment{ClusterName: "prod", Interfaces: []Interface{{Name: "eth0", Advertise: true, Static: &Static{
			Addresses: []netip.Prefix{netip.MustParsePrefix("192.0.2.10/24"), netip.MustParsePrefix("2001:db8::10/64")},
			Gateway4:  netip.MustParseAddr("192.0.2.1"), Gateway6: netip.MustParseAddr("2001:db8::1"),
			DNS: []netip.Addr{netip.MustParseAddr("192.0.2.53")},
		}}}}},
		{name: "two interfaces", config: interfaces(
			&enrolmentpb.Interface{Name: "eth0", Config: &enrolmentpb.Interface_Dhcp{Dhcp: &enrolmentpb.DHCP{}}},
			&enrolmentpb.Interface{Mac: "52:54:00:AA:00:01", Advertise: true, Config: &enrolmentpb.Interface_Static{
				Static: &enrolmentpb.Static{Addresses: []string{"10.77.0.1/24"}}}},
		), want: &Enrolment{ClusterName: "prod", Interfaces: []Interface{
			{Name: "eth0"},
			{MAC: "52:54:00:aa:00:01", Advertise: true, Static: &Static{Addresses: []netip.Prefix{netip.MustParsePrefix("10.77.0.1/24")}}},
		}}},
		{name: "join", config: join(validTicket(t)), want: &Enrolment{ClusterName: "prod", Ticket: func() *enrolmentpb.Ticket {
			var tk enrolmentpb.Ticket
			proto.Unmarshal(validTicket(t), &tk)
			return &tk
		}()}},
		{name: "join with garbage ticket", config: join([]byte("garbage")), wantField: "join.ticket", wantText: "not a ticket"},
		{name: "join with empty ticket", config: join(nil), wantField: "join.ticket", wantText: "empty"},
		{name: "no interface advertises", config: interfaces(&enrolmentpb.Interface{Name: "eth0"}),
			wantField: "network.interfaces", wantText: "0 interfaces advertise"},
		{name: "two interfaces advertise", config: interfaces(&enrolmentpb.Interface{Name: "eth0", Advertise: true},
			&enrolmentpb.Interface{Name: "eth1", Advertise: true}), wantField: "network.interfaces", wantText: "2 interfaces advertise"},
		{name: "interface matched twice", config: interfaces(&enrolmentpb.Interface{Name: "eth0", Advertise: true},
			&enrolmentpb.Interface{Name: "eth0"}), wantField: "network.interfaces[1]", wantText: "as an earlier"},
		{name: "NTP port 0", config: ntp("ntp.example:0"), wantField: "network.ntp_servers[0]", wantText: "want 1 to 65535"},
		{name: "NTP host too long", config: ntp(strings.Repeat("a.", 127) + "a"), wantField: "network.ntp_servers[0]",
			wantText: "not an IP address or host name"},
		{name: "NTP host with a space", config: ntp("pool.ntp.org", "bad host"), wantField: "network.ntp_servers[1]",
			wantText: "not an IP address or host name"},
		{name: "interface by name and MAC", config: interfaces(&enrolmentpb.Interface{Name: "eth0", Mac: "52:54:00:aa:00:01", Advertise: true}),
			wantField: "network.interfaces[0]", wantText: "exactly one of name and mac"},
		{name: "bad MAC", config: interfaces(&enrolmentpb.Interface{Mac: "52:54", Advertise: true}),
			wantField: "network.interfaces[0].mac"},
		{name: "bad interface address", config: interfaces(&enrolmentpb.Interface{Name: "eth0", Advertise: true,
			Config: &enrolmentpb.Interface_Static{Static: &enrolmentpb.Static{Addresses: []string{"x"}}}}),
			wantField: "network.interfaces[0].static.addresses[0]"},
		{name: "version 0", config: &enrolmentpb.Config{}, wantField: "version", wantText: "is 0"},
		{name: "version 2", config: &enrolmentpb.Config{Version: 2}, wantField: "version", wantText: "is 2"},
		{name: "no mode", config: &enrolmentpb.Config{Version: 1}, wantField: "mode"},
		{name: "empty name", config: bootstrap("", nil), wantField: "bootstrap.cluster_name"},
		{name: "upper-case name", config: bootstrap("Prod", nil), wantField: "bootstrap.cluster_name"},
		{name: "long name", config: bootstrap(strings.Repeat("a", 64), nil), wantField: "bootstrap.cluster_name"},
		{name: "garbage owner", config: bootstrap("prod", []byte("not a certificate")),
			wantField: "bootstrap.owner_certificate", wantText: "not an X.509 certificate"},
		{name: "PEM owner", config: bootstrap("prod", pem.EncodeToMemory(&pem.Block{Type: "CERTIFICATE", Bytes: owner})),
			wantField: "bootstrap.owner_certificate", wantText: "is PEM"},
		{name: "server-auth owner", config: bootstrap("prod", certUsage(t, false, now.AddDate(0, -1, 0), x509.ExtKeyUsageServerAuth)),
			wantField: "bootstrap.owner_certificate", wantText: "does not allow client authentication"},
		{name: "owner without usages", config: bootstrap("prod", certUsage(t, false, now.AddDate(0, -1, 0))),
			wantField: "bootstrap.owner_certificate", wantText: "does not allow client authentication"},
		// Made by openssl x509 -req without extensions; valid until 2126.
		{name: "v1 owner", config: bootstrap("prod", readFile(t, "testdata/owner-v1.der")),
			wantField: "bootstrap.owner_certificate", wantText: "X.509 v1 certificate"},
		{name: "CA owner", config: bootstrap("prod", cert(t, true, now.AddDate(0, -1, 0))),
			wantField: "bootstrap.owner_certificate", wantText: "CA certificate"},
		{name: "future owner", config: bootstrap("prod", cert(t, false, now.AddDate(0, 1, 0))),
			wantField: "bootstrap.owner_certificate", wantText: "not valid before"},
		{name: "expired owner", config: bootstrap("prod", cert(t, false, now.AddDate(-2, 0, 0))),
			wantField: "bootstrap.owner_certificate", wantText: "expired"},
		{name: "joiner's garbage owner", config: joinOwned(validTicket(t), []byte("not a certificate")),
			wantField: "join.owner_certificate", wantText: "not an X.509 certificate"},
		{name: "joiner's CA owner", config: joinOwned(validTicket(t), cert(t, true, now.AddDate(0, -1, 0))),
			wantField: "join.owner_certificate", wantText: "CA certificate"},
		{name: "joiner's expired owner", config: joinOwned(validTicket(t), cert(t, false, now.AddDate(-2, 0, 0))),
			wantField: "join.owner_certificate", wantText: "expired"},
		{name: "unknown policy", config: policy(42), wantField: "storage_policy"},
		{name: "unknown field", config: withUnknown, wantField: "(unknown)"},
		{name: "unknown field in bootstrap", config: nestedUnknown, wantField: "bootstrap"},
		{name: "static without addresses", config: static(&enrolmentpb.Static{}), wantField: "network.static.addresses"},
		{name: "bad address", config: static(&enrolmentpb.Static{Addresses: []string{"192.0.2.10"}}),
			wantField: "network.static.addresses[0]"},
		{name: "v6 gateway4", config: static(&enrolmentpb.Static{Addresses: []string{"192.0.2.10/24"}, Gateway4: "2001:db8::1"}),
			wantField: "network.static.gateway4", wantText: "not an IPv4"},
		{name: "gateway4 without v4 address", config: static(&enrolmentpb.Static{Addresses: []string{"2001:db8::10/64"}, Gateway4: "192.0.2.1"}),
			wantField: "network.static.gateway4", wantText: "contradicts itself"},
		{name: "gateway6 without v6 address", config: static(&enrolmentpb.Static{Addresses: []string{"192.0.2.10/24"}, Gateway6: "2001:db8::1"}),
			wantField: "network.static.gateway6", wantText: "contradicts itself"},
		{name: "bad dns", config: static(&enrolmentpb.Static{Addresses: []string{"192.0.2.10/24"}, Dns: []string{"dns.example"}}),
			wantField: "network.static.dns[0]"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			got, err := Check(tc.config, now)
			if tc.wantField != "" {
				var fe *FieldError
				if !errors.As(err, &fe) || fe.Field != tc.wantField || !strings.Contains(fe.Problem, tc.wantText) {
					t.Fatalf("Check = %v, want a FieldError for %s containing %q", err, tc.wantField, tc.wantText)
				}
				return
			}
			if err != nil {
				t.Fatal(err)
			}
			// TestOwnerRecovery checks OwnerRecovery.
			if diff := cmp.Diff(tc.want, got, cmpopts.EquateComparable(netip.Prefix{}, netip.Addr{}), protocmp.Transform(),
				cmpopts.IgnoreFields(Enrolment{}, "OwnerRecovery"), cmpopts.IgnoreUnexported(Enrolment{}),
				cmp.Comparer(func(a, b *age.X25519Identity) bool { return a.String() == b.String() })); diff != "" {
				t.Errorf("Check (-want +got):\n%s", diff)
			}
		})
	}
}

func TestParse(t *testing.T) {
	b, err := proto.Marshal(bootstrap("prod", nil))
	if err != nil {
		t.Fatal(err)
	}
	e, err := Parse(b, "test", now)
	if err != nil || e.ClusterName != "prod" || e.Source != "test" {
		t.Errorf("Parse = %+v, %v", e, err)
	}
	_, err = Parse([]byte{0xff, 0xff, 0xff}, "fw_cfg x", now)
	if err == nil || !strings.Contains(err.Error(), "from fw_cfg x is not a valid config") {
		t.Errorf("Parse of garbage = %v, want an error naming the source", err)
	}
	bad, _ := proto.Marshal(bootstrap("Bad Name", nil))
	_, err = Parse(bad, "ESP y", now)
	var fe *FieldError
	if !errors.As(err, &fe) || !strings.Contains(err.Error(), "from ESP y: field bootstrap.cluster_name") {
		t.Errorf("Parse of a bad name = %v", err)
	}
}

// FuzzParse checks that no input makes Parse panic, and that whatever it
// accepts survives a round trip unchanged.
func FuzzParse(f *testing.F) {
	for _, c := range []*enrolmentpb.Config{
		bootstrap("prod", nil),
		bootstrap("prod", cert(f, false, now.AddDate(0, -1, 0))),
		static(&enrolmentpb.Static{Addresses: []string{"192.0.2.10/24"}, Gateway4: "192.0.2.1", Dns: []string{"192.0.2.53"}}),
		join(validTicket(f)),
	} {
		b, err := proto.Marshal(c)
		if err != nil {
			f.Fatal(err)
		}
		f.Add(b)
	}
	f.Fuzz(func(t *testing.T, b []byte) {
		e, err := Parse(b, "fuzz", now)
		if err != nil {
			return
		}
		var c enrolmentpb.Config
		if err := proto.Unmarshal(b, &c); err != nil {
			t.Fatalf("Parse accepted what proto.Unmarshal refuses: %v", err)
		}
		again, err := proto.Marshal(&c)
		if err != nil {
			t.Fatal(err)
		}
		e2, err := Parse(again, "fuzz", now)
		if err != nil {
			t.Fatalf("a re-encoded accepted config was refused: %v", err)
		}
		if e.ClusterName != e2.ClusterName || e.StoragePolicy != e2.StoragePolicy {
			t.Fatalf("round trip changed the config: %+v != %+v", e, e2)
		}
	})
}

// TestLoad plays a node's boots with configs on its ESP: the first boot
// checks and records its config, later boots run from the record, even
// once the owner's certificate has expired, and ignore a changed config;
// without a usable record, the config stands in, unrecorded, until
// Confirm (TestConfirm).
func TestLoad(t *testing.T) {
	owner := cert(t, false, now.AddDate(0, -1, 0))
	first, err := proto.Marshal(bootstrap("prod", owner))
	if err != nil {
		t.Fatal(err)
	}
	other, err := proto.Marshal(bootstrap("other", nil))
	if err != nil {
		t.Fatal(err)
	}
	expired := now.AddDate(2, 0, 0)
	movedConfig := bootstrap("prod", owner)
	movedConfig.Network = &enrolmentpb.Network{NtpServers: []string{"10.0.2.2"}}
	moved, err := proto.Marshal(movedConfig)
	if err != nil {
		t.Fatal(err)
	}
	for _, tc := range []struct {
		name string
		// record, if set, is the applied config recorded on the ESP; "-"
		// is none.
		record string
		onESP  []byte
		fresh  bool
		at     time.Time
		want   string // cluster name, or an error's text
		warns  string
		// recorded is what the record must hold afterwards.
		recorded []byte
		// clock is what CheckClock at the time at says on a fresh node.
		clock string
		// ntp is the NTP servers Load must give.
		ntp []string
	}{
		{name: "first boot", record: "-", onESP: first, fresh: true, at: now, want: "prod", recorded: first},
		{name: "first boot, owner expired", record: "-", onESP: first, fresh: true, at: expired, want: "prod",
			clock: "bootstrap.owner_certificate: expired", recorded: first},
		{name: "first boot, no config", record: "-", fresh: true, at: now, want: DefaultClusterName, recorded: []byte{}},
		{name: "first boot again", record: string(other), onESP: first, fresh: true, at: now, want: "prod", recorded: first},
		{name: "later boot, owner expired", record: string(first), onESP: first, at: expired, want: "prod", recorded: first},
		{name: "later boot, clock in 2001", record: string(first), onESP: first,
			at: time.Date(2001, 1, 1, 0, 0, 0, 0, time.UTC), want: "prod", recorded: first},
		{name: "later boot, config changed", record: string(first), onESP: other, at: now, want: "prod",
			warns: "ignoring the enrolment config in ESP", recorded: first},
		// An edited config names another NTP server (a clock set back
		// revives expired credentials): the node takes no network from it.
		{name: "later boot, network changed", record: string(first), onESP: moved, at: now, want: "prod",
			warns: "takes its network only from its own record", recorded: first},
		{name: "later boot, no record, network changed", record: "-", onESP: moved, at: now, want: "prod",
			warns: "with DHCP for this boot"},
		{name: "later boot, config removed", record: string(first), at: now, want: "prod", recorded: first},
		{name: "later boot, no config applied", record: "", onESP: other, at: now, want: DefaultClusterName,
			warns: "differs", recorded: []byte{}},
		{name: "later boot, no record", record: "-", onESP: first, at: expired, want: "prod", warns: "it is missing"},
		{name: "later boot, damaged record", record: string(first[:len(first)/2]), onESP: first, at: expired, want: "prod",
			warns: "it is damaged", recorded: first[:len(first)/2]},
		{name: "later boot, damaged record, bad config", record: string(first[:len(first)/2]), onESP: []byte{0x08, 0x07},
			at: now, want: DefaultClusterName, warns: "the default config stands in"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			root := t.TempDir()
			if err := os.MkdirAll(filepath.Join(root, esp.Dir), 0o755); err != nil {
				t.Fatal(err)
			}
			if tc.record != "-" {
				if err := os.WriteFile(esp.AppliedEnrolment.In(root), []byte(tc.record), 0o600); err != nil {
					t.Fatal(err)
				}
			}
			if tc.onESP != nil {
				if err := os.WriteFile(esp.EnrolmentConfig.In(root), tc.onESP, 0o600); err != nil {
					t.Fatal(err)
				}
			}
			var log bytes.Buffer
			e, err := Load(slog.New(slog.NewTextHandler(&log, nil)), root, tc.fresh)
			got := ""
			if err != nil {
				got = err.Error()
			} else {
				got = e.ClusterName
			}
			if !strings.Contains(got, tc.want) {
				t.Errorf("Load = %q, want %q", got, tc.want)
			}
			if err == nil && e.Unconfigured() != (tc.want == DefaultClusterName) {
				t.Errorf("Load gave a config from %s: Unconfigured = %v", e.Source, e.Unconfigured())
			}
			if err == nil && e.Provisional() == tc.fresh {
				t.Errorf("Load gave a provisional config: %v, want %v", e.Provisional(), !tc.fresh)
			}
			if err == nil && !slices.Equal(e.NTPServers, tc.ntp) {
				t.Errorf("Load gave NTP servers %v, want %v", e.NTPServers, tc.ntp)
			}
			// A fresh node checks the clock once it is set; others never.
			if err == nil && tc.fresh {
				cerr := e.CheckClock(tc.at)
				if (cerr == nil) != (tc.clock == "") || (cerr != nil && !strings.Contains(cerr.Error(), tc.clock)) {
					t.Errorf("CheckClock(%v) = %v, want %q", tc.at, cerr, tc.clock)
				}
			}
			if !strings.Contains(log.String(), tc.warns) || (tc.warns == "" && log.Len() > 0) {
				t.Errorf("Load logged %q, want %q", log.String(), tc.warns)
			}
			if tc.recorded != nil {
				b, err := os.ReadFile(esp.AppliedEnrolment.In(root))
				if err != nil || !bytes.Equal(b, tc.recorded) {
					t.Errorf("record after Load: %d bytes, %v; want %d bytes", len(b), err, len(tc.recorded))
				}
			}
		})
	}
}

// TestOwnerRecovery: a node seals its keys for its owner unless its config
// says no; a node without a config does.
func TestOwnerRecovery(t *testing.T) {
	off := bootstrap("prod", nil)
	off.NoOwnerRecovery = true
	for _, tc := range []struct {
		name   string
		config *enrolmentpb.Config
		want   bool
	}{
		{"default", bootstrap("prod", nil), true},
		{"turned off", off, false},
	} {
		t.Run(tc.name, func(t *testing.T) {
			e, err := Check(tc.config, now)
			if err != nil || e.OwnerRecovery != tc.want {
				t.Errorf("Check = %+v, %v; want OwnerRecovery %v", e, err, tc.want)
			}
		})
	}
	if e, err := parse(nil, "none", now); err != nil || !e.OwnerRecovery {
		t.Errorf("the default config = %+v, %v; want OwnerRecovery", e, err)
	}
}

// TestCheckFounder: a bootstrap config's first node's ticket is taken
// only as its owner signed it, for its cluster and with its secret.
func TestCheckFounder(t *testing.T) {
	owner, err := pki.NewOwner("owner", now.AddDate(0, -1, 0))
	if err != nil {
		t.Fatal(err)
	}
	stranger, err := pki.NewOwner("owner", now.AddDate(0, -1, 0))
	if err != nil {
		t.Fatal(err)
	}
	founder := func(by *pki.Cert, cluster string) (*enrolmentpb.Ticket, []byte) {
		tk, body, err := ticket.Founder(cluster, now)
		if err != nil {
			t.Fatal(err)
		}
		stmt, err := authority.Sign(by.Cert, by.Key, authority.KindTicket, body)
		if err != nil {
			t.Fatal(err)
		}
		return tk, stmt
	}
	tk, stmt := founder(owner, "prod")
	_, strangers := founder(stranger, "prod")
	_, otherCluster := founder(owner, "other")
	config := func(ownerCert, statement, secret []byte) *enrolmentpb.Config {
		c := bootstrap("prod", ownerCert)
		c.GetBootstrap().OwnerTicket, c.GetBootstrap().TicketSecret = statement, secret
		return c
	}
	wrongSecret := slices.Clone(tk.GetSecret())
	wrongSecret[0] ^= 1
	for _, tc := range []struct {
		name   string
		config *enrolmentpb.Config
		want   string
	}{
		{"the owner's", config(owner.Cert.Raw, stmt, tk.GetSecret()), ""},
		{"none", config(owner.Cert.Raw, nil, nil), ""},
		{"in a cluster without an owner", config(nil, stmt, tk.GetSecret()), "without an owner"},
		{"without its secret", config(owner.Cert.Raw, stmt, nil), "one is missing"},
		{"another secret", config(owner.Cert.Raw, stmt, wrongSecret), "not the one whose claim key the owner signed"},
		{"signed by another owner", config(owner.Cert.Raw, strangers, tk.GetSecret()), "not signed by this node's owner"},
		{"for another cluster", config(owner.Cert.Raw, otherCluster, tk.GetSecret()), `for cluster "other"`},
	} {
		t.Run(tc.name, func(t *testing.T) {
			e, err := Check(tc.config, now)
			if tc.want != "" {
				var fe *FieldError
				if !errors.As(err, &fe) || !strings.HasPrefix(fe.Field, "bootstrap.") || !strings.Contains(fe.Problem, tc.want) {
					t.Fatalf("Check = %v, want a FieldError of the bootstrap containing %q", err, tc.want)
				}
				return
			}
			if err != nil {
				t.Fatal(err)
			}
			if len(tc.config.GetBootstrap().GetOwnerTicket()) > 0 &&
				(!bytes.Equal(e.FounderTicket.GetId(), tk.GetId()) || !bytes.Equal(e.FounderStatement, stmt)) {
				t.Errorf("Check took the ticket %x, want %x", e.FounderTicket.GetId(), tk.GetId())
			}
		})
	}
}
