package main

import (
	"context"
	"crypto/x509"
	"errors"
	"fmt"
	"io"
	"io/fs"
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"syscall"
	"time"

	"github.com/borough-os/borough/internal/admin"
	"github.com/borough-os/borough/internal/pki"
)

// Tools that read the owner's key from a file (etcdctl) get an owner
// session (admin.MintSession) instead: a key made for it and a
// certificate valid for hours, in a directory of their own that this
// process creates, with a name nobody can guess or take first
// (os.MkdirTemp: created exclusively, owner-only), in the user's runtime
// directory (memory-backed) where there is one. The directory's name
// carries its expiry, and every borough command removes the user's
// expired sessions.

// sessionPrefix starts a session directory's name, followed by its
// expiry (Unix seconds) and a random part.
const sessionPrefix = "borough-session-"

// sessionFiles is an owner session's files.
type sessionFiles struct {
	dir, cert, key string
	expires        time.Time
}

// sessionBase is where session directories are made.
func sessionBase() string {
	if dir := os.Getenv("XDG_RUNTIME_DIR"); dir != "" {
		return dir
	}
	return os.TempDir()
}

// ownerSession mints an owner session valid for ttl through endpoint,
// checked against ca, waits until endpoint takes it, and writes it.
func ownerSession(stdout io.Writer, endpoint string, ca *x509.Certificate, ttl time.Duration) (*sessionFiles, error) {
	owner, err := ownerKeyPair()
	if err != nil {
		return nil, err
	}
	c, err := admin.Connect([]string{endpoint}, ca, owner)
	if err != nil {
		return nil, err
	}
	defer c.Close()
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	cert, fresh, err := admin.MintSession(ctx, c, owner, ttl, time.Now())
	if err != nil {
		return nil, fmt.Errorf("%s: %w", endpoint, err)
	}
	if fresh {
		fmt.Fprintf(stdout, "# the cluster's first owner session or credential: each member's etcd restarts once to trust it\n")
		if err := awaitCredential(io.Discard, endpoint, "", cert, ca, 2*time.Minute); err != nil {
			return nil, err
		}
	}
	return writeSession(sessionBase(), cert)
}

// writeSession writes cert and its key in a new session directory under
// base.
func writeSession(base string, cert *pki.Cert) (*sessionFiles, error) {
	key, err := pki.KeyPEM(cert.Key)
	if err != nil {
		return nil, err
	}
	expires := cert.Cert.NotAfter
	dir, err := os.MkdirTemp(base, sessionPrefix+strconv.FormatInt(expires.Unix(), 10)+"-")
	if err != nil {
		return nil, fmt.Errorf("making the owner session's directory: %w", err)
	}
	s := &sessionFiles{dir: dir, cert: filepath.Join(dir, "owner-session.pem"), key: filepath.Join(dir, "owner-session-key.pem"), expires: expires}
	for path, b := range map[string][]byte{s.cert: pki.CertPEM(cert.Cert), s.key: key} {
		if err := writeNew(path, b); err != nil {
			os.RemoveAll(dir)
			return nil, err
		}
	}
	return s, nil
}

// writeNew writes b to path, a file that must not exist yet, owner-only,
// following no symbolic link.
func writeNew(path string, b []byte) error {
	f, err := os.OpenFile(path, os.O_WRONLY|os.O_CREATE|os.O_EXCL|syscall.O_NOFOLLOW, 0o600)
	if err != nil {
		return err
	}
	_, err = f.Write(b)
	return errors.Join(err, f.Close())
}

// removeExpiredSessions removes the user's session directories under base
// whose expiry is past at now: only directories (no link followed) this
// user owns.
func removeExpiredSessions(base string, now time.Time) {
	entries, err := os.ReadDir(base)
	if err != nil {
		return
	}
	for _, e := range entries {
		if expires, ok := sessionExpiry(e.Name()); ok && now.After(expires) && ownDir(base, e) {
			os.RemoveAll(filepath.Join(base, e.Name()))
		}
	}
}

// sessionExpiry reads a session directory's expiry from its name.
func sessionExpiry(name string) (time.Time, bool) {
	rest, ok := strings.CutPrefix(name, sessionPrefix)
	if !ok {
		return time.Time{}, false
	}
	stamp, _, ok := strings.Cut(rest, "-")
	secs, err := strconv.ParseInt(stamp, 10, 64)
	if !ok || err != nil {
		return time.Time{}, false
	}
	return time.Unix(secs, 0), true
}

// ownDir says whether e, in base, is a directory (not a link) of this
// user's.
func ownDir(base string, e fs.DirEntry) bool {
	info, err := os.Lstat(filepath.Join(base, e.Name()))
	if err != nil || !info.IsDir() {
		return false
	}
	st, ok := info.Sys().(*syscall.Stat_t)
	return ok && int(st.Uid) == os.Getuid()
}

// sessionEnv is the etcdctl settings for session s against the cluster's
// endpoints, whose CA is in caFile.
func sessionEnv(stdout io.Writer, s *sessionFiles, endpoints []string, caFile string) {
	fmt.Fprintf(stdout, "# ETCDCTL_CERT and ETCDCTL_KEY are an owner session, etcd's root until %s; "+
		"borough removes it once expired (rm -r %s ends it here sooner)\n", s.expires.Format(time.RFC3339), s.dir)
	for _, kv := range [][2]string{
		{"ETCDCTL_API", "3"},
		{"ETCDCTL_ENDPOINTS", strings.Join(endpoints, ",")},
		{"ETCDCTL_CACERT", caFile},
		{"ETCDCTL_CERT", s.cert},
		{"ETCDCTL_KEY", s.key},
	} {
		fmt.Fprintf(stdout, "export %s=%s\n", kv[0], kv[1])
	}
}
