#!/usr/bin/env bash
# closest's cost without a cluster, in the preview and in the plugin's
# per-task path. Times `desi-gpu-map plan -n N --method closest --topology
# perlmutter` (one node, its tasks bound to equal blocks of its 64 cores,
# one core each past 64 tasks) at each N, interleaving the sizes for ROUNDS
# rounds, and prints medians and the ratio of each size's time to the
# previous one's, measured in this one run: a linear preview takes about 4
# times as long for 4 times the tasks, a quadratic one 16. Then
# benches/closest.rs: the plugin's per-task decision (each task alone,
# in task_init) for 256 tasks on a node. It asserts nothing.
# Usage: benches/plan.sh [ROUNDS] [N...]   (default 5 rounds of 1000 4000 16000)
set -euo pipefail
cd "$(dirname "$0")/.."
rounds=${1:-5}
shift || true
sizes=${*:-1000 4000 16000}
cargo build --release --locked --quiet
bin=${CARGO_TARGET_DIR:-target}/release/desi-gpu-map
results=$(mktemp)
trap 'rm -f "$results"' EXIT
for _ in $(seq "$rounds"); do
    for n in $sizes; do
        t0=$(date +%s%N)
        "$bin" plan -n "$n" --method closest --topology perlmutter >/dev/null
        echo "$n $((($(date +%s%N) - t0) / 1000000))" >>"$results"
    done
done

median() { sort -n | awk '{a[NR]=$1} END {print (NR % 2) ? a[(NR+1)/2] : (a[NR/2]+a[NR/2+1])/2}'; }
echo "plan --method closest --topology perlmutter, one node, median of $rounds interleaved rounds (ms)"
printf '%8s %10s %16s\n' tasks ms 'ms/previous ms'
prev=
for n in $sizes; do
    ms=$(awk -v n="$n" '$1 == n {print $2}' "$results" | median)
    ratio=$([ -n "$prev" ] && awk -v a="$ms" -v b="$prev" 'BEGIN {printf "%.2f", a / (b > 0 ? b : 1)}' || echo -)
    printf '%8s %10s %16s\n' "$n" "$ms" "$ratio"
    prev=$ms
done
cargo bench --locked --quiet --bench closest -- 200 256
