# private-dev.sh: sourced by cluster.sh's node start, in the node's own
# mount namespace. private_dev DIR GPUS covers DIR (a Slurm root's /dev)
# with a tmpfs holding the host's basic devices and GPUS fake GPUs
# /dev/nvidia0.. (c 195 N), where Slurm's AutoDetect=nvml names them. The
# host's /dev is left as it was.
private_dev() {
    local dev=$1 gpus=$2 d k
    mount -t tmpfs -o mode=0755,size=1m dgm-dev "$dev" || return 1
    for d in null zero full random urandom tty ptmx; do
        : >"$dev/$d" && mount --bind "/dev/$d" "$dev/$d" || return 1
    done
    mkdir -p "$dev/pts" "$dev/shm" && mount --bind /dev/pts "$dev/pts" &&
        mount -t tmpfs -o mode=1777,size=16m dgm-shm "$dev/shm" || return 1
    ln -s /proc/self/fd "$dev/fd" && ln -s fd/0 "$dev/stdin" &&
        ln -s fd/1 "$dev/stdout" && ln -s fd/2 "$dev/stderr" || return 1
    for ((k = 0; k < gpus; k++)); do
        mknod -m 0666 "$dev/nvidia$k" c 195 "$k" || return 1
    done
}
