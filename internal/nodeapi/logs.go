package nodeapi

import (
	"bufio"
	"fmt"
	"log/slog"
	"net/http"
	"slices"
	"strings"
	"time"

	"google.golang.org/protobuf/encoding/protodelim"

	"github.com/borough-os/borough/internal/logtree"
	"github.com/borough-os/borough/proto/nodepb"
)

// logs streams the entries a LogsRequest selects, length-delimited, and
// with follow the new ones as they come, until the client goes away.
func (s *Server) logs(w http.ResponseWriter, r *http.Request) {
	var req nodepb.LogsRequest
	if !read(w, r, &req) {
		return
	}
	f := logtree.Filter{Service: req.GetService()}
	if n := req.GetSinceUnixNano(); n != 0 {
		f.Since = time.Unix(0, n)
	}
	if req.GetBoot() != 0 {
		s.earlierBoot(w, req.GetBoot(), req.GetFollow(), f)
		return
	}
	if f.Service != "" && !req.GetFollow() && !slices.ContainsFunc(s.Logs.Services(), f.MatchService) {
		http.Error(w, fmt.Sprintf("no service %q has logged; these have: %s", f.Service,
			strings.Join(s.Logs.Services(), ", ")), http.StatusNotFound)
		return
	}
	flusher, _ := w.(http.Flusher)
	bw := bufio.NewWriter(w)
	if !req.GetFollow() {
		writeEntries(bw, s.Logs.Read(f))
		bw.Flush()
		return
	}
	sub := s.Logs.Follow(f)
	defer sub.Close()
	writeEntries(bw, sub.Backlog)
	for {
		if bw.Flush() != nil {
			return
		}
		if flusher != nil {
			flusher.Flush()
		}
		select {
		case <-r.Context().Done():
			return
		case e, ok := <-sub.C:
			if !ok {
				if sub.Lagged() {
					writeEntries(bw, []logtree.Entry{{Time: time.Now(), Service: "node-api", Level: slog.LevelWarn,
						Text: "stopped following: the client read too slowly; follow again from here"}})
					bw.Flush()
				}
				return
			}
			// A burst goes out in one write.
			writeEntries(bw, append([]logtree.Entry{e}, sub.Waiting()...))
		}
	}
}

func (s *Server) earlierBoot(w http.ResponseWriter, boot int32, follow bool, f logtree.Filter) {
	if follow {
		http.Error(w, fmt.Sprintf("boot %d: only the current boot can be followed", boot), http.StatusBadRequest)
		return
	}
	if s.Journal == nil {
		http.Error(w, "no log of earlier boots: this node keeps none before its data volume is mounted", http.StatusNotFound)
		return
	}
	entries, err := s.Journal.Boot(int(boot))
	if err != nil {
		http.Error(w, err.Error(), http.StatusNotFound)
		return
	}
	var out []logtree.Entry
	for _, e := range entries {
		if f.Match(e) {
			out = append(out, e)
		}
	}
	bw := bufio.NewWriter(w)
	writeEntries(bw, out)
	bw.Flush()
}

func writeEntries(w *bufio.Writer, entries []logtree.Entry) {
	for _, e := range entries {
		_, _ = protodelim.MarshalTo(w, &nodepb.LogEntry{
			UnixNano: e.Time.UnixNano(), SinceBootNanos: int64(e.SinceBoot), Service: e.Service,
			Level: int32(e.Level), Text: e.Text,
		})
	}
}

// LogLine is a log entry as the owner's tool prints it: its time (UTC),
// its time since boot, its service and its text.
func LogLine(e *nodepb.LogEntry) string {
	return fmt.Sprintf("%s [%12.6f] %s: %s", time.Unix(0, e.GetUnixNano()).UTC().Format("2006-01-02T15:04:05.000Z"),
		time.Duration(e.GetSinceBootNanos()).Seconds(), e.GetService(), e.GetText())
}
