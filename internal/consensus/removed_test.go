package consensus

import (
	"errors"
	"testing"

	"go.etcd.io/etcd/server/v3/etcdserver/api/membership"
)

// TestSurvivingRemoval: etcd's panic for a member removed under a
// request is an error; a panic while the member is still there, and an
// answer, go through unchanged.
func TestSurvivingRemoval(t *testing.T) {
	for _, tc := range []struct {
		name      string
		present   bool
		op        func() (int, error)
		want      int
		wantErr   error
		wantPanic bool
	}{
		{"an answer", true, func() (int, error) { return 7, nil }, 7, nil, false},
		{"panic after removal", false, func() (int, error) { panic("failed to find local ID in cluster members") }, 0, membership.ErrIDRemoved, false},
		{"panic of a member still there", true, func() (int, error) { panic("something else") }, 0, nil, true},
	} {
		t.Run(tc.name, func(t *testing.T) {
			defer func() {
				if p := recover(); (p != nil) != tc.wantPanic {
					t.Errorf("panic %v, want a panic: %v", p, tc.wantPanic)
				}
			}()
			got, err := survivingRemoval(func() bool { return tc.present }, tc.op)
			if got != tc.want || !errors.Is(err, tc.wantErr) || (tc.wantErr == nil) != (err == nil) {
				t.Errorf("survivingRemoval = %d, %v; want %d, %v", got, err, tc.want, tc.wantErr)
			}
		})
	}
}
