package robustness

import (
	"errors"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"
)

func TestStep(t *testing.T) {
	holding := state{true, "a"}
	for _, tc := range []struct {
		name string
		s    state
		in   Input
		out  Output
		ok   bool
		next state
	}{
		{"get sees the value", holding, Input{Kind: Get}, Output{Found: true, Value: "a"}, true, holding},
		{"get sees another value", holding, Input{Kind: Get}, Output{Found: true, Value: "b"}, false, holding},
		{"get misses a value", holding, Input{Kind: Get}, Output{}, false, holding},
		{"get of an absent key", state{}, Input{Kind: Get}, Output{}, true, state{}},
		{"put", state{}, Input{Kind: Put, Value: "b"}, Output{}, true, state{true, "b"}},
		{"delete", holding, Input{Kind: Delete}, Output{}, true, state{}},
		{"cas that applies", holding, Input{Kind: CAS, Expect: "a", Value: "c"}, Output{Succeeded: true}, true, state{true, "c"}},
		{"cas said to apply that cannot", holding, Input{Kind: CAS, Expect: "x", Value: "c"}, Output{Succeeded: true}, false, holding},
		{"cas said to fail that applies", holding, Input{Kind: CAS, Expect: "a", Value: "c"}, Output{}, false, state{true, "c"}},
		{"cas on an absent key", state{}, Input{Kind: CAS, Expect: "", Value: "c"}, Output{}, true, state{}},
		{"unknown cas", holding, Input{Kind: CAS, Expect: "a", Value: "c"}, Output{Unknown: true}, true, state{true, "c"}},
	} {
		t.Run(tc.name, func(t *testing.T) {
			ok, next := step(tc.s, tc.in, tc.out)
			if ok != tc.ok || (ok && next != tc.next) {
				t.Errorf("step = %v, %+v; want %v, %+v", ok, next, tc.ok, tc.next)
			}
		})
	}
}

// at records a call between call and ret milliseconds.
func at(h *History, client int, in Input, call, ret int, out Output) {
	ms := func(n int) time.Time { return h.base.Add(time.Duration(n) * time.Millisecond) }
	h.record(client, in, ms(call), ms(ret), out)
}

// TestCheck checks hand-made histories: a stale read after an
// acknowledged put is found, and its picture written; an unknown put may
// or may not have happened.
func TestCheck(t *testing.T) {
	put := Input{Kind: Put, Key: "k", Value: "v1"}
	get := Input{Kind: Get, Key: "k"}
	for _, tc := range []struct {
		name  string
		calls func(h *History)
		legal bool
	}{
		{"read after put", func(h *History) {
			at(h, 0, put, 0, 10, Output{})
			at(h, 1, get, 20, 30, Output{Found: true, Value: "v1"})
		}, true},
		{"stale read after an acknowledged put", func(h *History) {
			at(h, 0, put, 0, 10, Output{})
			at(h, 1, get, 20, 30, Output{})
		}, false},
		{"unknown put seen", func(h *History) {
			at(h, 0, put, 0, 10, Output{Unknown: true})
			at(h, 1, get, 20, 30, Output{Found: true, Value: "v1"})
		}, true},
		{"unknown put not seen", func(h *History) {
			at(h, 0, put, 0, 10, Output{Unknown: true})
			at(h, 1, get, 20, 30, Output{})
		}, true},
		{"unknown put seen, then unseen", func(h *History) {
			at(h, 0, put, 0, 10, Output{Unknown: true})
			at(h, 1, get, 20, 30, Output{Found: true, Value: "v1"})
			at(h, 1, get, 40, 50, Output{})
		}, false},
	} {
		t.Run(tc.name, func(t *testing.T) {
			h := NewHistory()
			tc.calls(h)
			html := filepath.Join(t.TempDir(), "history.html")
			err := h.Check(10*time.Second, html)
			if tc.legal {
				if err != nil {
					t.Errorf("Check = %v, want a linearizable history", err)
				}
				return
			}
			if !errors.Is(err, ErrNotLinearizable) || !strings.Contains(err.Error(), html) {
				t.Fatalf("Check = %v, want ErrNotLinearizable naming %s", err, html)
			}
			if b, err := os.ReadFile(html); err != nil || !strings.Contains(string(b), "get(k)") {
				t.Errorf("the picture of the history: %v; it names no get(k)", err)
			}
		})
	}
}
