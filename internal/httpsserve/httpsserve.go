// Package httpsserve runs the node's HTTPS endpoints (the join endpoint,
// the unlock responder, the node API) the one way they all need: on a
// listener of their own, with their TLS config, until the context ends,
// with an error that names the endpoint. Each protocol keeps its own TLS
// policy and handlers; this is only the serving.
package httpsserve

import (
	"context"
	"crypto/tls"
	"fmt"
	"log/slog"
	"net"
	"net/http"
	"strconv"
	"time"
)

// readHeaderTimeout bounds a client that opens a connection and says
// nothing, idleTimeout one that keeps it open between requests,
// maxHeaderBytes the headers it sends; shutdownGrace is how long the
// answers under way get to reach their clients once the endpoint stops.
const (
	readHeaderTimeout = 10 * time.Second
	idleTimeout       = 30 * time.Second
	maxHeaderBytes    = 16 << 10
	shutdownGrace     = 3 * time.Second
)

// Endpoint is one HTTPS endpoint.
type Endpoint struct {
	// Name names the endpoint in errors ("join endpoint").
	Name    string
	Handler http.Handler
	TLS     *tls.Config
	// Log, if set, gets the server's own errors (bad handshakes) at
	// debug level.
	Log *slog.Logger
	// ReadTimeout, if set, bounds the time a client takes to send a
	// whole request, body included; endpoints that take large bodies
	// (an update) leave it unset.
	ReadTimeout time.Duration
}

// ListenAndServe listens on addr, or on every address at port if addr is
// empty, and serves until ctx ends.
func (e Endpoint) ListenAndServe(ctx context.Context, addr string, port int) error {
	l, err := e.Listen(addr, port)
	if err != nil {
		return err
	}
	return e.Serve(ctx, l)
}

// Listen listens on addr, or on every address at port if addr is empty,
// for an endpoint that wraps its listener before it Serves.
func (e Endpoint) Listen(addr string, port int) (net.Listener, error) {
	if addr == "" {
		addr = ":" + strconv.Itoa(port)
	}
	l, err := net.Listen("tcp", addr)
	if err != nil {
		return nil, fmt.Errorf("%s: %w", e.Name, err)
	}
	return l, nil
}

// Serve serves on l until ctx ends, and then returns ctx's error once the
// answers under way have gone out (at most shutdownGrace): an answer that
// asks the node to reboot, such as the node API's to an update, must reach
// its client before the node stops. Requests see ctx end too.
func (e Endpoint) Serve(ctx context.Context, l net.Listener) error {
	srv := &http.Server{
		Handler:           e.Handler,
		TLSConfig:         e.TLS,
		ReadHeaderTimeout: readHeaderTimeout,
		ReadTimeout:       e.ReadTimeout,
		IdleTimeout:       idleTimeout,
		MaxHeaderBytes:    maxHeaderBytes,
		BaseContext:       func(net.Listener) context.Context { return ctx },
	}
	if e.Log != nil {
		srv.ErrorLog = slog.NewLogLogger(e.Log.Handler(), slog.LevelDebug)
	}
	stopped := make(chan struct{})
	go func() {
		defer close(stopped)
		<-ctx.Done()
		grace, cancel := context.WithTimeout(context.Background(), shutdownGrace)
		defer cancel()
		if srv.Shutdown(grace) != nil {
			srv.Close()
		}
	}()
	err := srv.ServeTLS(l, "", "")
	if ctx.Err() != nil {
		<-stopped
		return ctx.Err()
	}
	return fmt.Errorf("%s: %w", e.Name, err)
}
