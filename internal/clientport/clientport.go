// Package clientport shares etcd's client port between gRPC and etcd's
// HTTP/JSON API without slowing gRPC down.
//
// etcd serves both on one port only through Go's net/http HTTP/2 server
// (grpc.Server.ServeHTTP), which costs gRPC a fifth to a third of its
// requests a second here (docs/decisions.md, "gRPC on a port of its
// own"); so etcd is told to serve gRPC alone, and JSON clients (Patroni,
// tooz, curl) found nothing to talk to. The two kinds of client differ
// before a byte of HTTP is sent: a gRPC client offers "h2" alone in its
// TLS ClientHello (ALPN, which gRPC requires), an HTTP client offers
// "http/1.1" as well, or nothing. So the port reads each connection's
// ClientHello, without answering it, and hands the connection, with the
// bytes it read put back in front, to one of two listeners: GRPC, which
// etcd's own gRPC server serves as it would its own socket (TLS and all),
// or HTTP, which the JSON API's server serves. Every byte after the
// ClientHello goes from the socket to its server untouched.
//
// Written here because no library does it: cmux (in etcd's tree) matches
// on plaintext and sees only that a connection is TLS; a TLS-terminating
// proxy would put gRPC's traffic through a second hop. The ClientHello is
// parsed by crypto/tls itself (Server with GetConfigForClient), not by
// hand.
package clientport

import (
	"bytes"
	"crypto/tls"
	"encoding/binary"
	"errors"
	"fmt"
	"io"
	"net"
	"slices"
	"sync"
	"time"
)

// helloTimeout bounds how long a connection may take to send its
// ClientHello: a client that connects and says nothing holds a goroutine
// no longer.
const helloTimeout = 10 * time.Second

// maxHello bounds the ClientHello the port reads (a real one is under
// 2 KiB, one with post-quantum key shares too).
const maxHello = 64 << 10

// Port is the client port's listener, routing connections to GRPC or
// HTTP.
type Port struct {
	// Dropped, if set before Serve, is told of each connection the port
	// closes before either server has it: one that sends no TLS
	// ClientHello within helloTimeout (plain HTTP to a TLS port, say),
	// or arrives as the port closes. Nothing else hears of them.
	Dropped func(remote net.Addr, why error)

	l          net.Listener
	grpc, http *queue
	wg         sync.WaitGroup
	closeOnce  sync.Once
}

// Listen opens the port on addr ("host:port"); Serve starts routing.
func Listen(addr string) (*Port, error) {
	l, err := net.Listen("tcp", addr)
	if err != nil {
		return nil, fmt.Errorf("client port %s: %w", addr, err)
	}
	return &Port{l: l, grpc: newQueue(l.Addr()), http: newQueue(l.Addr())}, nil
}

// GRPC is the listener of connections from gRPC clients.
func (p *Port) GRPC() net.Listener { return p.grpc }

// HTTP is the listener of connections from HTTP clients, still in TLS.
func (p *Port) HTTP() net.Listener { return p.http }

// Addr is the port's address.
func (p *Port) Addr() net.Addr { return p.l.Addr() }

// Serve routes connections until the port closes.
func (p *Port) Serve() error {
	for {
		c, err := p.l.Accept()
		if err != nil {
			if errors.Is(err, net.ErrClosed) {
				return nil
			}
			return fmt.Errorf("client port: %w", err)
		}
		p.wg.Go(func() { p.route(c) })
	}
}

// Close stops routing and closes both listeners; connections already
// handed over are their servers'.
func (p *Port) Close() error {
	var err error
	p.closeOnce.Do(func() {
		err = p.l.Close()
		p.grpc.Close()
		p.http.Close()
	})
	p.wg.Wait()
	return err
}

func (p *Port) route(c net.Conn) {
	hello, protos, err := readHello(c)
	if err != nil {
		p.drop(c, err)
		return
	}
	to := p.grpc
	if wantsHTTP(protos) {
		to = p.http
	}
	if !to.put(&prefixConn{Conn: c, prefix: hello}) {
		p.drop(c, errors.New("the port is closing"))
	}
}

// drop closes c, which no server will have, and tells Dropped why.
func (p *Port) drop(c net.Conn, why error) {
	c.Close()
	if p.Dropped != nil {
		p.Dropped(c.RemoteAddr(), why)
	}
}

// wantsHTTP says whether a client offering protos over ALPN is an HTTP
// client: it offers HTTP/1.1, or no protocol at all; gRPC clients offer
// "h2" and never HTTP/1.1.
func wantsHTTP(protos []string) bool {
	return len(protos) == 0 || slices.Contains(protos, "http/1.1")
}

// readHello reads c's ClientHello, every TLS record of it, and returns
// the bytes read and the protocols it offers.
func readHello(c net.Conn) ([]byte, []string, error) {
	if err := c.SetReadDeadline(time.Now().Add(helloTimeout)); err != nil {
		return nil, nil, err
	}
	var raw, handshake []byte
	for {
		header := make([]byte, 5)
		if _, err := io.ReadFull(c, header); err != nil {
			return nil, nil, fmt.Errorf("reading a TLS record: %w", err)
		}
		if header[0] != 0x16 {
			return nil, nil, errors.New("not a TLS handshake")
		}
		n := int(binary.BigEndian.Uint16(header[3:5]))
		if len(raw)+5+n > maxHello {
			return nil, nil, errors.New("ClientHello too long")
		}
		body := make([]byte, n)
		if _, err := io.ReadFull(c, body); err != nil {
			return nil, nil, fmt.Errorf("reading a TLS record: %w", err)
		}
		raw = append(append(raw, header...), body...)
		handshake = append(handshake, body...)
		if len(handshake) >= 4 && len(handshake) >= 4+int(handshake[1])<<16|int(handshake[2])<<8|int(handshake[3]) {
			break
		}
	}
	if err := c.SetReadDeadline(time.Time{}); err != nil {
		return nil, nil, err
	}
	protos, err := offered(raw)
	return raw, protos, err
}

// errRead stops the handshake offered runs once it has the ClientHello.
var errRead = errors.New("ClientHello read")

// offered returns the protocols the ClientHello in hello offers, as
// crypto/tls parses it.
func offered(hello []byte) ([]string, error) {
	var protos []string
	parsed := false
	cfg := &tls.Config{GetConfigForClient: func(h *tls.ClientHelloInfo) (*tls.Config, error) {
		protos, parsed = h.SupportedProtos, true
		return nil, errRead
	}}
	err := tls.Server(&replay{r: bytes.NewReader(hello)}, cfg).Handshake()
	if !parsed {
		return nil, fmt.Errorf("not a TLS ClientHello: %w", err)
	}
	return protos, nil
}

// replay is a connection that reads the bytes of r and writes nowhere.
type replay struct {
	net.Conn
	r io.Reader
}

func (c *replay) Read(p []byte) (int, error)           { return c.r.Read(p) }
func (c *replay) Write(p []byte) (int, error)          { return len(p), nil }
func (c *replay) Close() error                         { return nil }
func (c *replay) SetDeadline(time.Time) error          { return nil }
func (c *replay) SetReadDeadline(time.Time) error      { return nil }
func (c *replay) SetWriteDeadline(time.Time) error     { return nil }
func (c *replay) LocalAddr() net.Addr                  { return &net.TCPAddr{} }
func (c *replay) RemoteAddr() net.Addr                 { return &net.TCPAddr{} }
func (c *replay) ConnectionState() tls.ConnectionState { return tls.ConnectionState{} }

// prefixConn is a connection whose first bytes read are prefix, the
// ClientHello the port read, then the socket's.
type prefixConn struct {
	net.Conn
	prefix []byte
}

func (c *prefixConn) Read(p []byte) (int, error) {
	if len(c.prefix) > 0 {
		n := copy(p, c.prefix)
		c.prefix = c.prefix[n:]
		return n, nil
	}
	return c.Conn.Read(p)
}

// queue is a listener fed connections by the port.
type queue struct {
	addr  net.Addr
	conns chan net.Conn
	done  chan struct{}
	once  sync.Once
}

func newQueue(addr net.Addr) *queue {
	return &queue{addr: addr, conns: make(chan net.Conn), done: make(chan struct{})}
}

// put hands c to the queue's server, and says whether it did: not if
// the queue is closed.
func (q *queue) put(c net.Conn) bool {
	select {
	case q.conns <- c:
		return true
	case <-q.done:
		return false
	}
}

func (q *queue) Accept() (net.Conn, error) {
	select {
	case c := <-q.conns:
		return c, nil
	case <-q.done:
		return nil, net.ErrClosed
	}
}

func (q *queue) Close() error {
	q.once.Do(func() { close(q.done) })
	return nil
}

func (q *queue) Addr() net.Addr { return q.addr }
