#!/usr/bin/env bash
# The README's first command: a 2-node throw-away Slurm cluster with 4 fake
# GPUs per node, srun -N2 -n8 with each method, and the map each produced.
set -euo pipefail
cd "$(dirname "$0")/.."
. tests/cluster/session.sh
echo "== bringing up nodes n1, n2 (4 fake GPUs each) on 127.0.0.1"
bash "$harness" up 4 4
bash "$harness" plugin required "$so"
eval "$(bash "$harness" env)"
probe='echo "$SLURM_PROCID $(hostname) $SLURM_LOCALID $CUDA_VISIBLE_DEVICES ${DESI_GPU_MAPPED-unset}"'
# -n8 puts 4 tasks on each node's 4 GPUs; -n12 (6 per node) shows the methods
# differ; -n4 (2 per node) shows each task holding its share of the node's GPUs.
for ntasks in 8 12 4; do for method in contiguous roundrobin; do
    echo
    echo "== srun -N2 -n$ntasks --ntasks-per-node=$((ntasks / 2)) --gpus-per-node=4 --desi-gpu-map=$method"
    printf '%5s %5s %6s %8s %16s\n' rank node local gpu DESI_GPU_MAPPED
    srun -N2 -n"$ntasks" --ntasks-per-node=$((ntasks / 2)) --gpus-per-node=4 --desi-gpu-map="$method" bash -c "$probe" |
        sort -n | while read -r rank node local gpu flag; do
            printf '%5s %5s %6s %8s %16s\n' "$rank" "$node" "$local" "$gpu" "$flag"
        done
done; done
control=$DGM_CLUSTER_DIR/mps/bin/nvidia-cuda-mps-control
if [ -x "$control" ]; then
    echo
    echo "== MPS, as user dgm-alice: srun -n8 -w n1 --gpus-per-node=4 --desi-gpu-map=contiguous,mps"
    echo "   (Debian's real nvidia-cuda-mps-control; each task asks its step's daemon through its pipe)"
    bash "$harness" plugin required "$so" "mps_control=$control" mps_share=even
    printf '%5s %14s %6s %10s %s\n' rank gpu share answer pipe
    mps_probe='a=; for i in $(seq 50); do a=$(echo get_default_active_thread_percentage | '"$control"' 2>/dev/null) && [ -n "$a" ] && break; sleep 0.05; done
echo "$SLURM_PROCID $CUDA_VISIBLE_DEVICES $CUDA_MPS_ACTIVE_THREAD_PERCENTAGE $a $CUDA_MPS_PIPE_DIRECTORY"'
    (cd /tmp && runuser -u dgm-alice -- env SLURM_CONF="$SLURM_CONF" srun -n8 -w n1 --gpus-per-node=4 \
        --desi-gpu-map=contiguous,mps bash -c "$mps_probe") | sort -n | while read -r rank gpu share answer pipe; do
        printf '%5s %14s %6s %10s %s\n' "$rank" "$gpu" "$share" "$answer" "$pipe"
    done
    echo "   MPS directories left after the step: $(find /tmp -maxdepth 1 -name 'dgm-mps.*' | wc -l)"
fi
echo
echo "== a layout previewed without Slurm with: desi-gpu-map plan -N 2 -n 12 --method contiguous"
target/release/desi-gpu-map plan -N 2 -n 12 --method contiguous
echo
echo "== closest on a Perlmutter node (NUMA domain i wired to GPU 3-i): desi-gpu-map plan -n 8 --method closest --topology perlmutter"
target/release/desi-gpu-map plan -n 8 --method closest --topology perlmutter
echo
echo "== tearing the cluster down"
