package uki

import (
	"bytes"
	"slices"
	"testing"

	"github.com/klauspost/compress/zstd"
	"github.com/u-root/mkuimage/cpio"
)

func archive(t *testing.T, records ...cpio.Record) []byte {
	t.Helper()
	var raw bytes.Buffer
	w := cpio.Newc.Writer(&raw)
	if err := cpio.WriteRecordsAndDirs(w, records); err != nil {
		t.Fatal(err)
	}
	if err := cpio.WriteTrailer(w); err != nil {
		t.Fatal(err)
	}
	var out bytes.Buffer
	enc, _ := zstd.NewWriter(&out)
	enc.Write(raw.Bytes())
	enc.Close()
	return out.Bytes()
}

func TestInitrdRecords(t *testing.T) {
	b := archive(t,
		cpio.StaticFile("init", "#!init", 0o755),
		cpio.StaticFile("etc/borough/node-payload.sha256", "abc\n", 0o644),
	)
	records, err := InitrdRecords(b)
	if err != nil {
		t.Fatal(err)
	}
	var names []string
	for _, r := range records {
		names = append(names, r.Name)
	}
	if !slices.Contains(names, "etc/borough/node-payload.sha256") || !slices.Contains(names, "init") {
		t.Errorf("records %v; want init and the payload hash", names)
	}
	for name, bad := range map[string][]byte{"garbage": []byte("not zstd"), "truncated": b[:len(b)/2]} {
		if _, err := InitrdRecords(bad); err == nil {
			t.Errorf("InitrdRecords of %s succeeded", name)
		}
	}
}
