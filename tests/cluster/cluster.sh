#!/usr/bin/env bash
# Throw-away local Slurm test cluster for desi-gpu-map (see README.md here).
#
# Every daemon listens on 127.0.0.1 only.  Each node is `slurmd -N nI` on its
# own port, started in its own UTS namespace (hostname nI).  Fake GPUs are
# character devices (c 195 N) under the state directory, never in /dev.
# Everything (config, spool, state, logs, pids) lives in the state directory
# ${DGM_CLUSTER_DIR:-/tmp/desi-gpu-map-cluster}; daemons are started with
# -f <statedir>/slurm.conf and clients need SLURM_CONF (see `cluster.sh env`).
#
# Must run as root.  Only one Slurm cluster may run on the machine at a time.
set -euo pipefail

SCRIPT_DIR=$(cd "$(dirname "${BASH_SOURCE[0]}")" && pwd)
REPO_DIR=$(cd "$SCRIPT_DIR/../.." && pwd)
D=${DGM_CLUSTER_DIR:-/tmp/desi-gpu-map-cluster}
CTLD_PORT=${DGM_SLURMCTLD_PORT:-16817}
NODE_PORT_BASE=${DGM_SLURMD_PORT_BASE:-17001}
SLURM_DEBUG=${DGM_SLURM_DEBUG:-info}
# slurmd (and so slurmstepd and the SPANK plugin in it) gets this
# LD_LIBRARY_PATH, so dlopen("libnvidia-ml.so.1") finds the fake NVML.
# Set DGM_SLURMD_LD_LIBRARY_PATH= (empty) to start slurmd without it.
SLURMD_LD_LIBRARY_PATH=${DGM_SLURMD_LD_LIBRARY_PATH-$D/nvml}
MARKER=.desi-gpu-map-cluster
REAPER=$D/bin/dgm-reaper
SHORT_HOST=$(hostname -s)

export SLURM_CONF=$D/slurm.conf

log() { printf 'cluster.sh: %s\n' "$*" >&2; }
die() { log "ERROR: $*"; exit 1; }

usage() {
    cat <<EOF
usage: cluster.sh COMMAND [ARGS]
  up [GPUS...]              start nodes n1..nN with the given fake GPU counts (default: 4 4);
                            K:noenv gives a node whose GPUs Slurm names by count only (no_gpu_env)
  down                      stop everything 'up' started (idempotent)
  status                    show daemons and node states
  env                       print export lines for eval (SLURM_CONF, DGM_CLUSTER_DIR, fake NVML)
  logs [LINES]              tail all daemon logs (default 40 lines each)
  plugin MODE SO [ARGS...]  MODE=required|optional: write the test plugstack entry
  plugin off                remove the test plugstack entry
  plugstack-include DIR     make plugstack.conf include DIR/*.conf instead
  plugstack-include default restore: include <statedir>/plugstack.conf.d/*.conf
  restart-node nI           restart one slurmd and wait until the node is idle again
  hide nI DIR               cover DIR (under the state dir) with an empty tmpfs on node nI only
  unhide nI DIR             undo hide
  resume [NODES...]         undrain nodes (default all) and wait until they are idle
  nvml reset                rewrite the fake NVML control file with the per-node counts
  nvml set LINE...          reset, then append LINEs (e.g. fail.n2=init report=2)
  nvml add LINE...          append LINEs to the control file
  nvml lib off|on           hide / restore the fake libnvidia-ml.so.1
  nvml log                  print the fake NVML init log
  nvml clear-log            empty the fake NVML init log
State dir: $D  (DGM_CLUSTER_DIR)
EOF
}

# ---------------------------------------------------------------- helpers

need_root() { [ "$(id -u)" = 0 ] || die "must run as root"; }

check_state_dir_path() {
    case "$D" in
        /?*) ;;
        *) die "DGM_CLUSTER_DIR must be an absolute path (got '$D')" ;;
    esac
    case "$D" in
        / | /tmp | /tmp/ | /etc* | /usr* | /var | /root | /home | /run) die "refusing to use $D as state dir" ;;
    esac
}

# pid_is PID COMM: true if PID is alive and its comm is COMM (guards against pid reuse)
pid_is() {
    local pid=$1 comm=$2 c
    [ -n "$pid" ] || return 1
    c=$(cat "/proc/$pid/comm" 2>/dev/null) || return 1
    [ "$c" = "$comm" ]
}

# wait_gone SECONDS PID...: wait until all PIDs have exited; false on timeout
wait_gone() {
    local t=$1 deadline p alive
    shift
    deadline=$(($(date +%s%N) + t * 1000000000))
    while :; do
        alive=0
        for p in "$@"; do
            if [ -e "/proc/$p" ] && [ "$(awk '{print $3}' "/proc/$p/stat" 2>/dev/null)" != Z ]; then
                alive=1
            fi
        done
        [ $alive = 0 ] && return 0
        [ "$(date +%s%N)" -ge $deadline ] && return 1
        sleep 0.05
    done
}

port_listening() { # PORT -> true if something listens on it (IPv4/IPv6)
    local hex
    hex=$(printf '%04X' "$1")
    cat /proc/net/tcp /proc/net/tcp6 2>/dev/null |
        awk -v h=":$hex" 'NR>1 && $4=="0A" && substr($2, length($2)-4)==h {f=1} END {exit !f}'
}

ensure_packages() {
    local missing=0 b
    for b in slurmd slurmctld slurmstepd munged munge unmunge srun sbatch scontrol sinfo squeue scancel; do
        command -v "$b" >/dev/null 2>&1 || [ -x "/usr/sbin/$b" ] || missing=1
    done
    [ -e /usr/include/slurm/spank.h ] || missing=1
    local pkgs=()
    [ $missing = 1 ] && pkgs+=(slurm-wlm munge libslurm-dev)
    command -v cc >/dev/null 2>&1 || pkgs+=(gcc libc6-dev)
    if [ ${#pkgs[@]} -gt 0 ]; then
        log "installing missing Debian packages: ${pkgs[*]}"
        DEBIAN_FRONTEND=noninteractive apt-get update -qq
        DEBIAN_FRONTEND=noninteractive apt-get install -y -qq "${pkgs[@]}" >/dev/null
    fi
}

node_names() { awk '{print $1}' "$D/nodes"; }
node_count() { wc -l <"$D/nodes" | tr -d ' '; }

# ---------------------------------------------------------------- config

write_plugstack() { # DIR
    printf 'include %s/*.conf\n' "$1" >"$D/plugstack.conf"
}

write_nvml_conf() {
    {
        echo "# fake NVML control file (see tests/nvml/fake_nvml.c); per-node GPU counts:"
        awk '{printf "count.%s=%s\n", $1, $2}' "$D/nodes"
    } >"$D/nvml/fake-nvml.conf"
    chmod 0644 "$D/nvml/fake-nvml.conf"
}

write_config() {
    local i k n spec gpus flags port names=() last csv
    # DGM_TASK_AFFINITY=1: Slurm really binds tasks to CPUs (task/affinity),
    # so every node declares the host's real CPU count.
    TASK_PLUGIN=task/none NODE_CPUS=64
    if [ "${DGM_TASK_AFFINITY:-0}" = 1 ]; then
        TASK_PLUGIN=task/affinity NODE_CPUS=$(nproc)
    fi
    n=$#
    mkdir -p "$D"/{state,run,log,spool,pids,gpu,nvml,plugstack.conf.d}
    : >"$D/nodes"
    : >"$D/gres.conf"
    for ((i = 1; i <= n; i++)); do
        # K, or K:noenv for a node whose gres.conf says Flags=no_gpu_env:
        # Slurm then sets SLURM_GPUS_ON_NODE but no CUDA_VISIBLE_DEVICES.
        spec=${!i}
        gpus=${spec%%:*}
        flags=
        case "$spec" in *:noenv) flags=" Flags=no_gpu_env" ;; *:*) die "bad node spec '$spec' (K or K:noenv)" ;; esac
        [[ "$gpus" =~ ^[0-9]+$ ]] || die "GPU count must be a number, got '$spec'"
        port=$((NODE_PORT_BASE + i - 1))
        echo "n$i $gpus $port" >>"$D/nodes"
        names+=("n$i")
        mkdir -p "$D/spool/n$i" "$D/gpu/n$i"
        if [ "$gpus" -gt 0 ]; then
            for ((k = 0; k < gpus; k++)); do
                mknod -m 0600 "$D/gpu/n$i/nvidia$k" c 195 "$k"
            done
            last=$((gpus - 1))
            if [ "$gpus" = 1 ]; then
                echo "NodeName=n$i Name=gpu File=$D/gpu/n$i/nvidia0$flags" >>"$D/gres.conf"
            else
                echo "NodeName=n$i Name=gpu File=$D/gpu/n$i/nvidia[0-$last]$flags" >>"$D/gres.conf"
            fi
        fi
    done

    cat >"$D/slurm.conf" <<EOF
# generated by tests/cluster/cluster.sh - throw-away test cluster
ClusterName=dgmtest
SlurmctldHost=$SHORT_HOST(127.0.0.1)
SlurmctldPort=$CTLD_PORT
SlurmdPort=$NODE_PORT_BASE
SlurmUser=root
SlurmdUser=root
AuthType=auth/munge
CredType=cred/munge
ProctrackType=proctrack/linuxproc
TaskPlugin=$TASK_PLUGIN
SelectType=select/cons_tres
SelectTypeParameters=CR_Core
SchedulerType=sched/backfill
SchedulerParameters=batch_sched_delay=0,bf_interval=1,sched_min_interval=0
MpiDefault=none
SwitchType=switch/none
MailProg=/bin/true
SlurmdParameters=config_overrides
ReturnToService=2
GresTypes=gpu
PlugStackConfig=$D/plugstack.conf
AccountingStorageType=accounting_storage/none
JobAcctGatherType=jobacct_gather/none
JobCompType=jobcomp/none
StateSaveLocation=$D/state
SlurmdSpoolDir=$D/spool/%n
SlurmctldPidFile=$D/run/slurmctld.pid
SlurmdPidFile=$D/run/slurmd-%n.pid
SlurmctldLogFile=$D/log/slurmctld.log
SlurmdLogFile=$D/log/slurmd-%n.log
SlurmctldDebug=$SLURM_DEBUG
SlurmdDebug=$SLURM_DEBUG
SlurmctldTimeout=10
SlurmdTimeout=10
MessageTimeout=5
TCPTimeout=2
KillWait=1
InactiveLimit=0
MinJobAge=30
BatchStartTimeout=10
EOF
    while read -r name gpus port; do
        if [ "$gpus" -gt 0 ]; then
            echo "NodeName=$name NodeHostname=$name NodeAddr=127.0.0.1 Port=$port CPUs=$NODE_CPUS RealMemory=1000 Gres=gpu:$gpus State=UNKNOWN"
        else
            echo "NodeName=$name NodeHostname=$name NodeAddr=127.0.0.1 Port=$port CPUs=$NODE_CPUS RealMemory=1000 State=UNKNOWN"
        fi
    done <"$D/nodes" >>"$D/slurm.conf"
    csv=$(IFS=,; echo "${names[*]}")
    echo "PartitionName=debug Nodes=$csv Default=YES MaxTime=INFINITE State=UP" >>"$D/slurm.conf"
    # A site's shared queue: jobs share nodes, CPUs oversubscribed up to 4 times.
    echo "PartitionName=shared Nodes=$csv Default=NO MaxTime=INFINITE State=UP OverSubscribe=FORCE:4" >>"$D/slurm.conf"

    write_plugstack "$D/plugstack.conf.d"
    echo "$D/plugstack.conf.d" >"$D/plugstack-include"
}

build_helpers() {
    mkdir -p "$D/bin"
    cc -O2 -Wall -Wextra -o "$REAPER" "$SCRIPT_DIR/reaper.c"
    cc -shared -fPIC -O2 -Wall -Wextra -o "$D/nvml/libnvidia-ml.so.1" \
        "$REPO_DIR/tests/nvml/fake_nvml.c" -DFAKE_NVML_CONF="\"$D/nvml/fake-nvml.conf\""
    cc -O2 -Wall -Wextra -o "$D/nvml/nvml_query" "$REPO_DIR/tests/nvml/nvml_query.c" -ldl
    write_nvml_conf
    : >"$D/nvml/fake-nvml.log"
    chmod 0666 "$D/nvml/fake-nvml.log"
}

# ---------------------------------------------------------------- daemons

# launch PIDFILE LOGFILE CMD...: run CMD in the background under dgm-reaper
# (new session, subreaper that reaps CMD and its orphans), record the
# reaper's pid and wait until the reaper has written CMD's pid to PIDFILE
launch() {
    local pidfile=$1 logfile=$2 i
    shift 2
    rm -f "$pidfile"
    "$REAPER" "$pidfile" "$@" </dev/null >>"$logfile" 2>&1 &
    echo $! >>"$D/pids/reapers"
    for ((i = 0; i < 100; i++)); do
        [ -s "$pidfile" ] && return 0
        sleep 0.01
    done
    die "could not launch $*"
}

# live_pids COMM: pids of non-zombie processes named COMM
live_pids() {
    ps -eo pid=,stat=,comm= | awk -v c="$1" '$3 == c && $2 !~ /^Z/ {print $1}'
}

munge_ok() { munge -n 2>/dev/null | unmunge >/dev/null 2>&1; }

start_munge() {
    if munge_ok; then
        log "using the munged that is already running (not ours: it will be left alone)"
        return 0
    fi
    if [ ! -e /etc/munge/munge.key ]; then
        log "creating /etc/munge/munge.key (removed again by 'down')"
        mungekey -c -k /etc/munge/munge.key
        chown munge:munge /etc/munge/munge.key
        chmod 0600 /etc/munge/munge.key
        touch "$D/pids/created-munge-key"
    fi
    if [ ! -d /run/munge ]; then
        mkdir -p /run/munge
        touch "$D/pids/created-run-munge"
    fi
    chown munge:munge /run/munge
    chmod 0755 /run/munge
    mkdir -p "$D/munge"
    chown munge:munge "$D/munge"
    chmod 0700 "$D/munge"
    # runuser returns once munged has daemonized; munged stays below the reaper
    launch "$D/pids/munge-runuser.pid" "$D/log/munged.stderr" \
        runuser -u munge -- /usr/sbin/munged --pid-file="$D/munge/munged.pid" \
        --log-file="$D/munge/munged.log" --seed-file="$D/munge/munged.seed"
    local i pid=""
    for ((i = 0; i < 200; i++)); do
        pid=$(cat "$D/munge/munged.pid" 2>/dev/null || true)
        if [ -n "$pid" ] && munge_ok; then break; fi
        sleep 0.05
    done
    pid_is "$pid" munged || die "munged did not start"
    echo "$pid" >"$D/pids/munged.pid"
    rm -f "$D/pids/munge-runuser.pid"
    munge_ok || die "munge -n | unmunge fails"
}

start_slurmctld() {
    launch "$D/pids/slurmctld.pid" "$D/log/slurmctld.stderr" /usr/sbin/slurmctld -D -f "$D/slurm.conf"
    local i pid
    pid=$(cat "$D/pids/slurmctld.pid")
    for ((i = 0; i < 200; i++)); do
        [ -e "/proc/$pid" ] || die "slurmctld exited at once"
        pid_is "$pid" slurmctld || { sleep 0.05; continue; }
        if timeout 5 scontrol ping 2>/dev/null | grep -q 'is UP'; then return 0; fi
        sleep 0.05
    done
    die "slurmctld did not come up"
}

# start_slurmd NAME: start one node in its own UTS and mount namespaces (the
# latter so that `hide` can make a file vanish on this node alone), record
# pid and namespace
start_slurmd() {
    local name=$1 pid i ns
    launch "$D/pids/slurmd-$name.pid" "$D/log/slurmd-$name.stderr" \
        env ${SLURMD_LD_LIBRARY_PATH:+LD_LIBRARY_PATH="$SLURMD_LD_LIBRARY_PATH"} \
        unshare --uts --mount --propagation private sh -c 'hostname "$1" && exec /usr/sbin/slurmd -D -N "$1" -f "$2"' \
        sh "$name" "$D/slurm.conf"
    pid=$(cat "$D/pids/slurmd-$name.pid")
    for ((i = 0; i < 200; i++)); do
        pid_is "$pid" slurmd && break
        [ -e "/proc/$pid" ] || die "slurmd for $name exited at once"
        sleep 0.02
    done
    pid_is "$pid" slurmd || die "slurmd for $name did not start"
    ns=$(readlink "/proc/$pid/ns/uts") || die "cannot read UTS namespace of slurmd $name"
    [ "$ns" != "$(readlink /proc/self/ns/uts)" ] || die "slurmd $name is not in its own UTS namespace"
    echo "$ns" >>"$D/pids/uts-namespaces"
}

# wait_idle SECONDS [NODES...]: wait until the nodes (default all) are exactly "idle"
wait_idle() {
    local t=$1 deadline out bad n
    shift
    local want=("$@")
    [ ${#want[@]} -gt 0 ] || mapfile -t want < <(node_names)
    deadline=$(($(date +%s) + t))
    while :; do
        out=$(timeout 5 sinfo -h -N -o '%N %t' 2>/dev/null || true)
        bad=0
        for n in "${want[@]}"; do
            grep -qx "$n idle" <<<"$out" || bad=1
        done
        [ $bad = 0 ] && return 0
        [ "$(date +%s)" -ge $deadline ] && { log "node states: $(tr '\n' ' ' <<<"$out")"; return 1; }
        sleep 0.1
    done
}

show_logs() {
    local lines=${1:-40} f n
    for f in "$D"/log/slurmctld.log "$D"/log/slurmd-*.log "$D"/munge/munged.log "$D"/log/*.stderr; do
        [ -s "$f" ] || continue
        n=$lines
        # daemons run with -D, so *.stderr mostly repeats the log; it matters
        # for errors before the log file is opened
        case "$f" in *.stderr) [ "$n" -gt 10 ] && n=10 ;; esac
        echo "===== $f (last $n lines) ====="
        tail -n "$n" "$f"
    done
}

# ---------------------------------------------------------------- down

kill_pidfile() { # PIDFILE COMM: TERM, wait, KILL
    local f=$1 comm=$2 pid
    [ -f "$f" ] || return 0
    pid=$(cat "$f")
    if pid_is "$pid" "$comm"; then
        kill -TERM "$pid" 2>/dev/null || true
        if ! wait_gone 5 "$pid"; then
            log "$comm ($pid) ignored SIGTERM, sending SIGKILL"
            kill -KILL "$pid" 2>/dev/null || true
            wait_gone 3 "$pid" || log "WARNING: $comm ($pid) still alive"
        fi
    fi
    rm -f "$f"
}

# pids of every process in one of the UTS namespaces we created
ns_pids() {
    [ -s "$D/pids/uts-namespaces" ] || return 0
    local p ns
    for p in /proc/[0-9]*; do
        ns=$(readlink "$p/ns/uts" 2>/dev/null) || continue
        if grep -qxF "$ns" "$D/pids/uts-namespaces"; then echo "${p#/proc/}"; fi
    done
}

do_down() {
    local pids=() f pid ctld_alive=0 any=0
    [ -d "$D/pids" ] || return 0
    for f in "$D"/pids/*.pid; do [ -e "$f" ] && any=1; done
    [ -s "$D/pids/uts-namespaces" ] && any=1
    [ -s "$D/pids/reapers" ] && any=1
    if pid_is "$(cat "$D/pids/slurmctld.pid" 2>/dev/null || true)" slurmctld; then
        ctld_alive=1
    fi
    if [ $ctld_alive = 1 ]; then
        # cancel jobs, then ask Slurm to shut down controller and all slurmd
        local jobs
        jobs=$(timeout 5 squeue -h -o %A 2>/dev/null || true)
        if [ -n "$jobs" ]; then
            # shellcheck disable=SC2086
            timeout 5 scancel $jobs 2>/dev/null || true
            # slurmd with running steps ignores the shutdown request for a
            # while, so give the cancelled jobs a moment to end
            local i
            for ((i = 0; i < 50; i++)); do
                [ -z "$(timeout 5 squeue -h -o %A 2>/dev/null || true)" ] && break
                sleep 0.1
            done
        fi
        timeout 5 scontrol shutdown >/dev/null 2>&1 || true
    fi
    # wait for slurm daemons, then TERM/KILL leftovers
    for f in "$D"/pids/slurmctld.pid "$D"/pids/slurmd-*.pid; do
        [ -e "$f" ] || continue
        pid=$(cat "$f")
        if pid_is "$pid" slurmctld || pid_is "$pid" slurmd; then pids+=("$pid"); fi
    done
    if [ ${#pids[@]} -gt 0 ]; then wait_gone 3 "${pids[@]}" || true; fi
    for f in "$D"/pids/slurmd-*.pid; do [ -e "$f" ] && kill_pidfile "$f" slurmd; done
    kill_pidfile "$D/pids/slurmctld.pid" slurmctld
    # anything still running in our node namespaces (slurmstepd, job tasks)
    mapfile -t pids < <(ns_pids)
    if [ ${#pids[@]} -gt 0 ]; then
        log "terminating leftover node processes: ${pids[*]}"
        kill -TERM "${pids[@]}" 2>/dev/null || true
        if ! wait_gone 3 "${pids[@]}"; then
            mapfile -t pids < <(ns_pids)
            [ ${#pids[@]} -gt 0 ] && kill -KILL "${pids[@]}" 2>/dev/null || true
            mapfile -t pids < <(ns_pids)
            [ ${#pids[@]} -gt 0 ] && wait_gone 3 "${pids[@]}" || true
        fi
    fi
    rm -f "$D/pids/uts-namespaces"
    kill_pidfile "$D/pids/munged.pid" munged
    rm -f "$D/pids/munge-runuser.pid"
    # every reaper exits once all it started is gone
    if [ -s "$D/pids/reapers" ]; then
        mapfile -t pids < <(while read -r pid; do pid_is "$pid" dgm-reaper && echo "$pid"; done <"$D/pids/reapers")
        if [ ${#pids[@]} -gt 0 ] && ! wait_gone 3 "${pids[@]}"; then
            log "WARNING: reapers still have children; killing reapers ${pids[*]}"
            kill -KILL "${pids[@]}" 2>/dev/null || true
        fi
    fi
    rm -f "$D/pids/reapers"
    # restore what we changed outside the state dir
    if [ -e "$D/pids/created-munge-key" ]; then
        rm -f /etc/munge/munge.key
        rm -f "$D/pids/created-munge-key"
    fi
    if [ -e "$D/pids/created-run-munge" ]; then
        rm -rf /run/munge
        rm -f "$D/pids/created-run-munge"
    fi
    # the fake device nodes are not needed any more; logs are kept for post-mortems
    rm -rf "$D/gpu"
    [ $any = 1 ] && log "cluster in $D is down" || true
}

# ---------------------------------------------------------------- commands

cmd_up() {
    need_root
    check_state_dir_path
    [ $# -gt 0 ] || set -- 4 4
    local t0 n names got
    t0=$(date +%s%N)
    ensure_packages
    # stop a previous cluster of ours, then refuse if some other Slurm runs
    if [ -d "$D" ]; then
        [ -e "$D/$MARKER" ] || [ -z "$(ls -A "$D")" ] ||
            die "$D exists and was not made by cluster.sh; refusing to wipe it"
        do_down
        rm -rf "$D"
    fi
    if [ -n "$(live_pids slurmctld)$(live_pids slurmd)" ]; then
        die "another Slurm is running (slurmctld: $(live_pids slurmctld | tr '\n' ' ') slurmd: $(live_pids slurmd | tr '\n' ' ')); refusing to start a second one"
    fi
    local p
    for p in "$CTLD_PORT" $(seq "$NODE_PORT_BASE" $((NODE_PORT_BASE + $# - 1))); do
        ! port_listening "$p" || die "TCP port $p is already in use"
    done
    mkdir -p "$D"
    chmod 0755 "$D"
    touch "$D/$MARKER"

    # from here on, any failure tears down what was started
    trap 'rc=$?; trap - EXIT; if [ $rc -ne 0 ]; then log "up failed; daemon logs:"; show_logs 30 >&2 || true; do_down || true; fi; exit $rc' EXIT
    trap 'exit 130' INT TERM

    write_config "$@"
    build_helpers
    start_munge
    start_slurmctld
    for n in $(node_names); do start_slurmd "$n"; done
    wait_idle 30 || die "nodes did not become idle within 30 s"

    n=$(node_count)
    names=$(node_names | sort | tr '\n' ' ')
    got=$(timeout 30 srun -N"$n" -n"$n" hostname 2>&1 | sort | tr '\n' ' ') ||
        die "first srun failed: $got"
    [ "$got" = "$names" ] || die "srun -N$n -n$n hostname printed '$got', expected '$names'"
    trap - EXIT INT TERM
    log "cluster up in $D: $(tr '\n' ';' <"$D/nodes" | sed 's/;$//') (name gpus port); took $((($(date +%s%N) - t0) / 1000000)) ms"
    log "use: eval \"\$($0 env)\""
}

cmd_down() {
    need_root
    check_state_dir_path
    local t0
    t0=$(date +%s%N)
    do_down
    log "down took $((($(date +%s%N) - t0) / 1000000)) ms"
}

require_up() {
    [ -f "$D/slurm.conf" ] && [ -f "$D/nodes" ] || die "no cluster in $D (run: cluster.sh up)"
}

cmd_env() {
    echo "export SLURM_CONF=$D/slurm.conf"
    echo "export DGM_CLUSTER_DIR=$D"
    echo "export DGM_FAKE_NVML=$D/nvml/libnvidia-ml.so.1"
    echo "export DGM_FAKE_NVML_CONF=$D/nvml/fake-nvml.conf"
    echo "export DGM_FAKE_NVML_LOG=$D/nvml/fake-nvml.log"
}

cmd_plugin() {
    require_up
    local f=$D/plugstack.conf.d/desi-gpu-map-test.conf
    [ $# -ge 1 ] || die "usage: cluster.sh plugin required|optional SO_PATH [ARGS...] | plugin off"
    case "$1" in
        off)
            rm -f "$f"
            return 0
            ;;
        required | optional) ;;
        *) die "plugin mode must be required, optional or off (got '$1')" ;;
    esac
    [ $# -ge 2 ] || die "usage: cluster.sh plugin $1 SO_PATH [ARGS...]"
    mkdir -p "$D/plugstack.conf.d"
    echo "$*" >"$f.tmp"
    mv -f "$f.tmp" "$f"
}

cmd_plugstack_include() {
    require_up
    [ $# = 1 ] || die "usage: cluster.sh plugstack-include DIR|default"
    local dir=$1
    [ "$dir" = default ] && dir=$D/plugstack.conf.d
    case "$dir" in /*) ;; *) die "DIR must be absolute" ;; esac
    write_plugstack "$dir"
    echo "$dir" >"$D/plugstack-include"
}

cmd_restart_node() {
    need_root
    require_up
    [ $# = 1 ] || die "usage: cluster.sh restart-node nI"
    local name=$1 f pid before
    grep -q "^$name " "$D/nodes" || die "no node $name"
    f=$D/pids/slurmd-$name.pid
    pid=$(cat "$f" 2>/dev/null || true)
    if pid_is "$pid" slurmd; then
        kill -TERM "$pid"
        wait_gone 10 "$pid" || { kill -KILL "$pid" 2>/dev/null || true; wait_gone 3 "$pid" || true; }
    fi
    rm -f "$f"
    before=$(grep -c 'slurmd started on' "$D/log/slurmd-$name.log" 2>/dev/null || true)
    start_slurmd "$name"
    local i
    for ((i = 0; i < 300; i++)); do
        [ "$(grep -c 'slurmd started on' "$D/log/slurmd-$name.log" 2>/dev/null || true)" -gt "${before:-0}" ] && break
        pid_is "$(cat "$f")" slurmd || { show_logs 30 >&2; die "slurmd $name died on restart"; }
        sleep 0.05
    done
    wait_idle 30 "$name" || { show_logs 30 >&2; die "$name did not become idle after restart"; }
    log "$name restarted (slurmd pid $(cat "$f"))"
}

cmd_resume() {
    require_up
    local nodes
    if [ $# -gt 0 ]; then nodes=$(IFS=,; echo "$*"); else nodes=$(node_names | paste -sd, -); fi
    timeout 10 scontrol update nodename="$nodes" state=resume 2>/dev/null || true
    # shellcheck disable=SC2086
    wait_idle 30 ${nodes//,/ } || die "nodes $nodes did not become idle"
}

cmd_status() {
    require_up
    local f pid comm
    for f in "$D"/pids/*.pid; do
        [ -e "$f" ] || continue
        pid=$(cat "$f")
        comm=$(cat "/proc/$pid/comm" 2>/dev/null || echo dead)
        echo "$(basename "$f" .pid): pid $pid ($comm)"
    done
    timeout 5 sinfo -N -o '%N %t %G' || true
    timeout 5 squeue || true
}

cmd_nvml() {
    require_up
    local conf=$D/nvml/fake-nvml.conf lib=$D/nvml/libnvidia-ml.so.1
    case "${1:-}" in
        reset) write_nvml_conf ;;
        set)
            shift
            write_nvml_conf
            [ $# -gt 0 ] && printf '%s\n' "$@" >>"$conf"
            ;;
        add)
            shift
            [ $# -gt 0 ] && printf '%s\n' "$@" >>"$conf"
            ;;
        lib)
            case "${2:-}" in
                off) [ -e "$lib" ] && mv -f "$lib" "$lib.off" || true ;;
                on) [ -e "$lib.off" ] && mv -f "$lib.off" "$lib" || true ;;
                *) die "usage: cluster.sh nvml lib off|on" ;;
            esac
            ;;
        log) cat "$D/nvml/fake-nvml.log" ;;
        clear-log) : >"$D/nvml/fake-nvml.log" ;;
        *) die "usage: cluster.sh nvml reset|set LINE...|add LINE...|lib off|on|log|clear-log" ;;
    esac
}

# hide nI DIR: on node nI only (its slurmd and the slurmstepd it forks
# later), cover DIR, which must lie under the state dir, with an empty tmpfs.
cmd_hide() {
    need_root
    require_up
    [ $# = 2 ] || die "usage: cluster.sh hide nI DIR"
    local pid
    case "$2" in "$D"/?*) ;; *) die "hide: $2 is not under $D" ;; esac
    pid=$(cat "$D/pids/slurmd-$1.pid" 2>/dev/null) || die "no node $1"
    pid_is "$pid" slurmd || die "slurmd $1 is not running"
    nsenter -t "$pid" -m mount -t tmpfs -o size=1m dgm-hidden "$2"
}

# unhide nI DIR: undo `hide`.
cmd_unhide() {
    need_root
    require_up
    [ $# = 2 ] || die "usage: cluster.sh unhide nI DIR"
    local pid
    pid=$(cat "$D/pids/slurmd-$1.pid" 2>/dev/null) || die "no node $1"
    pid_is "$pid" slurmd || die "slurmd $1 is not running"
    nsenter -t "$pid" -m umount "$2"
}

main() {
    local cmd=${1:-}
    [ $# -gt 0 ] && shift
    case "$cmd" in
        up) cmd_up "$@" ;;
        down) cmd_down ;;
        env) cmd_env ;;
        logs) require_up; show_logs "${1:-40}" ;;
        plugin) cmd_plugin "$@" ;;
        plugstack-include) cmd_plugstack_include "$@" ;;
        restart-node) cmd_restart_node "$@" ;;
        resume) cmd_resume "$@" ;;
        status) cmd_status ;;
        nvml) cmd_nvml "$@" ;;
        hide) cmd_hide "$@" ;;
        unhide) cmd_unhide "$@" ;;
        -h | --help | help) usage ;;
        *) usage >&2; exit 2 ;;
    esac
}

main "$@"
