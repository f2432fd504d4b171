package space

import (
	"context"
	"fmt"

	clientv3 "go.etcd.io/etcd/client/v3"
)

// State is a member's etcd database as its node tells the owner: its
// size on disk, the bytes in use, the quota its budget set, and etcd's
// alarms raised on this member ("NOSPACE", "CORRUPT").
type State struct {
	DB, InUse, Quota int64
	Alarms           []string
}

// Read reads the state of the member c is a client of: etcd's status,
// which the member answers alone, and the cluster's alarms, of which it
// keeps the member's own. etcd lists alarms through raft, so a member
// without a quorum does not answer that: Read then returns the status it
// has, and says why the alarms are missing.
func Read(ctx context.Context, c *clientv3.Client) (State, error) {
	st, err := c.Status(ctx, "")
	if err != nil {
		return State{}, fmt.Errorf("etcd's status: %w", err)
	}
	s := State{DB: st.DbSize, InUse: st.DbSizeInUse, Quota: st.DbSizeQuota}
	alarms, err := c.AlarmList(ctx)
	if err != nil {
		return s, fmt.Errorf("etcd's alarms: %w", err)
	}
	for _, a := range alarms.Alarms {
		if a.MemberID == st.Header.GetMemberId() {
			s.Alarms = append(s.Alarms, a.Alarm.String())
		}
	}
	return s, nil
}
