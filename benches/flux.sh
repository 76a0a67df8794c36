#!/usr/bin/env bash
# The Flux shell plugin beside Flux's own gpu-affinity=per-task, on the
# same jobs, and what each costs. Starts one standalone
# `flux start --test-size=2` with 256 cores and four fake GPUs a broker
# (Flux from tests/flux/build.sh), prints each job's lists (task by task,
# in rank order) under both, then times `flux run` of 8, 64 and 256 tasks
# on one node three ways, interleaved (every size and way once a round,
# the ways' order turned each round): mapped by the plugin
# (-o desi-gpu-map=contiguous), bound by Flux's own gpu-affinity=per-task,
# and with neither (gpu-affinity=off, the plugin not loaded). It prints the
# median times and the median of each round's ratios, measured in this one
# run, and asserts nothing (docs/performance.md).
# Usage: benches/flux.sh [ROUNDS]   (default 15)
set -euo pipefail
cd "$(dirname "$0")/.."
rounds=${1:-15}
cargo build --release --locked --quiet -p desi-gpu-map-flux
target_dir=${CARGO_TARGET_DIR:-target}
[[ $target_dir = /* ]] || target_dir=$PWD/$target_dir
so=$target_dir/release/libdesi_gpu_map_flux.so
prefix=$(bash tests/flux/build.sh)
dir=$(mktemp -d)
trap 'rm -rf "$dir"' EXIT
host=$(hostname)
"$prefix/bin/flux" R encode -r 0-1 -c 0-255 -g 0-3 -H "$host,$host" >"$dir/R.json"
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
# One job: its wall time in microseconds, from submission to exit; a
# failed job ends the bench.
timed() {
    local t0 t1
    t0=\$(date +%s%N)
    flux run "\$@" true >&2 || return 1
    t1=\$(date +%s%N)
    echo \$(((t1 - t0) / 1000))
}
ways=(plugin flux neither)
for r in \$(seq $rounds); do
    for n in 8 64 256; do
        shape="-N1 --tasks-per-node=\$n --gpus-per-node=4 -o cpu-affinity=off"
        for i in 0 1 2; do
            way=\${ways[(i + r) % 3]}
            case \$way in
            plugin) us=\$(timed \$shape -o userrc=$dir/userrc.lua -o desi-gpu-map=contiguous) ;;
            flux) us=\$(timed \$shape -o gpu-affinity=per-task) ;;
            neither) us=\$(timed \$shape -o gpu-affinity=off) ;;
            esac || { echo "bench: a \$way job of \$n tasks failed" >&2; exit 1; }
            echo "TIME \$n \$way \$us"
        done
    done
done
INNER
out=$("$prefix/bin/flux" start --test-size=2 --config-path="$dir/conf" bash "$dir/inner.sh")
grep -v '^TIME' <<<"$out"
median() { sort -n | awk '{a[NR]=$1} END {print (NR % 2) ? a[(NR+1)/2] : (a[NR/2]+a[NR/2+1])/2}'; }
# Each round's three times of one size, on one line: plugin, per-task, neither.
rounds_of() {
    awk -v n="$1" '$1 == "TIME" && $2 == n {t[$3] = $4; k++} k == 3 {print t["plugin"], t["flux"], t["neither"]; k = 0}' <<<"$out"
}
echo
echo "flux run on one node with 4 GPUs, $rounds interleaved rounds: median times (ms), and the"
echo "median of each round's ratio (the three ways of a round ran back to back):"
echo "| tasks | plugin | gpu-affinity=per-task | neither | plugin / per-task | plugin / neither | per-task / neither |"
echo "|---:|---:|---:|---:|---:|---:|---:|"
for n in 8 64 256; do
    r=$(rounds_of "$n")
    printf '| %d | %.0f | %.0f | %.0f | %.3f | %.3f | %.3f |\n' "$n" \
        "$(awk '{print $1 / 1000}' <<<"$r" | median)" \
        "$(awk '{print $2 / 1000}' <<<"$r" | median)" \
        "$(awk '{print $3 / 1000}' <<<"$r" | median)" \
        "$(awk '{print $1 / $2}' <<<"$r" | median)" \
        "$(awk '{print $1 / $3}' <<<"$r" | median)" \
        "$(awk '{print $2 / $3}' <<<"$r" | median)"
done
