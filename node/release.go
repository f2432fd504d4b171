//go:build !boroughtest

package main

import (
	"crypto/tls"
	"log/slog"
	"sync/atomic"

	"github.com/borough-os/borough/internal/cluster"
	"github.com/borough-os/borough/internal/cmdline"
	"github.com/borough-os/borough/internal/storage"
	"github.com/borough-os/borough/internal/supervisor"
)

// The release build's stand-ins for the test hooks (testhooks.go): a
// node users run takes no borough.test.* parameters from anywhere.

func testRole(string) bool                                            { return false }
func addTestParams(*slog.Logger, cmdline.Params)                      {}
func testHooks(cmdline.Params, *storage.Storage) []supervisor.Service { return nil }
func pauseHook(*slog.Logger, cmdline.Params, string) func(string)     { return nil }
func testMarker(*slog.Logger, cmdline.Params) error                   { return nil }
func volumeSize(*slog.Logger, cmdline.Params) int64                   { return 0 }
func unbindTPM(*slog.Logger, cmdline.Params)                          {}
func exposeToRogue(*cluster.Manager)                                  {}

// apiIdentity is what the node API presents: the node's own identity and
// admission.
func apiIdentity(ph *atomic.Pointer[phase]) (func() (*tls.Certificate, error), func() []byte) {
	return func() (*tls.Certificate, error) { return ph.Load().memberIdentity() }, func() []byte { return ph.Load().admission() }
}
