#!/usr/bin/env bash
# NERSC's podman-hpc (PyPI, pinned) over Debian's podman, for
# tests/cluster/podman.rs, in places of the tests' own; run as root,
# idempotent, a second run takes well under a second. Prints the wrapper's
# path, which every test runs in place of `podman-hpc`.
#
# Under DIR (${DGM_PODMAN_HPC_DIR:-/var/tmp/desi-gpu-map-podman-hpc}):
# - venv/: podman-hpc $VERSION from PyPI;
# - podman_hpc.yaml: its site configuration (what NERSC keeps in
#   /etc/podman_hpc/podman_hpc.yaml), read through PODMANHPC_CONFIG_FILE.
#   One change from NERSC's: mount_program is empty, so podman mounts the
#   kernel's own overlay (unprivileged since Linux 5.11) where NERSC runs
#   fuse-overlayfs-wrap, which needs /dev/fuse (0600 on this machine) and
#   serves only squashed images, which the tests do not use;
# - modules.d/: the modules, this repository's packaging/podman-hpc/
#   desi-gpu-map.yaml alone (copied on every run);
# - hooks.d/podman_hpc.json: the OCI hook that carries out the modules'
#   binds (podman-hpc's own hook_tool, as its configure_hooks writes it);
# - containers.conf: this machine's quirks for podman (CONTAINERS_CONF):
#   runc (crun refuses the hybrid cgroup v1 hierarchies), cgroupfs, lower
#   ulimits (the hard limits here are below podman's defaults), no network;
# - image.tar: the test image's root (busybox-static), which the tests
#   import per user as localhost/dgm-busybox;
# - podman-hpc: the wrapper that exports the two variables and runs
#   venv/bin/podman-hpc.
# Nothing under /etc is changed; each user's storage is podman-hpc's own
# per-uid place under /tmp (graph_root_template below).
set -euo pipefail
repo=$(cd "$(dirname "$0")/../.." && pwd)
dir=${DGM_PODMAN_HPC_DIR:-/var/tmp/desi-gpu-map-podman-hpc}
VERSION=1.2.2
[ "$(id -u)" = 0 ] || { echo "podman-hpc.sh: run as root" >&2; exit 1; }
bash "$repo/tests/deps.sh"
mkdir -p "$dir"
chmod 755 "$dir"

# podman-hpc itself, on Debian's Python (which every user may run; a
# python3 earlier in root's PATH may be root's alone).
if [ "$("$dir/venv/bin/python" -c 'import sys, importlib.metadata as m; print(sys.base_prefix, m.version("podman-hpc"))' 2>/dev/null)" != "/usr $VERSION" ]; then
    rm -rf "$dir/venv"
    /usr/bin/python3 -m venv "$dir/venv"
    "$dir/venv/bin/pip" install -q "podman-hpc==$VERSION"
fi

# Writes FILE from stdin only where it differs (a second run changes nothing).
put() {
    local new
    new=$(cat)
    [ -f "$1" ] && [ "$(cat "$1")" = "$new" ] && return
    printf '%s\n' "$new" >"$1.new"
    mv "$1.new" "$1"
}

mkdir -p "$dir/modules.d" "$dir/hooks.d"
cp "$repo/packaging/podman-hpc/desi-gpu-map.yaml" "$dir/modules.d/desi-gpu-map.yaml"

put "$dir/podman_hpc.yaml" <<YAML
podman_bin: "/usr/bin/podman"
mount_program: ""
modules_dir: "$dir/modules.d"
hooks_dir: "$dir/hooks.d"
shared_run_exec_args: ["-e", "SLURM_*", "-e", "PALS_*", "-e", "PMI_*"]
shared_run_command: ["sleep", "infinity"]
localid_var: "SLURM_LOCALID"
tasks_per_node_var: "SLURM_STEP_TASKS_PER_NODE"
ntasks_pattern: "[0-9]+"
graph_root_template: "/tmp/{{ uid }}_hpc/storage"
run_root_template: "/tmp/{{ uid }}_hpc"
config_home_template: "/tmp/{{ uid }}_hpc/config"
YAML

put "$dir/hooks.d/podman_hpc.json" <<JSON
{
    "version": "1.0.0",
    "hook": {
        "path": "$dir/venv/bin/hook_tool",
        "args": ["hook_tool"]
    },
    "when": {
        "annotations": {
           "podman_hpc.hook_tool": "true"
        }
    },
    "stages": ["prestart"]
}
JSON

put "$dir/containers.conf" <<'TOML'
[containers]
default_ulimits = ["nofile=1024:1024", "nproc=1024:1024"]
netns = "none"

[engine]
runtime = "runc"
cgroup_manager = "cgroupfs"
TOML

# The storage driver: podman's rootless default is vfs, which refuses the
# mount_program that podman-hpc always passes; NERSC's storage.conf says
# overlay too.
put "$dir/storage.conf" <<'TOML'
[storage]
driver = "overlay"
TOML

# The image's root: busybox and the names the tests' commands use, and
# where glibc's loader and libraries are found, so that a test can bind
# the host's /usr/lib/x86_64-linux-gnu and run a host binary in it (the
# MPS control client). Remade each run, kept where unchanged.
root=$(mktemp -d)
chmod 755 "$root"
trap 'rm -rf "$root"' EXIT
mkdir -p "$root/bin" "$root/etc" "$root/tmp" "$root/proc" "$root/sys" "$root/dev" \
    "$root/usr/lib/x86_64-linux-gnu" "$root/lib64"
chmod 1777 "$root/tmp"
cp /bin/busybox "$root/bin/busybox"
for tool in sh env echo cat ls stat hostname test id sleep; do
    ln -s busybox "$root/bin/$tool"
done
ln -s usr/lib "$root/lib"
ln -s /lib/x86_64-linux-gnu/ld-linux-x86-64.so.2 "$root/lib64/ld-linux-x86-64.so.2"
printf 'root:x:0:0:root:/:/bin/sh\n' >"$root/etc/passwd"
printf 'root:x:0:\n' >"$root/etc/group"
touch -h -d @0 $(find "$root")
tar --numeric-owner --owner=0 --group=0 --sort=name -C "$root" -cf "$dir/image.tar.new" .
if cmp -s "$dir/image.tar.new" "$dir/image.tar"; then
    rm "$dir/image.tar.new"
else
    mv "$dir/image.tar.new" "$dir/image.tar"
fi
chmod 644 "$dir/image.tar"

put "$dir/podman-hpc" <<SH
#!/bin/sh
# podman-hpc $VERSION with this machine's site configuration (tests/containers/podman-hpc.sh).
export PODMANHPC_CONFIG_FILE=$dir/podman_hpc.yaml
export CONTAINERS_CONF=$dir/containers.conf
export CONTAINERS_STORAGE_CONF=$dir/storage.conf
export SQUASH_DIR=/tmp/\$(id -u)_hpc_squash
# podman-hpc reads USER where getlogin() fails (no terminal, as in a batch job).
export USER=\${USER:-\$(id -un)}
# Its own helpers (fuse-overlayfs-wrap, hook_tool), as an installed podman-hpc has them.
export PATH=$dir/venv/bin:\$PATH
exec $dir/venv/bin/podman-hpc "\$@"
SH
chmod 755 "$dir/podman-hpc"
echo "$dir/podman-hpc"
