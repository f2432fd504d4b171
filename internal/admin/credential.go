package admin

import (
	"context"
	"crypto"
	"crypto/tls"
	"crypto/x509"
	"crypto/x509/pkix"
	"encoding/json"
	"errors"
	"fmt"
	"regexp"
	"strings"
	"time"

	"go.etcd.io/etcd/api/v3/v3rpc/rpctypes"
	clientv3 "go.etcd.io/etcd/client/v3"

	"github.com/borough-os/borough/internal/authority"
	"github.com/borough-os/borough/internal/keyspace"
	"github.com/borough-os/borough/internal/pki"
)

// An application credential lets an application's own etcd client reach
// the keys under one prefix, and nothing of Borough's: a client
// certificate of the owner's applications CA
// (authority.NewApplicationsCA), signed with the owner's key, whose common
// name is an etcd user (credentialUser) with one role, granted read, or
// read and write, on the prefix. etcd takes the user from the common name
// once it requires client certificates, as Borough's client port does,
// and checks the role's permissions at every request. The peer port and
// the node API trust no applications CA. Revoking a credential deletes
// its user and role, which ends its access at its next request, and
// revokes its certificate with the owner's signed word, which ends its
// connections at their next handshake.

// CredentialParams are what a credential is for.
type CredentialParams struct {
	// Name names the credential; its etcd user and role are
	// credentialUser(Name).
	Name string
	// Prefix is the keys it reaches: those that begin with it.
	Prefix   string
	ReadOnly bool
	TTL      time.Duration
}

// credentialOrg marks a certificate as an application credential.
const credentialOrg = "Borough application"

// credentialName is what a credential's name may be: it is an etcd user
// and a role, and a file name on the owner's machine.
var credentialName = regexp.MustCompile(`^[a-z0-9][a-z0-9-]{0,62}$`)

// credentialUser is the etcd user, and role, of credential name.
func credentialUser(name string) string { return "app:" + name }

// check says what is wrong with p, or nil.
func (p CredentialParams) check() error {
	switch {
	case !credentialName.MatchString(p.Name):
		return fmt.Errorf("credential name %q: want lower-case letters, digits and dashes, as billing-app", p.Name)
	case p.Prefix == "":
		return errors.New("a credential needs a --prefix: the keys it reaches")
	case strings.HasPrefix(keyspace.Prefix, p.Prefix) || strings.HasPrefix(p.Prefix, keyspace.Prefix):
		return fmt.Errorf("--prefix %q reaches Borough's own keys (%s...): give an application a prefix of its own, as /app/", p.Prefix, keyspace.Prefix)
	case p.TTL <= 0:
		return fmt.Errorf("--ttl %v: a credential's lifetime must be positive", p.TTL)
	}
	return nil
}

// MintCredential makes credential p in the cluster c reaches, as its
// owner (etcd's root): it claims the name with the credential's record
// (a name in use is refused: revoke it first; a mint cut short is
// revoked too), then makes its role and user, then, if the cluster has
// none of this owner's yet, stores the applications CA, last, for it
// restarts each member's etcd in its turn (cluster.Member.retrust). It
// returns the certificate, valid for p.TTL from now, and the
// applications CA.
func MintCredential(ctx context.Context, c *clientv3.Client, p CredentialParams, owner tls.Certificate, now time.Time) (*pki.Cert, *x509.Certificate, error) {
	if err := p.check(); err != nil {
		return nil, nil, err
	}
	owner, err := withLeaf(owner)
	if err != nil {
		return nil, nil, err
	}
	key, err := ownerSigner(owner)
	if err != nil {
		return nil, nil, err
	}
	user := credentialUser(p.Name)
	if owner.Leaf.Subject.CommonName == user {
		return nil, nil, fmt.Errorf("credential %s would be etcd user %s, which is the owner's", p.Name, user)
	}
	if _, err := c.UserGet(ctx, user); err == nil {
		return nil, nil, fmt.Errorf("etcd has a user %s already: revoke credential %s first, or choose another name", user, p.Name)
	} else if !errors.Is(err, rpctypes.ErrUserNotFound) {
		return nil, nil, fmt.Errorf("looking for user %s: %w", user, err)
	}
	apps, stored, err := applicationsCA(ctx, c, owner.Leaf, key, now)
	if err != nil {
		return nil, nil, err
	}
	cert, err := pki.SignClient(apps, key, pkix.Name{CommonName: user, Organization: []string{credentialOrg}}, now.Add(-5*time.Minute), now.Add(p.TTL))
	if err != nil {
		return nil, nil, err
	}
	if err := claim(ctx, c, p, cert.Cert); err != nil {
		return nil, nil, err
	}
	if err := grant(ctx, c, p); err != nil {
		return nil, nil, fmt.Errorf("%w (borough cluster credential revoke %s undoes what was made)", err, p.Name)
	}
	if !stored {
		if _, err := c.Put(ctx, keyspace.ApplicationsCA, string(pki.CertPEM(apps))); err != nil {
			return nil, nil, fmt.Errorf("storing the applications CA: %w", err)
		}
	}
	return cert, apps, nil
}

// claim records credential p, whose certificate is cert, if the cluster
// has no credential of its name: two owners' tools minting one name at
// once cannot both have it, and the serial of each certificate handed
// out is recorded, to revoke.
func claim(ctx context.Context, c *clientv3.Client, p CredentialParams, cert *x509.Certificate) error {
	key := keyspace.Credentials + p.Name
	b, err := json.Marshal(keyspace.CredentialRecord{Prefix: p.Prefix, ReadOnly: p.ReadOnly, Serial: cert.SerialNumber.Text(16), NotAfter: cert.NotAfter})
	if err != nil {
		return err
	}
	resp, err := c.Txn(ctx).If(clientv3.Compare(clientv3.CreateRevision(key), "=", 0)).Then(clientv3.OpPut(key, string(b))).Commit()
	if err != nil {
		return fmt.Errorf("recording credential %s: %w", p.Name, err)
	}
	if !resp.Succeeded {
		return fmt.Errorf("the cluster has a credential %s already: revoke it first", p.Name)
	}
	return nil
}

// applicationsCA is the owner's applications CA the cluster holds
// (stored), or a new one if it holds none of this owner's.
func applicationsCA(ctx context.Context, c *clientv3.Client, owner *x509.Certificate, key crypto.Signer, now time.Time) (ca *x509.Certificate, stored bool, err error) {
	resp, err := c.Get(ctx, keyspace.ApplicationsCA)
	if err != nil {
		return nil, false, fmt.Errorf("reading the applications CA: %w", err)
	}
	if len(resp.Kvs) == 1 {
		if ca, err := pki.ParseCertPEM(resp.Kvs[0].Value); err == nil && authority.CheckApplicationsCA(ca, owner) == nil {
			return ca, true, nil
		}
	}
	ca, err = authority.NewApplicationsCA(owner, key, now)
	return ca, false, err
}

// grant makes credential p's etcd role, with its permission, and its
// user, which has no password: etcd knows it by its certificate.
func grant(ctx context.Context, c *clientv3.Client, p CredentialParams) error {
	user := credentialUser(p.Name)
	perm := clientv3.PermissionType(clientv3.PermReadWrite)
	if p.ReadOnly {
		perm = clientv3.PermissionType(clientv3.PermRead)
	}
	if _, err := c.RoleAdd(ctx, user); err != nil {
		return fmt.Errorf("adding role %s: %w", user, err)
	}
	if _, err := c.RoleGrantPermission(ctx, user, p.Prefix, clientv3.GetPrefixRangeEnd(p.Prefix), perm); err != nil {
		return fmt.Errorf("granting role %s %s: %w", user, p.Prefix, err)
	}
	if _, err := c.UserAddWithOptions(ctx, user, "", &clientv3.UserAddOptions{NoPassword: true}); err != nil {
		return fmt.Errorf("adding user %s: %w", user, err)
	}
	if _, err := c.UserGrantRole(ctx, user, user); err != nil {
		return fmt.Errorf("granting user %s its role: %w", user, err)
	}
	return nil
}

// RevokeCredential ends credential name: its user and role go, then its
// certificate is revoked with the owner's signed word (remembered: the
// last CRL the owner's tool made, as RemoveNode), then its record. It
// returns the new CRL.
func RevokeCredential(ctx context.Context, c *clientv3.Client, name string, owner tls.Certificate, remembered []byte) ([]byte, error) {
	owner, err := withLeaf(owner)
	if err != nil {
		return nil, err
	}
	rec, err := readCredential(ctx, c, name)
	if err != nil {
		return nil, err
	}
	if rec == nil {
		return nil, fmt.Errorf("the cluster has no credential %s", name)
	}
	user := credentialUser(name)
	if _, err := c.UserDelete(ctx, user); err != nil && !errors.Is(err, rpctypes.ErrUserNotFound) {
		return nil, fmt.Errorf("deleting user %s: %w", user, err)
	}
	if _, err := c.RoleDelete(ctx, user); err != nil && !errors.Is(err, rpctypes.ErrRoleNotFound) {
		return nil, fmt.Errorf("deleting role %s: %w", user, err)
	}
	der, err := revoke(ctx, c, "", []string{rec.Serial}, owner, remembered)
	if err != nil {
		return nil, fmt.Errorf("revoking credential %s's certificate: %w", name, err)
	}
	if _, err := c.Delete(ctx, keyspace.Credentials+name); err != nil {
		return der, fmt.Errorf("deleting the record of credential %s: %w", name, err)
	}
	return der, nil
}

// Credentials are the cluster's application credentials, by name.
func Credentials(ctx context.Context, c *clientv3.Client) (map[string]keyspace.CredentialRecord, error) {
	resp, err := c.Get(ctx, keyspace.Credentials, clientv3.WithPrefix())
	if err != nil {
		return nil, fmt.Errorf("reading the credentials: %w", err)
	}
	out := map[string]keyspace.CredentialRecord{}
	for _, kv := range resp.Kvs {
		var rec keyspace.CredentialRecord
		if err := json.Unmarshal(kv.Value, &rec); err != nil {
			return nil, fmt.Errorf("the record %s: %w", kv.Key, err)
		}
		out[strings.TrimPrefix(string(kv.Key), keyspace.Credentials)] = rec
	}
	return out, nil
}

// readCredential reads credential name's record; nil if there is none.
func readCredential(ctx context.Context, c *clientv3.Client, name string) (*keyspace.CredentialRecord, error) {
	resp, err := c.Get(ctx, keyspace.Credentials+name)
	if err != nil {
		return nil, fmt.Errorf("reading credential %s: %w", name, err)
	}
	if len(resp.Kvs) == 0 {
		return nil, nil
	}
	var rec keyspace.CredentialRecord
	if err := json.Unmarshal(resp.Kvs[0].Value, &rec); err != nil {
		return nil, fmt.Errorf("the record of credential %s: %w", name, err)
	}
	return &rec, nil
}
