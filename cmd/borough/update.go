package main

import (
	"context"
	"fmt"
	"io"
	"strings"
	"time"

	"github.com/spf13/cobra"

	"github.com/borough-os/borough/esp"
	"github.com/borough-os/borough/internal/nodeapi"
	"github.com/borough-os/borough/internal/update"
	"github.com/borough-os/borough/proto/nodepb"
)

// pollEvery is how often update asks the node whether it is back.
const pollEvery = 2 * time.Second

func updateCommand() *cobra.Command {
	var f apiFlags
	var force bool
	var wait time.Duration
	c := &cobra.Command{
		Use:   "update NODE IMAGE",
		Short: "Update the node whose API is at NODE to the version in IMAGE, on trial, and wait for it",
		Long: `update sends the boot binary and node payload of IMAGE (a disk image that
borough image build wrote, as out/borough.img) to the node. The node writes
them into its other boot slot, reboots into it once, and keeps it only when
the new system runs and its cluster answers it; otherwise the machine goes
back to the version it ran by itself. update waits for either and says
which. An older or the same version is refused unless --force.`,
		Args: cobra.ExactArgs(2),
		RunE: func(cmd *cobra.Command, args []string) error {
			return runUpdate(cmd.OutOrStdout(), args[0], args[1], f, force, wait)
		},
	}
	f.add(c)
	c.Flags().BoolVar(&force, "force", false, "install a version that is not newer than the running one")
	c.Flags().DurationVar(&wait, "wait", 10*time.Minute, "how long to wait for the node to confirm or roll back")
	return c
}

// readUpdate reads the boot binary and node payload from an image's ESP.
func readUpdate(image string) (*nodepb.UpdateRequest, error) {
	boot, err := readESPFile(image, esp.BootBinary)
	if err != nil {
		return nil, err
	}
	sha, err := update.PayloadSHA(boot)
	if err != nil {
		return nil, fmt.Errorf("the boot binary of %s: %w", image, err)
	}
	payload, err := readESPFile(image, esp.NodePayload(sha))
	if err != nil {
		return nil, err
	}
	return &nodepb.UpdateRequest{BootBinary: boot, Payload: payload}, nil
}

func runUpdate(stdout io.Writer, node, image string, f apiFlags, force bool, wait time.Duration) error {
	req, err := readUpdate(image)
	if err != nil {
		return err
	}
	req.Force = force
	c, err := apiClient(node, f)
	if err != nil {
		return err
	}
	ctx := context.Background()
	before, err := c.Info(ctx)
	if err != nil {
		return err
	}
	start := time.Now()
	fmt.Fprintf(stdout, "sending %s (%d MiB) to %s, which runs %s in slot %s\n", image,
		(len(req.BootBinary)+len(req.Payload))>>20, node, before.GetVersion(), before.GetBootSlot())
	resp, err := c.Update(ctx, req)
	if err != nil {
		return err
	}
	fmt.Fprintf(stdout, "installed %s in slot %s; the node reboots into it on trial\n", resp.GetVersion(), resp.GetSlot())
	return awaitUpdate(ctx, stdout, c, before.GetBootSlot(), resp, start, wait)
}

// awaitUpdate polls the node until it runs the update, confirmed, or runs
// the old slot again, rolled back.
func awaitUpdate(ctx context.Context, stdout io.Writer, c *nodeapi.Client, oldSlot string, resp *nodepb.UpdateResponse,
	start time.Time, wait time.Duration) error {
	deadline := time.Now().Add(wait)
	last := ""
	for time.Now().Before(deadline) {
		time.Sleep(pollEvery)
		info, err := c.Info(ctx)
		if err != nil {
			continue
		}
		took := time.Since(start).Round(100 * time.Millisecond)
		switch {
		case info.GetBootSlot() == resp.GetSlot() && strings.HasPrefix(info.GetUpdate(), string(update.Confirmed)):
			fmt.Fprintf(stdout, "updated: slot %s runs %s, confirmed, %v after the update was sent\n", resp.GetSlot(), info.GetVersion(), took)
			return nil
		case info.GetBootSlot() == oldSlot && strings.HasPrefix(info.GetUpdate(), string(update.RolledBack)):
			return fmt.Errorf("the update did not confirm itself: the node rolled back to %s in slot %s, %v after the update was sent (borough logs %s --boot -1 has the try boot's log, if it mounted its data)",
				info.GetVersion(), oldSlot, took, c.Addr)
		}
		if s := info.GetBootSlot() + " " + info.GetState() + " " + info.GetUpdate(); s != last {
			fmt.Fprintf(stdout, "node: slot %s, %s, %s\n", info.GetBootSlot(), info.GetState(), info.GetUpdate())
			last = s
		}
	}
	return fmt.Errorf("the node neither confirmed nor rolled back the update in %v", wait)
}
