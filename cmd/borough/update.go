package main

import (
	"context"
	"fmt"
	"io"
	"net"
	"strings"
	"time"

	"github.com/spf13/cobra"

	"github.com/borough-os/borough/esp"
	"github.com/borough-os/borough/image"
	"github.com/borough-os/borough/internal/admin"
	"github.com/borough-os/borough/internal/ownersession"
	"github.com/borough-os/borough/internal/rollout"
	"github.com/borough-os/borough/internal/update"
)

type updateFlags struct {
	api          apiFlags
	cluster      bool
	wait, settle time.Duration
	addrs        []string
}

func updateCommand() *cobra.Command {
	var f updateFlags
	c := &cobra.Command{
		Use:   "update NODE IMAGE | update --cluster ENDPOINTS IMAGE",
		Short: "Update the node whose API is at NODE, or every member of a cluster one at a time, to the version in IMAGE",
		Long: `update sends the boot binary and node payload of IMAGE (a disk image that
borough image build wrote, as out/borough.img) to the node. The node writes
them into its other boot slot, reboots into it once, and keeps it only when
the new system runs and its cluster answers it; otherwise the machine goes
back to the version it ran by itself. update waits for either and says
which. The node takes only an image its owner signed (borough image sign),
and an older or the same version only if the owner signed it with
--downgrade.

With --cluster, ENDPOINTS are etcd client endpoints of a cluster (HOST:PORT,
comma-separated; give more than one, as the member behind each reboots in
turn) and update does the same to each member that does not run IMAGE's
version: learners first, the leader last, one at a time, each only once every
member runs and etcd answers a linearizable read, so the cluster keeps its
quorum. A member that rolls back stops it. A cluster of fewer than three
voters is refused: it would lose quorum. Each member's node API is its
client URL's host at port 7835, or the address --api NAME=HOST:PORT gives;
it must present its certificate for its member name.`,
		Args: cobra.ExactArgs(2),
		RunE: func(cmd *cobra.Command, args []string) error {
			up, err := readUpdate(args[1])
			if err != nil {
				return err
			}
			if f.cluster {
				return runRollout(cmd.OutOrStdout(), args[0], up, f)
			}
			if len(f.addrs) > 0 {
				return fmt.Errorf("--api is for --cluster")
			}
			c, err := apiClient(args[0], f.api)
			if err != nil {
				return err
			}
			return rollout.Node(context.Background(), cmd.OutOrStdout(), c, up, f.wait)
		},
	}
	f.api.add(c)
	c.Flags().DurationVar(&f.wait, "wait", 10*time.Minute, "how long to wait for a node to confirm or roll back")
	c.Flags().BoolVar(&f.cluster, "cluster", false, "update every member of the cluster at ENDPOINTS, one at a time")
	c.Flags().DurationVar(&f.settle, "settle", 10*time.Minute, "with --cluster, how long to wait for every member to run before the next")
	c.Flags().StringArrayVar(&f.addrs, "api", nil, "with --cluster, NAME=HOST:PORT: the node API of member NAME (repeat for each)")
	return c
}

// readUpdate reads the boot binary and node payload from an image's ESP,
// and the owner's statement that lets them onto their nodes.
func readUpdate(img string) (rollout.Update, error) {
	boot, payload, err := readRelease(img)
	if err != nil {
		return rollout.Update{}, err
	}
	statement, err := image.ReadESPFile(img, esp.ReleaseStatement)
	if err != nil {
		return rollout.Update{}, fmt.Errorf("%w: the owner signs an img with borough img sign", err)
	}
	up, err := rollout.NewUpdate(boot, payload, statement)
	if err != nil {
		return rollout.Update{}, fmt.Errorf("%s: %w", img, err)
	}
	return up, nil
}

// readRelease reads the boot binary and node payload from an image's ESP.
func readRelease(img string) (boot, payload []byte, err error) {
	if boot, err = image.ReadESPFile(img, esp.BootBinary); err != nil {
		return nil, nil, err
	}
	sha, err := update.PayloadSHA(boot)
	if err != nil {
		return nil, nil, fmt.Errorf("the boot binary of %s: %w", img, err)
	}
	if payload, err = image.ReadESPFile(img, esp.NodePayload(sha)); err != nil {
		return nil, nil, err
	}
	return boot, payload, nil
}

func runRollout(stdout io.Writer, endpoints string, up rollout.Update, f updateFlags) error {
	if f.api.unverified {
		return fmt.Errorf("--unverified: a cluster's members are verified against its CA, always")
	}
	addrs, err := apiAddrs(f.addrs)
	if err != nil {
		return err
	}
	eps := strings.Split(endpoints, ",")
	ca, err := pinnedCA(eps[0], f.api.fingerprint)
	if err != nil {
		return err
	}
	kp, err := ownerKeyPair()
	if err != nil {
		return err
	}
	etcd, err := admin.Connect(eps, ca, kp)
	if err != nil {
		return err
	}
	defer etcd.Close()
	c := &rollout.Cluster{Etcd: etcd, Out: stdout, Wait: f.wait, Settle: f.settle,
		API: ownersession.Members{Given: addrs, Owner: kp, CA: ca}.Client}
	fmt.Fprintf(stdout, "rolling %s out to the cluster at %s, one member at a time\n", up.Version, endpoints)
	return c.Run(context.Background(), up)
}

// apiAddrs parses --api NAME=HOST:PORT flags.
func apiAddrs(flags []string) (map[string]string, error) {
	addrs := map[string]string{}
	for _, f := range flags {
		name, addr, ok := strings.Cut(f, "=")
		if _, _, err := net.SplitHostPort(addr); !ok || name == "" || err != nil {
			return nil, fmt.Errorf("--api %q: want NAME=HOST:PORT, as node-1a2b3c4d=127.0.0.1:7835", f)
		}
		addrs[name] = addr
	}
	return addrs, nil
}
