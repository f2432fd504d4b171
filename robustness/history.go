package robustness

import (
	"errors"
	"fmt"
	"math"
	"sort"
	"strings"
	"sync"
	"time"

	"github.com/anishathalye/porcupine"
)

// History is the record of every call the workload made.
type History struct {
	mu   sync.Mutex
	base time.Time
	ops  []porcupine.Operation
	ids  int
}

// NewHistory starts an empty history; its times count from now.
func NewHistory() *History { return &History{base: time.Now()} }

// newClient returns a client identity no call has used.
func (h *History) newClient() int {
	h.mu.Lock()
	defer h.mu.Unlock()
	h.ids++
	return h.ids - 1
}

// record adds a call made by client between call and ret. A write of
// unknown outcome returns at the end of time.
func (h *History) record(client int, in Input, call, ret time.Time, out Output) {
	h.mu.Lock()
	defer h.mu.Unlock()
	op := porcupine.Operation{ClientId: client, Input: in, Output: out,
		Call: int64(call.Sub(h.base)), Return: int64(ret.Sub(h.base))}
	if out.Unknown {
		op.Return = math.MaxInt64
	}
	h.ops = append(h.ops, op)
}

// Counts are the calls by kind and outcome ("put ok", "cas failed", "get
// unknown", ...): the workload's side of a run's table.
func (h *History) Counts() map[string]int {
	h.mu.Lock()
	defer h.mu.Unlock()
	c := map[string]int{}
	for _, op := range h.ops {
		in, out := op.Input.(Input), op.Output.(Output)
		outcome := "ok"
		switch {
		case out.Unknown:
			outcome = "unknown"
		case in.Kind == CAS && !out.Succeeded:
			outcome = "failed"
		}
		c[string(in.Kind)+" "+outcome]++
	}
	return c
}

// String is Counts, sorted, on one line.
func (h *History) String() string {
	c := h.Counts()
	var parts []string
	for k, n := range c {
		parts = append(parts, fmt.Sprintf("%s %d", k, n))
	}
	sort.Strings(parts)
	return strings.Join(parts, ", ")
}

// ErrNotLinearizable says a history has no linearization.
var ErrNotLinearizable = errors.New("the history is not linearizable")

// Check checks that the history is linearizable within timeout. When it
// is not, it writes porcupine's picture of the longest linearizations
// and where they fail to htmlPath, for a person to look at, and says
// where it is.
func (h *History) Check(timeout time.Duration, htmlPath string) error {
	h.mu.Lock()
	ops := append([]porcupine.Operation(nil), h.ops...)
	h.mu.Unlock()
	res, info := porcupine.CheckOperationsVerbose(model, ops, timeout)
	switch res {
	case porcupine.Ok:
		return nil
	case porcupine.Unknown:
		return fmt.Errorf("the linearizability check of %d operations did not finish within %v", len(ops), timeout)
	}
	if err := porcupine.VisualizePath(model, info, htmlPath); err != nil {
		return fmt.Errorf("%w (%d operations); writing its picture: %w", ErrNotLinearizable, len(ops), err)
	}
	return fmt.Errorf("%w (%d operations): see %s", ErrNotLinearizable, len(ops), htmlPath)
}
