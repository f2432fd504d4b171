package cmdline

import (
	"testing"

	"github.com/google/go-cmp/cmp"
)

func TestParse(t *testing.T) {
	for _, tc := range []struct {
		in   string
		want Params
	}{
		{"", Params{}},
		{"console=ttyS0,115200 quiet\n", Params{"console": "ttyS0,115200", "quiet": ""}},
		{"a=1 a=2", Params{"a": "2"}},
		{`x="two words" y`, Params{"x": "two words", "y": ""}},
		{`"quoted=key value"`, Params{"quoted": "key value"}},
		{`  spaced   out  `, Params{"spaced": "", "out": ""}},
		{`borough.test.fatal="disk on fire"`, Params{TestFatal: "disk on fire"}},
		{"k=a=b", Params{"k": "a=b"}},
	} {
		t.Run(tc.in, func(t *testing.T) {
			if diff := cmp.Diff(tc.want, Parse(tc.in)); diff != "" {
				t.Errorf("Parse(%q) (-want +got):\n%s", tc.in, diff)
			}
		})
	}
}

func TestHas(t *testing.T) {
	p := Parse("flag empty= k=v")
	for key, want := range map[string]bool{"flag": true, "empty": true, "k": true, "missing": false} {
		if got := p.Has(key); got != want {
			t.Errorf("Has(%q) = %v, want %v", key, got, want)
		}
	}
}

func TestMergeTest(t *testing.T) {
	p := Parse("console=ttyS0 borough.test.marker=a")
	ignored := p.MergeTest("borough.test.marker=b borough.test.pause=mkfs console=tty0 init=/bin/sh")
	want := Params{"console": "ttyS0", TestMarker: "b", TestPause: "mkfs"}
	if diff := cmp.Diff(want, p); diff != "" {
		t.Errorf("merged (-want +got):\n%s", diff)
	}
	if diff := cmp.Diff([]string{"console", "init"}, ignored); diff != "" {
		t.Errorf("ignored (-want +got):\n%s", diff)
	}
}
