package unlock

import (
	"bytes"
	"context"
	"crypto/tls"
	"crypto/x509"
	"fmt"
	"io"
	"log/slog"
	"net/http"
	"strings"
	"time"

	"google.golang.org/protobuf/proto"

	"github.com/borough-os/borough/internal/escrow"
	"github.com/borough-os/borough/proto/unlockpb"
)

const (
	// requestTimeout bounds one share request.
	requestTimeout = 5 * time.Second
	// minRetry and maxRetry bound the wait between rounds of requests.
	minRetry, maxRetry = time.Second, 10 * time.Second
	// logEvery is how often Fetch says it is still waiting.
	logEvery = 10 * time.Second
)

// Fetch asks the holders of e's envelopes, at addrs (holder name to
// host:port), for their shares, round after round, until K of them
// recover the node's cluster unlock key, or ctx ends. While it waits it
// says so, naming how many shares it has.
func Fetch(ctx context.Context, log *slog.Logger, id Identity, e *escrow.Escrow, addrs map[string]string) ([]byte, error) {
	onePriv, onePub, err := escrow.NewKey()
	if err != nil {
		return nil, err
	}
	defer clear(onePriv)
	shares := make(map[string][]byte)
	lastErr := make(map[string]string)
	var logged time.Time
	for wait := minRetry; ; wait = min(2*wait, maxRetry) {
		got, errs := requestAll(ctx, id, e, addrs, shares, onePub)
		for holder, err := range errs {
			lastErr[holder] = err.Error()
		}
		for holder, sealed := range got {
			share, err := escrow.OpenTransfer(onePriv, e.Binding, holder, sealed)
			if err != nil {
				log.Warn("a share that does not open", "holder", holder, "err", err)
				continue
			}
			shares[holder] = share
		}
		if len(shares) >= e.K {
			cuk, err := e.Recover(shares)
			if err == nil {
				log.Info("cluster unlock key recovered", "shares", len(shares), "needed", e.K)
				return cuk, nil
			}
			log.Warn("recovering the cluster unlock key", "err", err)
		}
		if time.Since(logged) >= logEvery {
			log.Warn(fmt.Sprintf("waiting for unlock: %d of %d shares", len(shares), e.K),
				"holders", strings.Join(holders(e), ","), "errors", fmt.Sprint(lastErr))
			logged = time.Now()
		}
		select {
		case <-ctx.Done():
			return nil, fmt.Errorf("waiting for unlock: %d of %d shares: %w", len(shares), e.K, ctx.Err())
		case <-time.After(wait):
		}
	}
}

func holders(e *escrow.Escrow) []string {
	var out []string
	for _, env := range e.Envelopes {
		out = append(out, env.Holder)
	}
	return out
}

// requestAll asks, in parallel, every holder that has an address and has
// not answered yet, and returns the sealed shares of those that did and
// the errors of those that did not.
func requestAll(ctx context.Context, id Identity, e *escrow.Escrow, addrs map[string]string,
	have map[string][]byte, onePub []byte) (map[string][]byte, map[string]error) {
	type answer struct {
		holder string
		sealed []byte
		err    error
	}
	answers := make(chan answer)
	asked := 0
	for _, env := range e.Envelopes {
		addr, ok := addrs[env.Holder]
		if _, done := have[env.Holder]; done || !ok {
			continue
		}
		asked++
		go func() {
			sealed, err := request(ctx, id, addr, e, env, onePub)
			answers <- answer{env.Holder, sealed, err}
		}()
	}
	out, errs := make(map[string][]byte), make(map[string]error)
	for range asked {
		a := <-answers
		if a.err != nil {
			errs[a.holder] = a.err
			continue
		}
		out[a.holder] = a.sealed
	}
	return out, errs
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
