#!/usr/bin/env bash
# Installs what the build and the test cluster need from Debian's packages,
# only when something is missing.
# Usage: tests/deps.sh [build | --start]
#   (none)   everything; waits for an install that --start began, then
#            installs what is still missing (a failed one is redone here,
#            with apt's errors)
#   build    only what the builds need: a C compiler and Slurm's headers
#            (cargo), and flux-core's build packages (tests/flux/build.sh),
#            so that both builds can start before the rest is installed
#   --start  everything, in the background, and returns at once (its log:
#            target/deps.log); `make test` installs the rest so, beside
#            the lints
# Every apt-get of the suite's scripts holds packaging/apt-lock.sh's lock.
set -euo pipefail
cd "$(dirname "$0")/.."
mode=${1:-all}
. packaging/apt-lock.sh
# missing: sets need to the packages this mode wants that are not installed.
missing() {
    need=()
    # What building needs.
    [ -f /usr/include/slurm/slurm_version.h ] || [ -n "${SLURM_INCLUDE_DIR:-}" ] || need+=(libslurm-dev)
    command -v cc >/dev/null || need+=(gcc)
    # tests/flux/build.sh: flux-core's and flux-security's build packages, and
    # munge for tests/flux/system.rs (tests/flux/packages).
    for pkg in $(grep -v '^#' tests/flux/packages); do
        dpkg -s "$pkg" >/dev/null 2>&1 || need+=("$pkg")
    done
    if [ "$mode" != build ]; then
        command -v slurmd >/dev/null || need+=(slurm-wlm)
        command -v munged >/dev/null || need+=(munge)
        command -v unshare >/dev/null || need+=(util-linux)
        # The MPS tests trace the control daemon's execve of its server.
        command -v strace >/dev/null || need+=(strace)
        # tests/cluster/desi.rs (22.05 only): real MPI ranks (Debian's mpi4py on Open MPI)
        # under srun --mpi=pmix, and pip for tests/desi/fetch.sh.
        /usr/bin/python3 -c 'import mpi4py' 2>/dev/null || need+=(python3-mpi4py)
        command -v ompi_info >/dev/null || need+=(openmpi-bin)
        # tests/launchers.rs: MPICH's Hydra mpiexec beside Open MPI's mpirun.
        command -v mpiexec.mpich >/dev/null || need+=(mpich)
        # Slurm's mpi/pmix dlopens pmix2/lib/libpmix.so (libpmix-dev), and only when
        # slurmd starts: without it every --mpi=pmix step fails to launch.
        ls /usr/lib/*/pmix2/lib/libpmix.so >/dev/null 2>&1 || need+=(libpmix-dev)
        /usr/bin/python3 -m pip --version >/dev/null 2>&1 || need+=(python3-pip)
        # tests/contrib.rs applies contrib/'s patches to desispec's tree (git apply),
        # and runs desispec's own unit tests there: what they import from Debian
        # (test_proc_night's desispec.workflow.processing imports numba too).
        command -v git >/dev/null || need+=(git)
        for mod in $(/usr/bin/python3 -c 'import importlib.util as u; [print(m) for m in "numpy astropy yaml fitsio healpy scipy numba".split() if not u.find_spec(m)]' 2>/dev/null ||
            echo numpy astropy yaml fitsio healpy scipy numba); do
            need+=("python3-$mod")
        done
        # tests/cluster/podman.rs (22.05 only): NERSC's podman-hpc (PyPI, in a venv
        # of its own: tests/containers/podman-hpc.sh) over Debian's podman; runc,
        # since crun refuses this machine's hybrid cgroup v1 hierarchies; uidmap
        # for rootless podman (newuidmap); busybox-static for the test image.
        command -v podman >/dev/null || need+=(podman)
        command -v runc >/dev/null || need+=(runc)
        command -v newuidmap >/dev/null || need+=(uidmap)
        [ -x /bin/busybox ] && ! ldd /bin/busybox >/dev/null 2>&1 || need+=(busybox-static)
        /usr/bin/python3 -c 'import ensurepip' 2>/dev/null || need+=(python3-venv)
        # tests/containers/build.sh: enroot built with glibc (Debian's makeself for
        # its missing submodule, libbsd-dev for strlcpy), and what enroot runs;
        # image.sh: busybox-static and mksquashfs (squashfs-tools).
        command -v makeself >/dev/null || need+=(makeself)
        [ -f /usr/lib/x86_64-linux-gnu/libbsd.a ] || need+=(libbsd-dev)
        command -v jq >/dev/null || need+=(jq)
        command -v parallel >/dev/null || need+=(parallel)
        command -v mksquashfs >/dev/null || need+=(squashfs-tools)
        command -v zstd >/dev/null || need+=(zstd)
        command -v squashfuse >/dev/null || need+=(squashfuse)
        command -v fuse-overlayfs >/dev/null || need+=(fuse-overlayfs)
        # What later scripts would each install with packaging/apt-need.sh, here
        # in the same transaction: the package tests' (tests/package/), and
        # mmdebstrap for the Slurm series' roots (tests/cluster/slurm-root.sh).
        command -v rpmbuild >/dev/null || need+=(rpm)
        command -v rpm2archive >/dev/null || need+=(rpm2cpio)
        command -v man >/dev/null || need+=(man-db)
        command -v groff >/dev/null || need+=(groff-base)
        command -v mmdebstrap >/dev/null || need+=(mmdebstrap)
    fi
}
missing
# Nothing to build with is missing: no need to wait for an install of the
# rest (the lints run beside it).
[ ${#need[@]} -gt 0 ] || [ "$mode" != build ] || exit 0
if [ "$(id -u)" = 0 ]; then
    # An install under way ends before this run reads what is missing: a
    # package it is still configuring may have its files in place already.
    if [ "$mode" = --start ]; then
        apt_lock_now || exit 0 # one is under way; a plain run waits for it
    else
        apt_lock
    fi
    missing
fi
[ ${#need[@]} -gt 0 ] || exit 0
if [ "$(id -u)" != 0 ]; then
    echo "deps.sh: missing ${need[*]}; install them as root (apt-get install ${need[*]})" >&2
    exit 1
fi
install() {
    echo "deps.sh: installing $*" >&2
    export DEBIAN_FRONTEND=noninteractive
    apt-get update -q >/dev/null
    apt-get install -y -q "$@" >/dev/null
}
if [ "$mode" = --start ]; then
    mkdir -p target
    # The child inherits the lock's descriptor, and with it the lock, until
    # it ends; a plain run then finds what it could not install, and
    # installs it with apt's errors shown.
    install "${need[@]}" </dev/null >target/deps.log 2>&1 &
    echo "deps.sh: installing ${#need[@]} packages in the background (pid $!, target/deps.log)" >&2
    exit 0
fi
install "${need[@]}"
