#!/usr/bin/env bash
# The Flux shell plugin beside Flux's own gpu-affinity=per-task, on the
# same jobs, and what the plugin costs per task. Starts one standalone
# `flux start --test-size=2` with four fake GPUs a broker (Flux from
# tests/flux/build.sh), prints each job's lists (task by task, in rank
# order) under both, then times ROUNDS interleaved rounds of a 64-task job
# without the plugin and with it, and prints the medians and their ratio,
# measured in this one run. It asserts nothing (docs/flux.md).
# Usage: benches/flux.sh [ROUNDS]   (default 5)
set -euo pipefail
cd "$(dirname "$0")/.."
rounds=${1:-5}
cargo build --release --locked --quiet -p desi-gpu-map-flux
so=$PWD/${CARGO_TARGET_DIR:-target}/release/libdesi_gpu_map_flux.so
prefix=$(bash tests/flux/build.sh)
dir=$(mktemp -d)
trap 'rm -rf "$dir"' EXIT
host=$(hostname)
"$prefix/bin/flux" R encode -r 0-1 -c 0-63 -g 0-3 -H "$host,$host" >"$dir/R.json"
mkdir "$dir/conf"
printf '[resource]\npath = "%s/R.json"\nnoverify = true\n' "$dir" >"$dir/conf/resource.toml"
echo "plugin.load { file = \"$so\" }" >"$dir/userrc.lua"
cat >"$dir/inner.sh" <<INNER
set -eu
lists() { flux run "\$@" -o cpu-affinity=off sh -c 'echo "\$FLUX_TASK_RANK \${CUDA_VISIBLE_DEVICES-unset}"' 2>/dev/null |
    sort -n | awk '{print (\$2 == "" ? "(empty)" : \$2)}' | paste -sd' '; }
echo "| job | gpu-affinity=per-task | desi-gpu-map=contiguous | desi-gpu-map=roundrobin |"
echo "|---|---|---|---|"
for shape in "-N1 --tasks-per-node=3 --gpus-per-node=4" "-N1 --tasks-per-node=4 --gpus-per-node=4" \
    "-N1 --tasks-per-node=6 --gpus-per-node=4" "-N1 --tasks-per-node=8 --gpus-per-node=4" \
    "-N1 --tasks-per-node=1 --gpus-per-node=4" "-N2 -n5 --exclusive"; do
    flux_lists=\$(lists \$shape -o gpu-affinity=per-task)
    contiguous=\$(lists \$shape -o userrc=$dir/userrc.lua -o desi-gpu-map=contiguous)
    roundrobin=\$(lists \$shape -o userrc=$dir/userrc.lua -o desi-gpu-map=roundrobin)
    echo "| \\\`\$shape\\\` | \$flux_lists | \$contiguous | \$roundrobin |"
done
shape="-N1 --tasks-per-node=64 --gpus-per-node=4 -o cpu-affinity=off"
for r in \$(seq $rounds); do
    t0=\$(date +%s%N); flux run \$shape true; t1=\$(date +%s%N)
    flux run \$shape -o userrc=$dir/userrc.lua -o desi-gpu-map=contiguous true; t2=\$(date +%s%N)
    echo "TIME \$(((t1 - t0) / 1000)) \$(((t2 - t1) / 1000))"
done
INNER
out=$("$prefix/bin/flux" start --test-size=2 --config-path="$dir/conf" bash "$dir/inner.sh")
grep -v '^TIME' <<<"$out"
median() { sort -n | awk '{a[NR]=$1} END {print (NR % 2) ? a[(NR+1)/2] : (a[NR/2]+a[NR/2+1])/2}'; }
plain=$(awk '/^TIME/ {print $2}' <<<"$out" | median)
mapped=$(awk '/^TIME/ {print $3}' <<<"$out" | median)
echo
echo "flux run, 64 tasks on 4 GPUs, median of $rounds interleaved rounds: $((plain / 1000)) ms without the plugin, $((mapped / 1000)) ms with it"
awk -v p="$plain" -v m="$mapped" 'BEGIN {printf "ratio %.2f; %.0f us a task more\n", m / p, (m - p) / 64}'
