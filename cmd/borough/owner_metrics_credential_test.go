package main

import (
	"bytes"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/borough-os/borough/internal/metrics"
	"github.com/borough-os/borough/internal/ownerkey"
	"github.com/borough-os/borough/internal/pki"
)

func TestMetricsCredential(t *testing.T) {
	configDir = t.TempDir()
	t.Setenv(ownerkey.PassphraseEnv, "the owner's passphrase")
	clear(unlocked)
	if err := ownerInit(&bytes.Buffer{}, "me", false); err != nil {
		t.Fatal(err)
	}
	owner, err := pki.ReadCertPEM(ownerCertPath())
	if err != nil {
		t.Fatal(err)
	}
	dir := t.TempDir()
	for _, tc := range []struct {
		args []string
		err  string
	}{
		{[]string{"prometheus", "--out", dir, "--ttl", "1h"}, ""},
		{[]string{"../prometheus", "--out", dir}, `metrics credential name "../prometheus": want a plain name`},
		{[]string{"prometheus", "--out", dir, "--ttl", "-1h"}, "lifetime must be positive"},
	} {
		t.Run(strings.Join(tc.args, " "), func(t *testing.T) {
			var out strings.Builder
			err := run(append([]string{"--config", configDir, "owner", "metrics-credential"}, tc.args...), &out, &out)
			if tc.err != "" {
				if err == nil || !strings.Contains(err.Error(), tc.err) {
					t.Fatalf("got %v, want %q", err, tc.err)
				}
				return
			}
			if err != nil {
				t.Fatal(err)
			}
			cert, err := pki.ReadCertPEM(filepath.Join(dir, "prometheus.pem"))
			if err != nil {
				t.Fatal(err)
			}
			if _, err := pki.ParseKeyPEM(readFile(t, filepath.Join(dir, "prometheus-key.pem"))); err != nil {
				t.Fatal(err)
			}
			if err := metrics.CheckCredential(cert, owner, time.Now()); err != nil {
				t.Fatalf("the credential written: %v", err)
			}
			if err := metrics.CheckCredential(cert, owner, time.Now().Add(2*time.Hour)); err == nil {
				t.Error("the credential is valid past its --ttl")
			}
			if !strings.Contains(out.String(), "cert_file: "+filepath.Join(dir, "prometheus.pem")) {
				t.Errorf("no scrape job naming the credential in:\n%s", out.String())
			}
		})
	}
}
