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
	"strings"
	"sync"
	"time"

	"google.golang.org/protobuf/proto"

	"github.com/borough-os/borough/internal/escrow"
	"github.com/borough-os/borough/proto/unlockpb"
)

const (
	// requestTimeout bounds one share request.
	requestTimeout = 5 * time.Second
	// minRetry and maxRetry bound the wait before asking a holder that
	// answered without a share again.
	minRetry, maxRetry = time.Second, 10 * time.Second
	// unreachableRetry is the wait before asking a holder that could not
	// be reached again: one that is not up yet, as every holder is for a
	// few seconds when a whole cluster is powered on together. Asking it
	// costs nothing while it is down (a connection refused, or ARP
	// unanswered), and each wait for it is a wait of the booting node.
	unreachableRetry = 500 * time.Millisecond
	// logEvery is how often Fetch says it is still waiting.
	logEvery = 10 * time.Second
)

// Fetch asks the holders of e's envelopes, at addrs (holder name to
// host:port), for their shares until K of them recover the node's cluster
// unlock key, or ctx ends. Each holder is asked on its own, again and
// again until it gives its share: a holder that is down or slow delays
// none of the others, and one that comes up is asked within
// unreachableRetry. While it waits it says so, naming how many shares it
// has.
func Fetch(ctx context.Context, log *slog.Logger, id Identity, e *escrow.Escrow, addrs map[string]string) ([]byte, error) {
	onePriv, onePub, err := escrow.NewKey()
	if err != nil {
		return nil, err
	}
	ctx, cancel := context.WithCancel(ctx)
	var wg sync.WaitGroup
	defer func() {
		cancel()
		wg.Wait()
		clear(onePriv)
	}()
	answers := make(chan answer)
	for _, env := range e.Envelopes {
		if addr, ok := addrs[env.Holder]; ok {
			h := holder{id: id, addr: addr, e: e, env: env, onePriv: onePriv, onePub: onePub, log: log}
			wg.Go(func() { h.ask(ctx, answers) })
		}
	}
	shares := make(map[string][]byte)
	lastErr := make(map[string]string)
	var logged time.Time
	for {
		var a answer
		select {
		case <-ctx.Done():
			return nil, fmt.Errorf("waiting for unlock: %d of %d shares: %w", len(shares), e.K, ctx.Err())
		case a = <-answers:
		}
		if a.err != nil {
			lastErr[a.holder] = a.err.Error()
			if time.Since(logged) >= logEvery {
				log.Warn(fmt.Sprintf("waiting for unlock: %d of %d shares", len(shares), e.K),
					"holders", strings.Join(holders(e), ","), "errors", fmt.Sprint(lastErr))
				logged = time.Now()
			}
			continue
		}
		shares[a.holder] = a.share
		if len(shares) < e.K {
			continue
		}
		cuk, err := e.Recover(shares)
		if err == nil {
			log.Info("cluster unlock key recovered", "shares", len(shares), "needed", e.K)
			return cuk, nil
		}
		log.Warn("recovering the cluster unlock key", "err", err)
	}
}

// answer is a holder's share, opened, or why there is none yet.
type answer struct {
	holder string
	share  []byte
	err    error
}

// holder is one holder as Fetch asks it.
type holder struct {
	id      Identity
	addr    string
	e       *escrow.Escrow
	env     escrow.Envelope
	onePriv []byte
	onePub  []byte
	log     *slog.Logger
}

// ask asks h for its share until it gives one that opens, and sends each
// outcome to answers, until ctx ends.
func (h holder) ask(ctx context.Context, answers chan<- answer) {
	wait := minRetry
	for {
		share, err := h.share(ctx)
		select {
		case answers <- answer{h.env.Holder, share, err}:
		case <-ctx.Done():
			return
		}
		if err == nil {
			return
		}
		pause := unreachableRetry
		if !unreachable(err) {
			pause, wait = wait, min(2*wait, maxRetry)
		}
		select {
		case <-ctx.Done():
			return
		case <-time.After(pause):
		}
	}
}

// share asks h once and opens what it sends.
func (h holder) share(ctx context.Context) ([]byte, error) {
	sealed, err := request(ctx, h.id, h.addr, h.e, h.env, h.onePub)
	if err != nil {
		return nil, err
	}
	share, err := escrow.OpenTransfer(h.onePriv, h.e.Binding, h.env.Holder, sealed)
	if err != nil {
		h.log.Warn("a share that does not open", "holder", h.env.Holder, "err", err)
		return nil, fmt.Errorf("a share that does not open: %w", err)
	}
	return share, nil
}

// unreachable says whether err is a failure to connect at all: the
// holder's machine or its responder is not up.
func unreachable(err error) bool {
	var op *net.OpError
	return errors.As(err, &op) && op.Op == "dial"
}

func holders(e *escrow.Escrow) []string {
	var out []string
	for _, env := range e.Envelopes {
		out = append(out, env.Holder)
	}
	return out
}

// request asks one holder, at addr, for its share.
func request(ctx context.Context, id Identity, addr string, e *escrow.Escrow, env escrow.Envelope, onePub []byte) ([]byte, error) {
	body, err := proto.Marshal(&unlockpb.ShareRequest{
		Cluster: e.Binding.Cluster, Node: e.Binding.Node, Epoch: e.Binding.Epoch,
		Holder: env.Holder, Envelope: env.Sealed, OneTimeKey: onePub, KeySha256: e.Binding.Key,
	})
	if err != nil {
		return nil, err
	}
	ctx, cancel := context.WithTimeout(ctx, requestTimeout)
	defer cancel()
	req, err := http.NewRequestWithContext(ctx, http.MethodPost, "https://"+addr+pathShare, bytes.NewReader(body))
	if err != nil {
		return nil, err
	}
	client := &http.Client{Transport: &http.Transport{TLSClientConfig: &tls.Config{
		MinVersion:   tls.VersionTLS13,
		Certificates: []tls.Certificate{id.Cert},
		// verify checks the chain, the holder's name and the CRL.
		InsecureSkipVerify: true,
		VerifyPeerCertificate: func(raw [][]byte, _ [][]*x509.Certificate) error {
			_, err := id.Verify(raw, env.Holder, x509.ExtKeyUsageServerAuth)
			return err
		},
	}}}
	defer client.CloseIdleConnections()
	rsp, err := client.Do(req)
	if err != nil {
		return nil, err
	}
	defer rsp.Body.Close()
	b, err := io.ReadAll(io.LimitReader(rsp.Body, maxBody))
	if err != nil {
		return nil, err
	}
	if rsp.StatusCode != http.StatusOK {
		return nil, fmt.Errorf("%s: %s: %s", env.Holder, rsp.Status, strings.TrimSpace(string(b)))
	}
	var sr unlockpb.ShareResponse
	if err := proto.Unmarshal(b, &sr); err != nil {
		return nil, err
	}
	return sr.GetSealed(), nil
}
