#!/usr/bin/env bash
# The hooks' own cost against a floor, in one cluster and one run (2 nodes,
# 4 fake GPUs each): the plugin's task_init (--desi-gpu-map=contiguous)
# and that of benches/floor.c, a C plugin that only sets
# CUDA_VISIBLE_DEVICES (local id % 4) and DESI_GPU_MAPPED=1 ("floor"), or
# the same five variables as the plugin ("floor-all"). Steps of 64 tasks
# (32 per node) rotate between the three, ROUNDS times each; each task_init
# logs its own wall (monotonic) and thread CPU time at debug level, and this
# prints the medians over every task, and the plugin's ratio to each floor.
# Usage: benches/hooks.sh [ROUNDS]   (default 20)
set -euo pipefail
cd "$(dirname "$0")/.."
rounds=${1:-20}
. tests/cluster/session.sh
DGM_SLURM_DEBUG=debug bash "$harness" up 4 4 >/dev/null
eval "$(bash "$harness" env)"
work=$DGM_CLUSTER_DIR/bench
mkdir -p "$work"
cc -shared -fPIC -O2 -Wall -Wextra -o "$work/floor.so" benches/floor.c

step() { # VARIANT
    case $1 in
        plugin) bash "$harness" plugin required "$so" >/dev/null; set -- --desi-gpu-map=contiguous ;;
        floor) bash "$harness" plugin required "$work/floor.so" >/dev/null; set -- ;;
        floor-all) bash "$harness" plugin required "$work/floor.so" all >/dev/null; set -- ;;
    esac
    srun -N2 -n64 --ntasks-per-node=32 --overlap "$@" true
}
export -f step
export harness so work
salloc -N2 --ntasks-per-node=32 -w 'n[1-2]' --gpus-per-node=4 bash -c "
    for r in \$(seq $rounds); do step plugin; step floor; step floor-all; done" 2>/dev/null

median() { sort -n | awk '{a[NR]=$1} END {print (NR % 2) ? a[(NR+1)/2] : (a[NR/2]+a[NR/2+1])/2}'; }
# times KIND wall|cpu: each task's, from "task_init took W us (KIND), thread cpu C us"
times() {
    cat "$DGM_CLUSTER_DIR"/log/slurmd-n*.log |
        sed -n "s/.*task_init took \([0-9]*\) us ($1), thread cpu \([0-9]*\) us.*/\1 \2/p" |
        awk -v c="$2" '{print (c == "wall") ? $1 : $2}'
}
ratio() { awk -v a="$1" -v b="$2" 'BEGIN {printf "%.2f", a / b}'; }
declare -A med=()
for kind in contiguous floor floor-all; do
    for clock in wall cpu; do med[$kind.$clock]=$(times "$kind" "$clock" | median); done
done
echo "task_init per task, medians (us) over $rounds steps of 64 tasks each (tasks logged: plugin $(times contiguous wall | wc -l), floor $(times floor wall | wc -l), floor-all $(times floor-all wall | wc -l))"
printf '%-36s %8s %11s\n' '' wall 'thread cpu'
printf '%-36s %8s %11s\n' "desi-gpu-map (contiguous)" "${med[contiguous.wall]}" "${med[contiguous.cpu]}"
printf '%-36s %8s %11s\n' "floor: GPU variable and flag" "${med[floor.wall]}" "${med[floor.cpu]}"
printf '%-36s %8s %11s\n' "floor-all: the plugin's 5 variables" "${med[floor-all.wall]}" "${med[floor-all.cpu]}"
printf '%-36s %8s %11s\n' "desi-gpu-map / floor" "$(ratio "${med[contiguous.wall]}" "${med[floor.wall]}")" "$(ratio "${med[contiguous.cpu]}" "${med[floor.cpu]}")"
printf '%-36s %8s %11s\n' "desi-gpu-map / floor-all" "$(ratio "${med[contiguous.wall]}" "${med[floor-all.wall]}")" "$(ratio "${med[contiguous.cpu]}" "${med[floor-all.cpu]}")"
