package enrolment

import (
	"bytes"
	"crypto/x509"
	"log/slog"
	"os"
	"path/filepath"
	"strings"
	"testing"

	"google.golang.org/protobuf/proto"

	"github.com/borough-os/borough/datavol"
	"github.com/borough-os/borough/esp"
	"github.com/borough-os/borough/internal/keyfile"
	"github.com/borough-os/borough/internal/pki"
	"github.com/borough-os/borough/proto/enrolmentpb"
)

// TestConfirm plays an attacker who rewrites the ESP while the machine is
// off: whatever the ESP's record says, an established node runs from the
// data volume's record, says which file it refused and why, and puts the
// authentic record back.
func TestConfirm(t *testing.T) {
	ownerDER := cert(t, false, now)
	owner, err := x509.ParseCertificate(ownerDER)
	if err != nil {
		t.Fatal(err)
	}
	genuineConfig := bootstrap("prod", ownerDER)
	genuineConfig.StoragePolicy = enrolmentpb.StoragePolicy_STORAGE_POLICY_TPM_REQUIRED
	genuine := marshal(t, genuineConfig)
	forgedConfig := bootstrap("prod", cert(t, false, now))
	forgedConfig.StoragePolicy = enrolmentpb.StoragePolicy_STORAGE_POLICY_TPM_DISABLED
	forged := marshal(t, forgedConfig)
	swapped := marshal(t, bootstrap("other", ownerDER))
	flipped := bytes.Clone(genuine)
	flipped[len(flipped)-40] ^= 0x01
	movedConfig := proto.Clone(forgedConfig).(*enrolmentpb.Config)
	movedConfig.Network = &enrolmentpb.Network{NtpServers: []string{"10.0.2.2"}}
	moved := marshal(t, movedConfig)

	for _, tc := range []struct {
		name string
		// espRecord, config and dataRecord are the files before the boot;
		// nil is none.
		espRecord, config, dataRecord []byte
		fresh                         bool
		// refused is what the log must say of the ESP's record; "" is
		// nothing.
		refused string
		// wantErr, if set, is Confirm's error.
		wantErr string
	}{
		{name: "first boot", config: genuine, fresh: true},
		{name: "records match", espRecord: genuine, dataRecord: genuine},
		{name: "another owner and a lower policy", espRecord: forged, dataRecord: genuine,
			refused: "in the owner (" + fingerprint(t, forged) + ", not " + pki.Fingerprint(owner) +
				"), the storage policy (disabled, not required)"},
		{name: "record deleted, another config", config: forged, dataRecord: genuine, refused: "it is missing"},
		{name: "record truncated", espRecord: genuine[:len(genuine)-7], config: forged, dataRecord: genuine,
			refused: "it is damaged"},
		{name: "record bit-flipped", espRecord: flipped, dataRecord: genuine, refused: "refused"},
		{name: "another node's record", espRecord: swapped, dataRecord: genuine, refused: "the cluster (other, not prod)"},
		// A config naming another NTP server beside a forged record: the
		// node takes neither's network.
		{name: "forged record, moved machine", espRecord: forged, config: moved, dataRecord: genuine,
			refused: "the owner"},
		{name: "volume from an older Borough", espRecord: genuine, refused: ""},
		{name: "volume record damaged", espRecord: genuine, dataRecord: genuine[:5],
			wantErr: "refusing to guess which config this node was enrolled with"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			espRoot, dataRoot := t.TempDir(), t.TempDir()
			write(t, espRoot, string(esp.AppliedEnrolment), tc.espRecord)
			write(t, espRoot, string(esp.EnrolmentConfig), tc.config)
			write(t, dataRoot, string(datavol.AppliedEnrolment), tc.dataRecord)
			var log bytes.Buffer
			lg := slog.New(slog.NewTextHandler(&log, nil))
			e, err := Load(lg, espRoot, tc.fresh)
			if err != nil {
				t.Fatalf("Load: %v", err)
			}
			e, err = Confirm(lg, e, espRoot, dataRoot)
			if tc.wantErr != "" {
				if err == nil || !strings.Contains(err.Error(), tc.wantErr) {
					t.Fatalf("Confirm = %v, want %q", err, tc.wantErr)
				}
				return
			}
			if err != nil {
				t.Fatalf("Confirm: %v", err)
			}
			if e.Provisional() || e.Owner == nil || !e.Owner.Equal(owner) || e.StoragePolicy != keyfile.TPMRequired && !tc.fresh {
				t.Errorf("Confirm gave owner %v, policy %v, provisional %v; want the genuine owner and policy",
					e.OwnerName(), e.StoragePolicy, e.Provisional())
			}
			gotRefusal := strings.Contains(log.String(), "refused "+string(esp.AppliedEnrolment))
			if gotRefusal != (tc.refused != "") || !strings.Contains(log.String(), tc.refused) {
				t.Errorf("Confirm logged %q, want a refusal saying %q", log.String(), tc.refused)
			}
			if len(e.NTPServers) != 0 {
				t.Errorf("NTP servers %v, want the genuine record's (none)", e.NTPServers)
			}
			want := genuine
			for _, f := range []string{esp.AppliedEnrolment.In(espRoot), datavol.AppliedEnrolment.In(dataRoot)} {
				if b := readFile(t, f); !bytes.Equal(b, want) {
					t.Errorf("%s holds %d bytes after Confirm, want the genuine record's %d", f, len(b), len(want))
				}
			}
		})
	}
}

func marshal(t *testing.T, c *enrolmentpb.Config) []byte {
	t.Helper()
	b, err := proto.Marshal(c)
	if err != nil {
		t.Fatal(err)
	}
	return b
}

// fingerprint is the owner fingerprint of a marshalled bootstrap config.
func fingerprint(t *testing.T, config []byte) string {
	t.Helper()
	e, err := Parse(config, "test", now)
	if err != nil {
		t.Fatal(err)
	}
	return pki.Fingerprint(e.Owner)
}

// write puts b at name under root, if b is set.
func write(t *testing.T, root, name string, b []byte) {
	t.Helper()
	if b == nil {
		return
	}
	path := filepath.Join(root, name)
	if err := os.MkdirAll(filepath.Dir(path), 0o755); err != nil {
		t.Fatal(err)
	}
	if err := os.WriteFile(path, b, 0o600); err != nil {
		t.Fatal(err)
	}
}

// TestWarnUnused: an established node warns of a config it does not use,
// whatever differs in it, and of its own config left in fw_cfg, spent
// there or not; of its own config on the ESP it says nothing.
func TestWarnUnused(t *testing.T) {
	owner, err := pki.NewOwner("owner", now)
	if err != nil {
		t.Fatal(err)
	}
	config := founderConfig(t, owner)
	own := marshal(t, config)
	record, _, err := spend(own)
	if err != nil {
		t.Fatal(err)
	}
	config.Network = &enrolmentpb.Network{NtpServers: []string{"10.0.2.2"}}
	other := marshal(t, config)
	for _, tc := range []struct {
		name, source string
		config       []byte
		want         string
	}{
		{"its own config on the ESP", "ESP " + string(esp.EnrolmentConfig), own, ""},
		{"its own config in fw_cfg", "fw_cfg opt/borough/enrolment", own, "still holds this node's enrolment config"},
		{"its own config, spent, in fw_cfg", "fw_cfg opt/borough/enrolment", record, "still holds this node's enrolment config"},
		{"another NTP server on the ESP", "ESP " + string(esp.EnrolmentConfig), other, "ignoring the enrolment config in ESP"},
		{"another NTP server pushed", "the owner's node API", other, "ignoring the enrolment config in the owner's node API"},
		{"no config", sourceNone, nil, ""},
	} {
		t.Run(tc.name, func(t *testing.T) {
			var log bytes.Buffer
			warnUnused(slog.New(slog.NewTextHandler(&log, nil)), tc.source, tc.config, record)
			if !strings.Contains(log.String(), tc.want) || (tc.want == "") != (log.Len() == 0) {
				t.Errorf("warned %q, want %q", log.String(), tc.want)
			}
		})
	}
}
