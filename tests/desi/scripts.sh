#!/usr/bin/env bash
# scripts.sh DIR unpatched|patched|desi-gpu-map USER DEPS
# The batch scripts desispec's own generator writes, ready to submit as
# USER, for tests/cluster/desi.rs and benches/desi.sh. In DIR (new, made
# here, 0755): desispec's branch unpacked from
# ../shared/thirdparty/desispec-main-efd9676.tar.gz (with
# contrib/desispec/*.patch applied by `git apply` where patched or
# desi-gpu-map; desi-gpu-map also sets perlmutter-gpu's `gpu_wrapper:
# desi-gpu-map` in the branch's batch_config.yaml, as a site would), USER's
# home (home/, USER's) with the .bash_profile a login shell reads there, and
# the production's output tree (redux/, USER's) where
# tests/desi/write_scripts.py, run as USER, writes the tilenight and the
# desi_proc script; their paths go to DIR/scripts, tilenight first. DEPS:
# the folders holding desiutil, desitarget and desimodel (colon-separated).
#
# The profile is what a site's modules give a DESI job at NERSC: on PATH
# the stand-ins (tests/desi: desi_proc, desi_proc_tilenight,
# desi_mps_wrapper), desi-gpu-map (target/release) and
# nvidia-cuda-mps-control (the cluster's copy); on PYTHONPATH the stand-ins
# for cupy and numba.cuda, the branch and DEPS; and what this cluster needs
# that Perlmutter's slurm.conf gives: SLURM_MPI_TYPE=pmix, since the
# scripts' srun lines name no --mpi and this cluster's MpiDefault is none
# (Perlmutter's is cray_shasta; setting pmix here for every test would make
# every multi-node step fail: two slurmd on one host cannot share PMIx's
# directories), Open MPI on loopback only, and DESI_GPU_MAP_NVML, the fake
# NVML that the real driver's library stands for. Where the cluster runs a
# Slurm root whose Slurm has no mpi/pmix (sid's 26.05: Debian removed it,
# tests/cluster/slurm-root.sh), the ranks run Debian's MPICH instead, under
# SLURM_MPI_TYPE=pmi2, with PyPI's mpi4py wheel (tests/desi/fetch.sh
# mpi4py) on PYTHONPATH, told to load MPICH, and UCX (MPICH's transport) on
# shared memory only. Nothing of the scripts is changed. Needs the cluster
# up (cluster.sh env in the environment).
#
# With DGM_DESI_EXTRACTION=1 in the environment, the profile puts
# tests/desi/extraction first on PATH (its desi_proc_tilenight runs
# desi_proc's own GPU extraction orchestration) and gpu_specter's package
# (tests/desi/gpu_specter-116b964/py) on PYTHONPATH.
set -euo pipefail
[ $# = 4 ] || { echo "usage: $0 DIR unpatched|patched|desi-gpu-map USER DEPS" >&2; exit 2; }
dir=$1 kind=$2 user=$3 deps=$4
repo=$(cd "$(dirname "$0")/../.." && pwd)
tarball=$repo/../shared/thirdparty/desispec-main-efd9676.tar.gz
[ -f "$tarball" ] || tarball=/work/shared/thirdparty/desispec-main-efd9676.tar.gz
: "${DGM_CLUSTER_DIR:?run eval \"\$(tests/cluster/cluster.sh env)\" first}"
# The ranks' MPI: Open MPI 4.1 (bookworm) and 5 (trixie) alike (vader is
# 5's sm by its old name; 5 has no osc/pt2pt, and one node needs only
# osc/sm), or MPICH where the cluster's Slurm root has no mpi/pmix.
root=$(cat "$DGM_CLUSTER_DIR/slurm-root" 2>/dev/null || true)
mpi="export SLURM_MPI_TYPE=pmix
export OMPI_MCA_oob_tcp_if_include=lo OMPI_MCA_btl_tcp_if_include=lo OMPI_MCA_btl=self,vader OMPI_MCA_pml=ob1 OMPI_MCA_osc=sm"
mpi4py=
if [ -n "$root" ] && [ ! -e "$root/usr/lib/x86_64-linux-gnu/slurm-wlm/mpi_pmix.so" ]; then
    [ -e "$root/usr/lib/x86_64-linux-gnu/libmpi.so.12" ] ||
        { echo "$0: $root's Slurm has no mpi/pmix, and it has no MPICH (libmpich12): remake it with tests/cluster/slurm-root.sh" >&2; exit 1; }
    mpi4py=$(bash "$repo/tests/desi/fetch.sh" mpi4py):
    mpi="export SLURM_MPI_TYPE=pmi2 MPI4PY_MPIABI=mpich UCX_TLS=self,sm UCX_NET_DEVICES=lo"
fi
mkdir -m 0755 "$dir"
tar xzf "$tarball" -C "$dir"
branch=$dir/desispec-efd9676
case $kind in
    patched) (cd "$branch" && git apply "$repo"/contrib/desispec/*.patch) ;;
    desi-gpu-map)
        (cd "$branch" && git apply "$repo"/contrib/desispec/*.patch)
        config=$branch/py/desispec/data/batch_config.yaml
        sed -i 's/^    gpu_wrapper: desi_mps_wrapper$/    gpu_wrapper: desi-gpu-map/' "$config"
        [ "$(grep -c '^    gpu_wrapper: desi-gpu-map$' "$config")" = 1 ] ||
            { echo "$0: no gpu_wrapper to set in $config" >&2; exit 1; }
        ;;
    unpatched) ;;
    *) echo "$0: unpatched, patched or desi-gpu-map, not '$kind'" >&2; exit 2 ;;
esac
standins=$repo/tests/desi pythonpath=$mpi4py$repo/tests/fakes/python:$branch/py:$deps
if [ "${DGM_DESI_EXTRACTION:-}" = 1 ]; then
    standins=$repo/tests/desi/extraction:$standins
    pythonpath=$pythonpath:$repo/tests/desi/gpu_specter-116b964/py
fi
mkdir -m 0755 "$dir/home" "$dir/redux"
cat >"$dir/home/.bash_profile" <<PROFILE
export PATH=$standins:$repo/target/release:$DGM_CLUSTER_DIR/mps/bin:\$PATH
export PYTHONPATH=$pythonpath
$mpi
export DESI_GPU_MAP_NVML=$DGM_CLUSTER_DIR/nvml/libnvidia-ml.so.1
PROFILE
chown -R "$user" "$dir/home" "$dir/redux"
(cd /tmp && runuser -u "$user" -- env HOME="$dir/home" DESI_SPECTRO_REDUX="$dir/redux" SPECPROD=test \
    PYTHONPATH="$branch/py:$deps" /usr/bin/python3 "$repo/tests/desi/write_scripts.py") |
    sed -n 's/^script //p' >"$dir/scripts"
[ "$(wc -l <"$dir/scripts")" = 2 ] || { echo "$0: the generator wrote no scripts" >&2; exit 1; }
