#!/usr/bin/env bash
# kernel/build.sh OUT [MAP]: builds Borough's kernel (a bzImage with the EFI
# stub) from Debian's linux-source-6.1 package and kernel/borough.config, and
# copies it to OUT, and its System.map to MAP if given (for guestprof, which
# names the kernel functions a VM's samples fall in).
#
# Builds are cached outside the repository, in
#   ${XDG_CACHE_HOME:-$HOME/.cache}/borough/kernel/<key>/
# where <key> hashes the source package version, the config fragment, the
# compiler version and this script's ABI number. A hit is a file copy. A miss
# configures (allnoconfig + fragment), checks that every requested option
# survived Kconfig, and builds with fixed KBUILD_BUILD_* values so that two
# builds of one key are bit-identical. The object tree stays at a fixed path
# inside the cache entry: objtool records absolute paths, so a moved tree
# rebuilds from scratch.
set -euo pipefail

# Bump when a change to this script changes the kernel it produces.
abi=1
pkg=linux-source-6.1

out=${1:?usage: kernel/build.sh OUT [MAP]}
map=${2:-}
here=$(cd "$(dirname "${BASH_SOURCE[0]}")" && pwd)
fragment=$here/borough.config
cache=${XDG_CACHE_HOME:-$HOME/.cache}/borough/kernel

log() { printf 'kernel: %s\n' "$*" >&2; }
die() { log "error: $*"; exit 1; }

version=$(dpkg-query -W -f='${Version}' "$pkg" 2>/dev/null) ||
	die "Debian package $pkg is not installed (apt-get install $pkg)"
tarball=/usr/src/$pkg.tar.xz
[ -f "$tarball" ] || die "$tarball is missing; reinstall $pkg"

key=$( { echo "abi=$abi"; echo "$pkg=$version"; gcc --version | head -1; cat "$fragment"; } |
	sha256sum | cut -c1-16)
entry=$cache/$key
mkdir -p "$cache"

# One build per cache at a time; a second caller waits and then hits.
exec 9>"$cache/.lock"
flock 9

# copy_map copies System.map, from the entry's object tree, to MAP.
copy_map() {
	[ -z "$map" ] || cp "$entry/build/System.map" "$map"
}

if [ -f "$entry/bzImage" ]; then
	log "cache hit $key ($pkg $version)"
	cp "$entry/bzImage" "$out"
	copy_map
	exit 0
fi
log "cache miss $key: building $pkg $version (about 10 minutes on 2 cores)"

src=$cache/src-$version
if [ ! -f "$src/.extracted" ]; then
	log "extracting $tarball"
	rm -rf "$src" && mkdir -p "$src"
	tar -xf "$tarball" -C "$src" --strip-components=1
	touch "$src/.extracted"
fi

obj=$entry/build
mkdir -p "$obj"
export KBUILD_BUILD_TIMESTAMP='Thu Jan  1 00:00:00 UTC 1970'
export KBUILD_BUILD_USER=borough KBUILD_BUILD_HOST=borough KBUILD_BUILD_VERSION=1
kmake() { make -C "$src" O="$obj" -j"$(nproc)" "$@"; }

log "configuring"
kmake KCONFIG_ALLCONFIG="$fragment" allnoconfig >"$entry/config.log" 2>&1 ||
	die "allnoconfig failed; see $entry/config.log"
kmake olddefconfig >>"$entry/config.log" 2>&1 ||
	die "olddefconfig failed; see $entry/config.log"

# Every symbol the fragment sets must hold that value in the result.
missing=0
while IFS= read -r line; do
	case "$line" in CONFIG_*=*) ;; *) continue ;; esac
	if ! grep -qxF -- "$line" "$obj/.config"; then
		got=$(grep -E "^(# )?${line%%=*}[= ]" "$obj/.config" || echo "absent")
		log "config: want $line, got: $got"
		missing=1
	fi
done <"$fragment"
[ "$missing" = 0 ] || die "kernel/borough.config has options Kconfig did not accept (see above)"

log "compiling (log: $entry/build.log)"
start=$SECONDS
kmake bzImage >"$entry/build.log" 2>&1 &
pid=$!
while kill -0 "$pid" 2>/dev/null; do
	sleep 20
	kill -0 "$pid" 2>/dev/null || break
	log "compiling: $(find "$obj" -name '*.o' | wc -l) objects after $((SECONDS - start)) s"
done
if ! wait "$pid"; then
	tail -n 30 "$entry/build.log" >&2
	die "compilation failed; see $entry/build.log"
fi
cp "$obj/arch/x86/boot/bzImage" "$entry/bzImage.tmp"
mv "$entry/bzImage.tmp" "$entry/bzImage"
log "built $key in $((SECONDS - start)) s ($(stat -c %s "$entry/bzImage") bytes)"
cp "$entry/bzImage" "$out"
copy_map
