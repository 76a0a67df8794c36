#!/usr/bin/env bash
# Installs what the build and the test cluster need from Debian's packages,
# only when something is missing.
set -euo pipefail
need=()
[ -f /usr/include/slurm/slurm_version.h ] || [ -n "${SLURM_INCLUDE_DIR:-}" ] || need+=(libslurm-dev)
command -v slurmd >/dev/null || need+=(slurm-wlm)
command -v munged >/dev/null || need+=(munge)
command -v cc >/dev/null || need+=(gcc)
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
for mod in $(/usr/bin/python3 -c 'import importlib.util as u
for m in "numpy astropy yaml fitsio healpy scipy numba".split():
    u.find_spec(m) or print(m)' 2>/dev/null || echo numpy astropy yaml fitsio healpy scipy numba); do
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
# tests/flux/build.sh: flux-core's and flux-security's build packages, and
# munge for tests/flux/system.rs (tests/flux/packages).
for pkg in $(grep -v '^#' "$(dirname "$0")/flux/packages"); do
    dpkg -s "$pkg" >/dev/null 2>&1 || need+=("$pkg")
done
if [ ${#need[@]} -gt 0 ]; then
    if [ "$(id -u)" != 0 ]; then
        echo "deps.sh: missing ${need[*]}; install them as root (apt-get install ${need[*]})" >&2
        exit 1
    fi
    echo "deps.sh: installing ${need[*]}" >&2
    export DEBIAN_FRONTEND=noninteractive
    apt-get update -q >/dev/null
    apt-get install -y -q "${need[@]}" >/dev/null
fi
