#!/usr/bin/env bash
# ./build.sh: builds Borough's disk image, out/borough.img, from this
# checkout. On a fresh Debian 12 machine, run as root, it first installs
# the Debian packages it needs. Environment:
#   OUT                 output directory (default out)
#   SIZE                image size (default 1GiB)
#   SOURCE_DATE_EPOCH   timestamp for the ESP (default: the last commit's)
# Steps: packages, kernel (cached outside the tree: kernel/build.sh), node,
# init, host CLI, then `borough image build` (initramfs, boot binary, image).
set -euo pipefail
cd "$(dirname "${BASH_SOURCE[0]}")"

out=${OUT:-out}
size=${SIZE:-1GiB}
# Everything the build and the tests need from Debian.
packages=(
	build-essential bc flex bison libelf-dev libssl-dev cpio linux-source-6.1
	systemd-boot-efi ovmf qemu-system-x86 swtpm swtpm-tools
	e2fsprogs dosfstools mtools gdisk cryptsetup-bin protobuf-compiler etcd-client
	sbsigntool efitools osslsigncode squashfs-tools nbdkit qemu-utils dnsmasq-base prometheus
	curl patroni postgresql-15 python3-idna protoc-gen-go
)
# python3-idna: Patroni's etcd client (urllib3 over pyOpenSSL) imports it
# to read a node certificate's DNS names, and Debian only suggests it; without it
# Patroni's etcd3 DCS fails to start ("Can not find suitable configuration
# of distributed configuration store"). protoc-gen-go: go generate ./proto.

say() { printf 'build: %s\n' "$*" >&2; }
die() { say "error: $*"; exit 1; }
start=$SECONDS

missing=()
for p in "${packages[@]}"; do
	dpkg-query -W -f='${Status}\n' "$p" 2>/dev/null | grep -q '^install ok installed$' || missing+=("$p")
done
if [ ${#missing[@]} -gt 0 ]; then
	[ "$(id -u)" = 0 ] || die "missing Debian packages: ${missing[*]} (run as root, or apt-get install them)"
	say "installing ${missing[*]}"
	export DEBIAN_FRONTEND=noninteractive
	apt-get update -qq
	apt-get install -y -qq --no-install-recommends "${missing[@]}" >/dev/null
fi

command -v go >/dev/null || die "Go is not installed (Go 1.26 or later, e.g. in /usr/local/go)"
gover=$(go env GOVERSION)
case "$gover" in go1.2[6-9]* | go1.[3-9]* | go2*) ;; *) die "Go $gover is too old; Borough needs Go 1.26" ;; esac

mkdir -p "$out/bin"
say "kernel"
kernel/build.sh "$out/vmlinuz" "$out/System.map"

say "node"
CGO_ENABLED=0 go build -trimpath -buildvcs=false -ldflags='-s -w -buildid=' -o "$out/node" ./node
say "init"
CGO_ENABLED=0 go build -trimpath -buildvcs=false -ldflags='-s -w -buildid=' -o "$out/init" ./init

version=$(git describe --always --dirty 2>/dev/null || echo dev)
say "host CLI"
go build -ldflags="-X main.version=$version" -o "$out/bin/borough" ./cmd/borough

if [ -z "${SOURCE_DATE_EPOCH:-}" ] && git rev-parse --verify -q HEAD >/dev/null; then
	SOURCE_DATE_EPOCH=$(git log -1 --format=%ct)
	export SOURCE_DATE_EPOCH
fi
# SECUREBOOT=dir signs the boot binary with the owner's db key in dir and
# puts the keys' signed updates on the ESP (borough secureboot init).
"$out/bin/borough" image build --kernel "$out/vmlinuz" --init "$out/init" --node "$out/node" \
	--out "$out" --size "$size" --version "$version" ${SECUREBOOT:+--secureboot "$SECUREBOOT"}

# The image boot tests use: the same kernel and init, and a node built
# with its test hooks (node/testhooks.go). Users get $out/borough.img.
say "node, test build"
CGO_ENABLED=0 go build -tags boroughtest -trimpath -buildvcs=false -ldflags='-s -w -buildid=' -o "$out/test/node" ./node
"$out/bin/borough" image build --kernel "$out/vmlinuz" --init "$out/init" --node "$out/test/node" \
	--out "$out/test" --size "$size" --version "$version-test"

img=$out/borough.img
say "done in $((SECONDS - start)) s: $img ($(du -h --apparent-size "$img" | cut -f1) apparent, $(du -h "$img" | cut -f1) allocated)"
