#!/usr/bin/env bash
# qemu/cluster.sh [flags]: boots a Borough cluster of several QEMU VMs,
# headless and rootless, from out/borough.img: node 1 bootstraps a cluster
# owned by you (borough owner init), the others join with tickets. Prints
# the etcdctl env for all nodes; Ctrl-C powers every node off. Flags:
#   --nodes N           how many nodes (default 3)
#   --state DIR         disks, firmware variables, TPM state (default out/cluster);
#                       the same DIR again restarts that cluster
#   --base-port PORT    node i's client port on 127.0.0.1:PORT+i-1 (default 2379)
#   --tpm               give every node a TPM 2.0 (swtpm)
#   --image IMAGE       the image every node starts from (default out/borough.img)
# It runs `borough qemu cluster`; see `borough qemu cluster --help`.
set -euo pipefail
top=$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)
bin=$top/out/bin/borough
(cd "$top" && go build -o "$bin" ./cmd/borough)
cd "$top"
exec "$bin" qemu cluster "$@"
