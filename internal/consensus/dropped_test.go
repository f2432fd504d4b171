package consensus

import (
	"bytes"
	"errors"
	"log/slog"
	"net"
	"strings"
	"testing"
)

// TestDroppedLogger: the client port's dropped connections are logged,
// with who and why, the first ten and then one a minute.
func TestDroppedLogger(t *testing.T) {
	var buf bytes.Buffer
	dropped := droppedLogger(slog.New(slog.NewTextHandler(&buf, nil)))
	remote := &net.TCPAddr{IP: net.ParseIP("192.0.2.7"), Port: 40000}
	for range 25 {
		dropped(remote, errors.New("not a TLS handshake"))
	}
	lines := strings.Split(strings.TrimSpace(buf.String()), "\n")
	if len(lines) != 10 {
		t.Fatalf("25 drops in a moment logged %d lines, want 10:\n%s", len(lines), buf.String())
	}
	if !strings.Contains(lines[0], "remote=192.0.2.7:40000") || !strings.Contains(lines[0], `err="not a TLS handshake"`) {
		t.Errorf("the line says %q, want the remote address and the reason", lines[0])
	}
}
