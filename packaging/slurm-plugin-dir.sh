#!/bin/sh
# Prints the directory the installed Slurm loads its plugins from (PluginDir):
# `make install` uses it as the default SLURM_PLUGIN_DIR.
set -eu
conf=${SLURM_CONF:-/etc/slurm/slurm.conf}
# Ask Slurm only when a slurm.conf exists: without one, scontrol looks for a
# configless controller through DNS. It needs a running slurmctld.
if [ -f "$conf" ] && command -v scontrol >/dev/null; then
    dir=$(timeout 5 scontrol show config 2>/dev/null | awk '$1 == "PluginDir" {print $3}') || true
    # PluginDir may be a colon-separated search path: the first entry wins.
    dir=${dir%%:*}
    [ -n "$dir" ] && [ -d "$dir" ] && { echo "$dir"; exit 0; }
    # No controller: a PluginDir set in slurm.conf itself (keys are case-insensitive).
    dir=$(awk -F= 'tolower($1) ~ /^[ \t]*plugindir[ \t]*$/ {gsub(/[ \t]/, "", $2); print $2}' "$conf" | tail -n 1)
    dir=${dir%%:*}
    [ -n "$dir" ] && [ -d "$dir" ] && { echo "$dir"; exit 0; }
fi
# Slurm's compiled-in defaults: Debian/Ubuntu, then RHEL family, then others.
triplet=$(dpkg-architecture -qDEB_HOST_MULTIARCH 2>/dev/null || gcc -print-multiarch 2>/dev/null || true)
for dir in ${triplet:+/usr/lib/$triplet/slurm-wlm} /usr/lib64/slurm /usr/lib/slurm; do
    [ -d "$dir" ] && { echo "$dir"; exit 0; }
done
echo "slurm-plugin-dir.sh: cannot find Slurm's plugin directory; set SLURM_PLUGIN_DIR" >&2
exit 1
