#!/usr/bin/env bash
# Builds target/package/desi-gpu-map_VERSION+slurmSERIES_ARCH.deb for the Slurm
# whose headers are in ${SLURM_INCLUDE_DIR:-/usr/include}, with dpkg-deb only.
# Environment:
#   SLURM_INCLUDE_DIR  directory holding slurm/slurm_version.h (default /usr/include);
#                      when set, the build goes to target/series/SERIES
#   CARGO_TARGET_DIR   cargo's build directory (default target, or as above)
#   SLURM_PLUGIN_DIR   where the plugin goes (default /usr/lib/TRIPLET/slurm-wlm)
#   DEB_DEPENDS        replaces the Slurm dependency (for a Slurm not from Debian)
#   DEB_MAINTAINER     the Maintainer field
set -euo pipefail
cd "$(dirname "$0")/../.."
umask 022 # the staged tree's modes become the installed ones

[ -n "${SLURM_INCLUDE_DIR:-}" ] ||
    bash packaging/apt-need.sh /usr/include/slurm/slurm_version.h:libslurm-dev
version=$(awk -F'"' '/^version *=/ {print $2; exit}' Cargo.toml)
series=$(sh packaging/slurm-series.sh)
next=$(sh packaging/slurm-series.sh --next)
arch=$(dpkg --print-architecture)
triplet=$(dpkg-architecture -qDEB_HOST_MULTIARCH 2>/dev/null || gcc -print-multiarch)
plugin_dir=${SLURM_PLUGIN_DIR:-/usr/lib/$triplet/slurm-wlm}
# Flux's shell plugin directory, as Debian's flux-core builds it (multiarch).
flux_dir=${FLUX_PLUGIN_DIR:-/usr/lib/$triplet/flux/shell/plugins}
debversion=$version+slurm$series

# Another series' plugin must not replace target/release's (the host's).
if [ -n "${SLURM_INCLUDE_DIR:-}" ] && [ -z "${CARGO_TARGET_DIR:-}" ]; then
    export CARGO_TARGET_DIR=target/series/$series
fi
# The release build, the prolog's static binary with it (Makefile).
make -s release

out=target/package
# One staging tree per series: run-cluster-tests.sh builds a later series'
# package while the first series' is built.
root=$out/deb-root-$series
rm -rf "$root"
mkdir -p "$root/DEBIAN"
make -s install DESTDIR="$root" PREFIX=/usr SYSCONFDIR=/etc SLURM_PLUGIN_DIR="$plugin_dir" FLUX_PLUGIN_DIR="$flux_dir" >/dev/null
gzip -9n "$root"/usr/share/man/man*/*
install -D -m 0644 packaging/README.md "$root/usr/share/doc/desi-gpu-map/README.md"

# Slurm loads the plugin only if it was built for the same release series:
# slurm-wlm-basic-plugins is in every Debian Slurm install and carries the
# Slurm version (slurm-client and slurmd depend on its exact version).
slurm_dep="slurm-wlm-basic-plugins (>= $series~), slurm-wlm-basic-plugins (<< $next~)"
# The dynamic binaries need libgcc_s and at least the newest glibc symbol
# version they use (/usr/bin's command is static where it could be linked so).
glibc=$(objdump -T "$root/usr/libexec/desi-gpu-map/desi-gpu-map" "$root$plugin_dir/desi_gpu_map.so" |
    grep -o 'GLIBC_[0-9.]*' | sed 's/GLIBC_//' | sort -uV | tail -n 1)
cat >"$root/DEBIAN/control" <<EOF
Package: desi-gpu-map
Version: $debversion
Architecture: $arch
Maintainer: ${DEB_MAINTAINER:-desi-gpu-map packagers <root@localhost>}
Section: admin
Priority: optional
Installed-Size: $(du -sk --exclude=DEBIAN "$root" | cut -f1)
Depends: libc6 (>= $glibc), libgcc-s1, ${DEB_DEPENDS:-$slurm_dep}
Homepage: https://github.com/desihub/desi-gpu-map
Description: Slurm SPANK plugin binding each task of a job step to a GPU
 The desi_gpu_map plugin sets CUDA_VISIBLE_DEVICES (and DESI_GPU_MAPPED=1)
 for every task of an srun step, before it starts, when the user asks with
 --desi-gpu-map=contiguous|roundrobin|closest (none turns it off). Built for
 Slurm $series.x only.
 The desi-gpu-map command previews a layout and shows a task's binding.
 The Flux shell plugin in $flux_dir does the same for
 flux run -o desi-gpu-map=METHOD.
EOF
echo /etc/slurm/plugstack.conf.d/zz-desi-gpu-map.conf >"$root/DEBIAN/conffiles"
install -m 0755 packaging/deb/preinst packaging/deb/postinst packaging/deb/postrm "$root/DEBIAN/"

deb=$out/desi-gpu-map_${debversion}_$arch.deb
dpkg-deb --root-owner-group -Zxz --build "$root" "$deb" >/dev/null
rm -rf "$root"
echo "built $deb (Slurm $series series; plugin in $plugin_dir)"
