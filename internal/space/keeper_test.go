package space

import (
	"testing"

	pb "go.etcd.io/etcd/api/v3/etcdserverpb"
)

// TestQuorumWithout checks when a member may defragment: while the other
// voters it is connected to make a quorum without it, or are all the
// others when they never can; learners count for nothing.
func TestQuorumWithout(t *testing.T) {
	voter := func(id uint64) *pb.Member { return &pb.Member{ID: id} }
	learner := &pb.Member{ID: 9, IsLearner: true}
	three := []*pb.Member{voter(1), voter(2), voter(3)}
	five := []*pb.Member{voter(1), voter(2), voter(3), voter(4), voter(5)}
	for _, tc := range []struct {
		name      string
		members   []*pb.Member
		connected map[uint64]bool
		ok        bool
	}{
		{"a lone voter", []*pb.Member{voter(1)}, nil, true},
		{"a lone voter and its learner, not connected", []*pb.Member{voter(1), learner}, nil, true},
		{"two voters, connected", []*pb.Member{voter(1), voter(2)}, map[uint64]bool{2: true}, true},
		{"two voters, the other away", []*pb.Member{voter(1), voter(2)}, nil, false},
		{"three voters, all connected", three, map[uint64]bool{2: true, 3: true}, true},
		{"three voters, one away", three, map[uint64]bool{2: true}, false},
		{"three voters, one away, a learner connected", append(three, learner), map[uint64]bool{2: true, 9: true}, false},
		{"five voters, one away", five, map[uint64]bool{2: true, 3: true, 4: true}, true},
		{"five voters, two away", five, map[uint64]bool{2: true, 3: true}, false},
		{"the member itself counts for nothing", three, map[uint64]bool{1: true, 2: true}, false},
	} {
		t.Run(tc.name, func(t *testing.T) {
			have, need := quorumWithout(tc.members, 1, tc.connected)
			if got := have >= need; got != tc.ok {
				t.Errorf("quorumWithout = %d connected, %d needed: defragments %v, want %v", have, need, got, tc.ok)
			}
		})
	}
}
