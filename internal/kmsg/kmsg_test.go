package kmsg

import (
	"log/slog"
	"strings"
	"testing"
	"time"
)

func TestParse(t *testing.T) {
	for _, tc := range []struct {
		name, in string
		want     Record
		err      string
	}{
		{name: "info", in: "6,339,5140900,-;NET: Registered protocol family 10\n",
			want: Record{Seq: 339, SinceBoot: 5140900 * time.Microsecond, Level: slog.LevelInfo, Text: "NET: Registered protocol family 10"}},
		{name: "facility and continuation lines", in: "28,12,100,c;virtio_net virtio0 eth0: renamed\n SUBSYSTEM=net\n DEVICE=n2\n",
			want: Record{Seq: 12, SinceBoot: 100 * time.Microsecond, Level: slog.LevelWarn, Text: "virtio_net virtio0 eth0: renamed"}},
		{name: "error", in: "3,1,0;Kernel panic",
			want: Record{Seq: 1, Level: slog.LevelError, Text: "Kernel panic"}},
		{name: "debug", in: "7,2,0,-;x", want: Record{Seq: 2, Level: slog.LevelDebug, Text: "x"}},
		{name: "no body", in: "6,1,2,-", err: "has no ';'"},
		{name: "short header", in: "6,1;x", err: "fewer than 3 fields"},
		{name: "bad number", in: "6,x,2,-;x", err: "field 2"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			got, err := Parse([]byte(tc.in))
			if tc.err != "" {
				if err == nil || !strings.Contains(err.Error(), tc.err) {
					t.Fatalf("Parse(%q) = %v, want error %q", tc.in, err, tc.err)
				}
				return
			}
			if err != nil || got != tc.want {
				t.Errorf("Parse(%q) = %+v, %v; want %+v", tc.in, got, err, tc.want)
			}
		})
	}
}
