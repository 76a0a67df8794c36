#!/usr/bin/env bash
# Slurm's own tests of task prologs and epilogs (its testsuite/), run against
# the unpatched and the patched slurmstepd that benches/slurm-epilog.sh
# builds (contrib/slurm's patch), on the repository's throw-away test
# cluster:
#
#   flock /tmp/dgm-cluster.lock benches/slurm-testsuite.sh [ROUNDS]
#   DGM_EPILOG_SERIES=24.11 DGM_SLURM_ROOT=$(tests/cluster/slurm-root.sh trixie) \
#       flock /tmp/dgm-cluster.lock benches/slurm-testsuite.sh [ROUNDS]
#   (26.05: the same with sid)
#
# The tests, from the Slurm source's testsuite/ ($DGM_SLURM_TESTSUITE),
# every one there that names TaskProlog, TaskEpilog, --task-prolog or
# --task-epilog, run as they are: the testsuite is not edited.
#   22.05 (default; the host's Slurm): Debian's 22.05.8 source that
#     `slurm-epilog.sh build` unpacked:
#       python/tests/commands/srun/test_--task-epilog.py
#       python/tests/commands/srun/test_--task-prolog.py
#       python/tests/commands/srun/test_task-prolog_and_epilog.py
#       expect/test1.49
#       python/tests/parameters/slurm/TaskEpilog/test_task_epilog.py (auto-config)
#   24.11: the orig tarball's: python/tests/test_116_37.py, _21, _44 and
#     expect/test1.49 (test_135_1, TaskEpilog, needs --auto-config: not in
#     a root, see below).
#   26.05: SchedMD's slurm-26.05 branch and tags carry none of these
#     tests, so master's (284c3b95f0, the commit the patch was made on),
#     exported to $DGM_SLURM_SRC/master-284c3b95f0 with
#       git archive 284c3b95f0 testsuite | tar -x -C that-dir
#     test_116_37, _21 and _44 (master has no test1.49).
# They find the cluster the way their README says: SLURM_TESTSUITE_CONF
# names a testsuite.conf written here (SlurmInstallDir, SlurmConfigDir the
# cluster's state dir), SLURM_CONF the cluster's slurm.conf, and for expect
# SLURM_LOCAL_GLOBALS_FILE a globals.local that puts its test directory in
# the state dir. They run as root, which is also the cluster's SlurmUser, so
# 22.05's and 24.11's ATF need no sudo; master's gets a stand-in (below).
#
# One node, n1. The local-config tests run against the running cluster,
# with the built slurmstepd bind-mounted over /usr/sbin/slurmstepd in n1's
# slurmd's own mount namespace (as slurm-epilog.sh does). In a Debian root
# (24.11, 26.05) the ATF's Slurm clients are wrappers that run the root's
# under chroot. TaskEpilog's test (22.05 only) needs
# --auto-config: the ATF stops the cluster's daemons, writes TaskEpilog=
# into the state dir's slurm.conf, starts slurmctld and `slurmd -N n1`
# itself, and at the end stops them and puts slurm.conf back. So pytest runs
# in a mount namespace of its own with the variant bound over
# /usr/sbin/slurmstepd: the slurmd the ATF starts inherits it (checked
# while it runs, with nsenter: /usr/sbin/slurmstepd is Debian's absolute
# link through /etc/alternatives to slurmstepd-wlm, the file the bind mount
# covers, and /proc/PID/root/... resolves that link in the reader's own
# namespace). The state dir is throw-away, so the ATF may rewrite it;
# whatever daemon of the ATF's is left afterwards is stopped by its pid
# file, and the cluster is torn down on exit. In a root the ATF would start
# the host's daemons (it finds slurmctld in PATH), so it is not run there.
#
# The patch's own tests (contrib/slurm's 0002 mail, applied to a copy of
# the testsuite; listed as TEST+0002): test_task_epilog_wait must fail
# with the unpatched build and pass with the patched one; its fixed
# test_task_epilog must pass with both, and fail with a third, test-only
# build, leaky (slurm-epilog.sh: the patched one without the final
# killpg, so the epilog's `sleep 60 &` survives), to show that the check
# can fail. The testsuite's own test_task_epilog runs against leaky too.
#
# Prints one line per test and variant: PASS, FAIL or SKIP (the test
# skipped itself), XFAIL (failed where it must) or XPASS (passed where it
# must fail), with its time, and exits 1 where any is FAIL, SKIP or XPASS. Logs
# go to $DGM_SLURM_TESTS_LOG (default /var/tmp/dgm-slurm-tests), one file
# per series, test and variant. ROUNDS (default 1) repeats the whole,
# unpatched and patched interleaved. Needs `make build` (the cluster
# harness checks for the plugin, which it leaves off), `slurm-epilog.sh
# build SERIES`, and Debian's python3-pytest and expect (and for the newer
# ATFs python3-requests, -jsondiff, -jsonpatch, -pexpect, -yaml; all
# installed here when missing).
set -euo pipefail
cd "$(dirname "$0")/.."
src_root=${DGM_SLURM_SRC:-/var/tmp/dgm-slurm-src}
out=${DGM_SLURMSTEPD_OUT:-/var/tmp/dgm-slurmstepd}
logs=${DGM_SLURM_TESTS_LOG:-/var/tmp/dgm-slurm-tests}
series=${DGM_EPILOG_SERIES:-22.05}
rounds=${1:-1}
die() { echo "slurm-testsuite.sh: $*" >&2; exit 1; }
case $series in
    22.05)
        suite=${DGM_SLURM_TESTSUITE:-$src_root/22.05/slurm-wlm-22.05.8/testsuite}
        [ -z "${DGM_SLURM_ROOT:-}" ] || die "22.05 is the host's Slurm: unset DGM_SLURM_ROOT"
        local_tests=(tests/commands/srun/test_--task-epilog.py tests/commands/srun/test_--task-prolog.py
            tests/commands/srun/test_task-prolog_and_epilog.py)
        patch=contrib/slurm/0002-Testsuite-task-epilog-wait-22.05.patch
        patch_file=tests/commands/srun/test_--task-epilog.py
        auto_tests=(tests/parameters/slurm/TaskEpilog/test_task_epilog.py)
        expect_tests=(test1.49)
        ;;
    24.11)
        # The orig tarball's testsuite (master's test names); the cluster
        # runs trixie's Slurm in its root, so the ATF's clients are
        # wrappers that run the root's (below).
        suite=${DGM_SLURM_TESTSUITE:-$src_root/24.11/orig/slurm-slurm-24-11-5-1/testsuite}
        [ -n "${DGM_SLURM_ROOT:-}" ] || die "24.11 runs in a Debian root: DGM_SLURM_ROOT=\$(tests/cluster/slurm-root.sh trixie)"
        local_tests=(tests/test_116_37.py tests/test_116_21.py tests/test_116_44.py)
        auto_tests=()
        expect_tests=(test1.49)
        patch=contrib/slurm/0002-Testsuite-task-epilog-wait-24.11.patch
        patch_file=tests/test_116_37.py
        ;;
    26.05)
        suite=${DGM_SLURM_TESTSUITE:-$src_root/master-284c3b95f0/testsuite}
        [ -n "${DGM_SLURM_ROOT:-}" ] || die "26.05 runs in a Debian root: DGM_SLURM_ROOT=\$(tests/cluster/slurm-root.sh sid)"
        [ -d "$suite/python" ] || die "no $suite/python: export master's testsuite there (see the top of this script)"
        local_tests=(tests/test_116_37.py tests/test_116_21.py tests/test_116_44.py)
        auto_tests=()
        expect_tests=()
        sudo_stand_in=1
        patch=contrib/slurm/0002-Testsuite-task-epilog-wait-26.05-master.patch
        patch_file=tests/test_116_37.py
        ;;
    *) die "DGM_EPILOG_SERIES must be 22.05, 24.11 or 26.05" ;;
esac

[ -x "$out/$series/unpatched" ] && [ -x "$out/$series/patched" ] && [ -x "$out/$series/leaky" ] ||
    die "build first: benches/slurm-epilog.sh build $series"
[ -f "$suite/python/lib/atf.py" ] || die "no Slurm testsuite in $suite"
bash packaging/apt-need.sh /usr/bin/pytest-3:python3-pytest expect:expect
# What the newer ATFs import (24.11: requests; master: also jsondiff,
# jsonpatch, pexpect, yaml).
bash packaging/apt-need.sh /usr/share/doc/python3-requests:python3-requests \
    /usr/share/doc/python3-jsondiff:python3-jsondiff /usr/share/doc/python3-jsonpatch:python3-jsonpatch \
    /usr/share/doc/python3-pexpect:python3-pexpect /usr/share/doc/python3-yaml:python3-yaml
# Debian's pytest, whatever python3 is first in PATH, without the plugins
# Debian's other python packages add (hypothesis writes into the testsuite).
pytest=(env PYTEST_DISABLE_PLUGIN_AUTOLOAD=1 /usr/bin/python3 -m pytest)

. tests/cluster/session.sh
bash "$harness" up 4 >/dev/null
eval "$(bash "$harness" env)"
bash "$harness" plugin off >/dev/null
D=$DGM_CLUSTER_DIR
root=${DGM_SLURM_ROOT:-}
version=$(${root:+chroot "$root"} /usr/sbin/slurmd -V | awk '{print $2}')
case $version in "$series".*) ;; *) die "the cluster's Slurm is $version; the built slurmstepd is $series" ;; esac

work=$D/slurm-tests
mkdir -p "$work" "$logs"
chmod 0755 "$work"
cp "$out/$series/unpatched" "$out/$series/patched" "$out/$series/leaky" "$work/"
# In a root, the ATF's (and expect's) Slurm clients are wrappers that run
# the root's own in it, from the same directory where the root has it (the
# state dir is bound into the root at the same path; expect runs from the
# testsuite, which is not there: then from /, its tests' paths being
# absolute), first in PATH and as SlurmInstallDir. A batch script runs in
# the root with that PATH: there (no ROOT inside it) the wrapper runs the
# root's own client at once (the patch's test runs srun in a batch job).
prefix=/usr
if [ -n "$root" ]; then
    prefix=$work/prefix
    mkdir -p "$prefix/bin"
    for c in sacct sacctmgr salloc sattach sbatch sbcast scancel scontrol scrontrol sdiag sinfo \
        sprio squeue sreport srun sshare sstat strigger; do
        printf '#!/bin/sh\n[ -d %q/usr/bin ] || exec /usr/bin/%s "$@"\nexec chroot %q /bin/sh -c '"'"'cd "$1" 2>/dev/null || cd /; shift; exec "$0" "$@"'"'"' /usr/bin/%s "$PWD" "$@"\n' \
            "$root" "$c" "$root" "$c" >"$prefix/bin/$c"
        chmod 0755 "$prefix/bin/$c"
    done
    # Master's ATF runs every command it is given a user for through
    # `sudo -u USER /bin/bash -lc CMD`, root's too, and skips the test
    # unless `sudo -ln` shows NOPASSWD: ALL. This host has no sudo, and a
    # login shell would reset PATH to the host's 22.05 clients: a stand-in,
    # first in PATH, that runs CMD as root only (we are root), with bash -c.
    if [ "${sudo_stand_in:-0}" = 1 ]; then
        cat >"$prefix/bin/sudo" <<'EOS'
#!/bin/bash
# benches/slurm-testsuite.sh's stand-in for sudo: root to root only.
if [ "${1:-}" = -ln ]; then echo "    (ALL : ALL) NOPASSWD: ALL"; exit 0; fi
user=root
while [ $# -gt 0 ]; do
    case $1 in
        --preserve-env=* | -n | -E) shift ;;
        -u) user=$2; shift 2 ;;
        *) break ;;
    esac
done
[ "$user" = root ] && [ "$(id -u)" = 0 ] || { echo "sudo stand-in: root to root only (asked for $user)" >&2; exit 1; }
if [ "${1:-}" = /bin/bash ] && [ "${2:-}" = -lc ]; then exec /bin/bash -c "$3"; fi
exec "$@"
EOS
        chmod 0755 "$prefix/bin/sudo"
    fi
    export PATH=$prefix/bin:$PATH
fi
cat >"$work/testsuite.conf" <<EOF
SlurmSourceDir=$(dirname "$suite")
SlurmBuildDir=$src_root/$series/build
SlurmInstallDir=$prefix
SlurmConfigDir=$D
EOF
cat >"$work/globals.local" <<EOF
set testsuite_shared_dir "$work/expect"
set testsuite_colorize false
EOF
mkdir -p "$work/expect"
chmod 0777 "$work/expect"
export SLURM_TESTSUITE_CONF=$work/testsuite.conf SLURM_LOCAL_GLOBALS_FILE=$work/globals.local

pid_is() { [ -n "$1" ] && [ "$(cat "/proc/$1/comm" 2>/dev/null)" = "$2" ]; }
sha() { sha256sum <"$1" | cut -c1-64; }
slurmd=$(cat "$D/pids/slurmd-n1.pid")
bound=0
use() { # debian|unpatched|patched|leaky: what the cluster's slurmd on n1 execs
    if [ "$bound" = 1 ]; then
        nsenter -t "$slurmd" -m umount -l /usr/sbin/slurmstepd
        bound=0
    fi
    if [ "$1" != debian ]; then
        nsenter -t "$slurmd" -m mount --bind "$work/$1" /usr/sbin/slurmstepd
        bound=1
        [ "$(nsenter -t "$slurmd" -m sha256sum /usr/sbin/slurmstepd | cut -c1-64)" = "$(sha "$work/$1")" ] ||
            die "the bind mount of $1 is not what n1 sees"
    fi
}

# What a test's steps left running: any process with the step's
# environment (this cluster's SLURM_CONF and a SLURM_JOB_ID), slurmstepd
# aside, once the test is over: the epilogs' `sleep 60 &` and `sleep 200`
# included. (The 22.05 tests' own `pgrep PATH` check matches process names,
# at most 15 characters, so it passes whatever is left; pgrep says as much.)
step_pids() { # the pids of processes with a step's environment, slurmstepd aside
    local e p
    for e in /proc/[0-9]*/environ; do
        p=${e#/proc/} p=${p%/environ}
        [ "$p" != $$ ] || continue
        [ "$(cat "/proc/$p/comm" 2>/dev/null)" != slurmstepd ] || continue
        tr '\0' '\n' 2>/dev/null <"$e" | grep -qx "SLURM_CONF=$D/slurm.conf" || continue
        tr '\0' '\n' 2>/dev/null <"$e" | grep -q '^SLURM_JOB_ID=' || continue
        echo "$p"
    done
}
leftovers() {
    local p
    for p in $(step_pids); do printf '%s(%s) ' "$p" "$(tr '\0' ' ' 2>/dev/null </proc/"$p"/cmdline)"; done
}
reap_leftovers() {
    local p
    for p in $(step_pids); do kill -9 "$p" 2>/dev/null || true; done
}
# The srun steps' times, as the ATF logged them.
srun_times() { # LOG
    awk '/Running command: srun/ {s=1; next} s && /Command duration:/ {for (i = 1; i <= NF; i++) if ($i == "duration:") printf "%s%d", (n++ ? "," : ""), $(i + 1) * 1000; s=0}' "$1"
}

results=()
record() { # VARIANT TEST VERDICT MS NOTE
    local line
    line=$(printf '%-10s %-58s %-5s %7s ms  %s' "$1" "$2" "$3" "$4" "$5")
    echo "$line"
    results+=("$line")
}
verdict_of_pytest() { # LOG RC -> PASS|FAIL|SKIP
    local last
    last=$(grep -E '^=+ .* in [0-9.]+s' "$1" | tail -1 || true)
    if [ "$2" = 0 ] && [[ $last == *passed* ]] && [[ $last != *failed* ]]; then echo PASS
    elif [ "$2" = 0 ] && [[ $last == *skipped* ]]; then echo SKIP
    else echo FAIL; fi
}

pytest_local() { # VARIANT TEST [SUITE [MUST_FAIL_WITH]]: local-config, against the running cluster
    # MUST_FAIL_WITH: the test must fail, with this in its log: XFAIL where
    # it does, XPASS where it passes.
    local v=$1 t=$2 in=${3:-$suite} must_fail=${4:-} log t0 rc=0 ms left label
    label=$t
    log=$logs/$series-$v-$(basename "${t//::/-}" .py).log
    if [ "$in" = "$patched_suite" ]; then
        label="$t+0002" log=${log%.log}-0002.log
    fi
    t0=$(date +%s%N)
    (cd "$in/python" && timeout 300 nice "${pytest[@]}" -s -rA -v -p no:cacheprovider \
        --basetemp="$work/pytest-$v" "$t") >"$log" 2>&1 || rc=$?
    ms=$((($(date +%s%N) - t0) / 1000000))
    left=$(leftovers)
    local verdict
    verdict=$(verdict_of_pytest "$log" "$rc")
    if [ -n "$must_fail" ]; then
        case $verdict in
            FAIL) grep -qF "$must_fail" "$log" && verdict=XFAIL ;;
            PASS) verdict=XPASS ;;
        esac
    fi
    # leaky is there to leave the epilog's child running: where it did
    # not, its results show nothing.
    if [ "$v" = leaky ] && [ -z "$left" ]; then
        verdict=FAIL left="nothing, so this run shows nothing"
    fi
    # The patch's test times its two steps inside its batch job.
    local inner='' steps=$work/pytest-$v/test_task_epilog_wait0/steps.out
    if [[ $t == *::test_task_epilog_wait ]] && [ -f "$steps" ]; then
        inner="; the batch job's steps without and with the epilog: $(awk '{printf "%s%d", (NR > 1 ? ", " : ""), $1 / 1e6}' "$steps") ms"
    fi
    record "$v" "$label" "$verdict" "$ms" \
        "srun $(srun_times "$log") ms$inner; left running: ${left:-nothing} $(grep -E '^(SKIPPED|FAILED|ERROR|E +AssertionError)' "$log" | head -2 | cut -c1-200 | paste -sd' ')"
    reap_leftovers
}

expect_test() { # VARIANT TEST: expect, against the running cluster
    local v=$1 t=$2 log t0 rc=0 ms verdict left
    log=$logs/$series-$v-$t.log
    t0=$(date +%s%N)
    (cd "$suite/expect" && timeout 300 nice expect "./$t") >"$log" 2>&1 || rc=$?
    ms=$((($(date +%s%N) - t0) / 1000000))
    # exit 0 SUCCESS, > 0 FAILURE, < 0 (as 255 and below) SKIPPED
    if [ "$rc" = 0 ] && grep -q SUCCESS "$log"; then verdict=PASS
    elif grep -q SKIPPED "$log" && ! grep -q FAILURE "$log"; then verdict=SKIP
    else verdict=FAIL; fi
    left=$(leftovers)
    record "$v" "expect/$t" "$verdict" "$ms" \
        "subtests: $(grep -cE 'Pass +Subtest' "$log" || true) passed, $(grep -cE 'Subtest +[0-9]+ failed' "$log" || true) failed; 'TaskEpilog failed status=9' from srun: $(grep -c 'TaskEpilog failed status=9' "$log" || true); left running: ${left:-nothing}"
    reap_leftovers
}

# The ATF's own daemons (auto-config): stopped by their pid files if the
# ATF left one running.
stop_atf_daemons() {
    local f p comm
    for f in "$D/run/slurmctld.pid" "$D/run/slurmd-n1.pid"; do
        p=$(cat "$f" 2>/dev/null || true)
        comm=$(basename "$f" .pid)
        comm=${comm%-n1}
        [ "$p" = "$slurmd" ] && continue
        if pid_is "$p" "$comm"; then
            echo "  stopping the ATF's $comm ($p)"
            kill -TERM "$p" 2>/dev/null || true
            for _ in $(seq 50); do pid_is "$p" "$comm" || break; sleep 0.1; done
            if pid_is "$p" "$comm"; then kill -KILL "$p" 2>/dev/null || true; fi
        fi
    done
}

pytest_auto() { # VARIANT TEST: auto-config, the ATF restarts Slurm itself
    local v=$1 t=$2 log t0 rc=0 ms watch seen note pids
    log=$logs/$series-$v-$(basename "$t" .py)-auto-config.log
    seen=$work/seen-$v
    : >"$seen"
    # Which slurmstepd each slurmd the ATF starts sees in its namespace.
    (
        while :; do
            p=$(cat "$D/run/slurmd-n1.pid" 2>/dev/null || true)
            if [ "$p" != "$slurmd" ] && pid_is "$p" slurmd && ! grep -q "^$p " "$seen"; then
                s=$(nsenter -t "$p" -m sha256sum /usr/sbin/slurmstepd 2>/dev/null | cut -c1-64 || true)
                [ -n "$s" ] && echo "$p $s" >>"$seen"
            fi
            sleep 0.1
        done
    ) &
    watch=$!
    t0=$(date +%s%N)
    unshare --mount --propagation private bash -c '
        mount --bind "$1" /usr/sbin/slurmstepd &&
        [ "$(sha256sum </usr/sbin/slurmstepd | cut -c1-64)" = "$(sha256sum <"$1" | cut -c1-64)" ] &&
        cd "$2" && exec timeout 300 nice "${@:5}" -s -rA -v -p no:cacheprovider --auto-config --basetemp="$3" "$4"
        ' bash "$work/$v" "$suite/python" "$work/pytest-auto-$v" "$t" "${pytest[@]}" >"$log" 2>&1 || rc=$?
    ms=$((($(date +%s%N) - t0) / 1000000))
    kill "$watch" 2>/dev/null || true
    wait "$watch" 2>/dev/null || true
    stop_atf_daemons
    if [ ! -s "$seen" ]; then
        note="no slurmd of the ATF's seen"
    elif awk -v s="$(sha "$work/$v")" '$2 != s {bad=1} END {exit bad}' "$seen"; then
        pids=$(awk '{print $1}' "$seen" | paste -sd' ')
        note="the ATF's slurmd (pid $pids) saw the $v slurmstepd"
    else
        note="WRONG slurmstepd under the ATF's slurmd: $(cat "$seen")"
    fi
    local left
    left=$(leftovers)
    record "$v" "$t --auto-config" "$(verdict_of_pytest "$log" "$rc")" "$ms" \
        "$note; srun $(srun_times "$log") ms; left running: ${left:-nothing} $(grep -E '^(SKIPPED|FAILED|ERROR) ' "$log" | head -1 | cut -c1-160)"
    reap_leftovers
}

# The patch's own tests, which the testsuite above does not have: a copy
# of its python/ with the 0002 mail's testsuite/ part applied (the mail for
# this series, whose test is in the series' own layout), listed as
# TEST+0002. Its test_task_epilog_wait, against both builds: XFAIL, it
# failed with the unpatched build as it must; XPASS, it passed there, and
# so guards nothing. Its test_task_epilog (the fixed check that the
# epilog's `sleep 60 &` is killed, pgrep -f), against both builds, where it
# must pass, and against leaky (the patched build without the final
# killpg, see slurm-epilog.sh), where the leftover survives and the check
# must fail with "should have been killed" (XFAIL). The testsuite's own
# test_task_epilog (pgrep without -f) is run against leaky too, to show
# whether it can fail at all: PASS there means it passed with the leftover
# running (the "left running" note names it).
patched_suite=$work/patched-src/testsuite
rm -rf "$work/patched-src"
mkdir -p "$patched_suite"
cp -a "$suite/python" "$patched_suite/"
git -C "$work/patched-src" init -q
git -C "$work/patched-src" apply --include='testsuite/*' "$PWD/$patch" ||
    die "$patch's testsuite/ part does not apply to $suite"

echo "Slurm $version's testsuite ($suite), one node${root:+ in $root}, run as $(id -un); logs in $logs"
echo "the patch's tests: $patch_file::test_task_epilog_wait and ::test_task_epilog, from $patch"
for r in $(seq "$rounds"); do
    for v in unpatched patched; do
        use "$v"
        pytest_local "$v" "$patch_file::test_task_epilog_wait" "$patched_suite" \
            "$([ "$v" = unpatched ] && echo 'delayed the end of a')"
        pytest_local "$v" "$patch_file::test_task_epilog" "$patched_suite"
        for t in "${local_tests[@]}"; do pytest_local "$v" "$t"; done
        for t in "${expect_tests[@]}"; do expect_test "$v" "$t"; done
    done
    use leaky
    pytest_local leaky "$patch_file::test_task_epilog" "$patched_suite" "should have been killed"
    pytest_local leaky "$patch_file::test_task_epilog"
done
use debian
# Last: the ATF stops the cluster's own daemons for this one.
for r in $(seq "$rounds"); do
    for v in unpatched patched; do
        for t in "${auto_tests[@]}"; do pytest_auto "$v" "$t"; done
    done
done
[ -z "$root" ] || echo "not run in a root: tests/test_135_1.py (TaskEpilog, --auto-config): the ATF would stop and start the daemons itself, the host's (it finds slurmctld in PATH), not the root's"
echo "summary:"
printf '  %s\n' "${results[@]}"
# Non-zero where any test failed or skipped itself, or the patch's test
# passed without the patch.
! printf '%s\n' "${results[@]}" | grep -qE ' (FAIL|SKIP|XPASS) +[0-9]+ ms  '
