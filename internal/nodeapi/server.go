// Package nodeapi is the node's API for its owner: its log (read and
// followed), what it is (version, state, boot timeline, hardware), reboot
// and power-off, updates, reset, restore, and the disaster's two steps:
// the owner's unlock of a node that waits for its unlock key, and the
// recovery of a cluster from one member.
//
// It is HTTPS with protobuf bodies (proto/node.proto), like the unlock and
// join protocols, on a port of its own (Port), rather than gRPC: the node
// has no other gRPC service, and one log stream is a chunked response of
// length-delimited entries. TLS 1.3; the client must present the owner's
// certificate of the node's enrolment config, byte for byte, as the etcd
// client port requires: nobody else reads a node's log, which says what it
// does, or powers it off. A metrics credential the owner signed (package
// metrics) reads the node's Prometheus metrics and nothing else. The node
// presents its certificate of the cluster
// CA once it has one, so the owner checks it against the CA pinned by
// fingerprint; a node without one (waiting for a config or a backup, or
// failed before it joined) presents a certificate of its own key, whose
// fingerprint it prints on its console, and the owner checks that
// (identity.go).
//
// A node without an owner runs no API: nobody could use it.
package nodeapi

import (
	"bytes"
	"context"
	"crypto/tls"
	"crypto/x509"
	"encoding/base64"
	"errors"
	"fmt"
	"io"
	"log/slog"
	"net"
	"net/http"
	"sync"
	"time"

	"google.golang.org/protobuf/proto"

	"github.com/borough-os/borough/internal/httpsserve"
	"github.com/borough-os/borough/internal/logtree"
	"github.com/borough-os/borough/internal/metrics"
	"github.com/borough-os/borough/internal/pki"
	"github.com/borough-os/borough/internal/ports"
	"github.com/borough-os/borough/proto/enrolmentpb"
	"github.com/borough-os/borough/proto/nodepb"
)

// Paths of the requests.
const (
	pathLogs    = "/v1/logs"
	pathInfo    = "/v1/info"
	pathPower   = "/v1/power"
	pathUpdate  = "/v1/update"
	pathRestore = "/v1/restore"
	pathReset   = "/v1/reset"
	pathLocked  = "/v1/locked"
	pathUnlock  = "/v1/unlock"
	pathRecover = "/v1/recover"
	pathNetwork = "/v1/network"
	pathEnrol   = "/v1/enrol"
)

// maxBody bounds a request; maxConfig an enrolment config, which carries
// certificates and a ticket; maxUpdate an update, which carries a boot
// binary and a node payload and is held in memory while it is checked:
// 64 MiB is some three times today's pair, and fits beside the running
// pair on the 128 MiB ESP of images built before esp.Size grew.
const (
	maxBody   = 4 << 10
	maxConfig = 64 << 10
	maxUpdate = 64 << 20
)

// Server is the node API of one node.
type Server struct {
	// Owner returns the one certificate the API accepts; nil, while the
	// node knows no owner, refuses everyone.
	Owner func() *x509.Certificate
	// Identity returns the certificate to present, or an error to present
	// a self-signed one.
	Identity func() (*tls.Certificate, error)
	// Admission returns the node's admission by its owner, which every
	// answer carries (AdmissionHeader), or nil while it has none.
	Admission func() []byte
	Logs      *logtree.Tree
	// Journal, if set, has the log of earlier boots.
	Journal *logtree.Journal
	// Info returns what the node says about itself.
	Info func() *nodepb.Info
	// Power is called once a power request is answered.
	Power func(nodepb.PowerRequest_Action)
	// Update installs an update and arms its try boot; the node API then
	// answers and calls Power to reboot.
	Update func(*nodepb.UpdateRequest) (*nodepb.UpdateResponse, error)
	// Restore, if set, takes the backup a first node waits for, streamed
	// in a request's body, and says which it took once it checked it.
	Restore func(context.Context, io.Reader) (*nodepb.RestoreResponse, error)
	// Reset, if set, marks the node to erase itself at its next boot
	// (package reset), or says why it will not; the node API then
	// answers and calls Power to reboot.
	Reset func(force bool) error
	// Locked, if set, returns what the owner needs to unlock a node that
	// waits for its cluster unlock key, or why it cannot
	// (clusterkey.Keeper.Locked); Unlock takes the key the owner sends.
	// Both answer while the node does not yet trust its owner: a locked
	// node cannot, and the owner's tool checks the node's key against
	// the record before it sends anything.
	Locked func() (record, key []byte, err error)
	Unlock func(sealed []byte) error
	// SealedOwner, if set, returns the fingerprint of the owner a locked
	// node's keys are sealed to, or "": a client with that certificate is
	// the owner too. Until the data volume opens, Owner is the enrolment
	// config's, and the cluster may have been handed over since; the node
	// reseals its keys to the new owner at a hand-over, and its record of
	// that, on the ESP, is authenticated by its ledger.
	SealedOwner func() string
	// Recover, if set, makes the member its cluster's only member, with
	// its data, or says why it will not (cluster.Manager.Recover).
	Recover func() error
	// Network, if set, writes network settings for the node to try at
	// the reboot the API then asks for (package netconfig), or says why
	// it will not.
	Network func(*enrolmentpb.Network) error
	// NetworkWindow is how long a trial boot of new network settings has
	// to reach the cluster, which the API tells the owner.
	NetworkWindow time.Duration
	// Enrol, if set, writes an enrolment config for the node's next boot
	// (a node without a data volume), or says why it will not; the API
	// then asks for a reboot.
	Enrol func(config []byte) error
	// Unconfirmed, if set, says why the node does not yet trust the owner
	// Owner returns, or nil once it does: an established node reads its
	// owner from the ESP, which nobody authenticates, before its data
	// volume's record confirms it. Until then the API answers what a
	// locked node may say (info, logs) and refuses power and updates.
	Unconfirmed func() error
	// Metrics, if set, serves the node's Prometheus metrics (package
	// metrics) to the owner and to the owner's metrics credentials, which
	// may ask for nothing else.
	Metrics http.Handler
	Log     *slog.Logger
	// Addr is the address to listen on; empty means every address, on
	// ports.NodeAPI.
	Addr string

	ownOnce sync.Once
	ownCert *tls.Certificate
	ownErr  error
}

// Run serves until ctx ends.
func (s *Server) Run(ctx context.Context) error {
	return s.endpoint().ListenAndServe(ctx, s.Addr, ports.NodeAPI)
}

// Serve serves on l until ctx ends.
func (s *Server) Serve(ctx context.Context, l net.Listener) error {
	return s.endpoint().Serve(ctx, l)
}

func (s *Server) endpoint() httpsserve.Endpoint {
	return httpsserve.Endpoint{Name: "node API", Handler: s.Handler(), TLS: s.tlsConfig(), Log: s.Log}
}

// errNotOwner refuses a client at the handshake.
var (
	errNotOwner = errors.New("the node API accepts its owner's certificate only")
	errNoOwner  = errors.New("the node knows no owner (yet): its node API accepts nobody")
)

// tlsConfig presents the node's cluster identity, or before it has one
// the node's own certificate (identity.go).
func (s *Server) tlsConfig() *tls.Config {
	return &tls.Config{
		MinVersion: tls.VersionTLS13,
		ClientAuth: tls.RequireAnyClientCert,
		GetCertificate: func(*tls.ClientHelloInfo) (*tls.Certificate, error) {
			if cert, err := s.Identity(); err == nil {
				return cert, nil
			}
			return s.own()
		},
		VerifyPeerCertificate: func(raw [][]byte, _ [][]*x509.Certificate) error {
			owner := s.Owner()
			switch {
			case len(raw) == 0:
				return errNotOwner
			case s.isOwner(raw[0]):
				return nil
			case owner == nil:
				return errNoOwner
			case s.Metrics != nil:
				return s.metricsCredential(raw[0], owner)
			}
			return errNotOwner
		},
	}
}

// isOwner says whether the client certificate raw is the owner's.
func (s *Server) isOwner(raw []byte) bool {
	owner := s.Owner()
	return owner != nil && bytes.Equal(raw, owner.Raw) || s.sealedOwner(raw)
}

// metricsCredential accepts at the handshake a metrics credential of
// owner, which the handler then lets read the metrics only.
func (s *Server) metricsCredential(raw []byte, owner *x509.Certificate) error {
	c, err := x509.ParseCertificate(raw)
	if err != nil {
		return errNotOwner
	}
	if err := metrics.CheckCredential(c, owner, time.Now()); err != nil {
		return fmt.Errorf("%w, or a metrics credential: %w", errNotOwner, err)
	}
	return nil
}

// sealedOwner says whether the certificate raw is the owner a locked
// node's keys are sealed to.
func (s *Server) sealedOwner(raw []byte) bool {
	if s.SealedOwner == nil {
		return false
	}
	fp := s.SealedOwner()
	if fp == "" {
		return false
	}
	c, err := x509.ParseCertificate(raw)
	return err == nil && pki.Fingerprint(c) == fp
}

// AdmissionHeader carries the node's admission by its owner
// (borough.authority.Admission, base64) in every answer: the client checks
// that the owner admitted the key of the certificate the node presented
// under the name it names, for every member holds the CA's key and could
// present a certificate in another's name.
const AdmissionHeader = "Borough-Admission"

// Handler answers requests on connections whose client Serve's TLS
// config has checked.
func (s *Server) Handler() http.Handler {
	mux := http.NewServeMux()
	mux.HandleFunc("POST "+pathLogs, s.logs)
	mux.HandleFunc("POST "+pathInfo, s.info)
	mux.HandleFunc("POST "+pathPower, s.power)
	mux.HandleFunc("POST "+pathUpdate, s.update)
	mux.HandleFunc("POST "+pathRestore, s.restore)
	mux.HandleFunc("POST "+pathReset, s.reset)
	mux.HandleFunc("POST "+pathLocked, s.locked)
	mux.HandleFunc("POST "+pathUnlock, s.unlock)
	mux.HandleFunc("POST "+pathRecover, s.recover)
	mux.HandleFunc("POST "+pathNetwork, s.network)
	mux.HandleFunc("POST "+pathEnrol, s.enrol)
	if s.Metrics != nil {
		mux.Handle("GET "+metrics.Path, s.Metrics)
	}
	return http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		if err := s.allowed(r); err != nil {
			http.Error(w, err.Error(), http.StatusForbidden)
			return
		}
		if s.Admission != nil {
			if a := s.Admission(); a != nil {
				w.Header().Set(AdmissionHeader, base64.StdEncoding.EncodeToString(a))
			}
		}
		mux.ServeHTTP(w, r)
	})
}

// allowed says why r may not be answered, or nil: the owner may ask
// anything, a metrics credential of the owner for the metrics. It is
// checked at each request, not only at the handshake, which a resumed TLS
// session skips: a credential, or an owner, handed over since must not
// keep its access for a session ticket's lifetime.
func (s *Server) allowed(r *http.Request) error {
	if r.TLS == nil || len(r.TLS.PeerCertificates) == 0 {
		return errNotOwner
	}
	raw := r.TLS.PeerCertificates[0].Raw
	switch owner := s.Owner(); {
	case s.isOwner(raw):
		return nil
	case owner == nil:
		return errNoOwner
	case r.URL.Path != metrics.Path:
		return errors.New("a metrics credential reads " + metrics.Path + " only")
	}
	return s.metricsCredential(raw, s.Owner())
}

// read decodes r's body into m, answering a bad request itself.
func read(w http.ResponseWriter, r *http.Request, m proto.Message) bool {
	return readUpTo(w, r, m, maxBody)
}

func readUpTo(w http.ResponseWriter, r *http.Request, m proto.Message, limit int64) bool {
	body, err := io.ReadAll(io.LimitReader(r.Body, limit))
	if err == nil {
		err = proto.Unmarshal(body, m)
	}
	if err != nil {
		http.Error(w, fmt.Sprintf("not a %s: %v", m.ProtoReflect().Descriptor().Name(), err), http.StatusBadRequest)
		return false
	}
	return true
}

func reply(w http.ResponseWriter, m proto.Message) {
	b, err := proto.Marshal(m)
	if err != nil {
		http.Error(w, err.Error(), http.StatusInternalServerError)
		return
	}
	_, _ = w.Write(b)
}

func (s *Server) info(w http.ResponseWriter, r *http.Request) {
	var req nodepb.InfoRequest
	if read(w, r, &req) {
		reply(w, s.Info())
	}
}

// refuseUnconfirmed refuses a request that acts on the node while the
// node does not yet trust its owner, and says whether it did.
func (s *Server) refuseUnconfirmed(w http.ResponseWriter) bool {
	if s.Unconfirmed == nil {
		return false
	}
	err := s.Unconfirmed()
	if err == nil {
		return false
	}
	http.Error(w, "refused until the node trusts its owner: "+err.Error(), http.StatusServiceUnavailable)
	return true
}

func (s *Server) power(w http.ResponseWriter, r *http.Request) {
	var req nodepb.PowerRequest
	if !read(w, r, &req) || s.refuseUnconfirmed(w) {
		return
	}
	if a := req.GetAction(); a != nodepb.PowerRequest_ACTION_REBOOT && a != nodepb.PowerRequest_ACTION_POWEROFF {
		http.Error(w, fmt.Sprintf("power action %v: want reboot or power-off", a), http.StatusBadRequest)
		return
	}
	s.Log.Info("the owner asked for " + actionName(req.GetAction()))
	s.replyThenPower(w, &nodepb.PowerResponse{}, req.GetAction())
}

func (s *Server) update(w http.ResponseWriter, r *http.Request) {
	var req nodepb.UpdateRequest
	if !readUpTo(w, r, &req, maxUpdate) || s.refuseUnconfirmed(w) {
		return
	}
	resp, err := s.Update(&req)
	if s.refused(w, "an update", err) {
		return
	}
	s.Log.Info("update installed; rebooting into it on trial", "slot", resp.GetSlot(), "version", resp.GetVersion())
	s.replyThenPower(w, resp, nodepb.PowerRequest_ACTION_REBOOT)
}

// restore hands the backup in the body to the node, which checks it
// before it answers and restores it after.
func (s *Server) restore(w http.ResponseWriter, r *http.Request) {
	if s.refuseUnconfirmed(w) {
		return
	}
	if s.Restore == nil {
		http.Error(w, "this node restores no backup", http.StatusConflict)
		return
	}
	resp, err := s.Restore(r.Context(), r.Body)
	if s.refused(w, "a backup", err) {
		return
	}
	s.Log.Info("took the owner's backup; restoring it", "cluster", resp.GetCluster(), "revision", resp.GetRevision())
	reply(w, resp)
}

// reset marks the node for a reset and reboots it into it.
func (s *Server) reset(w http.ResponseWriter, r *http.Request) {
	var req nodepb.ResetRequest
	if !read(w, r, &req) || s.refuseUnconfirmed(w) {
		return
	}
	if s.Reset == nil {
		http.Error(w, "this node does not reset", http.StatusConflict)
		return
	}
	if s.refused(w, "a reset", s.Reset(req.GetForce())) {
		return
	}
	s.Log.Info("the owner asked for a reset: rebooting to erase the node", "force", req.GetForce())
	s.replyThenPower(w, &nodepb.ResetResponse{}, nodepb.PowerRequest_ACTION_REBOOT)
}

// locked answers what the owner needs to unlock the node.
func (s *Server) locked(w http.ResponseWriter, r *http.Request) {
	var req nodepb.LockedRequest
	if !read(w, r, &req) {
		return
	}
	if s.Locked == nil {
		http.Error(w, "this node is not waiting for its unlock key", http.StatusConflict)
		return
	}
	record, key, err := s.Locked()
	if err != nil {
		http.Error(w, err.Error(), http.StatusConflict)
		return
	}
	reply(w, &nodepb.Locked{OwnerRecovery: record, Key: key})
}

// unlock hands the node the cluster unlock key its owner sent.
func (s *Server) unlock(w http.ResponseWriter, r *http.Request) {
	var req nodepb.UnlockRequest
	if !read(w, r, &req) {
		return
	}
	if s.Unlock == nil {
		http.Error(w, "this node is not waiting for its unlock key", http.StatusConflict)
		return
	}
	if s.refused(w, "an unlock key from the owner", s.Unlock(req.GetSealed())) {
		return
	}
	reply(w, &nodepb.UnlockResponse{})
}

// recover makes the member its cluster's only member.
func (s *Server) recover(w http.ResponseWriter, r *http.Request) {
	var req nodepb.RecoverRequest
	if !read(w, r, &req) || s.refuseUnconfirmed(w) {
		return
	}
	if s.Recover == nil {
		http.Error(w, "this node recovers no cluster", http.StatusConflict)
		return
	}
	if s.refused(w, "to recover the cluster", s.Recover()) {
		return
	}
	reply(w, &nodepb.RecoverResponse{})
}

// network has the node try network settings at a reboot.
func (s *Server) network(w http.ResponseWriter, r *http.Request) {
	var req nodepb.NetworkRequest
	if !read(w, r, &req) || s.refuseUnconfirmed(w) {
		return
	}
	if s.Network == nil {
		http.Error(w, "this node takes no network settings", http.StatusConflict)
		return
	}
	if s.refused(w, "network settings", s.Network(req.GetNetwork())) {
		return
	}
	s.Log.Info("the owner sent network settings: rebooting to try them")
	s.replyThenPower(w, &nodepb.NetworkResponse{WindowSeconds: uint32(s.NetworkWindow / time.Second)}, nodepb.PowerRequest_ACTION_REBOOT)
}

// enrol has a node without a data volume take an enrolment config at a
// reboot.
func (s *Server) enrol(w http.ResponseWriter, r *http.Request) {
	var req nodepb.EnrolRequest
	if !readUpTo(w, r, &req, maxConfig) || s.refuseUnconfirmed(w) {
		return
	}
	if s.Enrol == nil {
		http.Error(w, "this node takes no enrolment config", http.StatusConflict)
		return
	}
	if s.refused(w, "an enrolment config", s.Enrol(req.GetConfig())) {
		return
	}
	s.Log.Info("the owner sent an enrolment config: rebooting to take it")
	s.replyThenPower(w, &nodepb.EnrolResponse{}, nodepb.PowerRequest_ACTION_REBOOT)
}

// refused answers err, the node's refusal of what (the owner's request),
// if there is one, and says whether there was.
func (s *Server) refused(w http.ResponseWriter, what string, err error) bool {
	if err == nil {
		return false
	}
	s.Log.Warn("refused "+what, "err", err)
	http.Error(w, err.Error(), http.StatusConflict)
	return true
}

// replyThenPower answers m, and once the answer is sent reboots the node
// or powers it off.
func (s *Server) replyThenPower(w http.ResponseWriter, m proto.Message, a nodepb.PowerRequest_Action) {
	reply(w, m)
	if f, ok := w.(http.Flusher); ok {
		f.Flush()
	}
	s.Power(a)
}

func actionName(a nodepb.PowerRequest_Action) string {
	if a == nodepb.PowerRequest_ACTION_REBOOT {
		return "a reboot"
	}
	return "a power-off"
}
