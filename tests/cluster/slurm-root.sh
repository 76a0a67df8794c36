#!/usr/bin/env bash
# slurm-root.sh SUITE  Prints the path of a Debian SUITE root (trixie, sid)
# holding Debian's own Slurm, made with mmdebstrap on first use and cached in
# ${DGM_SERIES_CACHE:-/var/tmp/desi-gpu-map-series}/SUITE.
# The cache is keyed on what goes into the root (suite, packages, options,
# this script's format); a root with another key, or one whose slurmd no
# longer runs, is made again. A root is never removed while anything is
# mounted below it (cluster.sh binds the repo and the state dir into it).
# Must run as root; installs mmdebstrap from Debian if it is missing.
set -euo pipefail
cd "$(dirname "$0")/../.."

die() { echo "slurm-root.sh: $*" >&2; exit 1; }
[ $# = 1 ] || die "usage: slurm-root.sh SUITE"
suite=$1
[[ "$suite" =~ ^[a-z]+$ ]] || die "SUITE must be a Debian suite name such as trixie or sid (got '$suite')"
[ "$(id -u)" = 0 ] || die "must run as root (mmdebstrap and chroot)"
cache=${DGM_SERIES_CACHE:-/var/tmp/desi-gpu-map-series}
case "$cache" in /?*) ;; *) die "DGM_SERIES_CACHE must be an absolute path (got '$cache')" ;; esac
root=$cache/$suite

# Slurm and what tests/package/deb-smoke.sh runs inside the root (man).
packages=slurm-wlm,libslurm-dev,man-db,groff-base
# What enroot runs (tests/containers/build.sh installs enroot itself here:
# the series' slurmstepd, and so pyxis and enroot, run in the root); its
# 10-shadow hook runs grpck and pwck (passwd), which sid's minimal root lacks.
packages=$packages,jq,parallel,squashfs-tools,zstd,squashfuse,fuse-overlayfs,passwd
components=main
# Slurm's gpu/nvml plugin (gres.conf AutoDetect=nvml, tests/cluster/autodetect.sh)
# is in contrib, built for these suites only (not bookworm's 22.05).
case "$suite" in
    trixie | sid) components=main,contrib packages=$packages,slurm-wlm-nvml-plugin ;;
esac
# What the desi suite's extraction test runs in each of its 64 MPI ranks
# (tests/desi/extraction/desi_proc_tilenight, tests/cluster/desi.rs):
# Debian's Python and numpy (gpu_specter imports it), and an MPI that the
# suite's srun can start. trixie's Slurm has mpi/pmix: Debian's mpi4py on
# Open MPI (the plugin dlopens pmix2/lib/libpmix.so.2, which Slurm's own
# dependency libpmix2t64 ships; libpmix-dev would bring libc6-dev into the
# root, whose headers tests/containers/build.sh must not see). sid's has
# none (Debian removed it, #1149781) and Open MPI 5 and later start only
# through PMIx: MPICH under Slurm's mpi/pmi2, with PyPI's mpi4py wheel,
# which loads MPICH's libmpi.so.12 (tests/desi/fetch.sh mpi4py).
packages=$packages,python3,python3-numpy
case "$suite" in
    trixie) packages=$packages,python3-mpi4py ;;
    *) packages=$packages,libmpich12 ;;
esac
# sid's Release file may be past its Valid-Until on a mirror snapshot.
aptopt='Acquire::Check-Valid-Until "false"'
key=$(printf 'format 1\nsuite %s\ncomponents %s\npackages %s\naptopt %s\n' \
    "$suite" "$components" "$packages" "$aptopt" | sha256sum | cut -c1-16)

# mounted_below DIR: something is mounted at DIR or below it.
mounted_below() {
    awk -v d="$1" '$5 == d || index($5, d "/") == 1 {f = 1} END {exit !f}' /proc/self/mountinfo
}
usable() {
    [ "$(cat "$root/.dgm-root-key" 2>/dev/null)" = "$key" ] &&
        [ -f "$root/usr/include/slurm/slurm_version.h" ] &&
        chroot "$root" /usr/sbin/slurmd -V >/dev/null 2>&1
}

mkdir -p "$cache"
exec 9>"$cache/.lock"
flock 9
if ! usable; then
    bash packaging/apt-need.sh mmdebstrap:mmdebstrap
    for d in "$root" "$root.new"; do
        ! mounted_below "$d" || die "$d is stale but has mounts below it (a cluster is up? run cluster.sh down)"
    done
    rm -rf "$root.new"
    echo "slurm-root.sh: making the $suite root in $root (mmdebstrap, 30 to 80 s)" >&2
    t0=$(date +%s)
    mmdebstrap --quiet --variant=apt --aptopt="$aptopt" --components="$components" \
        --include="$packages" \
        "$suite" "$root.new" >&2 || die "mmdebstrap $suite failed"
    echo "$key" >"$root.new/.dgm-root-key"
    rm -rf "$root"
    mv "$root.new" "$root"
    echo "slurm-root.sh: $suite root ready in $(($(date +%s) - t0)) s: $(chroot "$root" /usr/sbin/slurmd -V)" >&2
fi
echo "$root"
