package httpsserve

import (
	"context"
	"crypto/tls"
	"errors"
	"net"
	"net/http"
	"strings"
	"testing"
	"time"

	"github.com/borough-os/borough/internal/pki"
)

func TestServe(t *testing.T) {
	ca, err := pki.NewCA("test", time.Now())
	if err != nil {
		t.Fatal(err)
	}
	cert, err := ca.Issue("node", []net.IP{net.IPv4(127, 0, 0, 1)}, nil, time.Now())
	if err != nil {
		t.Fatal(err)
	}
	e := Endpoint{
		Name:    "test endpoint",
		Handler: http.HandlerFunc(func(w http.ResponseWriter, _ *http.Request) { w.Write([]byte("hello")) }),
		TLS:     &tls.Config{Certificates: []tls.Certificate{{Certificate: [][]byte{cert.Cert.Raw}, PrivateKey: cert.Key}}},
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
