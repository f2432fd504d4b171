#!/usr/bin/env bash
# qemu/run.sh IMAGE [flags]: boots a Borough disk image in QEMU, headless,
# with the serial console on this terminal (Ctrl-A X quits). Flags:
#   --disk virtio|nvme|ahci   disk interface (default virtio)
#   --mem MIB                 memory (default 1024)
#   --tpm                     attach a TPM 2.0 (swtpm), kept across boots
#   --fw-cfg FILE             expose FILE as fw_cfg opt/borough/enrolment
#   --net                     attach a NIC (user-mode network)
#   --forward HOST:GUEST      forward a TCP port from 127.0.0.1
#   --state DIR               VM state (default IMAGE.vm): OVMF vars, TPM
# It runs `borough qemu`; see `borough qemu --help`.
set -euo pipefail
top=$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)
[ $# -ge 1 ] || { sed -n '2,11p' "$0" | sed 's/^# \{0,1\}//'; exit 2; }
bin=$top/out/bin/borough
(cd "$top" && go build -o "$bin" ./cmd/borough)
exec "$bin" qemu "$@"
