package lifecycle

import (
	"bytes"
	"log/slog"
	"os"
	"strings"
	"testing"

	"github.com/borough-os/borough/internal/console"
)

func TestTransitions(t *testing.T) {
	var buf bytes.Buffer
	m := &Lifecycle{state: New, log: slog.New(console.NewHandler(&buf))}
	m.To(CreatingCluster)
	m.To(Running)
	for _, want := range []string{"borough: state New -> CreatingCluster", "borough: state CreatingCluster -> Running"} {
		if !strings.Contains(buf.String(), want) {
			t.Errorf("log lacks %q:\n%s", want, buf.String())
		}
	}
	for _, tc := range []struct{ from, to State }{
		{Running, CreatingCluster}, {New, Running}, {Failed, Running}, {Running, Joining},
	} {
		func() {
			defer func() {
				if recover() == nil {
					t.Errorf("%s -> %s was allowed", tc.from, tc.to)
				}
			}()
			(&Lifecycle{state: tc.from, log: slog.New(console.NewHandler(&buf))}).To(tc.to)
		}()
	}
	buf.Reset()
	m = &Lifecycle{state: New, log: slog.New(console.NewHandler(&buf))}
	m.Fail(os.ErrPermission)
	if m.state != Failed || !strings.Contains(buf.String(), "state New -> Failed") ||
		!strings.Contains(buf.String(), "borough: node failed: permission denied") {
		t.Errorf("Fail logged:\n%s", buf.String())
	}
	if st := m.Status(); st.State != Failed || st.Failure != "permission denied" {
		t.Errorf("Status after Fail = %+v", st)
	}
}
