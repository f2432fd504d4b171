#!/usr/bin/env bash
# bench/build.sh: build-time and size figures for `make bench`.
#   cold kernel  kernel/build.sh into an empty cache (about 11 minutes on
#                2 cores; BENCH_COLD=0 skips it and says so), and whether it
#                is byte-identical to the kernel in the real cache
#   warm build   ./build.sh after editing one init source file, kernel
#                cached (target: under 30 s)
#   sizes        image apparent and allocated (target: under 64 MiB
#                allocated), boot binary, kernel, initramfs
set -euo pipefail
cd "$(dirname "${BASH_SOURCE[0]}")/.."
out=${OUT:-out}

if [ "${BENCH_COLD:-1}" = 1 ]; then
	cache=$(mktemp -d)
	trap 'rm -rf "$cache"' EXIT
	start=$(date +%s.%N)
	XDG_CACHE_HOME=$cache kernel/build.sh "$cache/bzImage"
	cold=$(echo "$(date +%s.%N) - $start" | bc)
	cold=$(printf '%.0f s' "$cold")
	# The cached kernel was built in another tree: the same bytes mean
	# the build is reproducible.
	kernel/build.sh "$cache/cached" 2>/dev/null
	if cmp -s "$cache/bzImage" "$cache/cached" && cmp -s "$cache/bzImage" "$out/vmlinuz"; then
		repro="yes: byte-identical to the cached build"
	else
		repro="NO: differs from the cached build"
	fi
else
	cold="skipped (BENCH_COLD=0)"
	repro="not checked (BENCH_COLD=0)"
fi

# A real edit, so that Go's content-addressed cache must rebuild init.
saved=$(mktemp)
cp init/main.go "$saved"
restore() { cp "$saved" init/main.go; rm -f "$saved"; }
echo "// bench edit $(date +%s%N)" >>init/main.go
start=$(date +%s.%N)
OUT=$out ./build.sh || { restore; exit 1; }
restore
warm=$(printf '%.1f s' "$(echo "$(date +%s.%N) - $start" | bc)")

mib() { echo "scale=1; $1 / 1048576" | bc; }
img=$out/borough.img
cat <<REPORT

bench: build
  cold kernel build          $cold
  kernel reproducible        $repro
  warm ./build.sh            $warm   (one init file edited, kernel cached; target < 30 s)
bench: sizes
  image apparent             $(mib "$(stat -c %s "$img")") MiB
  image allocated            $(mib "$(($(stat -c %b "$img") * $(stat -c %B "$img")))") MiB   (target < 64 MiB)
  boot binary (UKI)          $(mib "$(stat -c %s "$out/borough.efi")") MiB
  kernel                     $(mib "$(stat -c %s "$out/vmlinuz")") MiB   (4.1 MiB before the drivers of README "Hardware")
  initramfs (zstd)           $(mib "$(stat -c %s "$out/initramfs.cpio.zst")") MiB
  init binary                $(mib "$(stat -c %s "$out/init")") MiB
  node binary               $(mib "$(stat -c %s "$out/node")") MiB
  node payload (ESP, zstd squashfs + verity)  $(mib "$(stat -c %s "$out/node.squashfs")") MiB
REPORT
