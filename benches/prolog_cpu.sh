#!/usr/bin/env bash
# The task prolog's own CPU time, outside Slurm and without a cluster:
# /bin/true, desi-gpu-map-prolog (the static build) and desi-gpu-map (the
# dynamic one) each as a task prolog, and each OTHER build given (a build
# before a change, say), run ROUNDS times interleaved by a parent named
# slurmstepd (benches/prolog_cpu.c) with a task's variables (64 tasks on 2
# nodes of 4 GPUs, contiguous; no NVML is needed); then `exec --method
# contiguous -- /bin/true` of each of the two builds and each OTHER, which
# costs a task what it adds to /bin/true's line. Prints each one's median
# wall and CPU time and its minor faults, all from this one run. Asserts
# nothing. Usage: benches/prolog_cpu.sh [ROUNDS [OTHER...]]   (default 400)
set -euo pipefail
cd "$(dirname "$0")/.."
rounds=${1:-400}
[ -x target/release/desi-gpu-map-prolog ] || { echo "$0: build first (make build)" >&2; exit 1; }
work=$(mktemp -d)
trap 'rm -rf "$work"' EXIT
# Each build runs from a copy, as a package's install writes it: a file the
# linker has just written sits in the page cache in small pieces, and each
# start of it takes more page faults than a copy's (81 against 74 per start
# of the same prolog, about 30 us).
cp target/release/desi-gpu-map target/release/desi-gpu-map-prolog "$work/"
bin=$work/desi-gpu-map
prolog=$work/desi-gpu-map-prolog
cc -O2 -Wall -Wextra -o "$work/slurmstepd" benches/prolog_cpu.c
others=()
exec='exec --method contiguous -- /bin/true'
for i in $(seq 2 $#); do
    mkdir "$work/other$((i - 1))"
    cp "${!i}" "$work/other$((i - 1))/"
    others+=("$work/other$((i - 1))/$(basename "${!i}")")
done
echo "load average $(cut -d' ' -f1-3 /proc/loadavg); $rounds rounds"
env -i PATH=/usr/bin:/bin HOME=/ SLURM_SCRIPT_CONTEXT=prolog_task \
    SLURM_JOB_ID=12 SLURM_STEP_ID=0 SLURM_NODEID=0 SLURMD_NODENAME=n1 \
    SLURM_LOCALID=3 SLURM_PROCID=3 SLURM_NTASKS=64 SLURM_NNODES=2 \
    SLURM_STEP_NUM_TASKS=64 SLURM_STEP_NUM_NODES=2 SLURM_STEP_NODELIST='n[1-2]' \
    SLURM_STEP_TASKS_PER_NODE='32(x2)' SLURM_TASKS_PER_NODE='32(x2)' \
    SLURM_STEP_GPUS=0,1,2,3 SLURM_JOB_GPUS=0,1,2,3 SLURM_GPUS_ON_NODE=4 \
    CUDA_VISIBLE_DEVICES=0,1,2,3 GPU_DEVICE_ORDINAL=0,1,2,3 \
    DESI_GPU_MAP_METHOD=contiguous \
    "$work/slurmstepd" "$rounds" /bin/true "$prolog" "$bin" "${others[@]}" \
    "$prolog $exec" "$bin $exec" "${others[@]/%/ $exec}"
