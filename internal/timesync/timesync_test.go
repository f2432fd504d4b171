package timesync

import (
	"strconv"
	"strings"
	"testing"

	"github.com/borough-os/borough/internal/timesync/ntptest"
)

// TestSync queries real SNTP servers on loopback. Their clocks agree with
// this machine's, so the test never steps the host's clock.
func TestSync(t *testing.T) {
	good, err := ntptest.Start(0)
	if err != nil {
		t.Fatal(err)
	}
	defer good.Close()
	dead, err := ntptest.Start(0)
	if err != nil {
		t.Fatal(err)
	}
	dead.Close()
	addr := func(s *ntptest.Server) string { return "127.0.0.1:" + strconv.Itoa(s.Port) }
	for _, tc := range []struct {
		name    string
		servers []string
		want    string // the server used, or an error's text
	}{
		{"one server", []string{addr(good)}, addr(good)},
		{"first one down", []string{addr(dead), addr(good)}, addr(good)},
		{"all down", []string{addr(dead)}, "no NTP server answered"},
		{"bad name", []string{"no-such-host.invalid"}, "no-such-host.invalid"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			server, offset, stepped, err := Sync(tc.servers)
			got := server
			if err != nil {
				got = err.Error()
			}
			if !strings.Contains(got, tc.want) {
				t.Fatalf("Sync = %q, want %q", got, tc.want)
			}
			if stepped || offset.Abs() > threshold {
				t.Errorf("Sync stepped=%v by %v against a server that agrees with this machine", stepped, offset)
			}
		})
	}
}
