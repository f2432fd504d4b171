package main

import (
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/spf13/cobra"
	"github.com/spf13/pflag"
	"google.golang.org/protobuf/proto"

	"github.com/borough-os/borough/internal/pki"
	"github.com/borough-os/borough/proto/enrolmentpb"
)

// TestUnknownCommands: a word that names no command fails, at any depth,
// saying which; a group of commands alone prints its help and succeeds.
func TestUnknownCommands(t *testing.T) {
	for _, tc := range []struct {
		args []string
		want string
	}{
		{[]string{"node", "list"}, `borough node has no command "list"`},
		{[]string{"etcd", "snapshot"}, `borough etcd has no command "snapshot"`},
		{[]string{"nosuch"}, `unknown command "nosuch"`},
		{[]string{"node"}, ""},
		{[]string{"cluster"}, ""},
	} {
		t.Run(strings.Join(tc.args, " "), func(t *testing.T) {
			var out strings.Builder
			err := run(tc.args, &out, &out)
			if tc.want == "" && err != nil || tc.want != "" && (err == nil || !strings.Contains(err.Error(), tc.want)) {
				t.Errorf("borough %s = %v, want %q", strings.Join(tc.args, " "), err, tc.want)
			}
		})
	}
}

// TestFlagUsage: no flag's usage has a back-quote, which cobra's help
// takes for the name of the flag's value ("--owner borough owner init").
func TestFlagUsage(t *testing.T) {
	var walk func(*cobra.Command)
	walk = func(c *cobra.Command) {
		c.LocalFlags().VisitAll(func(f *pflag.Flag) {
			if strings.Contains(f.Usage, "`") {
				t.Errorf("%s --%s: usage %q has a back-quote", c.CommandPath(), f.Name, f.Usage)
			}
		})
		for _, sub := range c.Commands() {
			walk(sub)
		}
	}
	walk(commandTree())
}

// TestVersion: the CLI says its version.
func TestVersion(t *testing.T) {
	var out strings.Builder
	if err := run([]string{"version"}, &out, &out); err != nil || !strings.HasPrefix(out.String(), "borough "+version+" (go") {
		t.Errorf("borough version = %v:\n%s", err, out.String())
	}
}

// TestWrongFiles: a file given for another kind says what it is not, in
// words, not a protobuf field or the bytes a parser found.
func TestWrongFiles(t *testing.T) {
	configDir = t.TempDir()
	dir := t.TempDir()
	cfg := filepath.Join(dir, "bootstrap.pb")
	var out strings.Builder
	if err := run([]string{"--config", configDir, "enrolment", "bootstrap", "--cluster", "prod", "--no-owner", "--out", cfg}, &out, &out); err != nil {
		t.Fatal(err)
	}
	text := filepath.Join(dir, "notes.txt")
	if err := os.WriteFile(text, []byte(strings.Repeat("D2 is not a disk\n", 100)), 0o600); err != nil {
		t.Fatal(err)
	}
	for _, tc := range []struct {
		name string
		args []string
		want string
	}{
		{"a config for a ticket", []string{"enrolment", "join", "--ticket", cfg, "--out", filepath.Join(dir, "join.pb")}, "is an enrolment config, not a ticket"},
		{"text for a ticket", []string{"enrolment", "join", "--ticket", text, "--out", filepath.Join(dir, "join.pb")}, "is not a ticket (borough cluster ticket writes one)"},
		{"text for an image", []string{"image", "enrol", text, cfg}, text + " is not a disk image: it has no GPT partition table"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			err := run(append([]string{"--config", configDir}, tc.args...), &out, &out)
			if err == nil || !strings.Contains(err.Error(), tc.want) || strings.Contains(err.Error(), "[") {
				t.Errorf("borough %s = %v, want an error saying %q in words", strings.Join(tc.args, " "), err, tc.want)
			}
		})
	}
}

// TestShowEnrolment: show describes a join config's ticket and owner in
// words, not escaped bytes, and refuses one whose ticket has expired, as
// image enrol does; an unexpired one a node accepts.
func TestShowEnrolment(t *testing.T) {
	o, err := pki.NewOwner("alice", time.Now().Add(-time.Hour))
	if err != nil {
		t.Fatal(err)
	}
	dir := t.TempDir()
	config := func(name string, expires time.Time) string {
		tk, err := proto.Marshal(&enrolmentpb.Ticket{
			Version: 1, ClusterName: "prod", CaFingerprint: "sha256:" + strings.Repeat("ab", 32),
			JoinEndpoints: []string{"192.0.2.1:7834"}, Id: make([]byte, 16), Secret: make([]byte, 32), Expires: expires.Unix(),
		})
		if err != nil {
			t.Fatal(err)
		}
		b, err := proto.Marshal(&enrolmentpb.Config{Version: 1, Mode: &enrolmentpb.Config_Join{Join: &enrolmentpb.Join{Ticket: tk, OwnerCertificate: o.Cert.Raw}}})
		if err != nil {
			t.Fatal(err)
		}
		path := filepath.Join(dir, name)
		if err := os.WriteFile(path, b, 0o600); err != nil {
			t.Fatal(err)
		}
		return path
	}
	for _, tc := range []struct {
		name, config, wantErr string
	}{
		{"a live ticket", config("live.pb", time.Now().Add(time.Hour)), ""},
		{"an expired ticket", config("expired.pb", time.Now().Add(-time.Minute)), "its ticket expired at"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			var out strings.Builder
			err := run([]string{"enrolment", "show", tc.config}, &out, &out)
			if !strings.Contains(out.String(), "# ticket: joins cluster prod (CA sha256:abab") || !strings.Contains(out.String(), "# owner: alice sha256:") ||
				strings.Contains(out.String(), `\\`) {
				t.Errorf("show printed:\n%s", out.String())
			}
			if tc.wantErr == "" {
				if err != nil || !strings.Contains(out.String(), "# a node accepts this config") {
					t.Errorf("show = %v:\n%s", err, out.String())
				}
				return
			}
			if err == nil || !strings.Contains(err.Error(), tc.wantErr) || strings.Contains(out.String(), "a node accepts") {
				t.Errorf("show = %v, want %q:\n%s", err, tc.wantErr, out.String())
			}
			if err := run([]string{"image", "enrol", filepath.Join(dir, "no.img"), tc.config}, &out, &out); err == nil || !strings.Contains(err.Error(), tc.wantErr) {
				t.Errorf("image enrol = %v, want %q", err, tc.wantErr)
			}
		})
	}
}
