package consensus

import (
	"context"
	"errors"
	"sync"
	"time"
)

// The gate the node's own requests pass on their way into etcd.
//
// A request of a client over the network reaches etcd through its gRPC
// server, which etcd stops first when it closes, waiting for the requests
// in it; only then does it close its database. The node's own client
// (localclient.go) calls etcd's servers in process and passes no gRPC
// server, so nothing waited for its requests: a read of the node's CRL
// watcher, still in etcd as the node shut down, read a database already
// closed, and bbolt panicked. The gate stands where the gRPC server would:
// closing it ends the context of every request in it (a read waiting for
// its leader, as on a member cut off from its peers, gives up at once),
// refuses new ones, and waits until those in it have left. It closes when
// the node closes the member. etcd that stops by itself (a removed
// member's) closes its database before the node closes the member: that
// path is not gated yet (shutting the gate as etcd begins to stop made a
// removed member's watchers fail before etcd said why it stopped).

// errClosed is the error of a request made after the member closed.
var errClosed = errors.New("this etcd member is closed")

// closeWait bounds the wait for requests in the gate: each ends with its
// context, so this is only a guard against one that does not.
const closeWait = 10 * time.Second

type gate struct {
	mu     sync.Mutex
	closed bool
	in     sync.WaitGroup
	// stop ends the context of every request in the gate.
	stop    context.Context
	stopNow context.CancelFunc
}

func newGate() *gate {
	g := &gate{}
	g.stop, g.stopNow = context.WithCancel(context.Background())
	return g
}

// enter lets a request in, with a context that ends when ctx does or the
// gate closes; leave must be called when the request is done.
func (g *gate) enter(ctx context.Context) (context.Context, func(), error) {
	g.mu.Lock()
	defer g.mu.Unlock()
	if g.closed {
		return nil, nil, errClosed
	}
	g.in.Add(1)
	ctx, cancel := context.WithCancel(ctx)
	unhook := context.AfterFunc(g.stop, cancel)
	return ctx, func() {
		unhook()
		cancel()
		g.in.Done()
	}, nil
}

// close ends the requests in the gate and waits, up to closeWait, for them
// to leave. It says whether they all did.
func (g *gate) close() bool {
	g.mu.Lock()
	g.closed = true
	g.mu.Unlock()
	g.stopNow()
	left := make(chan struct{})
	go func() {
		g.in.Wait()
		close(left)
	}()
	select {
	case <-left:
		return true
	case <-time.After(closeWait):
		return false
	}
}
