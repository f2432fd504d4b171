package join

import (
	"bytes"
	"context"
	"crypto/sha256"
	"crypto/tls"
	"crypto/x509"
	"errors"
	"fmt"
	"io"
	"net"
	"net/http"
	"net/netip"
	"slices"
	"strings"
	"time"

	"google.golang.org/protobuf/proto"

	"github.com/borough-os/borough/internal/authority"
	"github.com/borough-os/borough/internal/pki"
	"github.com/borough-os/borough/internal/ticket"
	"github.com/borough-os/borough/proto/authoritypb"
	"github.com/borough-os/borough/proto/enrolmentpb"
	"github.com/borough-os/borough/proto/joinpb"
)

// Check asks the cluster whether the ticket would admit a fresh node,
// without using it up. It returns a *Refusal if the cluster says no.
func Check(ctx context.Context, t *enrolmentpb.Ticket) error {
	_, err := call(ctx, t, pathCheck, netip.Addr{}, &joinpb.JoinRequest{
		TicketId: t.GetId(), ClusterName: t.GetClusterName(), Claim: ticket.Prove(t, "", nil).Signature,
	})
	return err
}

// Join asks the cluster to admit the node whose certificate request is
// csr, from the node's address from (the one csr names, which the
// cluster checks against the request's source), and checks the answer
// against the ticket: the CA is the pinned one, and the certificate is
// for csr's key and issued by that CA. replace asks for a new member in
// place of the learner admitted before (JoinRequest.replace_member).
func Join(ctx context.Context, t *enrolmentpb.Ticket, csr []byte, from netip.Addr, replace bool) (*joinpb.JoinResponse, error) {
	c, err := x509.ParseCertificateRequest(csr)
	if err != nil {
		return nil, fmt.Errorf("the node's certificate request: %w", err)
	}
	keyHash := sha256.Sum256(c.RawSubjectPublicKeyInfo)
	resp, err := call(ctx, t, pathJoin, from, &joinpb.JoinRequest{
		TicketId: t.GetId(), Csr: csr, ClusterName: t.GetClusterName(), ReplaceMember: replace,
		Claim: ticket.Prove(t, c.Subject.CommonName, keyHash[:]).Signature,
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
		var st joinpb.MemberStatus
		if err := proto.Unmarshal(b, &st); err != nil {
			return nil, fmt.Errorf("a refusal as removed that does not decode: %w", err)
		}
		return nil, &Refusal{Reason: st.GetReason(), Removed: true, CRL: st.GetCrl()}
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
// certificate is cert as a member. It returns the first answer it can
// believe: with an owner, "removed" only with the owner's revocations of
// the node (checkRemoval), for a member can answer anything, and a node
// that believes it was removed stays out for good.
func Status(ctx context.Context, endpoints []string, ca, owner *x509.Certificate, cert tls.Certificate) (removed bool, err error) {
	var errs []error
	for _, ep := range endpoints {
		st, err := status(ctx, ep, ca, cert)
		if err == nil && st.GetRemoved() {
			err = checkRemoval(st.GetCrl(), ca, owner, cert)
		}
		if err == nil {
			return st.GetRemoved(), nil
		}
		errs = append(errs, fmt.Errorf("%s: %w", ep, err))
	}
	return false, fmt.Errorf("no member answered: %w", errors.Join(errs...))
}

// CheckRemoved checks, for a node of owner (nil: none known), that r, a
// refusal as removed, shows the owner's word for it (ownersRemoval), in
// cluster. A member can refuse anything, and a node that believes it was
// removed stays out for good.
func (r *Refusal) CheckRemoved(owner *x509.Certificate, cluster, name string) error {
	if owner == nil {
		return nil
	}
	crl, err := x509.ParseRevocationList(r.CRL)
	if err != nil {
		return fmt.Errorf("it says node %s was removed, with no CRL to show for it: %w", name, err)
	}
	stmt, err := ownersRemoval(crl, owner, name)
	if err == nil && stmt.GetCluster() != cluster {
		err = fmt.Errorf("it says node %s was removed, and the owner's revocations in its CRL number %v do not: they are of cluster %q",
			name, crl.Number, stmt.GetCluster())
	}
	return err
}

// checkRemoval checks, in a cluster with an owner, that der, the CRL in
// force of a member that said the node of cert was removed, is the
// cluster CA's and shows the owner's word for it (ownersRemoval).
func checkRemoval(der []byte, ca, owner *x509.Certificate, cert tls.Certificate) error {
	if owner == nil {
		return nil
	}
	leaf, err := x509.ParseCertificate(cert.Certificate[0])
	if err != nil {
		return err
	}
	crl, err := pki.ParseCRL(der, ca)
	if err != nil {
		return fmt.Errorf("it says node %s was removed, with no CRL to show for it: %w", leaf.Subject.CommonName, err)
	}
	_, err = ownersRemoval(crl, owner, leaf.Subject.CommonName)
	return err
}

// ownersRemoval returns the owner's revocations crl carries, once it has
// checked them against owner (authority.Revocations) and that they name
// node name among the nodes the owner removed.
func ownersRemoval(crl *x509.RevocationList, owner *x509.Certificate, name string) (*authoritypb.Revocations, error) {
	stmt, err := authority.Revocations(crl, owner)
	switch {
	case err != nil:
		return nil, fmt.Errorf("it says node %s was removed, with a CRL that is not the owner's word: %w", name, err)
	case stmt == nil || !slices.Contains(stmt.GetNodes(), name):
		return nil, fmt.Errorf("it says node %s was removed, and the owner's revocations in its CRL number %v do not", name, crl.Number)
	}
	return stmt, nil
}

func status(ctx context.Context, endpoint string, ca *x509.Certificate, cert tls.Certificate) (*joinpb.MemberStatus, error) {
	host, _, err := net.SplitHostPort(endpoint)
	if err != nil {
		return nil, err
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
		return nil, err
	}
	res, err := client.Do(r)
	if err != nil {
		return nil, err
	}
	defer res.Body.Close()
	b, err := io.ReadAll(io.LimitReader(res.Body, 1<<16))
	if err != nil {
		return nil, err
	}
	if res.StatusCode != http.StatusOK {
		return nil, fmt.Errorf("%s: %s", res.Status, strings.TrimSpace(string(b)))
	}
	var st joinpb.MemberStatus
	if err := proto.Unmarshal(b, &st); err != nil {
		return nil, err
	}
	return &st, nil
}
