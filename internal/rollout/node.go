package rollout

import (
	"context"
	"fmt"
	"io"
	"strings"
	"time"

	"github.com/borough-os/borough/internal/nodeapi"
	"github.com/borough-os/borough/internal/poll"
	"github.com/borough-os/borough/internal/uki"
	"github.com/borough-os/borough/internal/update"
	"github.com/borough-os/borough/proto/nodepb"
)

// pollEvery is how often a rollout asks a node or the cluster whether it
// is there yet.
const pollEvery = 2 * time.Second

// Update is what a rollout installs: the request sent to each node, and
// the version its boot binary says it is.
type Update struct {
	Request *nodepb.UpdateRequest
	Version string
}

// NewUpdate is the update of a boot binary and its node payload, with
// the owner's signed release statement of the two (update.SignRelease).
func NewUpdate(boot, payload, release []byte) (Update, error) {
	v, err := uki.VersionOf(boot)
	if err != nil {
		return Update{}, fmt.Errorf("the update's boot binary: %w", err)
	}
	return Update{Request: &nodepb.UpdateRequest{BootBinary: boot, Payload: payload, Release: release}, Version: v}, nil
}

// Node sends up to the node c calls and waits, at most wait, until the
// node runs it confirmed or runs its old slot again, rolled back (an
// error). It prints each change of the node's state on the way.
func Node(ctx context.Context, out io.Writer, c *nodeapi.Client, up Update, wait time.Duration) error {
	before, err := c.Info(ctx)
	if err != nil {
		return err
	}
	start := time.Now()
	req := up.Request
	fmt.Fprintf(out, "sending %s (%d MiB) to %s, which runs %s in slot %s\n", up.Version,
		(len(req.BootBinary)+len(req.Payload))>>20, c.Addr, before.GetVersion(), before.GetBootSlot())
	resp, err := c.Update(ctx, req)
	if err != nil {
		return err
	}
	fmt.Fprintf(out, "installed %s in slot %s; the node reboots into it on trial\n", resp.GetVersion(), resp.GetSlot())
	return await(ctx, out, c, before.GetBootSlot(), resp, start, wait)
}

// await polls the node until it runs the update, confirmed, or runs the
// old slot again, rolled back.
func await(ctx context.Context, out io.Writer, c *nodeapi.Client, oldSlot string, resp *nodepb.UpdateResponse,
	start time.Time, wait time.Duration) error {
	// The node answers from its old boot for a moment.
	if err := sleep(ctx, pollEvery); err != nil {
		return err
	}
	last := ""
	var rolledBack error
	err := poll.Until(ctx, wait, pollEvery, func() error {
		info, err := c.Info(ctx)
		if err != nil {
			return err
		}
		took := time.Since(start).Round(100 * time.Millisecond)
		switch {
		case info.GetBootSlot() == resp.GetSlot() && strings.HasPrefix(info.GetUpdate(), string(update.Confirmed)):
			fmt.Fprintf(out, "updated: slot %s runs %s, confirmed, %v after the update was sent\n", resp.GetSlot(), info.GetVersion(), took)
			return nil
		case info.GetBootSlot() == oldSlot && strings.HasPrefix(info.GetUpdate(), string(update.RolledBack)):
			rolledBack = fmt.Errorf("the update did not confirm itself: the node rolled back to %s in slot %s, %v after the update was sent (borough logs %s --boot -1 has the try boot's log, if it mounted its data)",
				info.GetVersion(), oldSlot, took, c.Addr)
			return poll.Stop(rolledBack)
		}
		s := info.GetBootSlot() + " " + info.GetState() + " " + info.GetUpdate()
		if s != last {
			fmt.Fprintf(out, "node: slot %s, %s, %s\n", info.GetBootSlot(), info.GetState(), info.GetUpdate())
			last = s
		}
		return fmt.Errorf("the node is in slot %s, %s, %s", info.GetBootSlot(), info.GetState(), info.GetUpdate())
	})
	if err != nil && rolledBack == nil {
		return fmt.Errorf("the node neither confirmed nor rolled back the update: %w", err)
	}
	return err
}

// sleep waits d, or less if ctx ends first (its error).
func sleep(ctx context.Context, d time.Duration) error {
	t := time.NewTimer(d)
	defer t.Stop()
	select {
	case <-ctx.Done():
		return ctx.Err()
	case <-t.C:
		return nil
	}
}
