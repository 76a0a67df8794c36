#!/usr/bin/env bash
# MPS launch benchmark on the local test cluster (one node, 4 fake GPUs),
# with Debian's real nvidia-cuda-mps-control (tests/nvidia/fetch.sh), as the
# harness's test user dgm-alice (the plugin never starts a daemon for
# root). Interleaves the variants at 8 and 32 tasks and prints medians and
# ratios measured in this one run. It asserts nothing.
#   contiguous  srun --desi-gpu-map=contiguous true
#   mps         srun --desi-gpu-map=contiguous,mps true: the plugin makes
#               the step's directories, starts the daemon, waits until it
#               answers, and stops it and removes them at the end
#   byhand      what batch scripts do: mkdir the pipe and log directories,
#               nvidia-cuda-mps-control -d, srun --desi-gpu-map=contiguous
#               true, echo quit | nvidia-cuda-mps-control, rm -r
#   execmps     srun desi-gpu-map exec --method contiguous,mps ... -- true,
#               in a step the plugin leaves alone (no --desi-gpu-map): the
#               node's first task starts a keeper that makes the directory
#               and the daemon, answers each task, and stops both after the
#               node's last task
#   prologmps   srun --task-prolog=desi-gpu-map --task-epilog=desi-gpu-map
#               true with DESI_GPU_MAP_METHOD=contiguous,mps, in a step the
#               plugin leaves alone: exec's keeper, started from the task
#               prolog, ended by the last task's epilog before the step ends
#   wrapper     srun bash benches/desi_mps_wrapper.sh true, a copy of
#               DESI's production desi_mps_wrapper (fixed /tmp/nvidia-mps,
#               local rank 0 starts the daemon, every task sleeps 1 s, rank 0
#               quits it after its own command)
# Without a GPU no MPS server starts (no CUDA client connects), so this
# measures what the plugin adds to a step's launch, not MPS itself.
# Usage: benches/mps.sh [ROUNDS]   (default 15 rounds)
set -euo pipefail
cd "$(dirname "$0")/.."
rounds=${1:-15}
. tests/cluster/session.sh
bash "$harness" up 4 >/dev/null
eval "$(bash "$harness" env)"
control=$DGM_CLUSTER_DIR/mps/bin/nvidia-cuda-mps-control
[ -x "$control" ] || { echo "$0: no $control: run tests/nvidia/fetch.sh first" >&2; exit 1; }
bash "$harness" plugin required "$so" "mps_control=$control" >/dev/null
nvml=$DGM_CLUSTER_DIR/nvml/libnvidia-ml.so.1
user=dgm-alice
# The wrapper's fixed directories: another user's would make it fail.
for d in /tmp/nvidia-mps /tmp/nvidia-log; do
    if [ -e "$d" ] && [ "$(stat -c %U "$d")" != "$user" ]; then
        echo "$0: $d exists and is not $user's: the wrapper variant needs it" >&2
        exit 1
    fi
done
work=$(runuser -u "$user" -- mktemp -d /tmp/dgm-mps-bench.XXXXXX)
results=$work/results
variants='contiguous mps execmps prologmps byhand wrapper'
cat >"$work/step.sh" <<'STEP'
# One timed step inside the allocation: VARIANT NTASKS -> milliseconds.
variant=$1 n=$2
t0=$(date +%s%N)
case $variant in
    contiguous) srun -n"$n" --overlap --desi-gpu-map=contiguous true ;;
    mps) srun -n"$n" --overlap --desi-gpu-map=contiguous,mps true ;;
    execmps)
        srun -n"$n" --overlap "$BIN" exec --method contiguous,mps \
            --mps-control "$CONTROL" --nvml "$NVML" -- true
        ;;
    prologmps)
        DESI_GPU_MAP_METHOD=contiguous,mps DESI_GPU_MAP_MPS_CONTROL="$CONTROL" \
            DESI_GPU_MAP_NVML="$NVML" srun -n"$n" --overlap --task-prolog="$BIN" \
            --task-epilog="$BIN" true
        ;;
    wrapper) srun -n"$n" --overlap bash "$WRAPPER" true ;;
    byhand)
        d=$(mktemp -d "$TMPDIR/mps.XXXXXX")
        mkdir -m 0700 "$d/pipe" "$d/log"
        CUDA_MPS_PIPE_DIRECTORY=$d/pipe CUDA_MPS_LOG_DIRECTORY=$d/log "$CONTROL" -d
        CUDA_MPS_PIPE_DIRECTORY=$d/pipe srun -n"$n" --overlap --desi-gpu-map=contiguous true
        echo quit | CUDA_MPS_PIPE_DIRECTORY=$d/pipe "$CONTROL" >/dev/null
        rm -rf "$d"
        ;;
esac
echo "$n $variant $((($(date +%s%N) - t0) / 1000000))"
STEP
chown "$user" "$work/step.sh"
runuser -u "$user" -- env SLURM_CONF="$SLURM_CONF" CONTROL="$control" NVML="$nvml" \
    BIN="$PWD/target/release/desi-gpu-map" WRAPPER="$PWD/benches/desi_mps_wrapper.sh" \
    TMPDIR=/tmp bash -c "
    cd /tmp
    salloc -N1 -n32 -w n1 --gpus-per-node=4 bash -c '
        for r in \$(seq $rounds); do
            for n in 8 32; do
                for v in $variants; do bash $work/step.sh \$v \$n; done
            done
        done' >$results 2>/dev/null"

median() { sort -n | awk '{a[NR]=$1} END {print (NR % 2) ? a[(NR+1)/2] : (a[NR/2]+a[NR/2+1])/2}'; }
ratio() { awk -v a="$1" -v b="$2" 'BEGIN {printf "%.3f", a / b}'; }
echo "launch time of one srun step under MPS, median of $rounds interleaved rounds (ms), 1 node, 4 GPUs"
row='%6s %11s %8s %8s %10s %8s %8s %15s %11s %12s %16s %18s\n'
printf "$row" tasks $variants mps/contiguous mps/byhand execmps/mps execmps/wrapper prologmps/wrapper
for n in 8 32; do
    declare -A med=()
    for v in $variants; do
        med[$v]=$(awk -v n="$n" -v v="$v" '$1 == n && $2 == v {print $3}' "$results" | median)
    done
    printf "$row" "$n" "${med[contiguous]}" "${med[mps]}" "${med[execmps]}" "${med[prologmps]}" \
        "${med[byhand]}" "${med[wrapper]}" "$(ratio "${med[mps]}" "${med[contiguous]}")" \
        "$(ratio "${med[mps]}" "${med[byhand]}")" "$(ratio "${med[execmps]}" "${med[mps]}")" \
        "$(ratio "${med[execmps]}" "${med[wrapper]}")" "$(ratio "${med[prologmps]}" "${med[wrapper]}")"
done
left=$(find /tmp -maxdepth 1 -name 'dgm-mps.*' -newer "$work/step.sh" | wc -l)
echo "MPS directories this run left under /tmp: $left"
# Not zombies: exited sruns may wait a moment for init to reap them.
echo "$user's processes left: $(ps -u "$user" -o stat= | grep -vc '^Z' || true)"
# The wrapper leaves its fixed directories behind, as in production.
runuser -u "$user" -- rm -rf /tmp/nvidia-mps /tmp/nvidia-log
rm -rf "$work"
