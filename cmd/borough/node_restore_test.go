package main

import (
	"bytes"
	"crypto/sha256"
	"crypto/tls"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	bolt "go.etcd.io/bbolt"
	"google.golang.org/protobuf/proto"

	"github.com/borough-os/borough/internal/backup"
	"github.com/borough-os/borough/internal/enrolment"
	"github.com/borough-os/borough/internal/ownerkey"
	"github.com/borough-os/borough/internal/pki"
	"github.com/borough-os/borough/proto/enrolmentpb"
)

// TestBootstrapRestore writes configs that restore backups: the owner's
// whole backup names its cluster, CA and snapshot in the config, and no
// key to it; another owner's, a truncated one, one of another cluster
// than --cluster, and one for a cluster without an owner are refused,
// and no config is written.
func TestBootstrapRestore(t *testing.T) {
	var out strings.Builder
	owner, other, ca := twoOwners(t)
	dir := t.TempDir()
	good, meta := writeBackup(t, dir, "good", owner, ca)
	foreign, _ := writeBackup(t, dir, "foreign", other.TLS(), ca)
	truncated := filepath.Join(dir, "truncated")
	if err := os.WriteFile(truncated, readFile(t, good)[:len(readFile(t, good))-200], 0o600); err != nil {
		t.Fatal(err)
	}
	for _, tc := range []struct {
		name    string
		args    []string
		wantErr string
	}{
		{"the owner's backup", []string{"--restore", good}, ""},
		{"another owner's", []string{"--restore", foreign}, "not encrypted to this owner's key"},
		{"a truncated backup", []string{"--restore", truncated}, "damaged or truncated"},
		{"another cluster than --cluster", []string{"--restore", good, "--cluster", "staging"}, `the backup is of cluster "prod", not "staging"`},
		{"a cluster without an owner", []string{"--restore", good, "--no-owner"}, "drop --no-owner"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			cfg := filepath.Join(t.TempDir(), "restore.pb")
			err := run(append([]string{"--config", configDir, "enrolment", "bootstrap", "--out", cfg}, tc.args...), &out, &out)
			if tc.wantErr != "" {
				if err == nil || !strings.Contains(err.Error(), tc.wantErr) {
					t.Errorf("bootstrap = %v, want an error saying %q", err, tc.wantErr)
				}
				if _, err := os.Stat(cfg); err == nil {
					t.Errorf("bootstrap wrote %s", cfg)
				}
				return
			}
			if err != nil {
				t.Fatal(err)
			}
			var c enrolmentpb.Config
			if err := proto.Unmarshal(readFile(t, cfg), &c); err != nil {
				t.Fatal(err)
			}
			e, err := enrolment.Check(&c, time.Now())
			if err != nil {
				t.Fatal(err)
			}
			r := e.Restore
			if bytes.Contains(readFile(t, cfg), []byte("AGE-SECRET-KEY-")) {
				t.Error("the config holds a private key")
			}
			if e.ClusterName != "prod" || r == nil || e.Spent() || r.SnapshotSHA256 != meta.SnapshotSHA256 ||
				r.SnapshotSize != meta.SnapshotSize || r.CAFingerprint != pki.Fingerprint(ca.Cert) || e.FounderTicket == nil {
				t.Errorf("the config restores %+v into cluster %q (first node's ticket %v)", r, e.ClusterName, e.FounderTicket != nil)
			}
		})
	}
}

// twoOwners makes an owner in a new config directory, with the passphrase
// in the environment, and returns its key pair, another owner and a
// cluster CA.
func twoOwners(t *testing.T) (tls.Certificate, *pki.Cert, *pki.CA) {
	t.Helper()
	configDir = t.TempDir()
	t.Setenv(ownerkey.PassphraseEnv, "a test owner's passphrase")
	var out strings.Builder
	if err := run([]string{"--config", configDir, "owner", "init"}, &out, &out); err != nil {
		t.Fatal(err)
	}
	owner, err := ownerKeyPair()
	if err != nil {
		t.Fatal(err)
	}
	other, err := pki.NewOwner("someone else", time.Now())
	if err != nil {
		t.Fatal(err)
	}
	ca, err := pki.NewCA("prod", time.Now())
	if err != nil {
		t.Fatal(err)
	}
	return owner, other, ca
}

// writeBackup writes, in dir as name, a backup for owner of a cluster
// "prod" of CA ca whose snapshot is an etcd database of one key, and
// returns its path and description.
func writeBackup(t *testing.T, dir, name string, owner tls.Certificate, ca *pki.CA) (string, backup.Meta) {
	t.Helper()
	db := filepath.Join(dir, name+".db")
	bdb, err := bolt.Open(db, 0o600, nil)
	if err != nil {
		t.Fatal(err)
	}
	err = bdb.Update(func(tx *bolt.Tx) error {
		b, err := tx.CreateBucket([]byte("key"))
		if err != nil {
			return err
		}
		return b.Put([]byte("k"), []byte("v"))
	})
	if cerr := bdb.Close(); err == nil {
		err = cerr
	}
	if err != nil {
		t.Fatal(err)
	}
	snapshot := readFile(t, db)
	sum := sha256.Sum256(snapshot)
	snapshot = append(snapshot, sum[:]...)
	key, err := pki.KeyPEM(ca.Key)
	if err != nil {
		t.Fatal(err)
	}
	var file bytes.Buffer
	meta, err := backup.Write(&file, owner, bytes.NewReader(snapshot),
		backup.Meta{Cluster: "prod", Taken: time.Now(), Revision: 2, CA: pki.CertPEM(ca.Cert), CAKey: key}, nil)
	if err != nil {
		t.Fatal(err)
	}
	path := filepath.Join(dir, name)
	if err := os.WriteFile(path, file.Bytes(), 0o600); err != nil {
		t.Fatal(err)
	}
	return path, meta
}
