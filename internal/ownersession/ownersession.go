// Package ownersession is the owner's connection to a running cluster,
// which `borough health`, `dashboard`, `support` and `update --cluster`
// share: its etcd, as the owner, and clients of each member's node API,
// each checked against the cluster's CA and the member's name. It is the
// owner's side alone: it links none of the node's machinery. The owner's
// config directory (the pinned CA, the owner's key, the members it
// remembers) stays with the CLI, which passes in what it read and keeps
// what a look saw.
package ownersession

import (
	"context"
	"crypto/tls"
	"crypto/x509"
	"fmt"
	"net"
	"net/url"
	"strconv"
	"strings"
	"time"

	clientv3 "go.etcd.io/etcd/client/v3"

	"github.com/borough-os/borough/internal/admin"
	"github.com/borough-os/borough/internal/clusterhealth"
	"github.com/borough-os/borough/internal/nodeapi"
	"github.com/borough-os/borough/internal/ports"
)

// Members makes clients of members' node APIs, as the owner.
type Members struct {
	// Given are the addresses the owner gave (--api), by member name.
	Given map[string]string
	Owner tls.Certificate
	CA    *x509.Certificate
}

// Client is a client of member name's node API (API).
func (m Members) Client(name string, clientURLs []string) (*nodeapi.Client, error) {
	addr, err := API(name, clientURLs, m.Given)
	if err != nil {
		return nil, err
	}
	return &nodeapi.Client{Addr: addr, Owner: m.Owner, CA: m.CA, ServerName: name}, nil
}

// API is the node API address of member name: the one given, or its
// first client URL's host at the node API's port.
func API(name string, clientURLs []string, given map[string]string) (string, error) {
	if addr, ok := given[name]; ok {
		return addr, nil
	}
	if len(clientURLs) == 0 {
		return "", fmt.Errorf("it has no client URL to find its node API by: give --api %s=HOST:PORT", name)
	}
	u, err := url.Parse(clientURLs[0])
	if err != nil || u.Hostname() == "" {
		return "", fmt.Errorf("its client URL %q names no host: give --api %s=HOST:PORT", clientURLs[0], name)
	}
	return net.JoinHostPort(u.Hostname(), strconv.Itoa(ports.NodeAPI)), nil
}

// Session is the owner's connection to the cluster at Endpoints.
type Session struct {
	Endpoints []string
	Etcd      *clientv3.Client
	Members   Members
}

// Open connects to the cluster at endpoints as owner, checking it
// against ca; given are the node API addresses the owner gave.
func Open(endpoints []string, ca *x509.Certificate, owner tls.Certificate, given map[string]string) (*Session, error) {
	etcd, err := admin.Connect(endpoints, ca, owner)
	if err != nil {
		return nil, err
	}
	return &Session{Endpoints: endpoints, Etcd: etcd, Members: Members{Given: given, Owner: owner, CA: ca}}, nil
}

// Close closes the session's etcd client.
func (s *Session) Close() error { return s.Etcd.Close() }

// Health reads every member's health, on its client port and its node
// API, and judges it; maxClock is how far a member's clock may be from
// the owner's.
func (s *Session) Health(ctx context.Context, maxClock time.Duration) (*clusterhealth.Cluster, error) {
	h, err := clusterhealth.Read(ctx, s.Etcd, s.Endpoints)
	if err != nil {
		return nil, fmt.Errorf("the cluster at %s does not answer (no quorum, or down): %w", strings.Join(s.Endpoints, ","), err)
	}
	for i := range h.Members {
		m := &h.Members[i]
		if c, err := s.Members.Client(m.Name, m.URLs); err == nil {
			m.Ask(ctx, c)
		} else {
			m.Problems = append(m.Problems, "node API: "+err.Error())
		}
		m.Judge(maxClock)
	}
	h.JudgeEscrow()
	h.Settle()
	return h, nil
}
