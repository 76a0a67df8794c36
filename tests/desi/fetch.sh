#!/usr/bin/env bash
# fetch.sh [branch|mpi4py]  Prints a directory holding DESI's own Python code from
# PyPI, installed with `--no-deps` into a private target directory (never the
# system Python's site-packages); put it on PYTHONPATH. Every wheel but
# mpi4py's is pure Python; each is pinned by its sha256.
#   fetch.sh         desispec 0.70.0 (PyPI's newest) and desiutil 4.0.1:
#                    ${DGM_DESI_CACHE:-/var/tmp/desi-gpu-map-desi}/desispec-0.70.0
#   fetch.sh branch  what desispec's branch (../shared/thirdparty/desispec-main-*)
#                    imports from PyPI, without desispec itself: desiutil 4.0.1,
#                    desitarget 4.4.0, desimodel 0.20.0 (no data files), in
#                    .../branch-deps; the branch's py/ goes before it on PYTHONPATH.
#                    Its Debian imports (numpy, astropy, ...) come from tests/deps.sh.
#   fetch.sh mpi4py  mpi4py 4.1.2's wheel for any CPython 3.10+ (abi3), which
#                    loads MPICH's or Open MPI's libmpi at run time, in
#                    .../mpi4py-4.1.2: for a Slurm root with no mpi/pmix
#                    (sid's: tests/cluster/slurm-root.sh), whose ranks run
#                    Debian's MPICH under mpi/pmi2 (Debian's python3-mpi4py
#                    is built on Open MPI, which starts only through PMIx).
# Uses Debian's /usr/bin/python3 and its pip (python3-pip, which tests/deps.sh
# installs when missing). Idempotent: a complete directory is used as it is.
# Must run as root unless the directory is complete.
set -euo pipefail

die() { echo "fetch.sh: $*" >&2; exit 1; }
cache=${DGM_DESI_CACHE:-/var/tmp/desi-gpu-map-desi}
case "$cache" in /?*) ;; *) die "DGM_DESI_CACHE must be an absolute path (got '$cache')" ;; esac
python=/usr/bin/python3

wheel=()
case "${1:-}" in
'')
    dir=$cache/desispec-0.70.0
    what="desispec 0.70.0 and desiutil 4.0.1"
    # Files each package must have installed.
    files=(desispec/gpu.py desiutil/log.py desispec-0.70.0.dist-info desiutil-4.0.1.dist-info)
    req='desispec==0.70.0 --hash=sha256:47cb75b783d7869661da49cdc481ff245308bc92bee7c33ab88f47391f5e7d3a
desiutil==4.0.1 --hash=sha256:926c0093525c48d8b0fec01694da00732d328430984ec56ea87381e1ebf5bc26'
    ;;
branch)
    dir=$cache/branch-deps
    what="desiutil 4.0.1, desitarget 4.4.0 and desimodel 0.20.0"
    files=(desiutil/log.py desitarget/targetmask.py desimodel/io.py
        desiutil-4.0.1.dist-info desitarget-4.4.0.dist-info desimodel-0.20.0.dist-info)
    req='desiutil==4.0.1 --hash=sha256:926c0093525c48d8b0fec01694da00732d328430984ec56ea87381e1ebf5bc26
desitarget==4.4.0 --hash=sha256:009c235645af1ced635dcf766df2075070273bc19e1e6a257b3a72d908dbe715
desimodel==0.20.0 --hash=sha256:3dbed73f43bdc39c91fa25f48b63ce35353fa2e53beb650f5488f66c47d42fd0'
    ;;
mpi4py)
    dir=$cache/mpi4py-4.1.2
    what="mpi4py 4.1.2 (abi3)"
    files=(mpi4py/MPI.mpich.abi3.so mpi4py-4.1.2.dist-info)
    req='mpi4py==4.1.2 --hash=sha256:2ef63b2e3083e6062fd90e4de8c4e3acbf81e0772406e0226eb8dde6a48cab8e'
    # The abi3 wheel whatever the host's Python: the root's is another.
    wheel=(--python-version 3.10 --implementation cp --abi abi3 --platform manylinux1_x86_64)
    ;;
*) die "unknown argument '$1': give none (desispec 0.70.0), 'branch' (the branch's PyPI imports) or 'mpi4py'" ;;
esac

# complete: every package is there, at its version.
complete() {
    [ -f "$dir/.complete" ] || return 1
    local f
    for f in "${files[@]}"; do [ -e "$dir/$f" ] || return 1; done
}
if complete; then
    echo "$dir"
    exit 0
fi
[ "$(id -u)" = 0 ] || die "$dir is missing or incomplete; run this script as root"
[ -x "$python" ] || die "$python is missing (apt-get install python3; tests/deps.sh does)"
"$python" -m pip --version >/dev/null 2>&1 ||
    die "$python has no pip (apt-get install python3-pip; tests/deps.sh does)"

mkdir -p "$cache"
work=$(mktemp -d "$cache/.fetch.XXXXXX")
trap 'rm -rf "$work"' EXIT
printf '%s\n' "$req" >"$work/requirements.txt"
PIP_DISABLE_PIP_VERSION_CHECK=1 PIP_NO_INPUT=1 PIP_ROOT_USER_ACTION=ignore \
    "$python" -m pip install --quiet --no-deps --no-compile --only-binary=:all: \
    --require-hashes ${wheel[@]+"${wheel[@]}"} --target "$work/site" -r "$work/requirements.txt" >&2 ||
    die "pip could not install $what from PyPI"
touch "$work/site/.complete"
rm -rf "$dir"
mv "$work/site" "$dir"
complete || die "$dir is incomplete after the install"
echo "$dir"
