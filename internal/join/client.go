package join

import (
	"bytes"
	"context"
	"crypto/tls"
	"crypto/x509"
	"errors"
	"fmt"
	"io"
	"net"
	"net/http"
	"net/netip"
	"strings"
	"time"

	"google.golang.org/protobuf/proto"

	"github.com/borough-os/borough/internal/pki"
	"github.com/borough-os/borough/proto/enrolmentpb"
	"github.com/borough-os/borough/proto/joinpb"
)

// Check asks the cluster whether the ticket would admit a fresh node,
// without using it up. It returns a *Refusal if the cluster says no.
func Check(ctx context.Context, t *enrolmentpb.Ticket) error {
	_, err := call(ctx, t, pathCheck, netip.Addr{}, &joinpb.JoinRequest{TicketId: t.GetId(), Secret: t.GetSecret(), ClusterName: t.GetClusterName()})
	return err
}

// Join asks the cluster to admit the node whose certificate request is
// csr, from the node's address from (the one csr names, which the
// cluster checks against the request's source), and checks the answer
// against the ticket: the CA is the pinned one, and the certificate is
// for csr's key and issued by that CA. replace asks for a new member in
// place of the learner admitted before (JoinRequest.replace_member).
func Join(ctx context.Context, t *enrolmentpb.Ticket, csr []byte, from netip.Addr, replace bool) (*joinpb.JoinResponse, error) {
	resp, err := call(ctx, t, pathJoin, from, &joinpb.JoinRequest{
		TicketId: t.GetId(), Secret: t.GetSecret(), Csr: csr, ClusterName: t.GetClusterName(),
		ReplaceMember: replace,
	})
	if err != nil {
		return nil, err
	}
	if err := checkAnswer(t, csr, resp); err != nil {
		return nil, &Refusal{Reason: "the cluster's answer is not acceptable: " + err.Error()}
	}
	return resp, nil
}

func checkAnswer(t *enrolmentpb.Ticket, csrDER []byte, resp *joinpb.JoinResponse) error {
	ca, err := x509.ParseCertificate(resp.GetCaCertificate())
	if err != nil {
		return fmt.Errorf("CA certificate: %w", err)
	}
	if pki.Fingerprint(ca) != t.GetCaFingerprint() {
		return fmt.Errorf("the CA is %s, the ticket pins %s", pki.Fingerprint(ca), t.GetCaFingerprint())
	}
	cert, err := x509.ParseCertificate(resp.GetCertificate())
	if err != nil {
		return fmt.Errorf("node certificate: %w", err)
	}
	if err := cert.CheckSignatureFrom(ca); err != nil {
		return fmt.Errorf("the node certificate is not issued by the CA: %w", err)
	}
	csr, err := x509.ParseCertificateRequest(csrDER)
	if err != nil {
		return err
	}
	if !bytes.Equal(cert.RawSubjectPublicKeyInfo, csr.RawSubjectPublicKeyInfo) {
		return errors.New("the node certificate is not for this node's key")
	}
	if resp.GetClusterName() != t.GetClusterName() {
		return fmt.Errorf("the cluster is %q, the ticket names %q", resp.GetClusterName(), t.GetClusterName())
	}
	return nil
}

// call POSTs req to each of the ticket's endpoints in turn, from the
// address from if it is valid, until one answers. A refusal ends the
// round at once.
func call(ctx context.Context, t *enrolmentpb.Ticket, path string, from netip.Addr, req *joinpb.JoinRequest) (*joinpb.JoinResponse, error) {
	body, err := proto.Marshal(req)
	if err != nil {
		return nil, err
	}
	var errs []error
	for _, ep := range t.GetJoinEndpoints() {
		resp, err := post(ctx, t.GetCaFingerprint(), ep, path, from, body)
		var refusal *Refusal
		if err == nil || errors.As(err, &refusal) {
			return resp, err
		}
		errs = append(errs, fmt.Errorf("%s: %w", ep, err))
	}
	return nil, fmt.Errorf("no join endpoint answered: %w", errors.Join(errs...))
}

// post sends one request to one endpoint, from the address from if it is
// valid.
func post(ctx context.Context, fingerprint, endpoint, path string, from netip.Addr, body []byte) (*joinpb.JoinResponse, error) {
	host, _, err := net.SplitHostPort(endpoint)
	if err != nil {
		return nil, err
	}
	dialer := &net.Dialer{Timeout: 5 * time.Second}
	if from.IsValid() {
		dialer.LocalAddr = &net.TCPAddr{IP: from.AsSlice()}
	}
	client := &http.Client{
		Timeout: 45 * time.Second,
		Transport: &http.Transport{
			TLSClientConfig: pinned(fingerprint, host),
			DialContext:     dialer.DialContext,
		},
	}
	defer client.CloseIdleConnections()
	r, err := http.NewRequestWithContext(ctx, http.MethodPost, "https://"+endpoint+path, bytes.NewReader(body))
	if err != nil {
		return nil, err
	}
	r.Header.Set("Content-Type", "application/x-protobuf")
	res, err := client.Do(r)
	if err != nil {
		return nil, err
	}
	defer res.Body.Close()
	b, err := io.ReadAll(io.LimitReader(res.Body, 1<<20))
	if err != nil {
		return nil, err
	}
	switch res.StatusCode {
	case http.StatusOK:
	case http.StatusForbidden, http.StatusBadRequest:
		return nil, &Refusal{Reason: strings.TrimSpace(string(b))}
	case http.StatusGone:
		return nil, &Refusal{Reason: strings.TrimSpace(string(b)), Removed: true}
	default:
		return nil, fmt.Errorf("%s: %s", res.Status, strings.TrimSpace(string(b)))
	}
	var resp joinpb.JoinResponse
	if err := proto.Unmarshal(b, &resp); err != nil {
		return nil, fmt.Errorf("the answer is not a join response: %w", err)
	}
	return &resp, nil
}

// pinned is a TLS config that accepts only a server whose chain holds the
// CA with the given fingerprint and whose certificate, issued by that CA,
// names host.
func pinned(fingerprint, host string) *tls.Config {
	return &tls.Config{
		MinVersion: tls.VersionTLS13,
		// The chain is verified below, against the pinned CA only.
		InsecureSkipVerify: true,
		VerifyConnection: func(cs tls.ConnectionState) error {
			if _, err := pki.VerifyPinned(cs.PeerCertificates, fingerprint, host); err != nil {
				return &Refusal{Reason: "the join endpoint: " + err.Error()}
			}
			return nil
		},
	}
}

// Status asks the members at endpoints ("host:port"), verified against
// the cluster CA ca, whether the cluster still counts the node whose
// certificate is cert as a member. It returns the first answer.
func Status(ctx context.Context, endpoints []string, ca *x509.Certificate, cert tls.Certificate) (removed bool, err error) {
	var errs []error
	for _, ep := range endpoints {
		removed, err := status(ctx, ep, ca, cert)
		if err == nil {
			return removed, nil
		}
		errs = append(errs, fmt.Errorf("%s: %w", ep, err))
	}
	return false, fmt.Errorf("no member answered: %w", errors.Join(errs...))
}

func status(ctx context.Context, endpoint string, ca *x509.Certificate, cert tls.Certificate) (bool, error) {
	host, _, err := net.SplitHostPort(endpoint)
	if err != nil {
		return false, err
	}
	roots := x509.NewCertPool()
	roots.AddCert(ca)
	client := &http.Client{Timeout: 10 * time.Second, Transport: &http.Transport{
		TLSClientConfig: &tls.Config{MinVersion: tls.VersionTLS13, RootCAs: roots, ServerName: host, Certificates: []tls.Certificate{cert}},
		DialContext:     (&net.Dialer{Timeout: 5 * time.Second}).DialContext,
	}}
	defer client.CloseIdleConnections()
	r, err := http.NewRequestWithContext(ctx, http.MethodPost, "https://"+endpoint+pathStatus, nil)
	if err != nil {
		return false, err
	}
	res, err := client.Do(r)
	if err != nil {
		return false, err
	}
	defer res.Body.Close()
	b, err := io.ReadAll(io.LimitReader(res.Body, 1<<16))
	if err != nil {
		return false, err
	}
	if res.StatusCode != http.StatusOK {
		return false, fmt.Errorf("%s: %s", res.Status, strings.TrimSpace(string(b)))
	}
	var st joinpb.MemberStatus
	if err := proto.Unmarshal(b, &st); err != nil {
		return false, err
	}
	return st.GetRemoved(), nil
}
