#!/usr/bin/env bash
# Slurm's user task epilog, with contrib/slurm's patch against without it.
# Two parts, so that the build does not hold the test cluster's lock:
#
#   benches/slurm-epilog.sh build [22.05] [24.11] [26.05]   (default 22.05)
#     Builds slurmstepd, only what it needs, under nice -n 19, configured
#     as Debian's packaging does, once as it is and once with contrib/slurm's
#     patch for the series (applied for the second build and taken off
#     again; only mgr.o is rebuilt), and prints how long each part took.
#     22.05: from Debian's source (apt-get source slurm-wlm/bookworm,
#     unpacked in $DGM_SLURM_SRC/22.05, default /var/tmp/dgm-slurm-src), on
#     this host. 24.11: from Debian trixie's orig tarball, unpacked in
#     $DGM_SLURM_SRC/24.11/orig ($DGM_SLURM_2411_TREE), in a trixie build
#     root made with mmdebstrap. 26.05: from a 26.05 tree
#     ($DGM_SLURM_2605_TREE, default $DGM_SLURM_SRC/26.05/slurm-26.05-branch:
#     Debian's 26.05 source was not downloadable here), in a sid build
#     root. (Trixie's debian.tar.xz was not downloadable either.) A third,
#     test-only build, leaky, is the patched one without the last
#     killpg(cpid, SIGKILL) after the script exits, so that what a task
#     epilog leaves behind survives (and with the script's stderr
#     /dev/null, so that the leftover does not hold the step open), for
#     slurm-testsuite.sh: does the testsuite's check of that kill fail when
#     it does not happen? The
#     binaries, with their runpath set to Debian's libslurmfull.so, go to
#     $DGM_SLURMSTEPD_OUT/SERIES/{unpatched,patched,leaky} (default
#     /var/tmp/dgm-slurmstepd).
#
#   flock /tmp/dgm-cluster.lock benches/slurm-epilog.sh run [ROUNDS [PARTS...]]
#     Brings up one test node (n1, the host's Slurm 22.05) and, for each
#     variant, bind-mounts the built slurmstepd over /usr/sbin/slurmstepd
#     in that slurmd's own mount namespace (the host's file is never
#     touched; slurmd execs a fresh slurmstepd per step), interleaving
#     unpatched and patched ROUNDS times (default 2). Prints medians (ms) and
#     ratios measured in this run:
#     - one srun step of 8, 32 and 64 tasks on the node, `true`, with
#       --task-epilog=/bin/true and without, and what the epilog adds per
#       task; Debian's own slurmstepd once at 8 tasks, to show the built
#       unpatched one behaves as Debian's;
#     - a one-task step whose epilog runs 20 s and leaves a child behind:
#       the step's time (killed at 5 s), the "TaskEpilog failed status=9"
#       line in slurmd's log, and whether the child is gone afterwards;
#     - an epilog that starts a child and exits at once (Slurm's
#       test_116_37): whether the child is gone after the step;
#     - the prolog+epilog MPS recipe (desi-gpu-map as the task prolog and
#       epilog, DESI_GPU_MAP_METHOD=contiguous,mps) at 64 tasks as
#       dgm-alice, and the plugin's --desi-gpu-map=contiguous,mps, where
#       tests/nvidia/fetch.sh has put nvidia-cuda-mps-control in the
#       cluster's state dir (else skipped, said so).
#     Asserts nothing. Needs `make build` (the plugin and desi-gpu-map).
#     PARTS after ROUNDS picks some of: steps kill mps (default all).
#     DGM_EPILOG_SERIES=26.05 DGM_SLURM_ROOT=$(tests/cluster/slurm-root.sh sid)
#     runs it on sid's Slurm with the 26.05 build (24.11: trixie), with no
#     MPS part there (the plugin in target/release is built for the host's
#     Slurm).
set -euo pipefail
cd "$(dirname "$0")/.."
src_root=${DGM_SLURM_SRC:-/var/tmp/dgm-slurm-src}
out=${DGM_SLURMSTEPD_OUT:-/var/tmp/dgm-slurmstepd}
die() { echo "slurm-epilog.sh: $*" >&2; exit 1; }

build() { # SERIES: 22.05 on this host, 24.11 and 26.05 in a build root
    local series=$1 in=() top src b patch t0 t1 t2 t3 t4 f
    local conf=(--prefix=/usr --sysconfdir=/etc/slurm --localstatedir=/var
        --libdir=/usr/lib/x86_64-linux-gnu --runstatedir=/run --disable-maintainer-mode
        --disable-dependency-tracking --with-munge --enable-pam --without-rpath --disable-debug
        --enable-multiple-slurmd SUCMD=/bin/su SLEEP_CMD=/bin/sleep)
    # Debian's paths: its pkglibdir is slurm-wlm (a Debian patch to
    # configure.ac that the shipped configure does not have).
    local mk=(pkglibdir=/usr/lib/x86_64-linux-gnu/slurm-wlm)
    bash packaging/apt-need.sh patchelf:patchelf gcc:gcc make:make mmdebstrap:mmdebstrap
    case $series in
        22.05)
            top=$src_root/22.05 src=$top/slurm-wlm-22.05.8 b=$top/build
            patch=$PWD/contrib/slurm/0001-slurmstepd-task-epilog-wait-22.05.patch
            conf+=(--with-pmix=/usr/lib/x86_64-linux-gnu/pmix2)
            [ -f "$src/configure" ] || die "no $src: add a 'Types: deb-src' entry for bookworm under /etc/apt/sources.list.d/, apt-get update, then (cd $top && apt-get source slurm-wlm/bookworm)"
            mkdir -p "$b"
            ;;
        24.11 | 26.05)
            # A build root of the Debian suite whose Slurm this is. 24.11:
            # Debian trixie's orig tarball (its debian.tar.xz was not
            # downloadable here). 26.05: any 26.05 tree, by default SchedMD's
            # slurm-26.05 branch exported there (no Debian 26.05 source here).
            top=$src_root/$series
            local suite=trixie from=${DGM_SLURM_2411_TREE:-$top/orig/slurm-slurm-24-11-5-1}
            patch=$PWD/contrib/slurm/0001-slurmstepd-task-epilog-wait-24.11.patch
            if [ "$series" = 26.05 ]; then
                suite=sid from=${DGM_SLURM_2605_TREE:-$top/slurm-26.05-branch}
                patch=$PWD/contrib/slurm/0001-slurmstepd-task-epilog-wait-26.05-master.patch
            fi
            local broot=$top/buildroot
            [ -f "$from/configure" ] || die "no $series tree in $from"
            if [ ! -x "$broot/usr/bin/gcc" ]; then
                nice -n 19 mmdebstrap --quiet --variant=buildd --aptopt='Acquire::Check-Valid-Until "false"' \
                    --include=libhwloc-dev,libpam0g-dev,libmunge-dev,libjson-c-dev,libyaml-dev,libjwt-dev,libhttp-parser-dev,liblz4-dev,libdbus-1-dev,libnuma-dev,libcurl4-openssl-dev,python3,pkgconf \
                    "$suite" "$broot" >&2 || die "mmdebstrap of the $suite build root failed"
            fi
            [ -d "$broot/slurm-src" ] || cp -a "$from" "$broot/slurm-src"
            mkdir -p "$broot/build"
            in=(chroot "$broot") src=/slurm-src b=/build
            ;;
        *) die "SERIES must be 22.05, 24.11 or 26.05 (got '$series')" ;;
    esac
    mkdir -p "$out/$series"
    t0=$(date +%s)
    "${in[@]}" bash -c 'cd "$1" && [ -f config.status ] || nice -n 19 "$2/configure" "${@:3}" >configure.log 2>&1' \
        sh "$b" "$src" "${conf[@]}" || die "configure failed: $b/configure.log"
    t1=$(date +%s)
    "${in[@]}" nice -n 19 make -j2 -C "$b/src/slurmd/slurmstepd" slurmstepd "${mk[@]}" >"$top/make-$series.log" 2>&1 ||
        die "make failed: $top/make-$series.log"
    t2=$(date +%s)
    local root=${in[1]:-}
    f=$root$b/src/slurmd/slurmstepd/.libs/slurmstepd
    install -m 0755 "$f" "$out/$series/unpatched"
    # Only its src/ part: the 26.05 branch carries none of master's python
    # tests, which the patch's test is added to.
    (cd "$root$src" && git apply --include='src/*' "$patch") || die "the patch does not apply to $root$src"
    trap '(cd "$root$src" && git apply -R --include="src/*" "$patch")' EXIT
    "${in[@]}" nice -n 19 make -j2 -C "$b/src/slurmd/slurmstepd" slurmstepd "${mk[@]}" >"$top/make-$series-patched.log" 2>&1 ||
        die "make failed: $top/make-$series-patched.log"
    t3=$(date +%s)
    install -m 0755 "$f" "$out/$series/patched"
    # leaky: a TEST-ONLY variant, never to be run anywhere else: the patched
    # source without the last killpg(cpid, SIGKILL) after the script has
    # exited, so that what a task epilog leaves behind (a `sleep 60 &`)
    # outlives it. benches/slurm-testsuite.sh runs the testsuite's check that
    # such a leftover is killed against it, to show whether the check can
    # fail. The script's stderr is also made /dev/null: it inherits
    # slurmstepd's, a pipe slurmstepd reads to the end before the step can
    # end, so without that killpg a leftover holding it keeps the step (and
    # srun) running until it exits (seen on 22.05: srun ran the whole 60 s
    # of the test's `sleep 60 &`, the ATF's timeout), and no check after the
    # step could see it.
    local mgr=$root$src/src/slurmd/slurmstepd/mgr.c
    cp "$mgr" "$mgr.dgm-patched"
    trap 'mv "$mgr.dgm-patched" "$mgr"; (cd "$root$src" && git apply -R --include="src/*" "$patch")' EXIT
    sed -i -e '/Ensure that all child processes get killed, one last time/{n;/^\tkillpg(cpid, SIGKILL);$/d}' \
        -e 's|^\t\t_exec_wait_child_wait_for_parent (ei);$|\t\tdup2(open("/dev/null", O_WRONLY), STDERR_FILENO); /* leaky, test only */\n&|' "$mgr"
    [ "$(diff "$mgr.dgm-patched" "$mgr" | grep -c '^< 	killpg(cpid, SIGKILL);$')" = 1 ] &&
        [ "$(diff "$mgr.dgm-patched" "$mgr" | grep -c '^> 		dup2(open("/dev/null", O_WRONLY), STDERR_FILENO); /\* leaky, test only \*/$')" = 1 ] &&
        [ "$(diff "$mgr.dgm-patched" "$mgr" | grep -c '^[<>]')" = 2 ] ||
        die "leaky: not exactly the last killpg() out and the script's stderr to /dev/null in $mgr"
    "${in[@]}" nice -n 19 make -j2 -C "$b/src/slurmd/slurmstepd" slurmstepd "${mk[@]}" >"$top/make-$series-leaky.log" 2>&1 ||
        die "make failed: $top/make-$series-leaky.log"
    install -m 0755 "$f" "$out/$series/leaky"
    mv "$mgr.dgm-patched" "$mgr"
    (cd "$root$src" && git apply -R --include='src/*' "$patch")
    trap - EXIT
    t4=$(date +%s)
    # Debian's libslurmfull.so, where Debian's own slurmstepd finds it.
    for f in "$out/$series/unpatched" "$out/$series/patched" "$out/$series/leaky"; do
        patchelf --set-rpath /usr/lib/x86_64-linux-gnu/slurm-wlm "$f"
    done
    cmp -s "$out/$series/unpatched" "$out/$series/patched" && die "the patched build is the unpatched one"
    cmp -s "$out/$series/patched" "$out/$series/leaky" && die "the leaky build is the patched one"
    echo "$series: configure $((t1 - t0)) s, slurmstepd and what it needs $((t2 - t1)) s, patched mgr.c and relink $((t3 - t2)) s, leaky $((t4 - t3)) s (nice -n 19)"
    ls -l "$out/$series"
}

run() {
    local rounds=${1:-2}
    shift || true
    local parts=" ${*:-steps kill mps} "
    local series=${DGM_EPILOG_SERIES:-22.05}
    [ -x "$out/$series/unpatched" ] && [ -x "$out/$series/patched" ] || die "build first: benches/slurm-epilog.sh build"
    . tests/cluster/session.sh
    bash "$harness" up 4 >/dev/null
    eval "$(bash "$harness" env)"
    bash "$harness" plugin off >/dev/null
    local D=$DGM_CLUSTER_DIR
    # A series in a Debian root (DGM_SLURM_ROOT at up): its clients run there.
    if [ -n "${DGM_SLURM_ROOT:-}" ]; then
        srun() { chroot "$DGM_SLURM_ROOT" /usr/bin/srun "$@"; }
    fi
    local slurmd version
    slurmd=$(cat "$D/pids/slurmd-n1.pid")
    version=$(${DGM_SLURM_ROOT:+chroot "$DGM_SLURM_ROOT"} /usr/sbin/slurmd -V | awk '{print $2}')
    case $version in "$series".*) ;; *) die "the cluster's Slurm is $version; the built slurmstepd is $series" ;; esac
    work=$D/bench-epilog
    mkdir -p "$work"
    chmod 0755 "$work"
    cp "$out/$series/unpatched" "$out/$series/patched" "$work/"
    bound=0
    use() { # debian|unpatched|patched: what slurmd on n1 execs for the next step
        if [ "$bound" = 1 ]; then
            # Lazily: the last step's slurmstepd may still be exiting.
            nsenter -t "$slurmd" -m umount -l /usr/sbin/slurmstepd
            bound=0
        fi
        if [ "$1" != debian ]; then
            nsenter -t "$slurmd" -m mount --bind "$work/$1" /usr/sbin/slurmstepd
            bound=1
            [ "$(nsenter -t "$slurmd" -m sha256sum /usr/sbin/slurmstepd | cut -c1-64)" = \
                "$(sha256sum "$work/$1" | cut -c1-64)" ] || die "the bind mount of $1 is not what n1 sees"
        fi
    }
    ms() { echo $((($(date +%s%N) - $1) / 1000000)); }
    step() { # VARIANT EPILOG NTASKS: one timed step, appended to results
        local t0
        t0=$(date +%s%N)
        srun -N1 -n"$3" -w n1 ${2:+--task-epilog=$2} true
        echo "$1 ${2:-none} $3 $(ms "$t0")" >>"$work/results"
    }
    : >"$work/results"
    median() { sort -n | awk '{a[NR]=$1} END {if (NR) print (NR % 2) ? a[(NR+1)/2] : (a[NR/2]+a[NR/2+1])/2}'; }
    ratio() { awk -v a="$1" -v b="$2" 'BEGIN {printf "%.3f", a / b}'; }
    med() { awk -v v="$1" -v e="$2" -v n="$3" '$1 == v && $2 == e && $3 == n {print $4}' "$work/results" | median; }
    local n a b c d
    if [[ $parts == *" steps "* ]]; then
    for r in $(seq "$rounds"); do
        for v in unpatched patched; do
            use "$v"
            for n in 8 32 64; do
                step "$v" "" "$n"
                step "$v" /bin/true "$n"
            done
        done
        use debian
        step debian "" 8
        step debian /bin/true 8
    done

    echo "one srun step on one node, Slurm $version, median of $rounds interleaved rounds (ms)"
    local row='%6s %10s %14s %10s %14s %17s %18s %16s\n'
    printf "$row" tasks unpatched unpatched+epi patched patched+epi "patched+epi/unp+epi" "unp epi/task (ms)" "pat epi/task (ms)"
    for n in 8 32 64; do
        a=$(med unpatched none "$n") b=$(med unpatched /bin/true "$n")
        c=$(med patched none "$n") d=$(med patched /bin/true "$n")
        printf "$row" "$n" "$a" "$b" "$c" "$d" "$(ratio "$d" "$b")" \
            "$(awk -v x="$b" -v y="$a" -v n="$n" 'BEGIN {printf "%.1f", (x - y) / n}')" \
            "$(awk -v x="$d" -v y="$c" -v n="$n" 'BEGIN {printf "%.1f", (x - y) / n}')"
    done
    echo "Debian's own slurmstepd, 8 tasks: $(med debian none 8) ms, with the epilog $(med debian /bin/true 8) ms"
    fi

    # An epilog past the 5 s limit, leaving a child; one that exits at once
    # leaving one (Slurm's test_116_37).
    cat >"$work/slow-epilog" <<EOF
#!/bin/sh
sleep 60 &
echo \$! >$work/slow-child
exec sleep 20
EOF
    cat >"$work/quick-epilog" <<EOF
#!/bin/sh
sleep 60 &
echo \$! >$work/quick-child
exit 0
EOF
    chmod 0755 "$work/slow-epilog" "$work/quick-epilog"
    local log=$D/log/slurmd-n1.log before after t0 t child
    if [[ $parts == *" kill "* ]]; then
    echo "an epilog that runs 20 s, 1 task (killed at 5 s, status logged, its child gone)"
    for v in unpatched patched; do
        use "$v"
        before=$(grep -c 'TaskEpilog failed status=9' "$log" || true)
        t0=$(date +%s%N)
        srun -N1 -n1 -w n1 --task-epilog="$work/slow-epilog" true
        t=$(ms "$t0")
        sleep 0.5
        after=$(grep -c 'TaskEpilog failed status=9' "$log" || true)
        child=$(cat "$work/slow-child")
        echo "  $v: step $t ms; 'TaskEpilog failed status=9' logged $((after - before)) time(s); child $child $([ -e "/proc/$child" ] && echo ALIVE || echo gone)"
        if [ -e "/proc/$child" ]; then kill -9 "$child" 2>/dev/null || true; fi
        use "$v"
        t0=$(date +%s%N)
        srun -N1 -n1 -w n1 --task-epilog="$work/quick-epilog" true
        t=$(ms "$t0")
        child=$(cat "$work/quick-child")
        echo "  $v, an epilog that exits at once leaving 'sleep 60 &': step $t ms; child $child $([ -e "/proc/$child" ] && echo ALIVE || echo gone)"
        if [ -e "/proc/$child" ]; then kill -9 "$child" 2>/dev/null || true; fi
    done
    grep 'TaskEpilog failed status=9' "$log" | tail -2 | sed 's/^/  log: /'
    fi

    # The MPS recipe at 64 tasks, as the test user (no daemon for root).
    local control=$D/mps/bin/nvidia-cuda-mps-control nvml=$D/nvml/libnvidia-ml.so.1
    local user=dgm-alice bin=$PWD/target/release/desi-gpu-map
    if [[ $parts != *" mps "* ]]; then
        :
    elif [ -n "${DGM_SLURM_ROOT:-}" ]; then
        echo "MPS recipe: skipped in a Debian root (the plugin here is built for the host's Slurm)"
    elif [ ! -x "$control" ]; then
        echo "MPS recipe: skipped, no $control (run tests/nvidia/fetch.sh)"
    else
        bash "$harness" plugin required "$so" "mps_control=$control" >/dev/null
        mps_step() { # VARIANT -> appended to results
            local t0 how
            t0=$(date +%s%N)
            case $1 in
                plugin) how=(--desi-gpu-map=contiguous,mps) ;;
                *) how=(--task-prolog="$bin" --task-epilog="$bin") ;;
            esac
            (cd /tmp && runuser -u "$user" -- env SLURM_CONF="$SLURM_CONF" TMPDIR=/tmp DESI_GPU_MAP_METHOD=contiguous,mps \
                DESI_GPU_MAP_MPS_CONTROL="$control" DESI_GPU_MAP_NVML="$nvml" \
                srun -N1 -n64 -w n1 --gpus-per-node=4 "${how[@]}" true)
            echo "mps $1 64 $(ms "$t0")" >>"$work/results"
        }
        for r in $(seq "$rounds"); do
            use unpatched
            mps_step unpatched
            use patched
            mps_step patched
            mps_step plugin
        done
        a=$(awk '$1 == "mps" && $2 == "unpatched" {print $4}' "$work/results" | median)
        b=$(awk '$1 == "mps" && $2 == "patched" {print $4}' "$work/results" | median)
        c=$(awk '$1 == "mps" && $2 == "plugin" {print $4}' "$work/results" | median)
        echo "MPS at 64 tasks as $user, median of $rounds (ms): prolog+epilog unpatched $a, patched $b, plugin ,mps (patched slurmstepd) $c; patched/unpatched $(ratio "$b" "$a"), patched/plugin $(ratio "$b" "$c")"
    fi
    use debian
}

case ${1:-} in
    build) shift; for series in "${@:-22.05}"; do build "$series"; done ;;
    run) shift; run "$@" ;;
    *) die "usage: slurm-epilog.sh build [22.05] [24.11] [26.05] | run [ROUNDS [PARTS...]]" ;;
esac
