package main

import (
	"maps"
	"path/filepath"
	"slices"
	"strings"

	"github.com/spf13/cobra"
)

// Shell completion (cobra's `borough completion bash|zsh|fish`) knows,
// beyond the commands and flags, the values they take: a NODE is one of
// the addresses pinned in the config directory (a cluster's client ports
// and node APIs the owner reached before), a MEMBER one of those in the
// directory of members (directory.go), and -o one of its formats. Completion runs without a passphrase, so it never
// asks a cluster: it offers what this machine already knows.

// pinnedNodes are the addresses pinned here, as given (HOST:PORT).
func pinnedNodes() []string {
	dirs, _ := filepath.Glob(filepath.Join(configDir, "clusters", "*"))
	var out []string
	for _, d := range dirs {
		name := filepath.Base(d)
		if i := strings.LastIndex(name, "_"); i > 0 {
			out = append(out, name[:i]+":"+name[i+1:])
		}
	}
	return out
}

// knownMembers are the names of the members in the directory.
func knownMembers() []string {
	return slices.Sorted(maps.Keys(loadDirectory()))
}

// completeArgs completes a command's arguments by the words of its use
// line: NODE and ENDPOINTS by the pinned addresses, MEMBER by the members.
func completeArgs(cmd *cobra.Command, args []string, _ string) ([]string, cobra.ShellCompDirective) {
	words := strings.Fields(cmd.Use)[1:]
	if len(args) >= len(words) {
		return nil, cobra.ShellCompDirectiveNoFileComp
	}
	switch strings.Trim(words[len(args)], "[]") {
	case "NODE", "ENDPOINTS":
		return pinnedNodes(), cobra.ShellCompDirectiveNoFileComp
	case "MEMBER":
		return knownMembers(), cobra.ShellCompDirectiveNoFileComp
	}
	return nil, cobra.ShellCompDirectiveDefault
}

// addCompletion gives every command under c that takes a NODE, ENDPOINTS
// or MEMBER its argument completion, and the flags that take one of a few
// values theirs.
func addCompletion(c *cobra.Command) {
	if c.ValidArgsFunction == nil && c.Runnable() && strings.ContainsAny(c.Use, " ") {
		c.ValidArgsFunction = completeArgs
	}
	if c.Flags().Lookup("output") != nil {
		_ = c.RegisterFlagCompletionFunc("output", cobra.FixedCompletions([]string{outputText, outputJSON}, cobra.ShellCompDirectiveNoFileComp))
	}
	for _, flag := range []string{"cluster", "api"} {
		if c.Flags().Lookup(flag) != nil {
			_ = c.RegisterFlagCompletionFunc(flag, func(*cobra.Command, []string, string) ([]string, cobra.ShellCompDirective) {
				if flag == "api" {
					var out []string
					for _, name := range knownMembers() {
						out = append(out, name+"=")
					}
					return out, cobra.ShellCompDirectiveNoSpace | cobra.ShellCompDirectiveNoFileComp
				}
				return pinnedNodes(), cobra.ShellCompDirectiveNoFileComp
			})
		}
	}
	for _, sub := range c.Commands() {
		addCompletion(sub)
	}
}
