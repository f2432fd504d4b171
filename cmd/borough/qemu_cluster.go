package main

import (
	"context"
	"fmt"
	"io"
	"os"
	"os/signal"
	"path/filepath"
	"strings"
	"syscall"
	"time"

	"github.com/spf13/cobra"

	"github.com/borough-os/borough/internal/pki"
	"github.com/borough-os/borough/qemu/multinode"
)

type clusterFlags struct {
	nodes, mem, basePort, apiPort int
	image, state, name            string
	tpm                           bool
	ttl                           time.Duration
}

func qemuClusterCommand() *cobra.Command {
	var f clusterFlags
	c := &cobra.Command{
		Use:   "cluster",
		Short: "Boot an N-node cluster in QEMU, headless and rootless, and print the etcdctl env",
		Long: `cluster boots --nodes VMs from --image: node 1 bootstraps a cluster owned by
you ('borough owner init'), the others join it one at a time with tickets.
The VMs talk over a LAN that exists only between them (a hub on a unix
socket); node i's client port is forwarded from 127.0.0.1:(--base-port + i-1).
It prints the etcdctl settings for all nodes and runs until Ctrl-C or SIGTERM, which
powers every node off. --state keeps disks, firmware variables and TPM state:
run it again with the same --state and the cluster restarts.`,
		Args: cobra.NoArgs,
		RunE: func(cmd *cobra.Command, _ []string) error {
			return runCluster(cmd, f)
		},
	}
	c.Flags().IntVar(&f.nodes, "nodes", 3, "how many nodes")
	c.Flags().StringVar(&f.image, "image", "out/borough.img", "disk image each node starts from")
	c.Flags().StringVar(&f.state, "state", "out/cluster", "directory of the nodes' disks and VM state")
	c.Flags().StringVar(&f.name, "cluster", "borough", "the cluster's name")
	c.Flags().IntVar(&f.basePort, "base-port", 2379, "host port of node 1's client port; node i gets base-port+i-1")
	c.Flags().IntVar(&f.apiPort, "api-port", 7835, "host port of node 1's node API; node i gets api-port+i-1")
	c.Flags().IntVar(&f.mem, "mem", 1024, "memory per VM, MiB")
	c.Flags().BoolVar(&f.tpm, "tpm", false, "give every node a TPM 2.0 (swtpm)")
	c.Flags().DurationVar(&f.ttl, "ttl", 8*time.Hour, "how long the printed owner session is valid (removed when the cluster powers off)")
	return c
}

func runCluster(cmd *cobra.Command, f clusterFlags) error {
	stderr := cmd.ErrOrStderr()
	ports, apiPorts := make([]int, f.nodes), make([]int, f.nodes)
	for i := range ports {
		ports[i] = f.basePort + i
		apiPorts[i] = f.apiPort + i
	}
	ctx, stop := signal.NotifyContext(context.Background(), os.Interrupt, syscall.SIGTERM)
	defer stop()
	consoles, err := consoleFiles(f.state, f.nodes)
	if err != nil {
		return err
	}
	defer func() {
		for _, c := range consoles {
			c.Close()
		}
	}()
	owner, err := ownerKeyPair()
	if err != nil {
		return err
	}
	c, err := multinode.Launch(ctx, multinode.Options{
		Nodes: f.nodes, Image: f.image, StateDir: f.state, Cluster: f.name, TPM: f.tpm, MemoryMiB: f.mem,
		Owner: owner, ClientPorts: ports, APIPorts: apiPorts,
		Console: func(i int) io.Writer { return consoles[i] },
		Logf:    func(format string, args ...any) { fmt.Fprintf(stderr, format+"\n", args...) },
	})
	if err != nil {
		return err
	}
	var urls []string
	for _, e := range c.Endpoints() {
		urls = append(urls, "https://"+e)
	}
	ca, err := pki.ReadCertPEM(c.CAFile)
	if err != nil {
		return err
	}
	session, err := ownerSession(stderr, c.Endpoints()[0], ca, f.ttl)
	if err != nil {
		return err
	}
	defer os.RemoveAll(session.dir)
	sessionEnv(cmd.OutOrStdout(), session, urls, c.CAFile)
	fmt.Fprintf(stderr, "cluster running (CA %s); consoles in %s/node*/console.log; Ctrl-C (or SIGTERM) powers every node off\n",
		c.Fingerprint, f.state)
	update := fmt.Sprintf("borough update --cluster %s IMAGE --fingerprint %s", strings.Join(c.Endpoints(), ","), c.Fingerprint)
	for _, n := range c.Nodes {
		fmt.Fprintf(stderr, "node%d's API: borough logs %s --fingerprint %s\n", n.Index+1, n.API(), c.Fingerprint)
		update += fmt.Sprintf(" --api %s=%s", n.Name, n.API())
	}
	fmt.Fprintf(stderr, "update every node, one at a time: %s\n", update)
	<-ctx.Done()
	fmt.Fprintln(stderr, "powering the cluster off")
	return c.PowerOff(time.Minute)
}

// consoleFiles opens each node's console log, appending, under state.
func consoleFiles(state string, nodes int) ([]*os.File, error) {
	var files []*os.File
	for i := range nodes {
		dir := filepath.Join(state, fmt.Sprintf("node%d", i+1))
		if err := os.MkdirAll(dir, 0o755); err != nil {
			return nil, err
		}
		f, err := os.OpenFile(filepath.Join(dir, "console.log"), os.O_CREATE|os.O_APPEND|os.O_WRONLY, 0o644)
		if err != nil {
			return nil, err
		}
		files = append(files, f)
	}
	return files, nil
}
