// Package support writes a support bundle: what someone helping with a
// cluster asks for first, in one file: every member's log (this boot and
// those its journal keeps), what it says of itself (version, boot
// timeline, disks and network interfaces, escrow, update), its metrics,
// and the cluster's health, member list and etcd status. It holds no secret: the node API serves
// none, etcd's keys are not read, and the logs say no key (the boot test
// greps a bundle for every key its cluster holds). What could not be had
// is listed in the bundle's MANIFEST rather than failing it: a bundle is
// most needed when something is down.
package support

import (
	"archive/tar"
	"bytes"
	"context"
	"encoding/json"
	"fmt"
	"io"
	"maps"
	"regexp"
	"slices"
	"strings"
	"time"

	"github.com/klauspost/compress/zstd"
	"github.com/prometheus/common/expfmt"
	clientv3 "go.etcd.io/etcd/client/v3"
	"google.golang.org/protobuf/encoding/protojson"
	"google.golang.org/protobuf/proto"

	"github.com/borough-os/borough/internal/nodeapi"
	"github.com/borough-os/borough/proto/nodepb"
)

// fileName matches what may not be in a file's name in the bundle: a
// member's name is what its cluster says.
var fileName = regexp.MustCompile(`[^A-Za-z0-9._-]|^\.+$`)

// New starts a bundle, saying what it adds on progress.
func New(progress io.Writer) (*Bundle, error) {
	b := &Bundle{progress: progress}
	zw, err := zstd.NewWriter(&b.buf)
	if err != nil {
		return nil, err
	}
	b.zw, b.tw = zw, tar.NewWriter(zw)
	return b, nil
}

// Close adds the manifest and returns the bundle, compressed (.tar.zst).
func (b *Bundle) Close() ([]byte, error) {
	if err := b.add("MANIFEST", []byte(b.manifest.String())); err != nil {
		return nil, err
	}
	if err := b.tw.Close(); err != nil {
		return nil, err
	}
	if err := b.zw.Close(); err != nil {
		return nil, err
	}
	return b.buf.Bytes(), nil
}

// Bundle is a support bundle being written: files in a tar, compressed.
type Bundle struct {
	tw       *tar.Writer
	zw       *zstd.Encoder
	buf      bytes.Buffer
	manifest strings.Builder
	progress io.Writer
}

func (b *Bundle) add(name string, data []byte) error {
	hdr := &tar.Header{Name: name, Mode: 0o644, Size: int64(len(data)), ModTime: time.Now(), Typeflag: tar.TypeReg}
	if err := b.tw.WriteHeader(hdr); err != nil {
		return err
	}
	_, err := b.tw.Write(data)
	fmt.Fprintf(&b.manifest, "%s\t%d bytes\n", name, len(data))
	return err
}

// Missing records what could not be had.
func (b *Bundle) Missing(what string, err error) {
	fmt.Fprintf(&b.manifest, "MISSING %s: %v\n", what, err)
	fmt.Fprintf(b.progress, "support: no %s: %v\n", what, err)
}

// Cluster adds etcd's member list and each endpoint's status, as the
// cluster at endpoints says through etcd.
func (b *Bundle) Cluster(ctx context.Context, etcd *clientv3.Client, endpoints []string) error {
	fmt.Fprintf(b.progress, "support: the cluster's members and status\n")
	list, err := etcd.MemberList(ctx)
	if err != nil {
		return fmt.Errorf("the cluster at %s does not answer: %w", strings.Join(endpoints, ","), err)
	}
	if err := b.AddJSON("cluster/members.json", list); err != nil {
		return err
	}
	for _, ep := range endpoints {
		st, err := etcd.Status(ctx, "https://"+ep)
		if err != nil {
			b.Missing("etcd status of "+ep, err)
			continue
		}
		if err := b.AddJSON("cluster/status-"+fileName.ReplaceAllString(ep, "_")+".json", st); err != nil {
			return err
		}
	}
	return nil
}

// Node adds what member name's node API says: its info, its metrics and
// the logs of up to boots boots.
func (b *Bundle) Node(ctx context.Context, name string, c *nodeapi.Client, boots int) error {
	dir := "nodes/" + fileName.ReplaceAllString(name, "_") + "/"
	fmt.Fprintf(b.progress, "support: %s: info, metrics, logs\n", name)
	if info, err := c.Info(ctx); err != nil {
		b.Missing(name+"'s info", err)
	} else if err := b.addProto(dir+"info.json", info); err != nil {
		return err
	}
	if families, err := c.Metrics(ctx); err != nil {
		b.Missing(name+"'s metrics", err)
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
		err := c.Logs(ctx, &nodepb.LogsRequest{Boot: boot}, func(e *nodepb.LogEntry) { fmt.Fprintln(&text, nodeapi.LogLine(e)) })
		if err != nil {
			b.Missing(fmt.Sprintf("%s's log of boot %d", name, boot), err)
			break
		}
		if err := b.add(fmt.Sprintf("%slog-boot%d.txt", dir, boot), text.Bytes()); err != nil {
			return err
		}
	}
	return nil
}

// AddJSON adds v as JSON, as protojson writes it if it is a message.
func (b *Bundle) AddJSON(name string, v any) error {
	if m, ok := v.(proto.Message); ok {
		return b.addProto(name, m)
	}
	js, err := json.MarshalIndent(v, "", "  ")
	if err != nil {
		return err
	}
	return b.add(name, js)
}

func (b *Bundle) addProto(name string, m proto.Message) error {
	js, err := protojson.MarshalOptions{Multiline: true}.Marshal(m)
	if err != nil {
		return err
	}
	return b.add(name, js)
}
