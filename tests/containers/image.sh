#!/usr/bin/env bash
# image.sh OUTDIR: the container images of tests/cluster/pyxis.rs, as
# squashfs files that pyxis takes by path (--container-image=/path.sqsh),
# made here from Debian's busybox-static; nothing is pulled from a registry.
# - OUTDIR/plain.sqsh: busybox (sh, hostname, env, ...), enough for a
#   task to print its probe row (tests/cluster/common/probe.rs) with sh;
# - OUTDIR/sets-gpu.sqsh: the same, whose /etc/environment sets
#   CUDA_VISIBLE_DEVICES=all-from-image, as an image may set a GPU variable
#   (enroot reads /etc/environment into the container's environment, and
#   pyxis copies that into every task).
# Remade only when this script or busybox changed.
set -euo pipefail
[ $# = 1 ] || { echo "usage: image.sh OUTDIR" >&2; exit 2; }
out=$1
busybox=/bin/busybox
# grep reads the whole list (no -q): a grep that exits at its first match
# leaves busybox writing into a closed pipe, and pipefail then fails the
# check on a busy machine.
if ! [ -x "$busybox" ] || ! "$busybox" --list | grep -x sh >/dev/null; then
    echo "image.sh: $busybox is missing: run tests/deps.sh (busybox-static)" >&2
    exit 1
fi
# busybox-static, not Debian's dynamic busybox: the image holds no libc.
! ldd "$busybox" >/dev/null 2>&1 || { echo "image.sh: $busybox is dynamic; install busybox-static" >&2; exit 1; }
command -v mksquashfs >/dev/null || { echo "image.sh: mksquashfs is missing: run tests/deps.sh (squashfs-tools)" >&2; exit 1; }

key=$(cat "$0" "$busybox" | sha256sum | cut -c1-16)
[ "$(cat "$out/.stamp" 2>/dev/null)" = "$key" ] && [ -f "$out/plain.sqsh" ] && [ -f "$out/sets-gpu.sqsh" ] && exit 0

mkdir -p "$out"
work=$(mktemp -d "$out/.rootfs.XXXXXX")
trap 'rm -rf "$work"' EXIT

# rootfs DIR: busybox and one link per applet, the directories enroot
# mounts over, and the users enroot's 10-shadow hook adds the caller to.
rootfs() {
    local d=$1 a
    mkdir -p "$d"/{bin,dev,etc,home,proc,root,run,sys,tmp,usr/bin,var}
    chmod 1777 "$d/tmp"
    install -m 0755 "$busybox" "$d/bin/busybox"
    for a in $("$busybox" --list); do
        [ "$a" = busybox ] || ln -sf busybox "$d/bin/$a"
    done
    printf 'root:x:0:0:root:/root:/bin/sh\n' >"$d/etc/passwd"
    printf 'root:x:0:\n' >"$d/etc/group"
    : >"$d/etc/environment"
}

rootfs "$work/plain"
rootfs "$work/sets-gpu"
echo 'CUDA_VISIBLE_DEVICES=all-from-image' >"$work/sets-gpu/etc/environment"
for name in plain sets-gpu; do
    rm -f "$out/$name.sqsh"
    # -all-root: the files are root's inside, whoever built the image.
    mksquashfs "$work/$name" "$out/$name.sqsh" -all-root -noappend -quiet -no-progress >/dev/null
    chmod 0644 "$out/$name.sqsh"
done
echo "$key" >"$out/.stamp"
echo "image.sh: made $out/plain.sqsh and $out/sets-gpu.sqsh" >&2
