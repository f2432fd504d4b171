package main

import (
	"archive/tar"
	"bytes"
	"context"
	"encoding/json"
	"fmt"
	"io"
	"maps"
	"os"
	"path/filepath"
	"regexp"
	"slices"
	"strings"
	"time"

	"github.com/klauspost/compress/zstd"
	"github.com/prometheus/common/expfmt"
	"github.com/spf13/cobra"
	"google.golang.org/protobuf/encoding/protojson"
	"google.golang.org/protobuf/proto"

	"github.com/borough-os/borough/internal/atomicfile"
	"github.com/borough-os/borough/internal/clusterhealth"
	"github.com/borough-os/borough/internal/nodeapi"
	"github.com/borough-os/borough/proto/nodepb"
)

// A support bundle is what someone helping with a cluster asks for first,
// in one file: every member's log (this boot and those its journal keeps),
// what it says of itself (version, boot timeline, disks and network
// interfaces, escrow, update), its metrics, and the cluster's health,
// member list and etcd status. It holds no secret: the node API serves
// none, etcd's keys are not read, and the logs say no key (the boot test
// greps a bundle for every key its cluster holds). What could not be had
// is listed in the bundle's MANIFEST rather than failing it: a bundle is
// most needed when something is down.

// fileName matches what may not be in a file's name in the bundle: a
// member's name is what its cluster says.
var fileName = regexp.MustCompile(`[^A-Za-z0-9._-]|^\.+$`)

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

// bundle is a support bundle being written: files in a tar, compressed.
type bundle struct {
	tw       *tar.Writer
	manifest strings.Builder
	progress io.Writer
}

func (b *bundle) add(name string, data []byte) error {
	hdr := &tar.Header{Name: name, Mode: 0o644, Size: int64(len(data)), ModTime: time.Now(), Typeflag: tar.TypeReg}
	if err := b.tw.WriteHeader(hdr); err != nil {
		return err
	}
	_, err := b.tw.Write(data)
	fmt.Fprintf(&b.manifest, "%s\t%d bytes\n", name, len(data))
	return err
}

// missing records what could not be had.
func (b *bundle) missing(what string, err error) {
	fmt.Fprintf(&b.manifest, "MISSING %s: %v\n", what, err)
	fmt.Fprintf(b.progress, "support: no %s: %v\n", what, err)
}

func support(progress io.Writer, endpoints []string, fingerprint string, given map[string]string, out string, boots int, timeout time.Duration) error {
	s, err := openSession(endpoints, fingerprint, given)
	if err != nil {
		return err
	}
	defer s.close()
	var buf bytes.Buffer
	zw, err := zstd.NewWriter(&buf)
	if err != nil {
		return err
	}
	b := &bundle{tw: tar.NewWriter(zw), progress: progress}
	members, err := b.clusterParts(s, timeout)
	if err != nil {
		return err
	}
	for _, name := range slices.Sorted(maps.Keys(members)) {
		c, err := s.clients.client(name, members[name])
		if err != nil {
			b.missing(name+"'s node API", err)
			continue
		}
		ctx, cancel := context.WithTimeout(context.Background(), timeout)
		err = b.node(ctx, name, c, boots)
		cancel()
		if err != nil {
			return err
		}
	}
	if err := b.add("MANIFEST", []byte(b.manifest.String())); err != nil {
		return err
	}
	if err := b.tw.Close(); err != nil {
		return err
	}
	if err := zw.Close(); err != nil {
		return err
	}
	if err := os.MkdirAll(filepath.Dir(out), 0o755); err != nil {
		return err
	}
	if err := atomicfile.Write(out, buf.Bytes(), 0o600); err != nil {
		return fmt.Errorf("writing the support bundle: %w", err)
	}
	fmt.Fprintf(progress, "support: wrote %s (%d members, %d bytes)\n", out, len(members), buf.Len())
	return nil
}

// clusterParts adds what the cluster says (its members, each endpoint's
// status, its health) and returns its members' client URLs, by name. A
// cluster that does not answer (no quorum) is missing from the bundle,
// and its members are those --api names.
func (b *bundle) clusterParts(s *session, timeout time.Duration) (map[string][]string, error) {
	ctx, cancel := context.WithTimeout(context.Background(), timeout)
	defer cancel()
	members := map[string][]string{}
	if err := b.cluster(ctx, s); err != nil {
		b.missing("the cluster's members and status", err)
	}
	h, err := s.health(ctx, clusterhealth.DefaultClockOffset)
	if err != nil {
		b.missing("the cluster's health", err)
		for name := range s.clients.given {
			members[name] = nil
		}
		return members, nil
	}
	for _, m := range h.Members {
		members[m.Name] = m.URLs
	}
	return members, b.addJSON("cluster/health.json", h)
}

// cluster adds etcd's member list and each endpoint's status.
func (b *bundle) cluster(ctx context.Context, s *session) error {
	fmt.Fprintf(b.progress, "support: the cluster's members and status\n")
	list, err := s.etcd.MemberList(ctx)
	if err != nil {
		return fmt.Errorf("the cluster at %s does not answer: %w", strings.Join(s.endpoints, ","), err)
	}
	if err := b.addJSON("cluster/members.json", list); err != nil {
		return err
	}
	for _, ep := range s.endpoints {
		st, err := s.etcd.Status(ctx, "https://"+ep)
		if err != nil {
			b.missing("etcd status of "+ep, err)
			continue
		}
		if err := b.addJSON("cluster/status-"+fileName.ReplaceAllString(ep, "_")+".json", st); err != nil {
			return err
		}
	}
	return nil
}

// node adds what member name's node API says: its info, its metrics and
// the logs of up to boots boots.
func (b *bundle) node(ctx context.Context, name string, c *nodeapi.Client, boots int) error {
	dir := "nodes/" + fileName.ReplaceAllString(name, "_") + "/"
	fmt.Fprintf(b.progress, "support: %s: info, metrics, logs\n", name)
	if info, err := c.Info(ctx); err != nil {
		b.missing(name+"'s info", err)
	} else if err := b.addProto(dir+"info.json", info); err != nil {
		return err
	}
	if families, err := c.Metrics(ctx); err != nil {
		b.missing(name+"'s metrics", err)
	} else {
		var text bytes.Buffer
		for _, n := range slices.Sorted(maps.Keys(families)) {
			if _, err := expfmt.MetricFamilyToText(&text, families[n]); err != nil {
				return err
			}
		}
		if err := b.add(dir+"metrics.txt", text.Bytes()); err != nil {
			return err
		}
	}
	for boot := int32(0); boot > -int32(boots); boot-- {
		var text bytes.Buffer
		err := c.Logs(ctx, &nodepb.LogsRequest{Boot: boot}, func(e *nodepb.LogEntry) { fmt.Fprintln(&text, logLine(e)) })
		if err != nil {
			b.missing(fmt.Sprintf("%s's log of boot %d", name, boot), err)
			break
		}
		if err := b.add(fmt.Sprintf("%slog-boot%d.txt", dir, boot), text.Bytes()); err != nil {
			return err
		}
	}
	return nil
}

func (b *bundle) addJSON(name string, v any) error {
	if m, ok := v.(proto.Message); ok {
		return b.addProto(name, m)
	}
	js, err := json.MarshalIndent(v, "", "  ")
	if err != nil {
		return err
	}
	return b.add(name, js)
}

func (b *bundle) addProto(name string, m proto.Message) error {
	js, err := protojson.MarshalOptions{Multiline: true}.Marshal(m)
	if err != nil {
		return err
	}
	return b.add(name, js)
}
