package main

import (
	"os"
	"path/filepath"
	"strings"
	"testing"

	"github.com/spf13/cobra"
	"github.com/spf13/pflag"
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
