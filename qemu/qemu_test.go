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
	o := Options{Image: dir + "/disk.img", StateDir: dir, FwCfg: dir + "/config.pb", Network: true, GDB: dir + "/gdb.sock"}
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
		"unix:" + strings.ReplaceAll(o.GDB, ",", ",,") + ",server=on,wait=off",
	} {
		if !slices.Contains(args, want) {
			t.Errorf("QEMU's arguments lack %q:\n%q", want, args)
		}
	}
	if _, err := o.startSwtpm(context.Background()); err == nil || !strings.Contains(err.Error(), "without a comma") {
		t.Errorf("swtpm with a comma in its state directory: %v, want a refusal", err)
	}
}

// TestTCGMachine: under TCG the guest's RAM is a memfd of the VM's memory
// size, which the machine uses, and its CPU has an invariant TSC; under
// KVM both are QEMU's defaults.
func TestTCGMachine(t *testing.T) {
	dir := t.TempDir()
	o := Options{Image: dir + "/disk.img", StateDir: dir, MemoryMiB: 384}
	if err := os.WriteFile(o.Image, nil, 0o644); err != nil {
		t.Fatal(err)
	}
	if err := o.defaults(); err != nil {
		t.Fatal(err)
	}
	for _, tc := range []struct {
		accel   string
		machine string
		cpu     string
		memfd   bool
	}{
		{"tcg", "q35,memory-backend=ram", "max,+invtsc,-erms,-fsrm", true},
		{"kvm", "q35", "max", false},
	} {
		args, err := o.args(tc.accel)
		if err != nil {
			t.Fatal(err)
		}
		if i := slices.Index(args, "-machine"); i < 0 || args[i+1] != tc.machine {
			t.Errorf("%s: -machine is not %q:\n%q", tc.accel, tc.machine, args)
		}
		if i := slices.Index(args, "-cpu"); i < 0 || args[i+1] != tc.cpu {
			t.Errorf("%s: -cpu is not %q:\n%q", tc.accel, tc.cpu, args)
		}
		if got := slices.Contains(args, "memory-backend-memfd,id=ram,size=384M"); got != tc.memfd {
			t.Errorf("%s: a 384 MiB memfd backend in the arguments is %v, want %v:\n%q", tc.accel, got, tc.memfd, args)
		}
	}
}
