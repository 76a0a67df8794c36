#!/usr/bin/env bash
# Runs the integration suite against every Slurm release series in SERIES
# (default: every series in tests/cluster/series; commas or spaces), each with Debian's own
# packages: 22.05 is the host's (bookworm), 24.11 trixie's and 26.05 sid's,
# each in a cached root made by tests/cluster/slurm-root.sh.
# The suites are the modules of one test binary, `cluster`
# (tests/cluster/main.rs); `suite NAME FILTER...` runs the tests that the
# filters select (`-- mps::`), each suite in a process of its own, as when
# each was a binary.
# For each series: the plugin and the .deb built against that series'
# headers, then three clusters in turn, each torn down after its tests:
# - n1, n2 with 4 fake GPUs, n3 with 2, n4 with 2 that Slurm names by count
#   only: the installed .deb smoke (tests/package/deb-smoke.sh) and the
#   suites by subject (SUITES below), closest's task_none_ tests, and on
#   22.05 only HOST_SUITES: desi (DESI's desispec in real MPI ranks:
#   Debian's python3-mpi4py; and the batch scripts desispec's branch
#   writes, 64 ranks a job, 10 jobs: the suite took 195 s on a loaded
#   2-core machine), mpi (exec under mpirun and mpiexec in an
#   allocation: openmpi-bin, mpich), podman (NERSC's podman-hpc over
#   Debian's podman: tests/containers/podman-hpc.sh) and flux (Flux built
#   from its source on the host, tests/flux/build.sh, started by srun
#   under the plugin, its jobs mapped by the Flux plugin), which the 24.11
#   and 26.05 roots lack; there, of desi, EVERY_SERIES only (desi_proc's
#   own GPU extraction in the 64 ranks of a tilenight job, 4 jobs: Open MPI
#   under mpi/pmix on 24.11, MPICH under mpi/pmi2 on 26.05, whose Debian
#   Slurm has no mpi/pmix; the roots' Python, tests/cluster/slurm-root.sh);
# - n1 with 4 GPUs and n2 with 2 named by count, task/affinity and the
#   host's real CPU count (DGM_TASK_AFFINITY=1): the rest of closest;
# - the first cluster's nodes as production GPU sites run Slurm
#   (DGM_PRODUCTION=1: proctrack/cgroup, task/cgroup with ConstrainDevices,
#   AutoDetect=nvml from 24.11, Flags=env_uuid from 26.05):
#   production, mps and hidepid again.
# Prints one summary line per series;
# each series' full output is in target/cluster-tests/SERIES.log, and a
# failing one's is shown.
# Fails, never skips, when a cluster cannot start or any series fails.
# DGM_CLUSTER_LOCK=FILE: hold flock(FILE) over each up..down span only.
set -euo pipefail
cd "$(dirname "$0")/.."
harness=tests/cluster/cluster.sh
# The suites by subject (modules of tests/cluster/main.rs) that run on the
# first cluster, in this order.
SUITES=(methods sources input vendors exec prolog faults mps hidepid pyxis)
# The series whose first cluster also runs HOST_SUITES (the host's).
DESI_SERIES=22.05
HOST_SUITES=(desi mpi podman flux)
# The tests of HOST_SUITES that every other series' first cluster runs too,
# each named in full (`--exact`); the summary counts them under their suite.
EVERY_SERIES=(desi::desi_procs_gpu_extraction_keeps_22_ranks_on_every_gpu_of_the_node)
# Every module of the cluster binary runs on some cluster: these, closest
# (on the first two) and production (on the third).
MODULES=("${SUITES[@]}" "${HOST_SUITES[@]}" closest production)
# The mps tests that the production cluster does not run again: what they
# check happens before any task starts or in the client (refusals, a site's
# broken daemon, deadlines, shares, the base's checks), where tracking and
# device constraint change nothing. Every end of a step, every leftover and
# every GPU naming runs in both modes; for leftover processes the first
# cluster's proctrack/linuxproc is the stricter, since cgroup tracking kills
# what a step leaves. Each is named by its file in tests/cluster/mps/
# (`--skip mps::edges::...`).
# The mps test that the first cluster leaves to the production one: a time
# limit ends a job through slurmd's terminate path as scancel does
# (teardown_after_scancel runs on both), and only under cgroup tracking
# does the kill that follows race the keeper; it waits 60 to 90 s for
# slurmctld's periodic check, so it runs once a series.
PLAIN_MPS_SKIP=(daemon::teardown_after_the_time_limit)
PRODUCTION_MPS_SKIP=(
    edges::bad_combinations_and_a_site_without_mps_are_refused_before_allocation
    edges::a_missing_control_binary_runs_the_step_without_mps
    edges::a_control_daemon_with_no_server_to_start_runs_the_step_without_mps
    edges::a_daemon_that_never_answers_is_bounded_by_the_deadline
    edges::a_stand_in_that_hangs_leaves_no_process_behind
    edges::a_stand_in_that_answers_garbage_is_quoted
    edges::a_base_others_can_write_without_the_sticky_bit_is_refused
    edges::a_planted_directory_neither_denies_mps_nor_receives_the_users_files
    edges::more_than_48_clients_per_gpu_run_without_mps
    edges::sbatch_and_the_environment_form_ask_for_mps_too
    edges::the_daemon_execs_its_server_from_where_the_package_put_it
    edges::without_nvml_uuids_no_daemon_starts_and_nvmls_error_is_said
    edges::a_stale_mps_flag_never_reaches_a_mapped_task
    daemon::mps_share_even_gives_each_task_its_share_of_its_gpu
    keeper::exec_gives_the_plugins_shares_and_says_why_it_runs_without_mps_once
    edges::show_reports_the_mps_daemon_serving_the_task
)
logs=target/cluster-tests

# series -> Debian suite ("host": the machine's own Slurm), from the table
# in tests/cluster/series, which the Makefile reads too.
series_table=tests/cluster/series
known_series() { awk '!/^#/ && NF {print $1}' "$series_table"; }
suite_of() {
    local suite
    suite=$(awk -v s="$1" '!/^#/ && $1 == s {print $2}' "$series_table")
    if [ -z "$suite" ]; then
        echo "run-cluster-tests.sh: no Debian suite for Slurm series '$1' in $series_table; choose from $(known_series | paste -sd, | sed 's/,/, /g')" >&2
        return 1
    fi
    echo "$suite"
}
read -r -a wanted <<<"$(tr ',' ' ' <<<"${SERIES:-$(known_series | paste -sd' ')}")"
[ ${#wanted[@]} -gt 0 ] || { echo "run-cluster-tests.sh: SERIES is empty" >&2; exit 2; }
for s in "${wanted[@]}"; do suite_of "$s" >/dev/null || exit 2; done

# result NAME PATTERN LOG: "NAME N passed[, M failed]", summed over the
# suite's result lines (closest runs on two clusters).
result() {
    local lines
    lines=$(grep -E "$2" "$3") || { echo "$1 did not run"; return; }
    local pass fail
    pass=$(grep -oE '[0-9]+ passed' <<<"$lines" | awk '{n += $1} END {print n + 0}')
    fail=$(grep -oE '[0-9]+ failed' <<<"$lines" | awk '{n += $1} END {print n + 0}')
    if [ "${fail:-0}" = 0 ]; then echo "$1 $pass passed"; else echo "$1 $pass passed, $fail FAILED"; fi
}

# suite NAME FILTER...: the cluster binary's tests that FILTER... select,
# one test at a time, after a "suite NAME:" line that the summary reads.
suite() {
    echo "suite $1: ${*:2}"
    cargo test --locked --features cluster-tests --test cluster -- --test-threads=1 "${@:2}"
}

# results NAME: the "test result:" lines of suite NAME's runs (every
# suite's when NAME is empty) in the log on stdin.
results() { awk -v name="$1" '/^suite / {on = name == "" || $2 == name ":"} on && /test result:/'; }

# phase WORDS LOG: the seconds that LOG's "series S: WORDS N s" line gives.
phase() { sed -n "s/^series [0-9.]*: $1 \(in \)\{0,1\}\([0-9]*\) s.*/\2/p" "$2" | tail -n 1; }

# prepare SERIES: builds the plugin and the .deb for it, and pyxis and
# enroot (tests/containers/build.sh); sets root, so, deb, version, pyxis_so.
prepare() {
    local s=$1 suite
    suite=$(suite_of "$s")
    if [ "$suite" = host ]; then
        root=''
        version=$(/usr/sbin/slurmd -V | awk '{print $2}')
        make -s release
        # The flux suite's Flux (a no-op once built: target/flux/install).
        bash tests/flux/build.sh >/dev/null
        bash packaging/deb/build-deb.sh
        so=$PWD/target/release/libdesi_gpu_map_spank.so
    else
        root=$(bash tests/cluster/slurm-root.sh "$suite")
        version=$(chroot "$root" /usr/sbin/slurmd -V | awk '{print $2}')
        SLURM_INCLUDE_DIR=$root/usr/include CARGO_TARGET_DIR=target/series/$s \
            bash packaging/deb/build-deb.sh
        so=$PWD/target/series/$s/release/libdesi_gpu_map_spank.so
    fi
    case $version in
        "$s".*) ;;
        *) echo "Debian's $suite now ships Slurm $version, not $s: update tests/cluster/series" >&2; return 1 ;;
    esac
    deb=$(ls -t "$PWD"/target/package/desi-gpu-map_*+slurm"$s"_*.deb | head -n 1)
    # pyxis against this series' headers; the suite's own enroot, in target/.
    pyxis_so=$(bash tests/containers/build.sh "$s" "$root")
}

# run_series SERIES: everything for one series (run as `$0 --one SERIES`, so
# that errexit holds throughout).
run_series() {
    s=$1 # global, as t0: the EXIT trap reads them
    t0=$(date +%s)
    prepare "$s"
    export DGM_SLURM_ROOT=$root DGM_SLURM_SERIES=$s DGM_PLUGIN_SO=$so DGM_PYXIS_SO=$pyxis_so
    echo "series $s: Slurm $version${root:+ in $root}; plugin $so; package $deb; pyxis $pyxis_so"
    echo "series $s: prepared in $(($(date +%s) - t0)) s"
    if [ -n "${DGM_CLUSTER_LOCK:-}" ]; then
        t0=$(date +%s)
        exec 8>"$DGM_CLUSTER_LOCK" && flock 8
        echo "series $s: waited $(($(date +%s) - t0)) s for $DGM_CLUSTER_LOCK"
    fi
    t0=$(date +%s)
    trap 'bash "$harness" down; echo "series $s: cluster and tests took $(($(date +%s) - t0)) s"' EXIT
    trap 'exit 130' INT TERM
    bash "$harness" down
    bash "$harness" up 4 4 2 2:noenv
    local rc=0 m first=("${SUITES[@]}")
    [ "$s" != "$DESI_SERIES" ] || first+=("${HOST_SUITES[@]}")
    bash tests/package/deb-smoke.sh "$deb" || rc=1
    local plain=(mps::) t
    if [ "$s" = "$DESI_SERIES" ]; then
        for t in "${PLAIN_MPS_SKIP[@]}"; do plain+=(--skip "mps::$t"); done
    else
        # The other series run here only what the production cluster skips;
        # the rest runs there, under the production configuration.
        plain=(--exact)
        for t in "${PRODUCTION_MPS_SKIP[@]}"; do plain+=("mps::$t"); done
    fi
    for m in "${first[@]}"; do
        if [ "$m" = mps ]; then suite mps "${plain[@]}" || rc=1; else suite "$m" "$m::" || rc=1; fi
    done
    if [ "$s" != "$DESI_SERIES" ]; then
        for t in "${EVERY_SERIES[@]}"; do suite "${t%%::*}" --exact "$t" || rc=1; done
    fi
    # closest's task_none_* tests need a cluster that binds no CPUs: this one.
    suite closest closest::task_none_ || rc=1
    # closest with real CPU binding: one node, task/affinity, the host's CPUs.
    bash "$harness" down
    DGM_TASK_AFFINITY=1 bash "$harness" up 4 2:noenv
    suite closest closest:: --skip closest::task_none_ || rc=1
    # As production sites run Slurm; the suites read the mode cluster.sh
    # recorded. "production" lines count its tests, mps's included.
    bash "$harness" down
    DGM_PRODUCTION=1 bash "$harness" up 4 4 2 2:noenv
    echo "series $s: production mode $(cat "${DGM_CLUSTER_DIR:-/tmp/desi-gpu-map-cluster}/mode")"
    suite production production:: || rc=1
    # hidepid's MPS and outsider tests under cgroup tracking too: Slurm
    # kills what a step leaves. Not its stale-variable tests: the walk they
    # check happens before any task starts, where tracking changes nothing,
    # and their rows are indices, which 26.05's Flags=env_uuid makes UUIDs
    # that only NVML could confirm (the first cluster runs them).
    suite hidepid hidepid:: \
        --skip hidepid::exec_ignores_a_ranks_stale_variables_under_hidepid \
        --skip hidepid::the_prolog_ignores_a_ranks_stale_variables_under_hidepid || rc=1
    skip=()
    for t in "${PRODUCTION_MPS_SKIP[@]}"; do skip+=(--skip "mps::$t"); done
    suite mps mps:: "${skip[@]}" || rc=1
    return $rc
}
if [ "${1:-}" = --one ]; then
    run_series "$2"
    exit
fi
if [ "${1:-}" = --build ]; then
    shift
    for s in "$@"; do prepare "$s"; done
    exit
fi

# Debian's real NVML, which the tests hand the plugin (tests/nvidia/fetch.sh).
bash tests/nvidia/fetch.sh >/dev/null
# desispec and desiutil from PyPI, and what desispec's branch imports, for
# tests/cluster/desi.rs (tests/desi/fetch.sh, fetch.sh branch: every series
# runs EVERY_SERIES), and mpi4py's wheel for a root whose Slurm has no
# mpi/pmix (fetch.sh mpi4py, tests/desi/scripts.sh).
bash tests/desi/fetch.sh >/dev/null && bash tests/desi/fetch.sh branch >/dev/null
for s in "${wanted[@]}"; do
    if [ "$(suite_of "$s")" != host ]; then bash tests/desi/fetch.sh mpi4py >/dev/null; break; fi
done
# The tests drive the cluster from the host; build them once. A filter
# NAME:: must select module NAME's tests alone, and every module must run.
cargo test --locked --features cluster-tests --test cluster --no-run 2>&1 | tail -n 1
listed=$(cargo test --locked --features cluster-tests --test cluster -- --list 2>/dev/null | sed -n 's/: test$//p')
for m in $(sed 's/::.*//' <<<"$listed" | sort -u); do
    case " ${MODULES[*]} " in *" $m "*) ;; *) echo "run-cluster-tests.sh: module $m of tests/cluster/main.rs runs on no cluster: add it to SUITES" >&2; exit 2 ;; esac
done
for m in "${MODULES[@]}"; do
    others=$(grep -F "$m::" <<<"$listed" | grep -v "^$m::" || true)
    [ -z "$others" ] || { echo "run-cluster-tests.sh: the filter $m:: also selects $others" >&2; exit 2; }
done
mkdir -p "$logs"

# The later series' builds (their Debian root, plugin, command, .deb, pyxis
# and enroot) run in the background at the lowest priority while the first
# series' cluster runs, whose tests mostly wait on Slurm; each later series
# waits for them, then finds its build done (a failed one is redone, and
# said, in its own run). Their output: target/cluster-tests/ahead.log.
ahead=
if [ ${#wanted[@]} -gt 1 ]; then
    setsid nice -n 19 bash "$0" --build "${wanted[@]:1}" >"$logs/ahead.log" 2>&1 &
    ahead=$!
    trap '[ -z "$ahead" ] || kill -- -"$ahead" 2>/dev/null || true' EXIT
    trap 'exit 130' INT TERM
fi

failed=0 summary=()
for s in "${wanted[@]}"; do
    log=$logs/$s.log
    if [ -n "$ahead" ] && [ "$s" != "${wanted[0]}" ]; then
        wait "$ahead" || echo "run-cluster-tests: building the later series ahead failed ($logs/ahead.log); each builds in its own run"
        ahead=
    fi
    t0=$(date +%s)
    echo "run-cluster-tests: Slurm $s ..."
    rc=0
    bash "$0" --one "$s" >"$log" 2>&1 || rc=$?
    took=$(($(date +%s) - t0))
    v=$(sed -n 's/^series [0-9.]*: Slurm \([0-9.]*\).*/\1/p' "$log" | head -n 1)
    line="series ${v:-$s}:"
    # The first two clusters' output, then the production cluster's.
    main=$(sed '/^series [0-9.]*: production mode/q' "$log")
    prod=$(sed -n '/^series [0-9.]*: production mode/,$p' "$log")
    for suite in "${SUITES[@]}" closest; do
        line+=" $(result $suite 'test result:' <(results $suite <<<"$main")),"
    done
    for suite in "${HOST_SUITES[@]}"; do
        if [ "$s" = "$DESI_SERIES" ]; then
            line+=" $(result $suite 'test result:' <(results $suite <<<"$main")),"
        elif printf '%s\n' "${EVERY_SERIES[@]}" | grep -q "^$suite::"; then
            line+=" $(result $suite 'test result:' <(results $suite <<<"$main")) (the rest $DESI_SERIES only),"
        else
            line+=" $suite ($DESI_SERIES only),"
        fi
    done
    mode=$(sed -n 's/^series [0-9.]*: production mode //p' "$log")
    line+=" $(result "production${mode:+ ($mode)}" 'test result:' <(results '' <<<"$prod")),"
    line+=" $(result deb '^deb-smoke:' "$log"); ${took} s"
    line+=" (build $(phase prepared "$log") s, cluster and tests $(phase 'cluster and tests took' "$log") s)"
    if [ $rc != 0 ]; then
        failed=1
        line+=" -- FAILED (log: $log)"
        echo "----- $log -----"
        cat "$log"
        echo "----- end of $log -----"
    fi
    summary+=("$line")
done
printf '%s\n' "${summary[@]}"
exit $failed
