#!/usr/bin/env bash
# The task prolog's and exec's own cost, in one cluster and one run (2 nodes,
# 4 fake GPUs each): one srun step of 32 and of 64 tasks, the variants
# interleaved ROUNDS times:
#   true    no plugin; /bin/true as the task prolog
#   prolog  no plugin; desi-gpu-map-prolog (the static build) as the task
#           prolog (DESI_GPU_MAP_METHOD=contiguous)
#   plugin  the plugin (--desi-gpu-map=contiguous), no prolog
#   exec    no plugin; each task started as desi-gpu-map exec --method contiguous -- true,
#           desi-gpu-map as make install installs it (the static build)
# and, for each OTHER build of desi-gpu-map given (a build before a change,
# say), that binary as the prolog and as exec beside them. Prints the medians
# (ms) and the ratios prolog/true and exec/plugin, both of the medians and
# the median of each round's own (paired), all from this one run. Then where one
# prolog's time goes: `strace -f -c` of desi-gpu-map-prolog as the prolog of
# a one-task step (its system calls, counted), the files it opens and the
# programs it runs, the dynamic loader's statistics for desi-gpu-map and
# /bin/true (LD_DEBUG=statistics; the static build has no loader), and its
# own wall and CPU time (GNU time's format through bash's TIMEFORMAT)
# beside /bin/true's. Asserts nothing.
# Usage: benches/desi_prolog.sh [ROUNDS [OTHER...]]   (default 15 rounds)
set -euo pipefail
cd "$(dirname "$0")/.."
rounds=${1:-15}
others=("${@:2}")
. tests/cluster/session.sh
bash "$harness" up 4 4 >/dev/null
eval "$(bash "$harness" env)"
bash "$harness" plugin off >/dev/null
work=$DGM_CLUSTER_DIR/bench
mkdir -p "$work"
[ -x target/release/desi-gpu-map-prolog ] || { echo "$0: build first (make build)" >&2; exit 1; }
# Every build runs from a copy, as a package's install writes it: a file
# the linker has just written sits in the page cache in small pieces, and
# each start of it takes more page faults than a copy's (81 against 74 per
# start of the same prolog, about 30 us, benches/prolog_cpu.sh).
mkdir -p "$work/this"
cp target/release/desi-gpu-map target/release/desi-gpu-map-prolog "$work/this/"
bin=$work/this/desi-gpu-map
prolog=$work/this/desi-gpu-map-prolog
# exec runs as installed: the static build (make install's desi-gpu-map).
export DESI_GPU_MAP_METHOD=contiguous DESI_GPU_MAP_NVML=$DGM_CLUSTER_DIR/nvml/libnvidia-ml.so.1
# Each build's name in the table, its prolog and its exec: this one, then
# the others.
names=(this) prologs=("$prolog") execs=("$prolog")
for i in "${!others[@]}"; do
    names+=("other$((i + 1))")
    mkdir -p "$work/other$((i + 1))"
    cp "${others[$i]}" "$work/other$((i + 1))/desi-gpu-map"
    prologs+=("$work/other$((i + 1))/desi-gpu-map")
    execs+=("$work/other$((i + 1))/desi-gpu-map")
done
variants=(true plugin)
for i in "${!names[@]}"; do variants+=("prolog:$i" "exec:$i"); done
step() { # VARIANT NTASKS -> milliseconds
    local args=(-N2 -n"$2" --ntasks-per-node=$(($2 / 2)) --overlap) t0 p
    case $1 in
        true) args+=(--task-prolog=/bin/true) ;;
        plugin) bash "$harness" plugin required "$so" >/dev/null; args+=(--desi-gpu-map=contiguous) ;;
        prolog:*) p=${1#prolog:}; args+=(--task-prolog="${prologs[$p]}") ;;
        exec:*) p=${1#exec:}; args+=("${execs[$p]}" exec --method contiguous --) ;;
    esac
    t0=$(date +%s%N)
    srun "${args[@]}" true
    echo $((($(date +%s%N) - t0) / 1000000))
    [ "$1" != plugin ] || bash "$harness" plugin off >/dev/null
}
results=$work/results
: >"$results"
# The allocation's shell runs the rounds; it gets the functions and arrays
# as text.
salloc -N2 --ntasks-per-node=32 -w 'n[1-2]' --gpus-per-node=4 bash -c "
    $(declare -f step)
    $(declare -p harness so prologs execs variants)
    for r in \$(seq $rounds); do
        for n in 32 64; do
            for v in \"\${variants[@]}\"; do
                echo \"\$n \$v \$(step \$v \$n) \$r\" >>'$results'
            done
        done
    done" 2>/dev/null

median() { sort -n | awk '{a[NR]=$1} END {print (NR % 2) ? a[(NR+1)/2] : (a[NR/2]+a[NR/2+1])/2}'; }
ratio() { awk -v a="$1" -v b="$2" 'BEGIN {printf "%.3f", a / b}'; }
med() { awk -v n="$1" -v v="$2" '$1 == n && $2 == v {print $3}' "$results" | median; }
# The median over rounds of A's step over B's in the same round: steps a
# few seconds apart share the machine's load, which moves whole rounds.
paired() {
    awk -v n="$1" -v a="$2" -v b="$3" '$1 == n && $2 == a {x[$4] = $3} $1 == n && $2 == b {y[$4] = $3}
        END {for (r in x) if (r in y && y[r] > 0) print x[r] / y[r]}' "$results" | median |
        awk '{printf "%.3f", $1}'
}
echo "one srun step, median of $rounds interleaved rounds (ms), 2 nodes, 4 GPUs each; load average $(cut -d' ' -f1-3 /proc/loadavg)"
for i in "${!names[@]}"; do
    echo "  ${names[$i]}: prolog ${prologs[$i]} ($(stat -c %s "${prologs[$i]}") bytes), exec ${execs[$i]}"
done
echo "ratios: of the medians, then (paired) the median of each round's own ratio"
printf '%-8s %5s %11s %7s %7s %7s %12s %12s %12s %12s\n' build tasks true-prolog prolog plugin exec \
    prolog/true exec/plugin paired:p/t paired:e/pl
for i in "${!names[@]}"; do
    for n in 32 64; do
        t=$(med "$n" true) pl=$(med "$n" plugin) p=$(med "$n" "prolog:$i") e=$(med "$n" "exec:$i")
        printf '%-8s %5s %11s %7s %7s %7s %12s %12s %12s %12s\n' "${names[$i]}" "$n" "$t" "$p" "$pl" "$e" \
            "$(ratio "$p" "$t")" "$(ratio "$e" "$pl")" \
            "$(paired "$n" "prolog:$i" true)" "$(paired "$n" "exec:$i" plugin)"
    done
done

# One prolog, traced: a prolog that runs desi-gpu-map-prolog under strace (its
# output, what slurmstepd reads, passes through), and one that times it.
cat >"$work/traced" <<TRACED
#!/bin/bash
exec strace -f -qq -o $work/calls -e trace=openat,open,execve,clone,clone3,fork,vfork,connect $prolog
TRACED
cat >"$work/counted" <<COUNTED
#!/bin/bash
exec strace -f -c -o $work/counts $prolog
COUNTED
cat >"$work/timed" <<TIMED
#!/bin/bash
TIMEFORMAT="\$1 wall %3R s, user %3U s, sys %3S s"
{ time $prolog >$work/out; } 2>>$work/times
cat $work/out
{ time /bin/true; } 2>>$work/times
TIMED
cat >"$work/loader" <<LOADER
#!/bin/bash
LD_DEBUG=statistics LD_DEBUG_OUTPUT=$work/ld-command $bin >/dev/null
LD_DEBUG=statistics LD_DEBUG_OUTPUT=$work/ld-true /bin/true
exec $prolog
LOADER
chmod +x "$work/traced" "$work/counted" "$work/timed" "$work/loader"
srun -N1 -n1 -w n1 --gpus-per-node=4 --task-prolog="$work/traced" true
srun -N1 -n1 -w n1 --gpus-per-node=4 --task-prolog="$work/counted" true
rm -f "$work"/ld-command.* "$work"/ld-true.*
srun -N1 -n1 -w n1 --gpus-per-node=4 --task-prolog="$work/loader" true
: >"$work/times"
for i in $(seq 20); do srun -N1 -n1 -w n1 --gpus-per-node=4 --task-prolog="$work/timed" true; done
echo
echo "one desi-gpu-map-prolog prolog (1 task of 4 GPUs on n1), strace -f -c:"
head -n 25 "$work/counts"
echo
echo "files it opens (strace -e openat), in order:"
grep -E 'open' "$work/calls" | grep -v ENOENT | sed -E 's/^[0-9]+ +//; s/, O_.*//' | sort | uniq -c | sort -rn | head -n 30
echo "opens that failed (ENOENT): $(grep -c ENOENT "$work/calls" || true)"
echo "programs it runs (execve) and processes it makes (clone/fork):"
grep -E 'execve|clone|fork' "$work/calls" | sed -E 's/^[0-9]+ +//' | cut -c1-150
echo
for f in command true; do
    echo "the dynamic loader for $([ $f = command ] && echo desi-gpu-map || echo /bin/true) in a task (LD_DEBUG=statistics):"
    sed -E 's/^ *[0-9]+: *//' "$work"/ld-$f.* | grep -E 'total startup|relocations|load objects' | sed 's/^/  /'
done
echo
echo "its own time as the prolog of 20 one-task steps, medians (s):"
awk 'NR % 2 == 1 {w1[++n] = $2; u1[n] = $5; s1[n] = $8} NR % 2 == 0 {w2[n] = $2; u2[n] = $5; s2[n] = $8}
     END {for (i = 1; i <= n; i++) print w1[i], u1[i], s1[i], w2[i], u2[i], s2[i]}' "$work/times" >"$work/pairs"
for col in 1 2 3 4 5 6; do echo "$(cut -d' ' -f$col "$work/pairs" | median)"; done | paste -sd' ' |
    awk '{printf "  desi-gpu-map-prolog: wall %s, user %s, sys %s; /bin/true: wall %s, user %s, sys %s\n", $1, $2, $3, $4, $5, $6}'
