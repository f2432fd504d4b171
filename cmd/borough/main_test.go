package main

import (
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
