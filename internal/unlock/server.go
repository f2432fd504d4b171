package unlock

import (
	"bytes"
	"context"
	"crypto/tls"
	"crypto/x509"
	"errors"
	"fmt"
	"io"
	"log/slog"
	"net"
	"net/http"

	"google.golang.org/protobuf/proto"

	"github.com/borough-os/borough/internal/authority"
	"github.com/borough-os/borough/internal/escrow"
	"github.com/borough-os/borough/internal/httpsserve"
	"github.com/borough-os/borough/internal/pki"
	"github.com/borough-os/borough/internal/ports"
	"github.com/borough-os/borough/proto/unlockpb"
)

// pathShare is the share request's path.
const pathShare = "/v1/share"

// maxBody bounds a request.
const maxBody = 16 << 10

// Server answers share requests for the node it runs on.
type Server struct {
	// Cluster and Node are this node's cluster and name.
	Cluster, Node string
	// EscrowKey is this node's escrow private key.
	EscrowKey []byte
	Identity  Identity
	Log       *slog.Logger
	// Addr is the address to listen on; empty means every address, on
	// ports.Unlock.
	Addr string
}

// Run serves on Addr until ctx ends.
func (s *Server) Run(ctx context.Context) error {
	return s.endpoint().ListenAndServe(ctx, s.Addr, ports.Unlock)
}

// Serve serves on l until ctx ends.
func (s *Server) Serve(ctx context.Context, l net.Listener) error {
	return s.endpoint().Serve(ctx, l)
}

func (s *Server) endpoint() httpsserve.Endpoint {
	return httpsserve.Endpoint{
		Name:    "unlock responder",
		Handler: s.Handler(),
		TLS: &tls.Config{
			Certificates: []tls.Certificate{s.Identity.Cert},
			MinVersion:   tls.VersionTLS13,
			ClientAuth:   tls.RequireAnyClientCert,
			// Revocation is checked per request (answer), so that a
			// removed node is told why rather than failing a handshake.
			VerifyPeerCertificate: func(raw [][]byte, _ [][]*x509.Certificate) error {
				_, err := Identity{CA: s.Identity.CA}.Verify(raw, "", x509.ExtKeyUsageClientAuth)
				return err
			},
		},
		Log: s.Log,
	}
}

// Handler answers share requests on a TLS connection whose client
// certificate the server has checked (Run's config).
func (s *Server) Handler() http.Handler {
	mux := http.NewServeMux()
	mux.HandleFunc("POST "+pathShare, s.share)
	return mux
}

// errRefused is a request the holder will not answer.
var errRefused = errors.New("refused")

// standing refuses a requester the CRL in force revokes,
// or any requester while the holder has no verified CRL: unreadable is
// not empty.
func (s *Server) standing(cert *x509.Certificate) error {
	if s.Identity.CRL == nil {
		return fmt.Errorf("%w: this holder has no revocation list to check %s against", errRefused, cert.Subject.CommonName)
	}
	crl, err := s.Identity.CRL()
	switch {
	case err != nil:
		return fmt.Errorf("%w: this holder cannot check %s: %v", errRefused, cert.Subject.CommonName, err)
	}
	if why := authority.Revokes(crl, cert); why != "" {
		return fmt.Errorf("%w: %s", errRefused, why)
	}
	return nil
}

func (s *Server) share(w http.ResponseWriter, r *http.Request) {
	body, err := io.ReadAll(io.LimitReader(r.Body, maxBody))
	var req unlockpb.ShareRequest
	if err == nil {
		err = proto.Unmarshal(body, &req)
	}
	if err != nil {
		http.Error(w, "not a share request", http.StatusBadRequest)
		return
	}
	if r.TLS == nil || len(r.TLS.PeerCertificates) == 0 {
		http.Error(w, "no client certificate", http.StatusForbidden)
		return
	}
	cert := r.TLS.PeerCertificates[0]
	requester := cert.Subject.CommonName
	var sealed []byte
	if err = s.standing(cert); err == nil {
		sealed, err = s.answer(cert, &req)
	}
	if err != nil {
		s.Log.Warn("refused a share request", "requester", requester, "node", req.GetNode(), "err", err)
		http.Error(w, err.Error(), http.StatusForbidden)
		return
	}
	s.Log.Info("released a share", "node", req.GetNode(), "epoch", req.GetEpoch())
	b, err := proto.Marshal(&unlockpb.ShareResponse{Sealed: sealed})
	if err != nil {
		http.Error(w, err.Error(), http.StatusInternalServerError)
		return
	}
	_, _ = w.Write(b)
}

// answer checks a request from the node cert names and returns the share
// sealed to its one-time key. The share opens only for the key the node
// escrowed it under (escrow.Binding), which must be cert's: a certificate
// for the node's name with another key, which any member holding the CA
// key can sign, gets nothing. An escrow split before keys were bound is
// answered, with a warning, until its node splits it again.
func (s *Server) answer(cert *x509.Certificate, req *unlockpb.ShareRequest) ([]byte, error) {
	requester := cert.Subject.CommonName
	switch {
	case requester == "" || requester != req.GetNode():
		return nil, fmt.Errorf("%w: %q asked for the share of %q", errRefused, requester, req.GetNode())
	case req.GetCluster() != s.Cluster:
		return nil, fmt.Errorf("%w: a share of cluster %q, this is %q", errRefused, req.GetCluster(), s.Cluster)
	case req.GetHolder() != s.Node:
		return nil, fmt.Errorf("%w: the envelope is for %s, this is %s", errRefused, req.GetHolder(), s.Node)
	case len(req.GetKeySha256()) > 0 && !bytes.Equal(req.GetKeySha256(), pki.KeyHash(cert)):
		return nil, fmt.Errorf("%w: the certificate %s presented is not of the key %s escrowed its unlock key under",
			errRefused, cert.SerialNumber.Text(16), requester)
	case len(req.GetKeySha256()) == 0:
		s.Log.Warn("answering for an escrow bound to no key: its node splits it again once it runs", "node", requester)
	}
	b := escrow.Binding{Cluster: req.GetCluster(), Node: req.GetNode(), Epoch: req.GetEpoch(), Key: req.GetKeySha256()}
	share, err := escrow.OpenEnvelope(s.EscrowKey, b, escrow.Envelope{Holder: s.Node, Sealed: req.GetEnvelope()})
	if err != nil {
		return nil, fmt.Errorf("%w: %w", errRefused, err)
	}
	defer clear(share)
	return escrow.SealTransfer(req.GetOneTimeKey(), b, s.Node, share)
}
