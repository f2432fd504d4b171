package timeline

import (
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"
)

// clock returns a timeline whose marks come at the given times.
func clock(at ...time.Duration) *Timeline {
	t := New()
	t.now = func() time.Duration {
		d := at[0]
		at = at[1:]
		return d
	}
	return t
}

func TestString(t *testing.T) {
	tl := clock(2050*time.Millisecond, 3*time.Second, 5500*time.Millisecond)
	for _, p := range []string{Init, PayloadMounted, Running} {
		tl.Mark(p)
	}
	if got, want := tl.String(), "init=2.05(+2.05) payload-mounted=3.00(+0.95) running=5.50(+2.50)"; got != want {
		t.Errorf("String = %q, want %q", got, want)
	}
}

func TestSaveLoad(t *testing.T) {
	path := filepath.Join(t.TempDir(), "run", "timeline.json")
	init := clock(time.Second, 2*time.Second)
	init.Mark(Init)
	init.Mark(PayloadMounted)
	if err := init.Save(path); err != nil {
		t.Fatal(err)
	}
	node, err := Load(path)
	if err != nil {
		t.Fatal(err)
	}
	node.now = func() time.Duration { return 3 * time.Second }
	node.Mark(Node)
	if got, want := node.String(), "init=1.00(+1.00) payload-mounted=2.00(+1.00) node=3.00(+1.00)"; got != want {
		t.Errorf("after Load and a mark: %q, want %q", got, want)
	}
}

func TestLoadBad(t *testing.T) {
	dir := t.TempDir()
	damaged := filepath.Join(dir, "damaged.json")
	if err := os.WriteFile(damaged, []byte(`[{"phase":"init","at_ns":`), 0o644); err != nil {
		t.Fatal(err)
	}
	for _, tc := range []struct{ name, path, want string }{
		{"missing", filepath.Join(dir, "none.json"), "no boot timeline from init"},
		{"damaged", damaged, "the boot timeline from init at " + damaged},
	} {
		t.Run(tc.name, func(t *testing.T) {
			tl, err := Load(tc.path)
			if err == nil || !strings.Contains(err.Error(), tc.want) {
				t.Errorf("Load = %v, want an error containing %q", err, tc.want)
			}
			if tl == nil || len(tl.Marks()) != 0 {
				t.Errorf("Load of a bad file gave %v, want an empty timeline to go on with", tl)
			}
		})
	}
}

func TestReached(t *testing.T) {
	closed := func(c <-chan struct{}) bool {
		select {
		case <-c:
			return true
		default:
			return false
		}
	}
	for _, tc := range []struct {
		name   string
		before []string // marked before Reached is asked
		after  []string // marked after
		want   bool
	}{
		{"not yet", []string{Init, Node}, nil, false},
		{"already", []string{Init, Running}, nil, true},
		{"later", []string{Init}, []string{Storage, Running}, true},
		{"other phases only", nil, []string{Storage, EtcdReady}, false},
	} {
		t.Run(tc.name, func(t *testing.T) {
			tl := New()
			for _, p := range tc.before {
				tl.Mark(p)
			}
			first, second := tl.Reached(Running), tl.Reached(Running)
			for _, p := range tc.after {
				tl.Mark(p)
			}
			if closed(first) != tc.want || closed(second) != tc.want {
				t.Errorf("Reached(%s) closed = %v, %v; want %v", Running, closed(first), closed(second), tc.want)
			}
		})
	}
}
