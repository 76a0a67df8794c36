#!/usr/bin/env bash
# fetch.sh  Prints the directory holding DESI's own Python code, desispec
# 0.70.0 and desiutil 4.0.1, installed from PyPI with `--no-deps` into a
# private target directory (never the system Python's site-packages), for
# tests/cluster/desi.rs: ${DGM_DESI_CACHE:-/var/tmp/desi-gpu-map-desi}/desispec-0.70.0
# (put it on PYTHONPATH). Both wheels are pure Python and pinned by their
# sha256. Uses Debian's /usr/bin/python3 and its pip (python3-pip, which
# tests/deps.sh installs when missing). Idempotent: a complete directory is
# used as it is. Must run as root unless the directory is complete.
set -euo pipefail

die() { echo "fetch.sh: $*" >&2; exit 1; }
cache=${DGM_DESI_CACHE:-/var/tmp/desi-gpu-map-desi}
case "$cache" in /?*) ;; *) die "DGM_DESI_CACHE must be an absolute path (got '$cache')" ;; esac
dir=$cache/desispec-0.70.0
python=/usr/bin/python3

# complete: both packages are there, at their versions, and gpu.py is readable.
complete() {
    [ -f "$dir/.complete" ] &&
        [ -f "$dir/desispec/gpu.py" ] && [ -f "$dir/desiutil/log.py" ] &&
        [ -d "$dir/desispec-0.70.0.dist-info" ] && [ -d "$dir/desiutil-4.0.1.dist-info" ]
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
cat >"$work/requirements.txt" <<'REQ'
desispec==0.70.0 --hash=sha256:47cb75b783d7869661da49cdc481ff245308bc92bee7c33ab88f47391f5e7d3a
desiutil==4.0.1 --hash=sha256:926c0093525c48d8b0fec01694da00732d328430984ec56ea87381e1ebf5bc26
REQ
PIP_DISABLE_PIP_VERSION_CHECK=1 PIP_NO_INPUT=1 PIP_ROOT_USER_ACTION=ignore \
    "$python" -m pip install --quiet --no-deps --no-compile --only-binary=:all: \
    --require-hashes --target "$work/site" -r "$work/requirements.txt" >&2 ||
    die "pip could not install desispec 0.70.0 and desiutil 4.0.1 from PyPI"
touch "$work/site/.complete"
rm -rf "$dir"
mv "$work/site" "$dir"
complete || die "$dir is incomplete after the install"
echo "$dir"
