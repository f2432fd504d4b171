#!/usr/bin/env bash
# boottest/run.sh: make test's boot tests, three runs of one test binary,
# so that the machine's two cores carry what they can bear (the host load
# lines of a make test measured it, docs/decisions.md "make test's
# order"):
#   1. TestRobustness alone: its workload keeps both cores busy, and it
#      holds every recovery to a bound;
#   2. TestMultiNode and, beside it, every other boot test, one at a
#      time: the cluster's three VMs leave about two fifths of the cores
#      idle while its cases wait on one node's boot.
# The two runs of step 2 print as their lines come, each line prefixed
# with its run's name. Every run runs whatever failed before it; the
# script fails if any failed.
set -euo pipefail
cd "$(dirname "${BASH_SOURCE[0]}")"
dir=$(mktemp -d)
trap 'rm -rf "$dir"' EXIT
bin=$dir/boottest.test
${GO:-go} test -c -tags boot -o "$bin" .

status=0
echo "boot tests: TestRobustness alone"
"$bin" -test.v -test.run '^TestRobustness$' -test.timeout 30m || status=$?

echo "boot tests: TestMultiNode, and beside it the other boot tests one at a time"
start=$SECONDS
"$bin" -test.v -test.run '^TestMultiNode$' -test.timeout 45m > >(sed -u 's/^/multinode | /') 2>&1 &
multi=$!
others=0
"$bin" -test.v -test.skip '^(TestRobustness|TestMultiNode)$' -test.parallel 1 -test.timeout 45m \
	> >(sed -u 's/^/others    | /') 2>&1 || others=$?
echo "boot tests: the others ended after $((SECONDS - start)) s (exit status $others)"
multinode=0
wait "$multi" || multinode=$?
echo "boot tests: TestMultiNode ended after $((SECONDS - start)) s (exit status $multinode)"
[ "$others" = 0 ] || status=$others
[ "$multinode" = 0 ] || status=$multinode
exit "$status"
