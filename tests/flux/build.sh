#!/usr/bin/env bash
# Builds flux-core from its source snapshot into target/flux/install, once:
# a rerun is a no-op while the install there is of the same version.
# Usage: tests/flux/build.sh [TARBALL]   (default: the shared snapshot)
# Prints the install prefix on its last line.
set -euo pipefail
cd "$(dirname "$0")/../.."
version=0.88.0
tarball=${1:-${FLUX_CORE_TARBALL:-$(realpath -m "$PWD/../shared/thirdparty/flux-core-$version.tar.gz")}}
[ -f "$tarball" ] || tarball=/work/shared/thirdparty/flux-core-$version.tar.gz
root=$PWD/target/flux
prefix=$root/install
stamp=$prefix/.built-$version
if [ -x "$prefix/bin/flux" ] && [ -f "$stamp" ]; then
    echo "$prefix"
    exit 0
fi
if [ ! -f "$tarball" ]; then
    echo "tests/flux/build.sh: no flux-core snapshot at $tarball; give its path as the first argument" >&2
    exit 1
fi
# flux-core's scripts/install-deps-deb.sh list, only what is missing.
need=()
for pkg in autoconf automake libtool make pkg-config libzmq3-dev uuid-dev \
    libjansson-dev liblz4-dev libarchive-dev libhwloc-dev libsqlite3-dev \
    lua5.1 liblua5.1-dev lua-posix python3-dev python3-cffi python3-ply \
    python3-setuptools python3-yaml jq; do
    dpkg -s "$pkg" >/dev/null 2>&1 || need+=("$pkg")
done
if [ ${#need[@]} -gt 0 ]; then
    if [ "$(id -u)" != 0 ]; then
        echo "tests/flux/build.sh: missing ${need[*]}; install them as root (apt-get install ${need[*]})" >&2
        exit 1
    fi
    echo "tests/flux/build.sh: installing ${need[*]}" >&2
    export DEBIAN_FRONTEND=noninteractive
    apt-get update -q >/dev/null
    apt-get install -y -q "${need[@]}" >/dev/null
fi
rm -rf "$root/src" "$prefix"
mkdir -p "$root/src"
tar -xzf "$tarball" -C "$root/src" --strip-components=1
cd "$root/src"
export FLUX_VERSION=$version PYTHON=/usr/bin/python3
start=$SECONDS
nice -n 15 ./autogen.sh >"$root/autogen.log" 2>&1
nice -n 15 ./configure --prefix="$prefix" --disable-docs >"$root/configure.log" 2>&1
nice -n 15 make -j"$(nproc)" >"$root/make.log" 2>&1
nice -n 15 make install >"$root/install.log" 2>&1
touch "$stamp"
echo "tests/flux/build.sh: flux-core $version built in $((SECONDS - start)) s" >&2
echo "$prefix"
