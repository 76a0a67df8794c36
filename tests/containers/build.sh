#!/usr/bin/env bash
# build.sh SERIES [ROOT]: what the container tests (tests/cluster/pyxis.rs)
# need for one Slurm series, from the sources vendored in thirdparty/:
# - enroot 4.1.2, built once with glibc (its musl submodule is not in the
#   archive) and installed into the suite's own prefix,
#   target/containers/enroot/prefix (paths.sh), its configuration in
#   PREFIX/etc/enroot: nothing is installed on the host or in a root, and a
#   machine's own enroot and /etc/enroot are never read nor touched (the
#   cluster puts PREFIX/bin first on its nodes' PATH, where pyxis finds it);
# - pyxis 0.24.0's spank_pyxis.so against the series' own headers (ROOT's,
#   else the host's /usr/include): target/containers/SERIES/spank_pyxis.so,
#   whose plugin_version Slurm checks;
# - the test images (image.sh) in target/containers/images.
# Prints the spank_pyxis.so path. Each piece is rebuilt only when its
# inputs changed, so a second run takes well under a second.
# The Debian packages come from tests/deps.sh (host) and
# tests/cluster/slurm-root.sh (roots). Runs as root, as the cluster does.
set -euo pipefail
cd "$(dirname "$0")/../.."
repo=$PWD
REPO_DIR=$repo
# shellcheck source=tests/containers/paths.sh
. tests/containers/paths.sh
here=tests/containers
third=$here/thirdparty
out=$repo/target/containers
ENROOT=enroot-4.1.2 PYXIS=pyxis-0.24.0 ENROOT_VERSION=4.1.2

die() { echo "build.sh: $*" >&2; exit 1; }
if [ $# -lt 1 ] || [ $# -gt 2 ]; then die "usage: build.sh SERIES [ROOT]"; fi
series=$1 root=${2:-}
[[ "$series" =~ ^[0-9]+\.[0-9]+$ ]] || die "SERIES must look like 22.05 (got '$series')"
[ -z "$root" ] || [ -x "$root/usr/sbin/slurmd" ] || die "$root is not a Slurm root (tests/cluster/slurm-root.sh)"
[ "$(id -u)" = 0 ] || die "must run as root (enroot's helpers must be root's)"

# The archives are what the README says, or nothing is built from them.
(cd "$third" && sha256sum --quiet -c SHA256SUMS) || die "$third does not match SHA256SUMS"

# stamp FILE INPUTS...: true when FILE holds the hash of INPUTS (strings).
stamp_of() { printf '%s\n' "$@" | sha256sum | cut -c1-16; }
fresh() { [ "$(cat "$1" 2>/dev/null)" = "$(stamp_of "${@:2}")" ]; }

# unpack NAME DIR: a fresh copy of the archive NAME.tar.gz as DIR/NAME.
unpack() {
    rm -rf "${2:?}/$1"
    mkdir -p "$2"
    tar -xzf "$third/$1.tar.gz" -C "$2"
}

# ---------------------------------------------------------------- enroot
# The flags from the notes that built it here: -D_GNU_SOURCE and
# bsd/string.h for strlcpy/strlcat, and LDFLAGS overridden so that the
# in-tree, incomplete deps/dist/libbsd (which lacks them) is not searched;
# libbsd linked statically, so the helpers need only glibc in a root.
# CPPFLAGS goes in the environment, which the Makefile appends to its
# own; LDFLAGS and LDLIBS on the command line, which replace its own.
# prefix and sysconfdir at build time: the enroot script has them baked
# in (it reads @sysconfdir@/enroot.conf), so they are the suite's own.
enroot_cppflags="-D_GNU_SOURCE -include bsd/string.h"
enroot_flags=(FORCE_GLIBC=1 "prefix=$ENROOT_PREFIX" "sysconfdir=$ENROOT_PREFIX/etc"
    "LDFLAGS=-Wl,-znow" "LDLIBS=-l:libbsd.a -l:libmd.a")
edir=$out/enroot
estamp=$(sha256sum "$third/$ENROOT.tar.gz" | cut -c1-16)
if ! fresh "$edir/.stamp" "$estamp" "$enroot_cppflags" "${enroot_flags[@]}" || [ ! -x "$ENROOT_PREFIX/bin/enroot" ]; then
    for f in /usr/bin/makeself /usr/include/bsd/string.h /usr/lib/x86_64-linux-gnu/libbsd.a; do
        [ -e "$f" ] || die "$f is missing: run tests/deps.sh (makeself, libbsd-dev)"
    done
    unpack "$ENROOT" "$edir"
    src=$edir/$ENROOT
    # The submodules' stand-ins: Debian's makeself, the host's kernel headers.
    install -m 755 -D /usr/bin/makeself "$src/deps/dist/makeself/bin/enroot-makeself"
    touch "$src/deps/makeself/.stamp"
    mkdir -p "$src/deps/dist/linux"
    ln -sfn /usr/include "$src/deps/dist/linux/include"
    touch "$src/deps/linux-headers/.stamp"
    # `make deps` runs `git submodule update`, which fails outside a git
    # checkout and is ignored (make's leading -).
    CPPFLAGS=$enroot_cppflags make -C "$src" "${enroot_flags[@]}" >"$edir/build.log" 2>&1 || { tail -n 30 "$edir/build.log" >&2; die "enroot did not build (log: $edir/build.log)"; }
    rm -rf "$ENROOT_PREFIX" "$edir/stage"
    CPPFLAGS=$enroot_cppflags make -C "$src" "${enroot_flags[@]}" install >>"$edir/build.log" 2>&1 || { tail -n 30 "$edir/build.log" >&2; die "enroot did not install into $ENROOT_PREFIX"; }
    # Not `enroot version`, which would make its default dirs (/run/enroot,
    # ~/.cache/enroot) on this machine: the script says its version.
    grep -qx "export ENROOT_VERSION=\"$ENROOT_VERSION\"" "$ENROOT_PREFIX/bin/enroot" || die "$ENROOT_PREFIX/bin/enroot is not enroot $ENROOT_VERSION"
    stamp_of "$estamp" "$enroot_cppflags" "${enroot_flags[@]}" >"$edir/.stamp"
fi

# ---------------------------------------------------------------- pyxis
inc=${root:+$root}/usr/include
[ -f "$inc/slurm/spank.h" ] || die "$inc/slurm/spank.h is missing (libslurm-dev)"
pdir=$out/$series
so=$pdir/spank_pyxis.so
pstamp=$(cat "$third/$PYXIS.tar.gz" "$inc/slurm/spank.h" "$inc/slurm/slurm_version.h" | sha256sum | cut -c1-16)
if ! fresh "$pdir/.stamp" "$pstamp" "$inc" || [ ! -f "$so" ]; then
    unpack "$PYXIS" "$pdir"
    # A root's spank.h before the host's (CPPFLAGS from the environment,
    # which the Makefile appends to its own).
    CPPFLAGS=${root:+-isystem $inc} make -C "$pdir/$PYXIS" >"$pdir/build.log" 2>&1 || { tail -n 30 "$pdir/build.log" >&2; die "pyxis did not build against $inc (log: $pdir/build.log)"; }
    install -m 0644 "$pdir/$PYXIS/spank_pyxis.so" "$so"
    stamp_of "$pstamp" "$inc" >"$pdir/.stamp"
fi

# ---------------------------------------------------------------- images
bash "$here/image.sh" "$out/images" >&2

echo "$so"
