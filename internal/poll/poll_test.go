package poll

import (
	"context"
	"errors"
	"strings"
	"testing"
	"time"
)

func TestUntil(t *testing.T) {
	errDown := errors.New("down")
	for _, tc := range []struct {
		name    string
		okAt    int // the call f first succeeds at; 0: never
		timeout time.Duration
		cancel  bool
		want    string // "" for success
		calls   int    // at least
	}{
		{"holds at once", 1, time.Second, false, "", 1},
		{"holds at the third call", 3, time.Second, false, "", 3},
		{"never holds", 0, 50 * time.Millisecond, false, "still after", 2},
		{"context ends", 0, time.Minute, true, "context canceled", 1},
	} {
		t.Run(tc.name, func(t *testing.T) {
			ctx, cancel := context.WithCancel(t.Context())
			defer cancel()
			calls := 0
			err := Until(ctx, tc.timeout, 5*time.Millisecond, func() error {
				calls++
				if tc.cancel {
					cancel()
				}
				if tc.okAt != 0 && calls >= tc.okAt {
					return nil
				}
				return errDown
			})
			switch {
			case tc.want == "" && err != nil:
				t.Fatalf("Until = %v, want nil", err)
			case tc.want != "" && (err == nil || !strings.Contains(err.Error(), tc.want) || !errors.Is(err, errDown)):
				t.Fatalf("Until = %v, want an error saying %q and wrapping f's", err, tc.want)
			case calls < tc.calls:
				t.Errorf("f called %d times, want at least %d", calls, tc.calls)
			}
		})
	}
}

func TestStop(t *testing.T) {
	errFinal := errors.New("rolled back")
	calls := 0
	err := Until(t.Context(), time.Minute, time.Millisecond, func() error {
		calls++
		if calls == 2 {
			return Stop(errFinal)
		}
		return errors.New("not yet")
	})
	if err != errFinal || calls != 2 {
		t.Errorf("Until = %v after %d calls, want %v after 2", err, calls, errFinal)
	}
}

func TestTrue(t *testing.T) {
	if err := True(func() bool { return false })(); !errors.Is(err, ErrNotYet) {
		t.Errorf("a false condition gives %v, want ErrNotYet", err)
	}
	if err := True(func() bool { return true })(); err != nil {
		t.Errorf("a true condition gives %v", err)
	}
}
