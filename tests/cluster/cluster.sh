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
# With DGM_SLURM_ROOT=DIR (a Debian root from slurm-root.sh) the cluster runs
# that root's Slurm: slurmctld and clients run under `chroot DIR`, each
# slurmd with DIR as its real root (pivot_root: enroot under pyxis needs a
# user namespace, which the kernel refuses in a chroot), with /proc, /sys,
# /dev, /etc/hosts, the state dir, the repo and tests/desi/fetch.sh's cache
# bound into it at the same paths, a tmpfs on its /run, and auth/slurm
# instead of munge (see README.md here). `down` undoes every mount.
#
# With DGM_PRODUCTION=1 at `up` the cluster runs as production GPU sites
# run Slurm: proctrack/cgroup, task/cgroup with ConstrainDevices=yes
# (cgroup v1), and where the series has Debian's gpu/nvml plugin (24.11 and
# later, contrib's slurm-wlm-nvml-plugin) GPUs found by AutoDetect=nvml
# through the fake NVML, each node seeing /dev/nvidiaN in a private /dev;
# from 26.05 also Flags=env_uuid. A machine that cannot give this mode makes
# `up` fail, saying what is missing. `down` removes the slurm_nI cgroups.
#
# Must run as root.  Only one Slurm cluster may run on the machine at a time.
set -euo pipefail

SCRIPT_DIR=$(cd "$(dirname "${BASH_SOURCE[0]}")" && pwd)
REPO_DIR=$(cd "$SCRIPT_DIR/../.." && pwd)
# ENROOT_PREFIX: the suite's own enroot (tests/containers/build.sh)
# shellcheck source=tests/containers/paths.sh
. "$REPO_DIR/tests/containers/paths.sh"
D=${DGM_CLUSTER_DIR:-/tmp/desi-gpu-map-cluster}
CTLD_PORT=${DGM_SLURMCTLD_PORT:-16817}
NODE_PORT_BASE=${DGM_SLURMD_PORT_BASE:-17001}
SLURM_DEBUG=${DGM_SLURM_DEBUG:-info}
# slurmd (and so slurmstepd and the SPANK plugin in it) gets this
# LD_LIBRARY_PATH, so dlopen("libnvidia-ml.so.1") finds the fake NVML.
# Set DGM_SLURMD_LD_LIBRARY_PATH= (empty) to start slurmd without it.
SLURMD_LD_LIBRARY_PATH=${DGM_SLURMD_LD_LIBRARY_PATH-$D/nvml}
MARKER=.desi-gpu-map-cluster
# slurmd's PATH, which slurmstepd and pyxis keep: the suite's own enroot
# first, where pyxis looks for `enroot`, before any the machine has.
SLURMD_PATH=$ENROOT_PREFIX/bin:${PATH:-/usr/sbin:/usr/bin:/sbin:/bin}
REAPER=$D/bin/dgm-reaper
# tests/desi/fetch.sh's cache, bound read-only into a Slurm root
DESI_CACHE=${DGM_DESI_CACHE:-/var/tmp/desi-gpu-map-desi}
SHORT_HOST=$(hostname -s)
# The root of the running cluster is recorded at `up`; other commands use it.
ROOT=$(cat "$D/slurm-root" 2>/dev/null || echo "${DGM_SLURM_ROOT:-}")
IN=() # the prefix that runs a Slurm command: (chroot ROOT) or nothing
# The running cluster's mode, recorded at `up` (see mode_of).
MODE=$(cat "$D/mode" 2>/dev/null || echo plain)
# The cgroup v1 controllers that proctrack/cgroup and task/cgroup use.
CGROUP_CONTROLLERS=(freezer devices cpuset memory)

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
  hidepid nI on|off         mount a new /proc with hidepid=invisible on node nI only (off: unmount it)
  resume [NODES...]         undrain nodes (default all) and wait until they are idle
  nvml reset                rewrite the fake NVML control file with the per-node counts
  nvml set LINE...          reset, then append LINEs (e.g. fail.n2=init report=2)
  nvml add LINE...          append LINEs to the control file
  nvml lib off|on           hide / restore the fake libnvidia-ml.so.1
  pyxis SO [before|after] [ARGS...]
                            put pyxis (spank_pyxis.so, tests/containers/build.sh) in the test
                            plugstack, before or after (default) the plugin's entry, with
                            runtime_path=<statedir>/pyxis and the suite's enroot configured
                            to keep every user's dirs under <statedir>/enroot
  pyxis off                 take pyxis out again (down does it too)
  nvml log                  print the fake NVML init log
  nvml clear-log            empty the fake NVML init log
State dir: $D  (DGM_CLUSTER_DIR)
Slurm root: DGM_SLURM_ROOT=DIR at 'up' runs DIR's Slurm under chroot (tests/cluster/slurm-root.sh)
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
    if [ -n "$ROOT" ]; then
        # Slurm is the root's; the host needs only the compiler and util-linux
        bash "$REPO_DIR/packaging/apt-need.sh" cc:gcc unshare:util-linux nsenter:util-linux
        return 0
    fi
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

# ---------------------------------------------------------------- Slurm root

use_root() { # DIR or empty: run Slurm from DIR (chroot) or from the host
    ROOT=$1
    if [ -n "$ROOT" ]; then IN=(chroot "$ROOT"); else IN=(); fi
}

check_root_path() {
    case "$ROOT" in
        /?*) ;;
        *) die "DGM_SLURM_ROOT must be an absolute path (got '$ROOT')" ;;
    esac
    [ "$(cd "$ROOT" 2>/dev/null && pwd -P)" != / ] || die "DGM_SLURM_ROOT must not be /"
    [ -x "$ROOT/usr/sbin/slurmd" ] || die "$ROOT has no /usr/sbin/slurmd (make one with tests/cluster/slurm-root.sh SUITE)"
}

# slurm_version: the running Slurm's version, e.g. 24.11.5
slurm_version() { "${IN[@]}" /usr/sbin/slurmd -V | awk '{print $2}'; }

# at_least VERSION MAJOR.MINOR: VERSION is that series or later
at_least() {
    local have=$1 want=$2
    [ "$(printf '%s\n%s\n' "$want" "$have" | sort -V | head -n 1)" = "$want" ]
}

# mounts_below: every mount point in the root, deepest first
mounts_below() {
    [ -n "$ROOT" ] || return 0
    awk -v r="$ROOT/" 'index($5, r) == 1 {print $5}' /proc/self/mountinfo | sort -r
}

# bind SRC DIR-IN-ROOT [ro]: SRC at the same path inside the root; a slave
# mount, so that unmounting it never reaches the host's own mounts
bind_into_root() {
    local src=$1 dst=$ROOT$2
    if [ -d "$src" ]; then mkdir -p "$dst"; else [ -e "$dst" ] || : >"$dst"; fi
    mount --rbind "$src" "$dst"
    mount --make-rslave "$dst"
    [ "${3:-}" != ro ] || mount -o remount,bind,ro "$dst"
}

# mount_root: what daemons and clients need inside the root. Recorded
# first, so that `down` after a failed `up` still finds the root.
mount_root() {
    [ -z "$(mounts_below)" ] || die "$ROOT already has mounts (another cluster uses it?): $(mounts_below | tr '\n' ' ')"
    echo "$ROOT" >"$D/slurm-root"
    local d
    for d in /proc /sys /dev /etc/hosts; do bind_into_root "$d" "$d"; done
    # slurmctld and the clients share this /run; every slurmd covers its
    # /run/slurm with its own (see start_slurmd)
    mount -t tmpfs -o mode=0755,size=16m dgm-run "$ROOT/run"
    mkdir -p "$ROOT/run/slurm"
    bind_into_root "$D" "$D"
    bind_into_root "$REPO_DIR" "$REPO_DIR" ro
    # DESI's Python from PyPI, which the desi suite's ranks import
    # (tests/desi/fetch.sh's cache; made here if missing, so that what
    # fetch.sh installs later shows through too)
    case "$DESI_CACHE" in /?*) ;; *) die "DGM_DESI_CACHE must be an absolute path (got '$DESI_CACHE')" ;; esac
    mkdir -p "$DESI_CACHE"
    bind_into_root "$DESI_CACHE" "$DESI_CACHE" ro
}

# unmount_root: undo mount_root; safe to repeat, and after a failed `up`
unmount_root() {
    local m i
    [ -n "$ROOT" ] || return 0
    for ((i = 0; i < 5; i++)); do
        [ -n "$(mounts_below)" ] || break
        for m in $(mounts_below); do
            umount "$m" 2>/dev/null || umount -l "$m" 2>/dev/null || true
        done
    done
    if [ -n "$(mounts_below)" ]; then
        log "WARNING: still mounted in $ROOT (kept for the next down): $(mounts_below | tr '\n' ' ')"
    else
        rm -f "$D/slurm-root"
    fi
}
node_count() { wc -l <"$D/nodes" | tr -d ' '; }

# ---------------------------------------------------------------- config

write_plugstack() { # DIR
    printf 'include %s/*.conf\n' "$1" >"$D/plugstack.conf"
}

write_nvml_conf() {
    {
        echo "# fake NVML control file (see tests/fakes/nvml/fake_nvml.c); per-node GPU counts:"
        awk '{printf "count.%s=%s\n", $1, $2}' "$D/nodes"
        # Slurm's gpu/nvml aborts on a GPU near no CPU, and binds a GPU job
        # to the cores near its GPUs: every GPU near every CPU of the host
        # (at most 64), so that the nodes' declared cores all stay usable.
        case "$MODE" in autodetect | uuid)
            local all
            all=$(printf '0x%x' $(( $(nproc) >= 64 ? -1 : (1 << $(nproc)) - 1 )))
            awk -v m="$all" '{printf "affinity.%s=", $1; for (k = 0; k < $2; k++) printf "%s%s", (k ? "," : ""), m; print ""}' "$D/nodes" ;;
        esac
        # Under device constraint NVML lists only the GPUs a process may
        # open, as real NVML does (fence=, tests/fakes/nvml/fake_nvml.c).
        [ "$MODE" = plain ] || awk -v d="$D/gpu" '{printf "fence.%s=%s/%s\n", $1, d, $1}' "$D/nodes"
    } >"$D/nvml/fake-nvml.conf"
    chmod 0644 "$D/nvml/fake-nvml.conf"
}

write_config() {
    local i k n spec gpus flags port names=() last csv
    # DGM_TASK_AFFINITY=1: Slurm really binds tasks to CPUs (task/affinity),
    # so every node declares the host's real CPU count. Otherwise 128, a
    # Perlmutter GPU node's (64 cores, 2 threads each), which DESI's GPU
    # scripts ask whole (-N 1 -n 64 -c 2, tests/cluster/desi.rs): slurmd
    # takes the declared count over the host's (config_overrides below).
    TASK_PLUGIN=task/none NODE_CPUS=128 PROCTRACK=proctrack/linuxproc
    if [ "${DGM_TASK_AFFINITY:-0}" = 1 ]; then
        TASK_PLUGIN=task/affinity NODE_CPUS=$(nproc)
    fi
    if [ "$MODE" != plain ]; then
        # The production modes keep 64 (their suites ask no more), which
        # Slurm lays the fake GPUs' NVML affinity over (write_nvml_conf).
        [ "${DGM_TASK_AFFINITY:-0}" = 1 ] || NODE_CPUS=64
        PROCTRACK=proctrack/cgroup
        case $TASK_PLUGIN in
            task/none) TASK_PLUGIN=task/cgroup ;;
            *) TASK_PLUGIN=task/cgroup,$TASK_PLUGIN ;;
        esac
        write_cgroup_conf
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
            # 0666, as the NVIDIA driver makes /dev/nvidiaN: a user's NVML may open
            # them where the device cgroup lets it (the fake NVML's fence= tries).
            for ((k = 0; k < gpus; k++)); do
                mknod -m 0666 "$D/gpu/n$i/nvidia$k" c 195 "$k"
            done
            last=$((gpus - 1))
            if [ "$MODE" = autodetect ] || [ "$MODE" = uuid ]; then
                autodetect_lines "n$i" "$gpus" "$flags" >>"$D/gres.conf"
            elif [ "$gpus" = 1 ]; then
                echo "NodeName=n$i Name=gpu File=$D/gpu/n$i/nvidia0$flags" >>"$D/gres.conf"
            else
                echo "NodeName=n$i Name=gpu File=$D/gpu/n$i/nvidia[0-$last]$flags" >>"$D/gres.conf"
            fi
        fi
    done

    # auth/slurm from 23.11: the nodes share one host, and with one munged
    # for them all, multi-node steps fail ("Replayed credential").
    # slurm.key, next to slurm.conf, is where auth/slurm looks for it.
    local auth=munge switch="SwitchType=switch/none"
    if at_least "$(cat "$D/version")" 23.11; then
        auth=slurm
        head -c 1024 /dev/urandom >"$D/slurm.key"
        chmod 0600 "$D/slurm.key"
        switch="# SwitchType: none is the default; 23.11+ have no switch/none plugin"
    fi
    cat >"$D/slurm.conf" <<EOF
# generated by tests/cluster/cluster.sh - throw-away test cluster
# Slurm $(cat "$D/version")${ROOT:+ from $ROOT}
ClusterName=dgmtest
SlurmctldHost=$SHORT_HOST(127.0.0.1)
SlurmctldPort=$CTLD_PORT
SlurmdPort=$NODE_PORT_BASE
SlurmUser=root
SlurmdUser=root
AuthType=auth/$auth
CredType=cred/$auth
ProctrackType=$PROCTRACK
TaskPlugin=$TASK_PLUGIN
SelectType=select/cons_tres
SelectTypeParameters=CR_Core
SchedulerType=sched/backfill
SchedulerParameters=batch_sched_delay=0,bf_interval=1,sched_min_interval=0
MpiDefault=none
$switch
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
    # Under AutoDetect one socket of NODE_CPUS cores: Slurm lays the GPUs'
    # NVML CPU affinity over the declared cores and refuses (INVAL) a range
    # that crosses a socket's boundary, as 64 one-core sockets would.
    local cpus="CPUs=$NODE_CPUS"
    case "$MODE" in autodetect | uuid) cpus="CPUs=$NODE_CPUS Sockets=1 CoresPerSocket=$NODE_CPUS ThreadsPerCore=1" ;; esac
    while read -r name gpus port; do
        if [ "$gpus" -gt 0 ]; then
            # Features=gpu: what DESI's GPU scripts ask (--constraint=gpu).
            echo "NodeName=$name NodeHostname=$name NodeAddr=127.0.0.1 Port=$port $cpus RealMemory=1000 Gres=gpu:$gpus Features=gpu State=UNKNOWN"
        else
            echo "NodeName=$name NodeHostname=$name NodeAddr=127.0.0.1 Port=$port $cpus RealMemory=1000 State=UNKNOWN"
        fi
    done <"$D/nodes" >>"$D/slurm.conf"
    csv=$(IFS=,; echo "${names[*]}")
    echo "PartitionName=debug Nodes=$csv Default=YES MaxTime=INFINITE State=UP" >>"$D/slurm.conf"
    # A site's shared queue: jobs share nodes, CPUs oversubscribed up to 4 times.
    echo "PartitionName=shared Nodes=$csv Default=NO MaxTime=INFINITE State=UP OverSubscribe=FORCE:4" >>"$D/slurm.conf"

    write_plugstack "$D/plugstack.conf.d"
    echo "$D/plugstack.conf.d" >"$D/plugstack-include"
}

# mode_of: the cluster's mode from DGM_PRODUCTION and the series: plain
# (linuxproc, File= lines), cgroup (production, File= lines: the series has
# no gpu/nvml package), autodetect (production, AutoDetect=nvml), uuid
# (autodetect with Flags=env_uuid). Fails, saying why, where the machine or
# the root cannot give production mode.
mode_of() {
    [ "${DGM_PRODUCTION:-0}" = 1 ] || { echo plain; return 0; }
    local c missing=()
    for c in "${CGROUP_CONTROLLERS[@]}"; do
        [ -w "/sys/fs/cgroup/$c" ] && [ -e "/sys/fs/cgroup/$c/cgroup.procs" ] || missing+=("/sys/fs/cgroup/$c")
    done
    [ ${#missing[@]} = 0 ] || die "DGM_PRODUCTION=1 needs writable cgroup v1 hierarchies; missing or read-only: ${missing[*]}"
    local version plugins=${ROOT}/usr/lib/x86_64-linux-gnu/slurm-wlm
    version=$(cat "$D/version")
    if ! at_least "$version" 24.11; then
        echo cgroup # Debian ships no gpu/nvml for 22.05
    elif [ ! -e "$plugins/gpu_nvml.so" ]; then
        die "DGM_PRODUCTION=1 on Slurm $version needs Debian's contrib slurm-wlm-nvml-plugin (gpu_nvml.so) in ${ROOT:-/}: remake the root with tests/cluster/slurm-root.sh"
    elif at_least "$version" 26.05; then
        echo uuid
    else
        echo autodetect
    fi
}

# cgroup.conf, next to slurm.conf where Slurm looks for it.
write_cgroup_conf() {
    cat >"$D/cgroup.conf" <<EOF
# generated by tests/cluster/cluster.sh (DGM_PRODUCTION=1)
CgroupPlugin=cgroup/v1
CgroupAutomount=no
ConstrainDevices=yes
ConstrainCores=no
ConstrainRAMSpace=no
EOF
}

# autodetect_lines NODE GPUS FLAGS: the node's gres.conf lines under
# AutoDetect=nvml. With Count= every GPU takes the flags (without it, a
# Flags= line matches one record); env_uuid from 26.05.
autodetect_lines() {
    local node=$1 gpus=$2 flags=$3
    [ "$MODE" = uuid ] && [ -z "$flags" ] && flags=" Flags=env_uuid"
    echo "NodeName=$node AutoDetect=nvml"
    [ -z "$flags" ] || echo "NodeName=$node Name=gpu Count=$gpus$flags"
}

# remove_cgroups: the slurm_nI trees Slurm leaves in each controller
# (empty once the nodes' processes are gone), deepest first.
remove_cgroups() {
    local c n
    [ -s "$D/nodes" ] || return 0
    for c in "${CGROUP_CONTROLLERS[@]}"; do
        for n in $(node_names); do
            [ -d "/sys/fs/cgroup/$c/slurm_$n" ] || continue
            find "/sys/fs/cgroup/$c/slurm_$n" -depth -type d -exec rmdir {} + 2>/dev/null ||
                log "WARNING: /sys/fs/cgroup/$c/slurm_$n is not empty; left"
        done
    done
}

build_helpers() {
    mkdir -p "$D/bin"
    cc -O2 -Wall -Wextra -o "$REAPER" "$SCRIPT_DIR/reaper.c"
    cc -shared -fPIC -O2 -Wall -Wextra -o "$D/nvml/libnvidia-ml.so.1" \
        "$REPO_DIR/tests/fakes/nvml/fake_nvml.c" -DFAKE_NVML_CONF="\"$D/nvml/fake-nvml.conf\""
    cc -O2 -Wall -Wextra -o "$D/nvml/nvml_query" "$REPO_DIR/tests/fakes/nvml/nvml_query.c" -ldl
    write_nvml_conf
    : >"$D/nvml/fake-nvml.log"
    chmod 0666 "$D/nvml/fake-nvml.log"
}

# The test users, who run the MPS tests' jobs (a daemon never runs as
# root): NAME:UID each, made on the host and in the Slurm root, where
# slurmd looks them up. The same names in tests/cluster/common/mod.rs.
TEST_USERS=(dgm-alice:3901 dgm-bob:3902)

make_users() {
    local entry name uid etc
    for entry in "${TEST_USERS[@]}"; do
        name=${entry%%:*} uid=${entry##*:}
        if ! getent passwd "$name" >/dev/null; then
            groupadd -g "$uid" "$name" 2>/dev/null || true
            useradd -u "$uid" -g "$uid" -M -d /tmp -s /bin/bash "$name"
        fi
        [ -n "$ROOT" ] || continue
        for etc in passwd group; do
            grep -q "^$name:" "$ROOT/etc/$etc" || getent "$etc" "$name" >>"$ROOT/etc/$etc"
        done
    done
}

# The real MPS control daemon and server (tests/nvidia/fetch.sh unpacked
# them), copied into the state dir, where a Slurm root sees them too, laid
# out as Debian's nvidia-cuda-mps lays them: the control daemon in bin/,
# the server it execs in sbin/.
copy_mps() {
    local from=${DGM_NVIDIA_DIR:-/var/tmp/desi-gpu-map-nvidia/current} b
    mkdir -p "$D/mps/bin" "$D/mps/sbin"
    for b in bin/nvidia-cuda-mps-control sbin/nvidia-cuda-mps-server; do
        [ -x "$from/${b#*/}" ] || { log "no $from/${b#*/}: the MPS tests will fail (run tests/nvidia/fetch.sh)"; return 0; }
        install -m 0755 "$from/${b#*/}" "$D/mps/$b"
    done
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
    grep -qx 'AuthType=auth/munge' "$D/slurm.conf" || return 0
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
    launch "$D/pids/slurmctld.pid" "$D/log/slurmctld.stderr" "${IN[@]}" /usr/sbin/slurmctld -D -f "$D/slurm.conf"
    local i pid
    pid=$(cat "$D/pids/slurmctld.pid")
    for ((i = 0; i < 200; i++)); do
        [ -e "/proc/$pid" ] || die "slurmctld exited at once"
        pid_is "$pid" slurmctld || { sleep 0.05; continue; }
        if timeout 5 "${IN[@]}" scontrol ping 2>/dev/null | grep -q 'is UP'; then return 0; fi
        sleep 0.05
    done
    die "slurmctld did not come up"
}

# start_slurmd NAME: start one node in its own UTS and mount namespaces (the
# latter so that `hide` can make a file vanish on this node alone), record
# pid and namespace. In a root, the node also gets its own /run/slurm: every
# slurmd of 23.11+ listens on /run/slurm/sack.socket (auth/slurm). There
# the root becomes the node's real root (pivot_root, then the host's tree
# detached), not a chroot: the kernel refuses a chrooted process a user
# namespace (EPERM), which enroot needs under pyxis (tests/cluster/pyxis.rs).
start_slurmd() {
    local name=$1 pid i ns
    if [ -n "$ROOT" ]; then
        launch "$D/pids/slurmd-$name.pid" "$D/log/slurmd-$name.stderr" \
            env ${SLURMD_LD_LIBRARY_PATH:+LD_LIBRARY_PATH="$SLURMD_LD_LIBRARY_PATH"} PATH="$SLURMD_PATH" \
            unshare --uts --mount --propagation private bash -c 'hostname "$1" &&
                mount -t tmpfs -o mode=0755,size=1m dgm-run-slurm "$3/run/slurm" &&
                if [ "$4" -gt 0 ]; then . "$5" && private_dev "$3/dev" "$4"; fi &&
                mount --rbind "$3" "$3" && cd "$3" && pivot_root . mnt &&
                cd / && umount -l /mnt &&
                exec /usr/sbin/slurmd -D -N "$1" -f "$2"' \
            bash "$name" "$D/slurm.conf" "$ROOT" "$(dev_gpus "$name")" "$SCRIPT_DIR/private-dev.sh"
    else
        launch "$D/pids/slurmd-$name.pid" "$D/log/slurmd-$name.stderr" \
            env ${SLURMD_LD_LIBRARY_PATH:+LD_LIBRARY_PATH="$SLURMD_LD_LIBRARY_PATH"} PATH="$SLURMD_PATH" \
            unshare --uts --mount --propagation private sh -c 'hostname "$1" && exec /usr/sbin/slurmd -D -N "$1" -f "$2"' \
            sh "$name" "$D/slurm.conf"
    fi
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

# dev_gpus NAME: how many /dev/nvidiaN node NAME needs in a private /dev:
# its GPU count where Slurm's AutoDetect names them so, else 0.
dev_gpus() {
    case "$MODE" in
        autodetect | uuid) awk -v n="$1" '$1 == n {print $2}' "$D/nodes" ;;
        *) echo 0 ;;
    esac
}

# wait_idle SECONDS [NODES...]: wait until the nodes (default all) are exactly "idle"
wait_idle() { STATES=idle wait_states "$@"; }

# wait_up SECONDS [NODES...]: until the nodes respond, running jobs or not
wait_up() { STATES='idle|mix|alloc' wait_states "$@"; }

wait_states() {
    local t=$1 deadline out bad n
    shift
    local want=("$@")
    [ ${#want[@]} -gt 0 ] || mapfile -t want < <(node_names)
    deadline=$(($(date +%s) + t))
    while :; do
        out=$(timeout 5 "${IN[@]}" sinfo -h -N -o '%N %t' 2>/dev/null || true)
        bad=0
        for n in "${want[@]}"; do
            grep -qxE "$n ($STATES)" <<<"$out" || bad=1
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
    # no daemon was started (an `up` that failed early): only the mounts
    [ -d "$D/pids" ] || { unmount_root; return 0; }
    for f in "$D"/pids/*.pid; do [ -e "$f" ] && any=1; done
    [ -s "$D/pids/uts-namespaces" ] && any=1
    [ -s "$D/pids/reapers" ] && any=1
    if pid_is "$(cat "$D/pids/slurmctld.pid" 2>/dev/null || true)" slurmctld; then
        ctld_alive=1
    fi
    if [ $ctld_alive = 1 ]; then
        # cancel jobs, then ask Slurm to shut down controller and all slurmd
        local jobs
        jobs=$(timeout 5 "${IN[@]}" squeue -h -o %A 2>/dev/null || true)
        if [ -n "$jobs" ]; then
            # shellcheck disable=SC2086
            timeout 5 "${IN[@]}" scancel $jobs 2>/dev/null || true
            # slurmd with running steps ignores the shutdown request for a
            # while, so give the cancelled jobs a moment to end
            local i
            for ((i = 0; i < 50; i++)); do
                [ -z "$(timeout 5 "${IN[@]}" squeue -h -o %A 2>/dev/null || true)" ] && break
                sleep 0.1
            done
        fi
        timeout 5 "${IN[@]}" scontrol shutdown >/dev/null 2>&1 || true
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
    remove_cgroups
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
    # pyxis' runtime dirs and enroot's, the suite's own
    pyxis_off
    # the root's mounts, once nothing runs in it
    unmount_root
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
    use_root "${DGM_SLURM_ROOT:-}"
    [ -z "$ROOT" ] || check_root_path
    ensure_packages
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

    [ -z "$ROOT" ] || mount_root
    slurm_version >"$D/version" || die "cannot run slurmd -V${ROOT:+ in $ROOT}"
    mode_of >"$D/mode"
    MODE=$(cat "$D/mode")
    write_config "$@"
    build_helpers
    make_users
    copy_mps
    start_munge
    start_slurmctld
    for n in $(node_names); do start_slurmd "$n"; done
    wait_idle 30 || die "nodes did not become idle within 30 s"

    n=$(node_count)
    names=$(node_names | sort | tr '\n' ' ')
    got=$(timeout 30 "${IN[@]}" srun -N"$n" -n"$n" hostname 2>&1 | sort | tr '\n' ' ') ||
        die "first srun failed: $got"
    [ "$got" = "$names" ] || die "srun -N$n -n$n hostname printed '$got', expected '$names'"
    trap - EXIT INT TERM
    log "cluster up in $D: Slurm $(cat "$D/version")${ROOT:+ in $ROOT}; $(tr '\n' ';' <"$D/nodes" | sed 's/;$//') (name gpus port); took $((($(date +%s%N) - t0) / 1000000)) ms"
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
    echo "export DGM_SLURM_ROOT=$ROOT"
    echo "export DGM_CLUSTER_MODE=$MODE"
}

# plugin_snippet: the plugin's plugstack snippet, which `plugin` writes.
plugin_snippet() { echo "$D/plugstack.conf.d/desi-gpu-map-test.conf"; }

cmd_plugin() {
    require_up
    local f
    f=$(plugin_snippet)
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

# ---------------------------------------------------------------- pyxis
# pyxis and the suite's own enroot (tests/containers/build.sh, installed in
# ENROOT_PREFIX) run where the series' slurmstepd runs: on the host, or
# inside the root, which sees the repository and the state dir at the same
# paths. Everything they use is the suite's: pyxis' runtime_path and every
# enroot dir are under the state dir, and enroot's configuration is in its
# own prefix. Nothing of the machine's (its /etc/enroot, /run/pyxis, an
# enroot or pyxis of its own) is read or touched. What is made here is
# recorded in pids/ and undone by `pyxis off` and `down`.
PYXIS_SNIPPETS=(00-pyxis.conf zz-pyxis.conf)
# pyxis' runtime_path: slurmstepd makes a dir per uid in it.
PYXIS_RUNTIME=$D/pyxis
# enroot's per-user dirs; 1777 so that every test user makes its own.
ENROOT_BASE=$D/enroot
# The suite's enroot's drop-in: where each user's dirs are.
ENROOT_DROPIN=$ENROOT_PREFIX/etc/enroot/enroot.conf.d/desi-gpu-map-test.conf

# pyxis SO [before|after] [ARGS...]: pyxis' plugstack line, in a snippet
# whose name sorts (glob(3), which Slurm's `include` uses, sorts in the C
# locale here) before or after the plugin's own snippet; its runtime_path
# is the state dir's.
cmd_pyxis() {
    need_root
    require_up
    [ $# -ge 1 ] || die "usage: cluster.sh pyxis SO [before|after] [ARGS...] | pyxis off"
    if [ "$1" = off ]; then
        pyxis_off
        return 0
    fi
    local so=$1 order=after snippet arg
    shift
    case "${1:-}" in before | after) order=$1; shift ;; esac
    [ -f "$so" ] || die "no $so (build it with tests/containers/build.sh SERIES [ROOT])"
    [ -x "$ENROOT_PREFIX/bin/enroot" ] || die "no enroot in $ENROOT_PREFIX/bin (tests/containers/build.sh builds it)"
    for arg in "$@"; do
        case $arg in runtime_path=*) die "pyxis' runtime_path is the suite's own ($PYXIS_RUNTIME)" ;; esac
    done
    case $order in before) snippet=${PYXIS_SNIPPETS[0]} ;; after) snippet=${PYXIS_SNIPPETS[1]} ;; esac
    # The plugin's snippet name is cmd_plugin's; check that the chosen
    # name really sorts on the asked side of it.
    local first
    first=$(printf '%s\n' "$snippet" "$(basename "$(plugin_snippet)")" | LC_ALL=C sort | head -n 1)
    if { [ $order = before ] && [ "$first" != "$snippet" ]; } || { [ $order = after ] && [ "$first" = "$snippet" ]; }; then
        die "pyxis' snippet $snippet would not sort $order $(basename "$(plugin_snippet)"): rename PYXIS_SNIPPETS"
    fi
    pyxis_runtime
    rm -f "${PYXIS_SNIPPETS[@]/#/$D/plugstack.conf.d/}"
    echo "required $so runtime_path=$PYXIS_RUNTIME $*" >"$D/plugstack.conf.d/$snippet.tmp"
    mv -f "$D/plugstack.conf.d/$snippet.tmp" "$D/plugstack.conf.d/$snippet"
}

# pyxis_runtime: what pyxis and enroot need at run time, all the suite's:
# PYXIS_RUNTIME, ENROOT_BASE, and the drop-in that puts each user's
# runtime, cache and data (per node: the nodes share the state dir, and a
# step's container has one name on every node) and config under
# ENROOT_BASE.
pyxis_runtime() {
    if [ ! -d "$PYXIS_RUNTIME" ]; then
        mkdir -m 0755 "$PYXIS_RUNTIME"
        touch "$D/pids/created-pyxis-runtime"
    fi
    if [ ! -d "$ENROOT_BASE" ]; then
        mkdir -m 1777 "$ENROOT_BASE"
        touch "$D/pids/created-enroot-dirs"
    fi
    mkdir -p "$(dirname "$ENROOT_DROPIN")"
    cat >"$ENROOT_DROPIN.tmp" <<EOF
# tests/cluster/cluster.sh pyxis: removed by pyxis off and down
ENROOT_RUNTIME_PATH $ENROOT_BASE/user-\$(id -u)/\$(hostname)/run
ENROOT_CACHE_PATH   $ENROOT_BASE/user-\$(id -u)/\$(hostname)/cache
ENROOT_DATA_PATH    $ENROOT_BASE/user-\$(id -u)/\$(hostname)/data
ENROOT_CONFIG_PATH  $ENROOT_BASE/user-\$(id -u)/config
EOF
    mv -f "$ENROOT_DROPIN.tmp" "$ENROOT_DROPIN"
    echo "$ENROOT_DROPIN" >"$D/pids/created-enroot-dropin"
}

# pyxis_off: undo cmd_pyxis; safe to repeat, and after a failed `up`.
# Also what an earlier cluster.sh recorded as its own, in the root or on
# the host (its /run/pyxis and /tmp/enroot-run).
pyxis_off() {
    [ -d "$D/pids" ] || return 0
    rm -f "${PYXIS_SNIPPETS[@]/#/$D/plugstack.conf.d/}"
    if [ -e "$D/pids/created-enroot-dropin" ]; then
        rm -f "$(cat "$D/pids/created-enroot-dropin")" "$ENROOT_DROPIN.tmp"
        rm -f "$D/pids/created-enroot-dropin"
    fi
    local made dir
    for made in enroot-dirs:"$ENROOT_BASE" enroot-base:"$ROOT/tmp/enroot-run"; do
        dir=${made#*:}
        [ -e "$D/pids/created-${made%%:*}" ] || continue
        # Containers a failed step left: files the users made, some read-only.
        chmod -R u+w "$dir" 2>/dev/null || true
        rm -rf "$dir"
        rm -f "$D/pids/created-${made%%:*}"
    done
    for made in pyxis-runtime:"$PYXIS_RUNTIME" run-pyxis:"$ROOT/run/pyxis"; do
        [ -e "$D/pids/created-${made%%:*}" ] || continue
        rm -rf "${made#*:}"
        rm -f "$D/pids/created-${made%%:*}"
    done
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
    wait_up 30 "$name" || { show_logs 30 >&2; die "$name did not respond after restart"; }
    log "$name restarted (slurmd pid $(cat "$f"))"
}

cmd_resume() {
    require_up
    local nodes
    if [ $# -gt 0 ]; then nodes=$(IFS=,; echo "$*"); else nodes=$(node_names | paste -sd, -); fi
    timeout 10 "${IN[@]}" scontrol update nodename="$nodes" state=resume 2>/dev/null || true
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
    timeout 5 "${IN[@]}" sinfo -N -o '%N %t %G' || true
    timeout 5 "${IN[@]}" squeue || true
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
    # The node's mount namespace has the root (if any) as its own root.
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

# hidepid nI on|off: on node nI only, cover /proc with a new proc instance
# mounted hidepid=invisible (hidepid=2), as shared HPC nodes mount it: a
# user sees only their own dumpable processes. Each proc mount has its own
# options (Linux 5.8 on), so the host's /proc is untouched; never remount.
cmd_hidepid() {
    need_root
    require_up
    [ $# = 2 ] || die "usage: cluster.sh hidepid nI on|off"
    local pid
    pid=$(cat "$D/pids/slurmd-$1.pid" 2>/dev/null) || die "no node $1"
    pid_is "$pid" slurmd || die "slurmd $1 is not running"
    case "$2" in
        on) nsenter -t "$pid" -m mount -t proc -o hidepid=invisible proc /proc ;;
        off)
            # Only our mount: the one whose options say hidepid.
            nsenter -t "$pid" -m sh -c 'grep -q "^proc /proc proc .*hidepid" /proc/mounts && umount /proc' ||
                die "hidepid: no hidepid /proc on $1"
            ;;
        *) die "usage: cluster.sh hidepid nI on|off" ;;
    esac
}

main() {
    local cmd=${1:-}
    use_root "$ROOT"
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
        pyxis) cmd_pyxis "$@" ;;
        hide) cmd_hide "$@" ;;
        unhide) cmd_unhide "$@" ;;
        hidepid) cmd_hidepid "$@" ;;
        -h | --help | help) usage ;;
        *) usage >&2; exit 2 ;;
    esac
}

main "$@"
