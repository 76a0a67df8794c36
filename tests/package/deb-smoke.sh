#!/usr/bin/env bash
# deb-smoke.sh [DEB]  The .deb on the live test cluster: install it, let the
# cluster read /etc/slurm/plugstack.conf.d like a Debian site does, map a
# step, then remove and purge it and check that no plugstack line is left.
# Assumes `tests/cluster/cluster.sh up` (nodes n1, n2 with 4 GPUs each) has
# run; leaves the cluster up, the package not installed and the cluster's
# plugstack include at its default. Builds the .deb if DEB is not given.
# When the cluster runs from a Debian root (cluster.sh env: DGM_SLURM_ROOT),
# the package is built for that root's Slurm, and dpkg, srun and man run
# inside the root.
set -euo pipefail
cd "$(dirname "$0")/../.."
harness=tests/cluster/cluster.sh
eval "$(bash "$harness" env)"
export SLURM_CONF
root=${DGM_SLURM_ROOT:-} # prefix of every file path below
in_root=()
if [ -n "$root" ]; then
    in_root=(chroot "$root") # slurm-root.sh put man-db and groff-base there
else
    bash packaging/apt-need.sh man:man-db groff:groff-base
fi
# where_slurm CMD...: the command CMD (never a function) where Slurm runs
where_slurm() { if [ -n "$root" ]; then "${in_root[@]}" "$@"; else command "$@"; fi; }
dpkg() { where_slurm dpkg "$@"; }
srun() { where_slurm srun "$@"; }
man() { where_slurm man "$@"; }
pass=0 failed=0
check() { if "${@:2}"; then pass=$((pass + 1)); echo "ok   $1"; else failed=$((failed + 1)); echo "FAIL $1"; fi; }

if [ $# -ge 1 ]; then
    deb=$1
else
    SLURM_INCLUDE_DIR=${root:+$root/usr/include} bash packaging/deb/build-deb.sh
    deb=$(ls -t target/package/desi-gpu-map_*.deb | head -n 1)
fi
deb=$(realpath "$deb") # the repo has the same path inside the root
triplet=$(dpkg-architecture -qDEB_HOST_MULTIARCH 2>/dev/null || gcc -print-multiarch)
so=/usr/lib/$triplet/slurm-wlm/desi_gpu_map.so
conf_dir=/etc/slurm/plugstack.conf.d
conf=$conf_dir/zz-desi-gpu-map.conf

# Never touch a desi-gpu-map that this script did not install.
if dpkg -s desi-gpu-map >/dev/null 2>&1; then
    echo "deb-smoke.sh: dpkg already knows desi-gpu-map; purge it first" >&2
    exit 1
fi
# under the state dir, which has the same path inside the root
tmp=$(mktemp -d "$DGM_CLUSTER_DIR/deb-smoke.XXXXXX")
cleanup() {
    rm -rf "$tmp"
    dpkg --purge desi-gpu-map >/dev/null 2>&1 || true
    bash "$harness" plugstack-include default >/dev/null 2>&1 || true
}
trap cleanup EXIT
trap 'exit 130' INT TERM

bash "$harness" plugin off
dpkg -i "$deb" >/dev/null
bash "$harness" plugstack-include "$conf_dir"

probe='echo $SLURM_PROCID $(hostname) $CUDA_VISIBLE_DEVICES $DESI_GPU_MAPPED'
maps_two_nodes() {
    local got want
    got=$(srun -N2 -n8 --ntasks-per-node=4 -w 'n[1-2]' --gpus-per-node=4 \
        --desi-gpu-map=roundrobin bash -c "$probe" | sort -n) || return 1
    want=$(printf '%s\n' "0 n1 0 1" "1 n1 1 1" "2 n1 2 1" "3 n1 3 1" \
        "4 n2 0 1" "5 n2 1 1" "6 n2 2 1" "7 n2 3 1")
    [ "$got" = "$want" ] || { printf '  got:\n%s\n  want:\n%s\n' "$got" "$want"; return 1; }
}
maps_one_node() {
    local got
    got=$(srun -N1 -n2 -w n1 --gpus-per-node=2 --desi-gpu-map=contiguous bash -c "$probe" | sort -n) || return 1
    [ "$got" = "$(printf '%s\n' "0 n1 0 1" "1 n1 1 1")" ] || { echo "  got: $got"; return 1; }
}
# The installed prolog's binary maps a step as the task prolog, with the
# plugin out of the plugstack meanwhile (it too reads DESI_GPU_MAP_METHOD).
prolog_maps() {
    local got rc=0
    bash "$harness" plugstack-include default >/dev/null
    got=$(DESI_GPU_MAP_METHOD=contiguous srun -N1 -n2 -w n1 --gpus-per-node=2 \
        --task-prolog=/usr/bin/desi-gpu-map-prolog bash -c "$probe" | sort -n) || rc=1
    bash "$harness" plugstack-include "$conf_dir" >/dev/null
    [ $rc = 0 ] && [ "$got" = "$(printf '%s\n' "0 n1 0 1" "1 n1 1 1")" ] || { echo "  got: $got"; return 1; }
}
# The installed command (static) maps a step as exec, and where it needs
# NVML (show's device details) runs the dynamic build from libexec in its
# place: its answer names NVML's library, not a build it could not find.
exec_maps() {
    local got nvml
    bash "$harness" plugstack-include default >/dev/null
    got=$(srun -N1 -n2 -w n1 --gpus-per-node=2 \
        desi-gpu-map exec --method contiguous -- bash -c "$probe" | sort -n)
    bash "$harness" plugstack-include "$conf_dir" >/dev/null
    [ "$got" = "$(printf '%s\n' "0 n1 0 1" "1 n1 1 1")" ] || { echo "  got: $got"; return 1; }
    nvml=$(srun -N1 -n1 -w n1 --gpus-per-node=1 desi-gpu-map show --nvml /nonexistent/libnvidia-ml.so.1 2>&1)
    echo "$nvml" | grep -q '/nonexistent/libnvidia-ml.so.1' &&
        ! echo "$nvml" | grep -q 'cannot find the dynamic\|cannot run .* to ask NVML' ||
        { echo "  show: $nvml"; return 1; }
}
renders() {
    local err
    err=$(MANWIDTH=80 man --warnings -l "$1" 2>&1 >/dev/null) && [ -z "$err" ] ||
        { echo "  $1: ${err:-man failed}"; return 1; }
}
# No active plugstack line anywhere in the include dir names the plugin, and
# a plain srun still runs (a stale `required` line would abort it).
nothing_left() {
    [ ! -e "$root$so" ] || { echo "  $so is still there"; return 1; }
    if grep -ls desi_gpu_map "$root$conf_dir"/*.conf; then
        echo "  a *.conf in $conf_dir still names the plugin"
        return 1
    fi
    srun -N1 -w n1 true || { echo "  srun fails without the package"; return 1; }
}

check "installed .deb maps 8 tasks on n1,n2 round-robin from $conf" maps_two_nodes
check "installed desi-gpu-map-prolog maps 2 tasks on n1 as the task prolog" prolog_maps
check "installed desi-gpu-map (static) maps 2 tasks as exec; show asks NVML through libexec's build" exec_maps
if grep -rqs '^path-exclude=/usr/share/man' "$root/etc/dpkg/dpkg.cfg.d/"; then
    # Minimal container images tell dpkg not to unpack man pages at all.
    echo "note: dpkg excludes /usr/share/man here (path-exclude); checking the .deb's pages"
    dpkg-deb -x "$deb" "$tmp"
    man_root=$tmp
else
    man_root=
    check "man finds desi_gpu_map(8) and desi-gpu-map(1)" eval \
        'man -w 8 desi_gpu_map >/dev/null && man -w 1 desi-gpu-map >/dev/null'
fi
check "installed man pages render without warnings" eval \
    'renders $man_root/usr/share/man/man1/desi-gpu-map.1.gz && renders $man_root/usr/share/man/man8/desi_gpu_map.8.gz'

echo "# site edit" >>"$root$conf"
dpkg -r desi-gpu-map >/dev/null
check "dpkg -r: plugin gone, no *.conf names it, srun runs" nothing_left
check "dpkg -r: the edited snippet is kept aside as $conf.dpkg-disabled" \
    grep -q "site edit" "$root$conf.dpkg-disabled"

dpkg -i "$deb" >/dev/null
check "reinstall after dpkg -r: the edited snippet is back in use" eval \
    '[ ! -e "$root$conf.dpkg-disabled" ] && grep -q "site edit" "$root$conf" && maps_one_node'

dpkg -r desi-gpu-map >/dev/null
dpkg --purge desi-gpu-map >/dev/null
check "dpkg --purge: plugin gone, no *.conf names it, srun runs" nothing_left
check "dpkg --purge: no snippet or set-aside copy left, package unknown to dpkg" eval \
    '! ls "$root$conf"* >/dev/null 2>&1 && ! dpkg -s desi-gpu-map >/dev/null 2>&1'

bash "$harness" plugstack-include default
echo "deb-smoke: $pass passed, $failed failed"
[ "$failed" = 0 ]
