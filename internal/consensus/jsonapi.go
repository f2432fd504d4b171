package consensus

import (
	"context"
	"crypto/tls"
	"fmt"
	"io"
	"log"
	"net/http"
	"strings"
	"time"

	gw "github.com/grpc-ecosystem/grpc-gateway/v2/runtime"
	"github.com/tmc/grpc-websocket-proxy/wsproxy"
	etcdgw "go.etcd.io/etcd/api/v3/etcdserverpb/gw"
	"go.etcd.io/etcd/api/v3/v3rpc/rpctypes"
	"go.etcd.io/etcd/client/pkg/v3/transport"
	"go.etcd.io/etcd/server/v3/etcdserver"
	"go.etcd.io/etcd/server/v3/etcdserver/api/etcdhttp"
	"go.uber.org/zap"
	"google.golang.org/grpc/credentials"
	"google.golang.org/protobuf/encoding/protojson"
)

// etcd's HTTP/JSON API on the client port.
//
// Patroni, OpenStack's tooz and every script with curl speak etcd's
// gRPC gateway (POST /v3/kv/range and the rest, GET /version), not gRPC.
// etcd's own gateway would not do on this port: it reaches etcd through
// a gRPC connection of its own, made with the member's certificate, so
// etcd cannot tell its callers apart (it ignores the certificate's name
// on a gateway's requests, and every credential here is a certificate),
// and the client port trusts the owner's certificate alone, not the
// member's. So the node serves the gateway's handlers (etcd's generated
// ones, with etcd's marshalling) itself, on the client port's HTTP
// connections (internal/clientport), and calls etcd's servers in process
// as the node's own client does (localclient.go), with the identity the
// caller's TLS connection verified: the same trust, CRL and etcd user as
// over gRPC, so a credential reaches its prefix and nothing else. The
// identity is all a request carries in: the gateway's metadata is not
// passed on (etcd's password tokens have no use here: no user of
// Borough's has a password).
//
// etcd's lock and election services are gRPC's alone: their servers make
// requests of their own, in the background, that would carry no caller.

// jsonTimeout bounds a JSON request's wait for its headers.
const jsonTimeout = time.Minute

// callerKey is the context key of a JSON request's TLS state.
type callerKey struct{}

// callerTLS is the identity of the JSON request whose context is ctx:
// what its TLS connection verified, or nothing (etcd then finds no user).
func callerTLS(ctx context.Context) credentials.TLSInfo {
	state, _ := ctx.Value(callerKey{}).(tls.ConnectionState)
	return credentials.TLSInfo{State: state}
}

// jsonServer is the server of the JSON API over the client port's HTTP
// connections, with the client port's TLS: the PKI files' certificate,
// trust and CRL, as etcd reads them for gRPC.
func jsonServer(s *etcdserver.EtcdServer, g *gate, pki Files, lg *zap.Logger) (*http.Server, *tls.Config, error) {
	info := transport.TLSInfo{CertFile: pki.Cert(), KeyFile: pki.Key(), TrustedCAFile: pki.Trusted(), ClientCertAuth: true, CRLFile: pki.CRL()}
	cfg, err := info.ServerConfig()
	if err != nil {
		return nil, nil, fmt.Errorf("the JSON API's TLS: %w", err)
	}
	info.ConfigureCRLVerification(cfg)
	// Patroni's urllib3 offers HTTP/1.1 alone; a server that does not
	// take it ends the handshake.
	cfg.NextProtos = []string{"h2", "http/1.1"}
	h, err := jsonHandler(s, g, lg)
	if err != nil {
		return nil, nil, err
	}
	srv := &http.Server{
		Handler:           h,
		ReadHeaderTimeout: jsonTimeout,
		ErrorLog:          log.New(io.Discard, "", 0),
	}
	return srv, cfg, nil
}

// jsonHandler serves etcd's gateway under /v3/, etcd's /version and
// /health, as the caller.
func jsonHandler(s *etcdserver.EtcdServer, g *gate, lg *zap.Logger) (http.Handler, error) {
	sv := servicesAs(s, as{identity: callerTLS, g: g})
	mux := gw.NewServeMux(gw.WithMarshalerOption(gw.MIMEWildcard, &gw.HTTPBodyMarshaler{
		Marshaler: &gw.JSONPb{
			MarshalOptions:   protojson.MarshalOptions{UseProtoNames: true},
			UnmarshalOptions: protojson.UnmarshalOptions{DiscardUnknown: true},
		},
	}))
	ctx := context.Background()
	for _, register := range []func() error{
		func() error { return etcdgw.RegisterKVHandlerClient(ctx, mux, sv.kv) },
		func() error { return etcdgw.RegisterWatchHandlerClient(ctx, mux, sv.watch) },
		func() error { return etcdgw.RegisterLeaseHandlerClient(ctx, mux, sv.lease) },
		func() error { return etcdgw.RegisterClusterHandlerClient(ctx, mux, sv.cluster) },
		func() error { return etcdgw.RegisterMaintenanceHandlerClient(ctx, mux, sv.maintenance) },
		func() error { return etcdgw.RegisterAuthHandlerClient(ctx, mux, sv.auth) },
	} {
		if err := register(); err != nil {
			return nil, fmt.Errorf("the JSON API: %w", err)
		}
	}
	root := http.NewServeMux()
	// Watches and lease keep-alives are streams: over a websocket, or as
	// a POST whose answer goes on (etcd's own gateway does the same).
	root.Handle("/v3/", wsproxy.WebsocketProxy(mux,
		wsproxy.WithRequestMutator(func(_ *http.Request, out *http.Request) *http.Request { out.Method = "POST"; return out }),
		wsproxy.WithMaxRespBodyBufferSize(0x7fffffff)))
	etcdhttp.HandleVersion(root, s)
	etcdhttp.HandleHealth(lg, root, s)
	return asCaller(learnerRefuses(s, root)), nil
}

// asCaller puts the request's TLS state in its context, for callerTLS.
func asCaller(next http.Handler) http.Handler {
	return http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		if r.TLS == nil {
			http.Error(w, "the JSON API is served over TLS only", http.StatusForbidden)
			return
		}
		next.ServeHTTP(w, r.WithContext(context.WithValue(r.Context(), callerKey{}, *r.TLS)))
	})
}

// learnerRefuses refuses what etcd's gRPC server refuses on a learner:
// everything but its status (and here /version and /health, which etcd
// serves a learner over HTTP).
func learnerRefuses(s *etcdserver.EtcdServer, next http.Handler) http.Handler {
	return http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		if strings.HasPrefix(r.URL.Path, "/v3/") && r.URL.Path != "/v3/maintenance/status" &&
			s.IsMemberExist(s.MemberID()) && s.IsLearner() {
			http.Error(w, `{"error":"`+rpctypes.ErrGRPCNotSupportedForLearner.Error()+`","code":9}`, http.StatusPreconditionFailed)
			return
		}
		next.ServeHTTP(w, r)
	})
}
