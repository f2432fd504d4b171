package consensus

import (
	"context"
	"fmt"

	pb "go.etcd.io/etcd/api/v3/etcdserverpb"

	"github.com/borough-os/borough/internal/space"
)

// keepSpace runs the member's space keeper (internal/space) until ctx
// ends: its alarm, compaction and defragmentation.
func (c *Consensus) keepSpace(ctx context.Context) error {
	k := &space.Keeper{
		Client: c.Client, Name: c.cfg.Name, ID: c.MemberID(),
		Volume: c.cfg.Volume, Ballast: c.cfg.ballast(), StartBallast: c.cfg.startBallast(), Budget: c.budget,
		Raise: c.raiseSpaceAlarm, Connected: c.connectedPeers, Alarms: c.etcd.Server.Alarms,
		Log: c.cfg.Log.With("service", "space"),
	}
	return k.Run(ctx)
}

// raiseSpaceAlarm raises the member's space alarm, as etcd does when a
// write through it is refused.
func (c *Consensus) raiseSpaceAlarm(ctx context.Context) error {
	_, err := servicesAs(c.etcd.Server, asUser(nodeUser, c.gate)).maintenance.Alarm(ctx, &pb.AlarmRequest{
		Action: pb.AlarmRequest_ACTIVATE, MemberID: c.MemberID(), Alarm: pb.AlarmType_NOSPACE,
	})
	if err != nil {
		return fmt.Errorf("raising member %x's space alarm: %w", c.MemberID(), err)
	}
	return nil
}

// Budget is the space budget the member started with.
func (c *Consensus) Budget() space.Budget { return c.budget }
