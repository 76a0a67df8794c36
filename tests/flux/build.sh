#!/usr/bin/env bash
# Builds flux-core from its source snapshot into target/flux/install, once:
# a rerun is a no-op while the install there is of the same version.
# Usage: tests/flux/build.sh [--start] [TARBALL]   (default: the shared snapshot)
#   --start  builds in the background (niced) and returns at once; a later
#            plain run waits for that build and fails if it failed. `make
#            test` starts it so, to build beside the lints and unit tests.
# Prints the install prefix on its last line (a plain run).
set -euo pipefail
cd "$(dirname "$0")/../.."
start_only=false
if [ "${1:-}" = --start ]; then
    start_only=true
    shift
fi
version=0.88.0
tarball=${1:-${FLUX_CORE_TARBALL:-$(realpath -m "$PWD/../shared/thirdparty/flux-core-$version.tar.gz")}}
[ -f "$tarball" ] || tarball=/work/shared/thirdparty/flux-core-$version.tar.gz
root=$PWD/target/flux
prefix=$root/install
stamp=$prefix/.built-$version
failed=$root/build-failed
mkdir -p "$root"
# One build at a time: whoever holds the lock builds; a plain run waits for it.
exec 9>"$root/.lock"
if $start_only; then
    flock -n 9 || exit 0 # a build is already under way
else
    flock 9
fi
if [ -x "$prefix/bin/flux" ] && [ -f "$stamp" ]; then
    $start_only || echo "$prefix"
    exit 0
fi
if [ -f "$failed" ] && ! $start_only; then
    cat "$failed" >&2
    rm -f "$failed"
    exit 1
fi
if [ ! -f "$tarball" ]; then
    echo "tests/flux/build.sh: no flux-core snapshot at $tarball; give its path as the first argument" >&2
    exit 1
fi
need=()
for pkg in $(grep -v '^#' tests/flux/packages); do
    dpkg -s "$pkg" >/dev/null 2>&1 || need+=("$pkg")
done
if [ ${#need[@]} -gt 0 ]; then
    echo "tests/flux/build.sh: missing ${need[*]}; install them with tests/deps.sh (make deps), as root" >&2
    exit 1
fi

# The build itself; its logs are target/flux/*.log.
build() {
    rm -rf "$root/src" "$prefix" "$failed"
    mkdir -p "$root/src"
    if ! tar -xzf "$tarball" -C "$root/src" --strip-components=1 || ! cd "$root/src"; then
        echo "tests/flux/build.sh: cannot unpack $tarball into $root/src" >"$failed"
        return 1
    fi
    export FLUX_VERSION=$version PYTHON=/usr/bin/python3
    local begin=$SECONDS step
    for step in autogen configure make install; do
        if ! case $step in
            autogen) nice -n 15 ./autogen.sh ;;
            configure) nice -n 15 ./configure --prefix="$prefix" --disable-docs ;;
            make) nice -n 15 make -j"$(nproc)" ;;
            install) nice -n 15 make install ;;
            esac >"$root/$step.log" 2>&1; then
            echo "tests/flux/build.sh: flux-core's $step failed; the last lines of $root/$step.log:" >"$failed"
            tail -n 30 "$root/$step.log" >>"$failed"
            return 1
        fi
    done
    touch "$stamp"
    echo "tests/flux/build.sh: flux-core $version built in $((SECONDS - begin)) s" >&2
}

if $start_only; then
    # The child inherits descriptor 9, and with it the lock, until it ends.
    build </dev/null >"$root/build.log" 2>&1 &
    echo "tests/flux/build.sh: building flux-core $version in the background (pid $!, $root/build.log)" >&2
    exit 0
fi
if ! build; then
    cat "$failed" >&2
    rm -f "$failed"
    exit 1
fi
echo "$prefix"
