#!/usr/bin/env bash
# examples/ci/boot-and-query.sh IMAGE: what a CI job does with a Borough
# image. It makes an owner, boots IMAGE headless under QEMU (TCG is fine)
# with a bootstrap config through fw_cfg, waits for `node running`, then,
# as the owner, puts and gets a key with Debian's etcdctl through the
# forwarded client port, and powers the node off. It exits non-zero, with
# the console's tail, if any step fails.
#   BOROUGH   the host CLI (default out/bin/borough)
#   PORT      the host port the node's client port is forwarded to (2379)
#   TIMEOUT   how long the boot may take (default 5m)
#   BOROUGH_OWNER_PASSPHRASE  encrypts the throwaway owner's key (default:
#             a random one, for this run only)
set -euo pipefail
image=${1:?usage: examples/ci/boot-and-query.sh IMAGE}
borough=${BOROUGH:-out/bin/borough}
port=${PORT:-2379}
work=$(mktemp -d)
trap 'rm -rf "$work"' EXIT
BOROUGH_OWNER_PASSPHRASE=${BOROUGH_OWNER_PASSPHRASE:-$(head -c 24 /dev/urandom | base64)}
export BOROUGH_OWNER_PASSPHRASE

"$borough" --config "$work/config" owner init
"$borough" --config "$work/config" enrolment bootstrap --cluster ci --out "$work/ci.pb"
cp --sparse=always "$image" "$work/node.img"

# The node prints its CA's fingerprint; the owner pins it on first use.
query='fp=$(grep -o "ca_fingerprint=sha256:[0-9a-f]*" "$CONSOLE" | head -1 | cut -d= -f2)
eval "$("$BOROUGH" --config "$CONFIG" etcd env 127.0.0.1:$PORT --fingerprint "$fp")"
etcdctl put greeting "hello from CI"
test "$(etcdctl get greeting --print-value-only)" = "hello from CI"
echo "ci: put and got greeting through the node"'
CONSOLE=$work/console.log BOROUGH=$borough CONFIG=$work/config PORT=$port \
	"$borough" qemu "$work/node.img" --fw-cfg "$work/ci.pb" --forward "$port:2379" \
	--until "borough: node running" --timeout "${TIMEOUT:-5m}" -- bash -euo pipefail -c "$query" |
	tee "$work/console.log"
