// Package supervisor runs the node's long-lived services and restarts
// those that fail, with backoff. It is a thin layer over suture
// (github.com/thejerf/suture/v4) that adds what Borough needs:
//
//   - a service is a plain func(ctx) error with a name;
//   - each service gets its own logger from its context (Logger);
//   - a service that returns nil is done and is not restarted;
//   - a service that returns an error marked with Fatal stops the whole
//     tree, and Run returns that error: the node cannot go on without it.
//
// Any other error, or a panic, is logged and the service restarts. When
// failures pile up, suture backs off before restarting again.
package supervisor

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"time"

	"github.com/thejerf/suture/v4"

	"github.com/borough-os/borough/internal/console"
)

// Service is a named, long-running piece of the node. Run must return
// when ctx is cancelled.
type Service struct {
	Name string
	Run  func(ctx context.Context) error
}

// Options tunes restart behaviour. Zero values take suture's defaults.
type Options struct {
	// FailureBackoff is how long to wait once FailureThreshold failures
	// have piled up (decaying with a 30 s half-life).
	FailureBackoff   time.Duration
	FailureThreshold float64
}

type fatalError struct{ err error }

func (f fatalError) Error() string { return f.err.Error() }
func (f fatalError) Unwrap() []error {
	return []error{f.err, suture.ErrTerminateSupervisorTree}
}

// Fatal marks err as fatal: the node stops, and Run returns err.
func Fatal(err error) error {
	return fatalError{err: err}
}

// IsFatal reports whether err was marked with Fatal.
func IsFatal(err error) bool {
	var f fatalError
	return errors.As(err, &f)
}

type loggerKey struct{}

// Logger returns the logger of the service whose context ctx is.
func Logger(ctx context.Context) *slog.Logger {
	if l, ok := ctx.Value(loggerKey{}).(*slog.Logger); ok {
		return l
	}
	return slog.Default()
}

// RunAlone runs s outside any supervisor until ctx ends, with the logger
// Run would give it: for a service needed before the supervisor starts
// (the node API, while a node waits for the key to its data volume).
func RunAlone(ctx context.Context, log *slog.Logger, s Service) error {
	return s.Run(context.WithValue(ctx, loggerKey{}, log.With(console.ServiceKey, s.Name)))
}

type service struct {
	Service
	log *slog.Logger
}

func (s service) String() string { return s.Name }

func (s service) Serve(ctx context.Context) error {
	err := s.Run(context.WithValue(ctx, loggerKey{}, s.log))
	switch {
	case err == nil:
		return suture.ErrDoNotRestart
	case IsFatal(err):
		return fmt.Errorf("%s: %w", s.Name, err)
	case ctx.Err() != nil:
		return ctx.Err()
	default:
		s.log.Error("failed; restarting", "err", err)
		return err
	}
}

// Tree is a supervisor that services can be added to while it runs: the
// node starts it first, with the power button, and adds its services as
// bring-up makes them.
type Tree struct {
	root *suture.Supervisor
	log  *slog.Logger
}

// New returns a tree that logs to log.
func New(log *slog.Logger, opts Options) *Tree {
	return &Tree{log: log, root: suture.New("node", suture.Spec{
		EventHook:        eventHook(log),
		FailureBackoff:   opts.FailureBackoff,
		FailureThreshold: opts.FailureThreshold,
	})}
}

// Add adds services to the tree, which starts them at once if it runs.
func (t *Tree) Add(services ...Service) {
	for _, s := range services {
		t.root.Add(service{Service: s, log: t.log.With(console.ServiceKey, s.Name)})
	}
}

// Run runs the tree's services until ctx is cancelled or one of them
// fails fatally. It returns the fatal error, or nil after a cancellation,
// once every service has returned (or suture's stop timeout has passed).
func (t *Tree) Run(ctx context.Context) error {
	err := t.root.Serve(ctx)
	if IsFatal(err) {
		return err
	}
	if err != nil && ctx.Err() == nil {
		return fmt.Errorf("supervisor stopped: %w", err)
	}
	return nil
}

// Run runs services in a new tree, as Tree.Run.
func Run(ctx context.Context, log *slog.Logger, opts Options, services ...Service) error {
	t := New(log, opts)
	t.Add(services...)
	return t.Run(ctx)
}

// eventHook logs what suture reports. Plain failures are already logged by
// the service wrapper; panics, backoff and stuck services are not.
func eventHook(log *slog.Logger) suture.EventHook {
	return func(e suture.Event) {
		switch e := e.(type) {
		case suture.EventServicePanic:
			log.Error("service panicked; restarting", "service", e.ServiceName, "panic", e.PanicMsg)
		case suture.EventBackoff:
			log.Warn("too many failures; backing off before restarting")
		case suture.EventResume:
			log.Info("resuming restarts")
		case suture.EventStopTimeout:
			log.Warn("service did not stop in time", "service", e.ServiceName)
		}
	}
}
