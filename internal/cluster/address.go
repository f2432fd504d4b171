package cluster

import (
	"context"
	"fmt"
	"time"

	"github.com/borough-os/borough/internal/atomicfile"
	"github.com/borough-os/borough/internal/consensus"
	"github.com/borough-os/borough/internal/keyspace"
	"github.com/borough-os/borough/internal/pki"
)

// A node's address may change while it is down (a new DHCP lease, a moved
// machine). Its certificate names the old one, and peers check a peer's
// certificate against the address it connects from, so before etcd
// starts the node gives itself a certificate for the new address, signed
// with its copy of the cluster CA's key; once etcd runs it tells the
// cluster its new peer URL and records the new certificate's serial, so
// that removing the node revokes it too.

// reissueIfMoved gives the node a certificate for its current address if
// the one it has names another. It returns the new certificate's serial,
// or "" if nothing changed.
func (mg *Manager) reissueIfMoved() (string, error) {
	f := mg.pkiFiles()
	cert, err := f.LoadCert()
	if err != nil {
		return "", err
	}
	for _, ip := range cert.IPAddresses {
		if ip.Equal(mg.cfg.IP.AsSlice()) {
			return "", nil
		}
	}
	ca, err := f.LoadSigningCA()
	if err != nil {
		return "", fmt.Errorf("the node's address is now %s, not %v, and it cannot give itself a new certificate: %w",
			mg.cfg.IP, cert.IPAddresses, err)
	}
	key, err := mg.nodeKey()
	if err != nil {
		return "", err
	}
	csr, err := pki.NewCSR(cert.Subject.CommonName, mg.ips(), key)
	if err != nil {
		return "", err
	}
	fresh, err := ca.SignCSR(csr, mg.cfg.IP, time.Now())
	if err != nil {
		return "", err
	}
	if err := atomicfile.Write(f.Cert(), append(pki.CertPEM(fresh), pki.CertPEM(ca.Cert)...), 0o600); err != nil {
		return "", fmt.Errorf("writing the new certificate: %w", err)
	}
	mg.log.Warn("the node's address changed; gave it a new certificate", "was", fmt.Sprint(cert.IPAddresses[0]), "now", mg.cfg.IP)
	return fresh.SerialNumber.Text(16), nil
}

// announceMove tells the cluster the member's new peer URL and records the
// new certificate's serial, retrying until it succeeds or ctx ends.
func (mg *Manager) announceMove(ctx context.Context, c *consensus.Consensus, name, serial string) error {
	return retry(ctx, mg.log, "telling the cluster the node's new address", noneFinal, func() error {
		if _, err := c.Client.MemberUpdate(ctx, c.MemberID(), []string{c.PeerURL()}); err != nil {
			return fmt.Errorf("updating the peer URL: %w", err)
		}
		return keyspace.AddSerial(ctx, c.Client, name, keyspace.Issue{Serial: serial})
	})
}
