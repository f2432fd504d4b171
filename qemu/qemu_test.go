package qemu

import (
	"context"
	"os"
	"slices"
	"strings"
	"testing"
)

// TestCommaPaths: a comma in a path is escaped in QEMU's option lists,
// not taken for the start of another option; swtpm, which has no escape,
// gets a clear refusal.
func TestCommaPaths(t *testing.T) {
	dir := t.TempDir() + "/a,b"
	o := Options{Image: dir + "/disk.img", StateDir: dir, FwCfg: dir + "/config.pb", Network: true}
	if err := os.MkdirAll(dir, 0o755); err != nil {
		t.Fatal(err)
	}
	for _, f := range []string{o.Image, o.FwCfg} {
		if err := os.WriteFile(f, nil, 0o644); err != nil {
			t.Fatal(err)
		}
	}
	if err := o.defaults(); err != nil {
		t.Fatal(err)
	}
	args, err := o.args("tcg")
	if err != nil {
		t.Fatal(err)
	}
	for _, want := range []string{
		"if=none,id=disk0,format=raw,file=" + strings.ReplaceAll(o.Image, ",", ",,"),
		"name=opt/borough/enrolment,file=" + strings.ReplaceAll(o.FwCfg, ",", ",,"),
	} {
		if !slices.Contains(args, want) {
			t.Errorf("QEMU's arguments lack %q:\n%q", want, args)
		}
	}
	if _, err := o.startSwtpm(context.Background()); err == nil || !strings.Contains(err.Error(), "without a comma") {
		t.Errorf("swtpm with a comma in its state directory: %v, want a refusal", err)
	}
}
