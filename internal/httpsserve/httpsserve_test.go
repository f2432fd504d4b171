package httpsserve

import (
	"context"
	"crypto/tls"
	"errors"
	"io"
	"net"
	"net/http"
	"strings"
	"testing"
	"time"

	"github.com/borough-os/borough/internal/pki"
)

// serverTLS is a server's TLS config with a certificate of a new CA.
func serverTLS(t *testing.T) *tls.Config {
	t.Helper()
	ca, err := pki.NewCA("test", time.Now())
	if err != nil {
		t.Fatal(err)
	}
	cert, err := ca.Issue("node", []net.IP{net.IPv4(127, 0, 0, 1)}, nil, time.Now())
	if err != nil {
		t.Fatal(err)
	}
	return &tls.Config{Certificates: []tls.Certificate{{Certificate: [][]byte{cert.Cert.Raw}, PrivateKey: cert.Key}}}
}

func TestServe(t *testing.T) {
	e := Endpoint{
		Name:    "test endpoint",
		Handler: http.HandlerFunc(func(w http.ResponseWriter, _ *http.Request) { w.Write([]byte("hello")) }),
		TLS:     serverTLS(t),
	}
	l, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	ctx, cancel := context.WithCancel(context.Background())
	done := make(chan error, 1)
	go func() { done <- e.Serve(ctx, l) }()

	conn, err := tls.Dial("tcp", l.Addr().String(), &tls.Config{InsecureSkipVerify: true})
	if err != nil {
		t.Fatalf("the endpoint does not speak TLS: %v", err)
	}
	conn.Close()
	if err := e.ListenAndServe(ctx, l.Addr().String(), 0); err == nil || !strings.HasPrefix(err.Error(), "test endpoint: ") {
		t.Errorf("listening on a taken address: %v, want an error naming the endpoint", err)
	}
	cancel()
	if err := <-done; !errors.Is(err, context.Canceled) {
		t.Errorf("Serve after cancel = %v, want context.Canceled", err)
	}
}

// TestSlowBody sends a request's headers and then its body too slowly:
// with ReadTimeout the endpoint drops the connection, the handler never
// sees a whole body.
func TestSlowBody(t *testing.T) {
	read := make(chan error, 1)
	e := Endpoint{
		Name: "test endpoint",
		Handler: http.HandlerFunc(func(_ http.ResponseWriter, r *http.Request) {
			_, err := io.ReadAll(r.Body)
			read <- err
		}),
		TLS:         serverTLS(t),
		ReadTimeout: 300 * time.Millisecond,
	}
	l, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	go e.Serve(ctx, l)
	conn, err := tls.Dial("tcp", l.Addr().String(), &tls.Config{InsecureSkipVerify: true})
	if err != nil {
		t.Fatal(err)
	}
	defer conn.Close()
	if _, err := io.WriteString(conn, "POST / HTTP/1.1\r\nHost: x\r\nContent-Length: 100\r\n\r\nslow"); err != nil {
		t.Fatal(err)
	}
	select {
	case err := <-read:
		if err == nil {
			t.Error("the handler read a whole body the client never sent")
		}
	case <-time.After(10 * time.Second):
		t.Fatal("the endpoint still waits for the body 10 s on, past its 300 ms ReadTimeout")
	}
}
