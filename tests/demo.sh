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
# -n8 puts 4 tasks on each node's 4 GPUs; -n12 (6 per node) shows the methods differ.
for ntasks in 8 12; do for method in contiguous roundrobin; do
    echo
    echo "== srun -N2 -n$ntasks --ntasks-per-node=$((ntasks / 2)) --gpus-per-node=4 --desi-gpu-map=$method"
    printf '%5s %5s %6s %5s %16s\n' rank node local gpu DESI_GPU_MAPPED
    srun -N2 -n"$ntasks" --ntasks-per-node=$((ntasks / 2)) --gpus-per-node=4 --desi-gpu-map="$method" bash -c "$probe" |
        sort -n | while read -r rank node local gpu flag; do
            printf '%5s %5s %6s %5s %16s\n' "$rank" "$node" "$local" "$gpu" "$flag"
        done
done; done
echo
echo "== a layout previewed without Slurm with: desi-gpu-map plan -N 2 -n 12 --method contiguous"
target/release/desi-gpu-map plan -N 2 -n 12 --method contiguous
echo
echo "== closest on a Perlmutter node (NUMA domain i wired to GPU 3-i): desi-gpu-map plan -n 8 --method closest --topology perlmutter"
target/release/desi-gpu-map plan -n 8 --method closest --topology perlmutter
echo
echo "== tearing the cluster down"
