#!/usr/bin/env bash
# autodetect.sh SUITE  Proves that Slurm's own gpu/nvml plugin (gres.conf
# AutoDetect=nvml, Debian's slurm-wlm-nvml-plugin) finds the fake NVML's
# GPUs, with no cluster: in the SUITE root from slurm-root.sh (trixie: 24.11,
# sid: 26.05) it runs `slurmd -G` (print the node's GRES and exit) against a
# one-node slurm.conf with Gres=gpu:4 and the fake libnvidia-ml.so.1, and
# fails unless Slurm lists exactly the fake's four GPUs: Index and
# File=/dev/nvidiaI, the fake's UUIDs, no NVLinks, CPU affinity, ENV_NVML.
# From 26.05 it also runs with gres.conf Flags=env_uuid and expects every
# GPU flagged UUID.
# Everything happens in a private mount and UTS namespace (hostname n1): a
# tmpfs on the root's /tmp holds the config and the fake, a tmpfs on its
# /dev holds the basic devices and /dev/nvidia0-3 (c 195 N); the root and
# the host are left as they were. No daemon stays: slurmd -G exits at once.
# DGM_SERIES_CACHE picks the roots' cache (see slurm-root.sh);
# DGM_AUTODETECT_NVML='LINE...' appends lines to the fake's control file
# (report=2 makes Slurm find two GPUs, so this script fails).
# Must run as root.
set -euo pipefail
cd "$(dirname "$0")/../.."

die() { echo "autodetect.sh: FAIL: $*" >&2; exit 1; }
[ $# = 1 ] || die "usage: autodetect.sh SUITE (trixie or sid)"
[ "$(id -u)" = 0 ] || die "must run as root (chroot, mount, mknod)"
GPUS=4
W=/tmp/dgm-autodetect # inside the root, on a private tmpfs

# write_files DIR GRES_EXTRA: the config, the key and the fake in DIR.
write_files() {
    local dir=$1 extra=$2
    cc -shared -fPIC -O2 -Wall -Wextra -o "$dir/libnvidia-ml.so.1" \
        tests/fakes/nvml/fake_nvml.c -DFAKE_NVML_CONF="\"$W/fake-nvml.conf\""
    # Slurm fatal()s on a GPU with no CPUs: GPUs 0,1 near CPU 0, 2,3 near the last.
    local last=$(($(nproc) - 1))
    printf 'count=%s\naffinity=0x1,0x1,0x%x,0x%x\n' "$GPUS" $((1 << last)) $((1 << last)) \
        >"$dir/fake-nvml.conf"
    local line
    for line in ${DGM_AUTODETECT_NVML:-}; do echo "$line" >>"$dir/fake-nvml.conf"; done
    cat >"$dir/slurm.conf" <<EOF
ClusterName=autodetect
SlurmctldHost=n1(127.0.0.1)
SlurmUser=root
AuthType=auth/slurm
CredType=cred/slurm
SlurmdPort=17501
SlurmdSpoolDir=$W/spool
SlurmdPidFile=$W/slurmd.pid
StateSaveLocation=$W/state
ProctrackType=proctrack/linuxproc
TaskPlugin=task/none
SlurmdParameters=config_overrides
GresTypes=gpu
NodeName=n1 NodeAddr=127.0.0.1 CPUs=$(nproc) Gres=gpu:$GPUS State=UNKNOWN
PartitionName=p Nodes=n1 Default=YES
EOF
    printf 'AutoDetect=nvml\n%s' "$extra" >"$dir/gres.conf"
    head -c 1024 /dev/urandom >"$dir/slurm.key"
    chmod 0600 "$dir/slurm.key"
    mkdir -p "$dir/spool" "$dir/state"
}

# in_namespace ROOT DIR: (already in the private namespace) mounts what
# slurmd needs below ROOT, then runs `slurmd -G` there; prints its output.
in_namespace() {
    local root=$1 dir=$2 dev name major minor i
    hostname n1
    mount -t tmpfs -o mode=1777 tmpfs "$root/tmp"
    mkdir "$root$W"
    cp -a "$dir/." "$root$W/"
    mount -t proc proc "$root/proc"
    mount --rbind /sys "$root/sys"
    mount -t tmpfs -o mode=0755 tmpfs "$root/dev"
    for dev in null:1:3 zero:1:5 full:1:7 random:1:8 urandom:1:9 tty:5:0; do
        IFS=: read -r name major minor <<<"$dev"
        mknod -m 0666 "$root/dev/$name" c "$major" "$minor"
    done
    for ((i = 0; i < GPUS; i++)); do mknod -m 0666 "$root/dev/nvidia$i" c 195 "$i"; done
    LD_LIBRARY_PATH=$W timeout 60 chroot "$root" /usr/sbin/slurmd -f "$W/slurm.conf" -N n1 -G -vvv 2>&1 ||
        echo "autodetect.sh: slurmd -G exited $?"
    echo "autodetect.sh: fake NVML inits: $(cat "$root$W/fake-nvml.log" 2>/dev/null | grep -c '^init n1 ')"
}

# check OUTPUT WANT_UUID_FLAG: Slurm found the fake's GPUs and nothing else.
check() {
    local out=$1 want_uuid=$2 i record
    ! grep -E '(^|: |\] )(error|fatal):|slurmd -G exited' <<<"$out" || die "slurmd -G reported errors (above)"
    grep -q '^autodetect.sh: fake NVML inits: [1-9]' <<<"$out" || die "Slurm never called the fake NVML"
    [ "$(grep -c 'Gres Name=gpu ' <<<"$out")" = "$GPUS" ] || die "Slurm did not list exactly $GPUS GPUs"
    for ((i = 0; i < GPUS; i++)); do
        record=$(grep "Gres Name=gpu .* Index=$i " <<<"$out") || die "no GPU with Index=$i"
        grep -q " File=/dev/nvidia$i " <<<"$record" || die "GPU $i: not File=/dev/nvidia$i: $record"
        grep -q " Cores=[0-9]" <<<"$record" || die "GPU $i: no Cores= (CPU affinity): $record"
        grep -q " Links=$(links "$i") " <<<"$record" || die "GPU $i: NVLinks other than none: $record"
        grep -Eq " Flags=([A-Z_]+,)*ENV_NVML(,|$)" <<<"$record" || die "GPU $i: no ENV_NVML flag: $record"
        if [ "$want_uuid" = 1 ]; then
            grep -Eq " Flags=.*(,|=)UUID(,|$)" <<<"$record" || die "GPU $i: no UUID flag (env_uuid): $record"
        fi
        grep -q "UUID: GPU-fake-n1-$i\$" <<<"$out" || die "GPU $i: Slurm did not read UUID GPU-fake-n1-$i"
    done
}

# links I: the Links= value of GPU I with no NVLink (-1 for itself, else 0).
links() {
    local k s=
    for ((k = 0; k < GPUS; k++)); do s+=${s:+,}$([ "$k" = "$1" ] && echo -1 || echo 0); done
    echo "$s"
}

# run ROOT LABEL GRES_EXTRA WANT_UUID_FLAG: one slurmd -G, checked.
run() {
    local root=$1 label=$2 extra=$3 want_uuid=$4 dir out
    dir=$(mktemp -d "$tmp/run.XXXXXX")
    write_files "$dir" "$extra"
    out=$(unshare --mount --uts --propagation private \
        bash -c "set -eu; $(declare -f in_namespace); GPUS=$GPUS W=$W; in_namespace \"\$1\" \"\$2\"" _ "$root" "$dir")
    echo "--- $label: slurmd -G"
    grep -E 'Gres Name=|UUID: |fake NVML inits|(error|fatal):' <<<"$out" | sed 's/^/    /'
    check "$out" "$want_uuid"
    echo "autodetect.sh: $label: ok, Slurm found the fake's $GPUS GPUs"
}

root=$(bash tests/cluster/slurm-root.sh "$1")
tmp=$(mktemp -d /tmp/dgm-autodetect.XXXXXX)
trap 'rm -rf "$tmp"' EXIT
[ -f "$root/usr/lib/x86_64-linux-gnu/slurm-wlm/gpu_nvml.so" ] ||
    die "$root has no gpu_nvml.so (slurm-wlm-nvml-plugin is in contrib, for trixie and sid)"
version=$(chroot "$root" /usr/sbin/slurmd -V | awk '{print $2}')
run "$root" "$1 ($version) AutoDetect=nvml" "" 0
IFS=. read -r major minor _ <<<"$version"
if [ $((10#$major * 100 + 10#$minor)) -ge 2605 ]; then
    run "$root" "$1 ($version) AutoDetect=nvml Flags=env_uuid" "Name=gpu Count=$GPUS Flags=env_uuid" 1
fi
