package clientport

import (
	"crypto/tls"
	"crypto/x509"
	"io"
	"net"
	"strings"
	"testing"
	"time"

	"github.com/borough-os/borough/internal/pki"
)

// TestRoute runs the port with a TLS server behind each listener, as
// etcd's gRPC server and the JSON API stand there, and connects with the
// ALPN offers of real clients: each reaches the server it should, the TLS
// handshake completing through the bytes the port read; what is not TLS
// reaches neither.
func TestRoute(t *testing.T) {
	now := time.Now()
	ca, err := pki.NewCA("test", now)
	if err != nil {
		t.Fatal(err)
	}
	server, err := ca.Issue("server", []net.IP{net.ParseIP("127.0.0.1")}, nil, now)
	if err != nil {
		t.Fatal(err)
	}
	p, err := Listen("127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	dropped := make(chan error, 1)
	p.Dropped = func(_ net.Addr, why error) { dropped <- why }
	go p.Serve()
	t.Cleanup(func() { p.Close() })
	cert := tls.Certificate{Certificate: [][]byte{server.Cert.Raw}, PrivateKey: server.Key}
	for name, l := range map[string]net.Listener{"grpc": p.GRPC(), "http": p.HTTP()} {
		tl := tls.NewListener(l, &tls.Config{Certificates: []tls.Certificate{cert}, NextProtos: []string{"h2", "http/1.1"}})
		go func() {
			for {
				c, err := tl.Accept()
				if err != nil {
					return
				}
				c.Write([]byte(name))
				c.Close()
			}
		}()
	}
	roots := x509.NewCertPool()
	roots.AddCert(ca.Cert)
	for _, tc := range []struct {
		client string
		protos []string
		want   string
	}{
		{"grpc-go (etcdctl, clientv3)", []string{"h2"}, "grpc"},
		{"grpc C core", []string{"grpc-exp", "h2"}, "grpc"},
		{"urllib3 (Patroni)", []string{"http/1.1"}, "http"},
		{"curl", []string{"h2", "http/1.1"}, "http"},
		{"no ALPN", nil, "http"},
	} {
		t.Run(tc.client, func(t *testing.T) {
			c, err := tls.Dial("tcp", p.Addr().String(), &tls.Config{RootCAs: roots, NextProtos: tc.protos})
			if err != nil {
				t.Fatal(err)
			}
			defer c.Close()
			got, err := io.ReadAll(c)
			if err != nil {
				t.Fatal(err)
			}
			if string(got) != tc.want {
				t.Errorf("reached %q, want %q", got, tc.want)
			}
		})
	}
	t.Run("not TLS", func(t *testing.T) {
		c, err := net.Dial("tcp", p.Addr().String())
		if err != nil {
			t.Fatal(err)
		}
		defer c.Close()
		c.Write([]byte("GET / HTTP/1.1\r\nHost: x\r\n\r\n"))
		c.SetReadDeadline(time.Now().Add(5 * time.Second))
		if got, _ := io.ReadAll(c); len(got) != 0 {
			t.Errorf("plain HTTP got %q, want the connection closed", got)
		}
		select {
		case why := <-dropped:
			if !strings.Contains(why.Error(), "not a TLS handshake") {
				t.Errorf("Dropped was told %v, want not a TLS handshake", why)
			}
		case <-time.After(5 * time.Second):
			t.Error("Dropped was not told of the plain HTTP connection")
		}
	})
}

// TestClose says a closed port refuses connections and its listeners
// return net.ErrClosed.
func TestClose(t *testing.T) {
	p, err := Listen("127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	go p.Serve()
	addr := p.Addr().String()
	if err := p.Close(); err != nil {
		t.Fatal(err)
	}
	for _, l := range []net.Listener{p.GRPC(), p.HTTP()} {
		if _, err := l.Accept(); err != net.ErrClosed {
			t.Errorf("Accept after Close: %v, want net.ErrClosed", err)
		}
	}
	if c, err := net.Dial("tcp", addr); err == nil {
		c.Close()
		t.Error("the closed port still accepts connections")
	}
}
