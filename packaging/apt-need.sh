#!/usr/bin/env bash
# apt-need.sh WHAT:PACKAGE...  Installs, from Debian's archive, each PACKAGE
# whose WHAT is missing. WHAT is a command name or an absolute file path.
# Runs `apt-get update` at most once, and not at all when nothing is missing.
set -euo pipefail
need=()
for pair in "$@"; do
    what=${pair%%:*} pkg=${pair#*:}
    case $what in
        /*) [ -e "$what" ] && continue ;;
        *) command -v "$what" >/dev/null && continue ;;
    esac
    need+=("$pkg")
done
[ ${#need[@]} -eq 0 ] && exit 0
if [ "$(id -u)" != 0 ] || ! command -v apt-get >/dev/null; then
    echo "apt-need.sh: missing ${need[*]}; install them (as root: apt-get install ${need[*]})" >&2
    exit 1
fi
# Not beside another apt-get of the suite's (tests/deps.sh --start's).
. "$(dirname "$0")/apt-lock.sh"
apt_lock
echo "apt-need.sh: installing ${need[*]}" >&2
export DEBIAN_FRONTEND=noninteractive
apt-get update -q >/dev/null
apt-get install -y -q --no-install-recommends "${need[@]}" >/dev/null
