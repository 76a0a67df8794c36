#!/usr/bin/env bash
# Launch-overhead benchmark on the local test cluster (2 nodes, 4 fake GPUs
# each). Interleaves the variants, A B C D A B C D ..., at 8, 32 and 64
# tasks, and prints medians and ratios against "none", all measured in this
# one run. It asserts nothing: noise on a 2-core machine is real.
#   none     no plugin in plugstack
#   plugin   --desi-gpu-map=contiguous
#   wrapper  no plugin; each task exec'd through a bash wrapper that sets
#            CUDA_VISIBLE_DEVICES=$((SLURM_LOCALID % 4)) (NERSC's select_gpu_device)
#   slurm    no plugin; Slurm's own --gpu-bind=map_gpu:0,1,2,3
#   closest  --desi-gpu-map=closest, the GPUs located through a fake
#            kernel tree (kernel_root=); tasks unbound (task/none)
#   exec     no plugin; each task started as desi-gpu-map exec --method
#            contiguous -- true (the command for sites without the plugin)
#   prolog   no plugin; desi-gpu-map-prolog (the static build) as the task prolog
#            (DESI_GPU_MAP_METHOD=contiguous), the task itself unwrapped (a
#            task epilog, any, costs Slurm about 1 s per task per node: see
#            benches/mps.sh's prologmps, where MPS's end needs one)
# Usage: benches/launch.sh [ROUNDS]   (default 15 rounds)
set -euo pipefail
cd "$(dirname "$0")/.."
rounds=${1:-15}
. tests/cluster/session.sh
DGM_SLURM_DEBUG=debug bash "$harness" up 4 4 >/dev/null
eval "$(bash "$harness" env)"
work=$DGM_CLUSTER_DIR/bench
mkdir -p "$work"
cat >"$work/wrapper.sh" <<'WRAP'
#!/bin/bash
export CUDA_VISIBLE_DEVICES=$((SLURM_LOCALID % 4))
exec "$@"
WRAP
chmod +x "$work/wrapper.sh"
# The fake kernel files closest reads: 4 GPUs, 2 per CPU.
for g in 0 1 2 3; do
    bus=0000:0$((g + 1)):00.0
    mkdir -p "$work/kernel/proc/driver/nvidia/gpus/$bus" "$work/kernel/sys/bus/pci/devices/$bus"
    printf 'Device Minor: %d\n' "$g" >"$work/kernel/proc/driver/nvidia/gpus/$bus/information"
    echo $((g / 2)) >"$work/kernel/sys/bus/pci/devices/$bus/numa_node"
    echo $((g / 2)) >"$work/kernel/sys/bus/pci/devices/$bus/local_cpulist"
done

# One timed step inside the allocation: VARIANT NTASKS -> milliseconds.
step() {
    local variant=$1 n=$2 t0 t1
    local args=(-N2 -n"$n" --ntasks-per-node=$((n / 2)) --overlap)
    case $variant in
        none) bash "$harness" plugin off >/dev/null ;;
        plugin) bash "$harness" plugin required "$so" >/dev/null; args+=(--desi-gpu-map=contiguous) ;;
        wrapper) bash "$harness" plugin off >/dev/null; args+=("$work/wrapper.sh") ;;
        slurm) bash "$harness" plugin off >/dev/null; args+=(--gpu-bind=map_gpu:0,1,2,3) ;;
        closest) bash "$harness" plugin required "$so" "kernel_root=$work/kernel" >/dev/null; args+=(--desi-gpu-map=closest) ;;
        exec) bash "$harness" plugin off >/dev/null; args+=("$bin" exec --method contiguous --) ;;
        prolog) bash "$harness" plugin off >/dev/null; args+=(--task-prolog="$bin-prolog") ;;
    esac
    t0=$(date +%s%N)
    DESI_GPU_MAP_METHOD=contiguous srun "${args[@]}" true
    t1=$(date +%s%N)
    echo $(((t1 - t0) / 1000000))
}

median() { sort -n | awk '{a[NR]=$1} END {print (NR % 2) ? a[(NR+1)/2] : (a[NR/2]+a[NR/2+1])/2}'; }

export -f step
bin=$PWD/target/release/desi-gpu-map
export harness so work bin
results=$work/results
: >"$results"
salloc -N2 --ntasks-per-node=32 -w 'n[1-2]' --gpus-per-node=4 bash -c "
    for r in \$(seq $rounds); do
        for n in 8 32 64; do
            for v in none plugin wrapper slurm closest exec prolog; do
                echo \"\$n \$v \$(step \$v \$n)\" >>'$results'
            done
        done
    done" 2>/dev/null

echo "launch time of one srun step, median of $rounds interleaved rounds (ms), 2 nodes, 4 GPUs each"
ratio() { awk -v a="$1" -v b="$2" 'BEGIN {printf "%.3f", a / b}'; }
printf '%6s %8s %8s %8s %8s %8s %8s %8s %12s %13s %13s %11s %13s %13s\n' tasks none plugin wrapper slurm closest exec prolog \
    plugin/none wrapper/none closest/none exec/none exec/wrapper prolog/none
for n in 8 32 64; do
    declare -A med=()
    for v in none plugin wrapper slurm closest exec prolog; do
        med[$v]=$(awk -v n="$n" -v v="$v" '$1 == n && $2 == v {print $3}' "$results" | median)
    done
    printf '%6s %8s %8s %8s %8s %8s %8s %8s %12s %13s %13s %11s %13s %13s\n' "$n" "${med[none]}" "${med[plugin]}" \
        "${med[wrapper]}" "${med[slurm]}" "${med[closest]}" "${med[exec]}" "${med[prolog]}" \
        "$(ratio "${med[plugin]}" "${med[none]}")" "$(ratio "${med[wrapper]}" "${med[none]}")" \
        "$(ratio "${med[closest]}" "${med[none]}")" "$(ratio "${med[exec]}" "${med[none]}")" \
        "$(ratio "${med[exec]}" "${med[wrapper]}")" "$(ratio "${med[prolog]}" "${med[none]}")"
done

# Time inside the plugin's own hooks, per method, from slurmd's debug log
# ("task_init took N us (METHOD), thread cpu M us").
hook_times() { cat "$DGM_CLUSTER_DIR"/log/slurmd-n*.log | sed -n "s/.*$1 took \([0-9]*\) us ($2).*/\1/p"; }
echo
for m in contiguous closest; do
    t=$(hook_times task_init "$m")
    u=$(hook_times user_init "$m")
    echo "$m: task_init per task: $(echo "$t" | wc -l) samples, median $(echo "$t" | median) us, max $(echo "$t" | sort -n | tail -n 1) us;" \
        "user_init per step and node: median $(echo "$u" | median) us, max $(echo "$u" | sort -n | tail -n 1) us"
done

# NVML loads: steps that need NVML (whole nodes, no GPU request, which
# untracked=whole-node maps) load it once per node per step.
bash "$harness" plugin required "$so" untracked=whole-node >/dev/null
bash "$harness" nvml clear-log >/dev/null
steps=5
for i in $(seq $steps); do srun -N2 -n64 --exclusive --desi-gpu-map=contiguous true; done
inits=$(bash "$harness" nvml log | grep -c '^init ' || true)
echo "NVML initialisations: $inits for $steps steps x 2 nodes x 32 tasks per node (one per node per step: $((steps * 2)))"

strip -o "$work/stripped.so" "$so"
echo "release .so: $(stat -c %s "$so") bytes, stripped: $(stat -c %s "$work/stripped.so") bytes"
