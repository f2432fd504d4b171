package network

import (
	"testing"
	"time"

	"github.com/insomniacslk/dhcp/dhcpv4"
	"github.com/insomniacslk/dhcp/dhcpv4/nclient4"
)

func lease(t *testing.T, opts ...dhcpv4.Option) *nclient4.Lease {
	t.Helper()
	ack, err := dhcpv4.New(dhcpv4.WithReply(&dhcpv4.DHCPv4{}))
	if err != nil {
		t.Fatal(err)
	}
	for _, o := range opts {
		ack.UpdateOption(o)
	}
	return &nclient4.Lease{ACK: ack}
}

func renew(d time.Duration) dhcpv4.Option {
	return dhcpv4.Option{Code: dhcpv4.OptionRenewTimeValue, Value: dhcpv4.Duration(d)}
}

func rebind(d time.Duration) dhcpv4.Option {
	return dhcpv4.Option{Code: dhcpv4.OptionRebindingTimeValue, Value: dhcpv4.Duration(d)}
}

func TestTimes(t *testing.T) {
	for _, tc := range []struct {
		name           string
		opts           []dhcpv4.Option
		t1, t2, expiry time.Duration
	}{
		{"lease only", []dhcpv4.Option{dhcpv4.OptIPAddressLeaseTime(8 * time.Hour)}, 4 * time.Hour, 7 * time.Hour, 8 * time.Hour},
		{"server's T1 and T2", []dhcpv4.Option{dhcpv4.OptIPAddressLeaseTime(time.Hour),
			renew(10 * time.Minute), rebind(40 * time.Minute)},
			10 * time.Minute, 40 * time.Minute, time.Hour},
		{"T1 past the lease", []dhcpv4.Option{dhcpv4.OptIPAddressLeaseTime(time.Hour),
			renew(2 * time.Hour)}, 30 * time.Minute, 52*time.Minute + 30*time.Second, time.Hour},
		{"T2 before T1", []dhcpv4.Option{dhcpv4.OptIPAddressLeaseTime(time.Hour),
			renew(30 * time.Minute), rebind(10 * time.Minute)},
			30 * time.Minute, 52*time.Minute + 30*time.Second, time.Hour},
		{"no lease time", nil, 30 * time.Minute, 52*time.Minute + 30*time.Second, time.Hour},
	} {
		t.Run(tc.name, func(t *testing.T) {
			t1, t2, expiry := times(lease(t, tc.opts...))
			if t1 != tc.t1 || t2 != tc.t2 || expiry != tc.expiry {
				t.Errorf("times = %v, %v, %v; want %v, %v, %v", t1, t2, expiry, tc.t1, tc.t2, tc.expiry)
			}
		})
	}
}

func TestRetryAfter(t *testing.T) {
	now := time.Date(2026, 12, 1, 0, 0, 0, 0, time.UTC)
	for _, tc := range []struct {
		left, want time.Duration
	}{
		{time.Hour, maxRetry},
		{4 * time.Minute, 2 * time.Minute},
		{30 * time.Second, 15 * time.Second},
		{10 * time.Second, minRetry},
		{-time.Minute, minRetry},
	} {
		if got := retryAfter(now, now.Add(tc.left)); got != tc.want {
			t.Errorf("retryAfter with %v left = %v, want %v", tc.left, got, tc.want)
		}
	}
}
