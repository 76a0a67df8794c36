#!/usr/bin/env bash
# DESI's tilenight job at DESI's shape, as desispec's own generator writes
# it, under each way of binding and serving its ranks: one node (n1, 4
# fake GPUs, 128 CPUs), 64 ranks, `srun -N 1 -n 64 -c 2 --cpu-bind=cores`,
# each rank the desi_proc_tilenight stand-in (tests/desi/desi_proc: real MPI
# ranks under Slurm's PMIx, desispec's real redistribute_gpu_ranks), the
# job submitted with sbatch as the test user dgm-alice, from the branch's
# batch_writer (tests/desi/scripts.sh: ../shared/thirdparty's snapshot,
# patches not applied: the GPU code a recipe runs changes no time). Each
# variant is that script with its srun line's `desi_mps_wrapper ` and the
# lines below, nothing else:
#   wrapper       as generated: every rank under desi_mps_wrapper (the
#                 stand-in in tests/desi, what production runs today)
#   exec          contrib/desispec/0002's recipe as first written:
#                 `desi-gpu-map exec --` in the wrapper's place, `export
#                 DESI_GPU_MAP_METHOD=contiguous,mps` before the srun (0002
#                 now writes it where a system sets `gpu_wrapper:
#                 desi-gpu-map`, exporting roundrobin,mps, desispec's own
#                 layout; the method moves ranks, not the cost)
#   prolog        the wrapper dropped; `export SLURM_TASK_PROLOG=$(command
#                 -v desi-gpu-map)` and the method exported
#   prolog+epilog the same and SLURM_TASK_EPILOG (0002 as first written)
#   plugin        exec's script on a node whose site installed the plugin
#                 (required, default=contiguous): the plugin takes the
#                 exported method as the job's request and exec stands aside
# The time is the batch script's own, from its login shell's start to its
# exit, in ms (an EXIT trap the bench adds to the user's profile: sbatch
# --wait polls in whole seconds), each variant once a round, in turn.
# After each job it counts what the job left: the user's processes, MPS
# directories under /tmp (the keeper's and the wrapper's), and how many
# ranks reached an MPS control daemon (the stand-in's rows).
# Prints medians and ratios to the wrapper, all from this one run. Asserts
# nothing. The epilog variant alone takes over a minute a round.
# Usage: benches/desi.sh [ROUNDS] [VARIANTS...]   (default 3 rounds, all)
# Needs: make build, tests/nvidia/fetch.sh, and what desispec's branch
# imports from PyPI, `tests/desi/fetch.sh branch` (or DGM_DESI_DEPS=DIR[:DIR...]
# holding desiutil, desitarget and desimodel), and from Debian (tests/deps.sh).
set -euo pipefail
cd "$(dirname "$0")/.."
rounds=${1:-3}
shift || true
variants=${*:-wrapper exec prolog prolog+epilog plugin}
deps=${DGM_DESI_DEPS:-$(bash tests/desi/fetch.sh branch)}
. tests/cluster/session.sh
bash "$harness" up 4 4 >/dev/null
eval "$(bash "$harness" env)"
control=$DGM_CLUSTER_DIR/mps/bin/nvidia-cuda-mps-control
[ -x "$control" ] || { echo "$0: no $control: run tests/nvidia/fetch.sh first" >&2; exit 1; }
user=dgm-alice
uid=$(id -u "$user")
for d in /tmp/nvidia-mps /tmp/nvidia-log; do
    if [ -e "$d" ] && [ "$(stat -c %U "$d")" != "$user" ]; then
        echo "$0: $d exists and is not $user's: the wrapper variant needs it" >&2
        exit 1
    fi
done
work=$(mktemp -u /tmp/dgm-desi-bench.XXXXXX)
trap 'rm -rf "$work" /tmp/nvidia-mps /tmp/nvidia-log; bash "$harness" down >/dev/null 2>&1 || true' EXIT
bash tests/desi/scripts.sh "$work" unpatched "$user" "$deps"
tilenight=$(head -1 "$work/scripts")
# The script's own time, from the profile (read first by bash -l) to exit.
cat >>"$work/home/.bash_profile" <<'TIMER'
dgm_t0=$(date +%s%N)
trap 'echo "$SLURM_JOB_ID $dgm_t0 $(date +%s%N)" >>"$HOME/times"' EXIT
TIMER
method='export DESI_GPU_MAP_METHOD=contiguous,mps'
prolog='export SLURM_TASK_PROLOG=$(command -v desi-gpu-map)'
variant_script() { # VARIANT -> path of its script
    local out=$work/$1.slurm
    case $1 in
        wrapper) cp "$tilenight" "$out" ;;
        exec | plugin)
            sed -e 's/ desi_mps_wrapper / desi-gpu-map exec -- /' -e "/^export MPICH_GPU_SUPPORT_ENABLED/a $method" \
                "$tilenight" >"$out" ;;
        prolog)
            sed -e 's/ desi_mps_wrapper / /' -e "/^export MPICH_GPU_SUPPORT_ENABLED/a $method\\n$prolog" "$tilenight" >"$out" ;;
        prolog+epilog)
            sed -e 's/ desi_mps_wrapper / /' \
                -e "/^export MPICH_GPU_SUPPORT_ENABLED/a $method\\n$prolog SLURM_TASK_EPILOG=\$(command -v desi-gpu-map)" \
                "$tilenight" >"$out" ;;
        *) echo "$0: unknown variant $1" >&2; exit 2 ;;
    esac
    chmod 0644 "$out"
    echo "$out"
}
leftovers() { # the user's processes, MPS directories and daemons now
    local procs dirs
    procs=$(ps -u "$uid" -o stat= | grep -vc '^Z' || true)
    dirs=$(find /tmp -maxdepth 1 -user "$uid" \( -name 'dgm-mps.*' -o -name nvidia-mps \) | wc -l)
    echo "procs=$procs dirs=$dirs"
}
results=$work/results
for r in $(seq "$rounds"); do
    for v in $variants; do
        case $v in
            plugin) bash "$harness" plugin required "$so" default=contiguous "mps_control=$control" >/dev/null ;;
            *) bash "$harness" plugin off >/dev/null ;;
        esac
        script=$(variant_script "$v")
        id=$(cd /tmp && runuser -u "$user" -- env -u SLURM_JOB_ID HOME="$work/home" SLURM_CONF="$SLURM_CONF" \
            sbatch --parsable "$script")
        # Polled here: sbatch --wait polls in whole seconds, growing.
        while [ -n "$(squeue -h -j "$id" -o %t 2>/dev/null)" ]; do sleep 0.2; done
        log=${tilenight%.slurm}-$id.log
        grep -q '^SUCCESS' "$log" || { echo "$0: $v: job $id failed:" >&2; cat "$log" >&2; exit 1; }
        # The wrapper's fixed directories are left as in production: not counted as the job's.
        sleep 1
        left=$(leftovers)
        runuser -u "$user" -- rm -rf /tmp/nvidia-mps /tmp/nvidia-log
        ms=$(awk -v id="$id" '$1 == id {print int(($3 - $2) / 1000000)}' "$work/home/times")
        # The ranks that reached an MPS daemon, from the job's log.
        served=$(grep -c '^T .* reached ' "$log" || true)
        echo "$v $ms $left served=$served" | tee -a "$results" >&2
    done
done

median() { sort -n | awk '{a[NR]=$1} END {print (NR % 2) ? a[(NR+1)/2] : (a[NR/2]+a[NR/2+1])/2}'; }
ratio() { awk -v a="$1" -v b="$2" 'BEGIN {printf "%.2f", a / b}'; }
base=$(awk '$1 == "wrapper" {print $2}' "$results" | median)
echo "DESI's tilenight job (desispec's branch batch_writer, perlmutter-gpu): 64 ranks, -c 2, 1 node, 4 GPUs; the batch script's wall time, median of $rounds rounds (ms)"
printf '%-14s %9s %11s %s\n' variant median /wrapper 'after each job: processes and MPS directories of the user left; ranks that reached a daemon'
for v in $variants; do
    med=$(awk -v v="$v" '$1 == v {print $2}' "$results" | median)
    left=$(awk -v v="$v" '$1 == v {print $3, $4, $5}' "$results" | sort | uniq -c | awk '{printf "%s%s x%s", (NR > 1 ? ", " : ""), $2" "$3" "$4, $1}')
    printf '%-14s %9s %11s %s\n' "$v" "$med" "$(ratio "$med" "$base")" "$left"
done
