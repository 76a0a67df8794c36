#!/usr/bin/env bash
# Builds flux-security from its release tarball and flux-core from its
# source snapshot, configured --with-flux-security against it, into
# target/flux/install, once: a rerun is a no-op while the install there is
# of the same versions. flux-security's configuration (the IMP's
# etc/flux/imp/conf.d, the signing library's etc/flux/security/conf.d) is
# under that prefix too, never the machine's /etc: the system-instance
# suite (tests/flux/system.rs) writes its IMP configuration there.
# Usage: tests/flux/build.sh [--start] [TARBALL [SECURITY_TARBALL]]
#   (default: the shared snapshots)
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
security_version=0.15.0
tarball=${1:-${FLUX_CORE_TARBALL:-$(realpath -m "$PWD/../shared/thirdparty/flux-core-$version.tar.gz")}}
[ -f "$tarball" ] || tarball=/work/shared/thirdparty/flux-core-$version.tar.gz
security_tarball=${2:-${FLUX_SECURITY_TARBALL:-$(realpath -m "$PWD/../shared/thirdparty/flux-security-$security_version.tar.gz")}}
[ -f "$security_tarball" ] || security_tarball=/work/shared/thirdparty/flux-security-$security_version.tar.gz
root=$PWD/target/flux
prefix=$root/install
stamp=$prefix/.built-$version-security-$security_version
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
if [ ! -f "$security_tarball" ]; then
    echo "tests/flux/build.sh: no flux-security tarball at $security_tarball; give its path as the second argument" >&2
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

# The build itself; its logs are target/flux/*.log. flux-security builds
# while flux-core's autogen runs (one core each), then flux-core is
# configured against it.
step() {
    local name=$1
    shift
    if ! nice -n 15 "$@" >"$root/$name.log" 2>&1; then
        echo "tests/flux/build.sh: $name failed; the last lines of $root/$name.log:" >"$failed.$name"
        tail -n 30 "$root/$name.log" >>"$failed.$name"
        return 1
    fi
}

build_security() {
    cd "$root/security-src" &&
        step security-configure ./configure --prefix="$prefix" --disable-docs &&
        step security-make make -j"$(nproc)" &&
        step security-install make install
}

build() {
    rm -rf "$root/src" "$root/security-src" "$prefix" "$failed" "$failed".*
    mkdir -p "$root/src" "$root/security-src"
    if ! tar -xzf "$tarball" -C "$root/src" --strip-components=1 ||
        ! tar -xzf "$security_tarball" -C "$root/security-src" --strip-components=1; then
        echo "tests/flux/build.sh: cannot unpack $tarball or $security_tarball under $root" >"$failed"
        return 1
    fi
    export FLUX_VERSION=$version PYTHON=/usr/bin/python3
    local begin=$SECONDS ok=true
    (build_security) &
    local security=$!
    (cd "$root/src" && step autogen ./autogen.sh) || ok=false
    wait "$security" || ok=false
    security_done=$SECONDS
    if $ok; then
        cd "$root/src" &&
            step configure env PKG_CONFIG_PATH="$prefix/lib/pkgconfig" CPPFLAGS="-I$prefix/include" \
                ./configure --prefix="$prefix" --disable-docs --with-flux-security &&
            step make make -j"$(nproc)" &&
            step install make install || ok=false
    fi
    if ! $ok; then
        cat "$failed".* >"$failed" 2>/dev/null
        rm -f "$failed".*
        return 1
    fi
    touch "$stamp"
    echo "tests/flux/build.sh: flux-security $security_version and flux-core $version built in $((SECONDS - begin)) s ($((security_done - begin)) s to flux-core's configure)" >&2
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
