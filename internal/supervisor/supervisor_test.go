package supervisor

import (
	"bytes"
	"context"
	"errors"
	"log/slog"
	"strings"
	"sync/atomic"
	"testing"
	"time"

	"github.com/borough-os/borough/internal/console"
)

func TestRun(t *testing.T) {
	errBoom := errors.New("boom")
	for _, tc := range []struct {
		name string
		// run is the service under test; n counts its starts from 1.
		run       func(ctx context.Context, n int32) error
		cancel    bool
		wantErr   error
		wantRuns  int32
		wantInLog string
	}{
		{
			name: "restarts after failures",
			run: func(ctx context.Context, n int32) error {
				if n < 3 {
					return errBoom
				}
				return nil
			},
			wantRuns:  3,
			wantInLog: "borough: flaky: error: failed; restarting err=boom",
		},
		{
			name: "fatal stops the tree",
			run: func(ctx context.Context, n int32) error {
				return Fatal(errBoom)
			},
			wantErr:  errBoom,
			wantRuns: 1,
		},
		{
			name: "restarts after a panic",
			run: func(ctx context.Context, n int32) error {
				if n == 1 {
					panic("oops")
				}
				return Fatal(errBoom)
			},
			wantErr:   errBoom,
			wantRuns:  2,
			wantInLog: "service panicked; restarting service=flaky panic=oops",
		},
		{
			name: "cancellation ends cleanly",
			run: func(ctx context.Context, n int32) error {
				<-ctx.Done()
				return ctx.Err()
			},
			cancel:   true,
			wantRuns: 1,
		},
	} {
		t.Run(tc.name, func(t *testing.T) {
			var buf bytes.Buffer
			log := slog.New(console.NewHandler(&buf))
			ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
			defer cancel()
			var runs atomic.Int32
			done := make(chan struct{})
			svc := Service{Name: "flaky", Run: func(ctx context.Context) error {
				n := runs.Add(1)
				if Logger(ctx) == slog.Default() {
					t.Error("service has no logger of its own")
				}
				err := tc.run(ctx, n)
				if err == nil {
					close(done)
				}
				return err
			}}
			result := make(chan error, 1)
			go func() { result <- Run(ctx, log, Options{FailureBackoff: 10 * time.Millisecond}, svc) }()
			switch {
			case tc.cancel:
				time.Sleep(50 * time.Millisecond)
				cancel()
			case tc.wantErr == nil:
				<-done
				cancel()
			}
			err := <-result
			if !errors.Is(err, tc.wantErr) || (tc.wantErr != nil && !IsFatal(err)) {
				t.Errorf("Run = %v, want fatal %v", err, tc.wantErr)
			}
			if got := runs.Load(); got != tc.wantRuns {
				t.Errorf("service ran %d times, want %d", got, tc.wantRuns)
			}
			if !strings.Contains(buf.String(), tc.wantInLog) {
				t.Errorf("log lacks %q:\n%s", tc.wantInLog, buf.String())
			}
		})
	}
}

// TestAddWhileRunning: a service added to a running tree starts at once,
// runs beside the first, and stops with the tree.
func TestAddWhileRunning(t *testing.T) {
	log := slog.New(slog.DiscardHandler)
	tree := New(log, Options{})
	started := make(chan string, 2)
	stopped := make(chan string, 2)
	svc := func(name string) Service {
		return Service{Name: name, Run: func(ctx context.Context) error {
			started <- name
			<-ctx.Done()
			stopped <- name
			return ctx.Err()
		}}
	}
	tree.Add(svc("first"))
	ctx, cancel := context.WithCancel(t.Context())
	result := make(chan error, 1)
	go func() { result <- tree.Run(ctx) }()
	if got := <-started; got != "first" {
		t.Fatalf("started %q first", got)
	}
	tree.Add(svc("added"))
	select {
	case got := <-started:
		if got != "added" {
			t.Fatalf("started %q, want the added service", got)
		}
	case <-time.After(10 * time.Second):
		t.Fatal("the service added to a running tree did not start")
	}
	cancel()
	if err := <-result; err != nil {
		t.Errorf("Run after a cancellation = %v", err)
	}
	if len(stopped) != 2 {
		t.Errorf("%d of 2 services stopped with the tree", len(stopped))
	}
}
