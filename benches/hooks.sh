#!/usr/bin/env bash
# The hooks' own cost against a floor, in one cluster and one run (2 nodes,
# 4 fake GPUs each): the plugin's task_init (--desi-gpu-map=contiguous)
# and that of benches/floor.c, a C plugin that only sets
# CUDA_VISIBLE_DEVICES (local id % 4) and DESI_GPU_MAPPED=1 ("floor"), or
# the same seven variables as the plugin ("floor-all"). Steps of 64 tasks
# (32 per node) rotate between the three, ROUNDS times each; each task_init
# logs its own wall (monotonic) and thread CPU time at debug level, and this
# prints the medians over every task, and the plugin's ratio to each floor.
# With DGM_BASELINE_SO=PATH (another build of the plugin, e.g. an earlier
# commit's), its task_init joins the rotation as "baseline", for a before
# and after in the same run.
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
        baseline) bash "$harness" plugin required "$DGM_BASELINE_SO" >/dev/null; set -- --desi-gpu-map=contiguous ;;
    esac
    srun -N2 -n64 --ntasks-per-node=32 --overlap "$@" true
}
export -f step
variants=(plugin floor floor-all ${DGM_BASELINE_SO:+baseline})
export harness so work DGM_BASELINE_SO
# Each step's variant, in the order the allocation runs them: its steps
# are numbered from 0, and slurmstepd prefixes its log lines [JOB.STEP].
: >"$work/order"
salloc -N2 --ntasks-per-node=32 -w 'n[1-2]' --gpus-per-node=4 bash -c "
    for r in \$(seq $rounds); do for v in ${variants[*]}; do echo \$v >>$work/order; step \$v; done; done" 2>/dev/null

median() { sort -n | awk '{a[NR]=$1} END {print (NR % 2) ? a[(NR+1)/2] : (a[NR/2]+a[NR/2+1])/2}'; }
# times VARIANT wall|cpu: each of its tasks', from "[JOB.STEP] ... task_init
# took W us (KIND), thread cpu C us", the step's variant read from the order.
times() {
    cat "$DGM_CLUSTER_DIR"/log/slurmd-n*.log |
        sed -n "s/.*\[[0-9]*\.\([0-9]*\)\].*task_init took \([0-9]*\) us (.*), thread cpu \([0-9]*\) us.*/\1 \2 \3/p" |
        awk -v v="$1" -v c="$2" 'NR == FNR {of[NR - 1] = $1; next} of[$1] == v {print (c == "wall") ? $2 : $3}' "$work/order" -
}
ratio() { awk -v a="$1" -v b="$2" 'BEGIN {printf "%.2f", a / b}'; }
declare -A med=() count=()
for v in "${variants[@]}"; do
    count[$v]=$(times "$v" wall | wc -l)
    [ "${count[$v]}" -gt 0 ] || { echo "hooks.sh: no task_init of $v was logged" >&2; exit 1; }
    for clock in wall cpu; do med[$v.$clock]=$(times "$v" "$clock" | median); done
done
echo "task_init per task, medians (us) over $rounds steps of 64 tasks each (tasks logged: $(for v in "${variants[@]}"; do printf '%s %s ' "$v" "${count[$v]}"; done))"
printf '%-36s %8s %11s\n' '' wall 'thread cpu'
printf '%-36s %8s %11s\n' "desi-gpu-map (contiguous)" "${med[plugin.wall]}" "${med[plugin.cpu]}"
printf '%-36s %8s %11s\n' "floor: GPU variable and flag" "${med[floor.wall]}" "${med[floor.cpu]}"
printf '%-36s %8s %11s\n' "floor-all: the plugin's 7 variables" "${med[floor-all.wall]}" "${med[floor-all.cpu]}"
printf '%-36s %8s %11s\n' "desi-gpu-map / floor" "$(ratio "${med[plugin.wall]}" "${med[floor.wall]}")" "$(ratio "${med[plugin.cpu]}" "${med[floor.cpu]}")"
printf '%-36s %8s %11s\n' "desi-gpu-map / floor-all" "$(ratio "${med[plugin.wall]}" "${med[floor-all.wall]}")" "$(ratio "${med[plugin.cpu]}" "${med[floor-all.cpu]}")"
if [ -n "${DGM_BASELINE_SO:-}" ]; then
    printf '%-36s %8s %11s\n' "baseline ($DGM_BASELINE_SO)" "${med[baseline.wall]}" "${med[baseline.cpu]}"
    printf '%-36s %8s %11s\n' "baseline / floor-all" "$(ratio "${med[baseline.wall]}" "${med[floor-all.wall]}")" "$(ratio "${med[baseline.cpu]}" "${med[floor-all.cpu]}")"
    printf '%-36s %8s %11s\n' "desi-gpu-map / baseline" "$(ratio "${med[plugin.wall]}" "${med[baseline.wall]}")" "$(ratio "${med[plugin.cpu]}" "${med[baseline.cpu]}")"
fi
