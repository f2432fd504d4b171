package main

import (
	"context"
	"fmt"
	"io"
	"maps"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"time"

	"github.com/spf13/cobra"

	"github.com/borough-os/borough/internal/atomicfile"
	"github.com/borough-os/borough/internal/clusterhealth"
	"github.com/borough-os/borough/internal/ownersession"
	supportbundle "github.com/borough-os/borough/internal/support"
)

// borough support writes a support bundle (package support) of the
// cluster at ENDPOINTS.

func supportCommand() *cobra.Command {
	var fingerprint, out string
	var addrs []string
	var boots int
	var timeout time.Duration
	c := &cobra.Command{
		Use:   "support ENDPOINTS",
		Short: "Write a support bundle of the cluster at ENDPOINTS (client ports): logs, info, metrics and status of every member, no secrets",
		Args:  cobra.ExactArgs(1),
		RunE: func(cmd *cobra.Command, args []string) error {
			given, err := apiAddrs(addrs)
			if err != nil {
				return err
			}
			if !strings.HasSuffix(out, ".tar.zst") {
				return fmt.Errorf("--out %q: a support bundle is a .tar.zst", out)
			}
			if boots < 1 {
				return fmt.Errorf("--boots %d: take at least the current boot's log", boots)
			}
			return support(cmd.ErrOrStderr(), strings.Split(args[0], ","), fingerprint, given, out, boots, timeout)
		},
	}
	c.Flags().StringVar(&fingerprint, "fingerprint", "", "the cluster CA's fingerprint; needed on first use")
	c.Flags().StringArrayVar(&addrs, "api", nil, "NAME=HOST:PORT: the node API of member NAME (repeat for each)")
	c.Flags().StringVarP(&out, "out", "o", "borough-support.tar.zst", "the bundle to write")
	c.Flags().IntVar(&boots, "boots", 5, "how many boots' logs to take, the current one first")
	c.Flags().DurationVar(&timeout, "timeout", time.Minute, "how long to wait for the cluster and each member")
	return c
}

func support(progress io.Writer, endpoints []string, fingerprint string, given map[string]string, out string, boots int, timeout time.Duration) error {
	s, err := openSession(endpoints, fingerprint, given)
	if err != nil {
		return err
	}
	defer s.Close()
	b, err := supportbundle.New(progress)
	if err != nil {
		return err
	}
	members, err := clusterParts(b, s, timeout)
	if err != nil {
		return err
	}
	for _, name := range slices.Sorted(maps.Keys(members)) {
		c, err := s.Members.Client(name, members[name])
		if err != nil {
			b.Missing(name+"'s node API", err)
			continue
		}
		ctx, cancel := context.WithTimeout(context.Background(), timeout)
		err = b.Node(ctx, name, c, boots)
		cancel()
		if err != nil {
			return err
		}
	}
	data, err := b.Close()
	if err != nil {
		return err
	}
	if err := os.MkdirAll(filepath.Dir(out), 0o755); err != nil {
		return err
	}
	if err := atomicfile.Write(out, data, 0o600); err != nil {
		return fmt.Errorf("writing the support bundle: %w", err)
	}
	fmt.Fprintf(progress, "support: wrote %s (%d members, %d bytes)\n", out, len(members), len(data))
	return nil
}

// clusterParts adds what the cluster says (its members, each endpoint's
// status, its health) and returns its members' client URLs, by name. A
// cluster that does not answer (no quorum) is missing from the bundle,
// and its members are those --api names.
func clusterParts(b *supportbundle.Bundle, s *ownersession.Session, timeout time.Duration) (map[string][]string, error) {
	ctx, cancel := context.WithTimeout(context.Background(), timeout)
	defer cancel()
	members := map[string][]string{}
	if err := b.Cluster(ctx, s.Etcd, s.Endpoints); err != nil {
		b.Missing("the cluster's members and status", err)
	}
	h, err := lookHealth(ctx, s, clusterhealth.DefaultClockOffset)
	if err != nil {
		b.Missing("the cluster's health", err)
		for name := range s.Members.Given {
			members[name] = nil
		}
		return members, nil
	}
	for _, m := range h.Members {
		members[m.Name] = m.URLs
	}
	return members, b.AddJSON("cluster/health.json", h)
}
