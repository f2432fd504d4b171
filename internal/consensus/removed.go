package consensus

import (
	"fmt"

	"go.etcd.io/etcd/server/v3/etcdserver/api/membership"
)

// A member removed while etcd answers its Status.
//
// etcd v3.7 panics when a request asks whether the member is a learner
// (Status does) while the member's removal is being applied: the apply
// deletes the member from the membership before the server stops, and
// RaftCluster.IsLocalMemberLearner takes the missing member for a
// programming error (etcd-io/etcd#21966, open; fixes proposed in #22188
// and #22205). In process there is no gRPC server between the caller and
// etcd, so the panic ends the node process: the space keeper asks for
// the member's Status every second, and a member replaced under it died
// with the panic instead of saying it was removed, then could not open
// its data volume again, its certificate revoked (a robustness run's
// "member replaced"). survivingRemoval turns that one panic into
// membership.ErrIDRemoved, so that the member's removal goes its usual
// way; any other panic, or one while the member is still there, goes on.

// survivingRemoval calls op; if op panics and present says the member is
// no longer in its cluster, it returns an error wrapping
// membership.ErrIDRemoved instead.
func survivingRemoval[T any](present func() bool, op func() (T, error)) (r T, err error) {
	defer func() {
		p := recover()
		if p == nil {
			return
		}
		if present() {
			panic(p)
		}
		err = fmt.Errorf("the member was removed from its cluster while etcd answered (%v): %w", p, membership.ErrIDRemoved)
	}()
	return op()
}
