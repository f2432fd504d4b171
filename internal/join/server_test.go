package join

import (
	"bytes"
	"context"
	"io"
	"log/slog"
	"net/http"
	"net/http/httptest"
	"net/netip"
	"testing"

	"google.golang.org/protobuf/proto"

	"github.com/borough-os/borough/proto/joinpb"
)

// TestHandleBounds sends bodies that are no join request: each is a 400
// that never reaches the request's handler.
func TestHandleBounds(t *testing.T) {
	s := &Server{Log: slog.New(slog.NewTextHandler(io.Discard, nil))}
	h := s.handle(func(context.Context, netip.Addr, *joinpb.JoinRequest) (proto.Message, error) {
		t.Error("the handler got a request that should not reach it")
		return &joinpb.JoinResponse{}, nil
	})
	for _, tc := range []struct {
		name string
		body []byte
	}{
		{"larger than maxBody", bytes.Repeat([]byte{0x0a, 0x01, 0x00}, maxBody/3+1)},
		{"not protobuf", []byte{0xff, 0xff, 0xff}},
	} {
		t.Run(tc.name, func(t *testing.T) {
			w := httptest.NewRecorder()
			h(w, httptest.NewRequest(http.MethodPost, pathJoin, bytes.NewReader(tc.body)))
			if w.Code != http.StatusBadRequest {
				t.Errorf("status %d, want 400: %s", w.Code, w.Body)
			}
		})
	}
}
