#!/bin/sh
# slurm-series.sh [--next]  Prints the Slurm release series (22.05) that the
# plugin is built for, from SLURM_VERSION_NUMBER in
# ${SLURM_INCLUDE_DIR:-/usr/include}/slurm/slurm_version.h (as spank/build.rs
# reads it); with --next, the first version past that series (22.06).
set -eu
h=${SLURM_INCLUDE_DIR:-/usr/include}/slurm/slurm_version.h
hex=$(awk '$1 == "#define" && $2 == "SLURM_VERSION_NUMBER" {print $3; exit}' "$h")
case $hex in
    0x* | 0X*) ;;
    *) echo "slurm-series.sh: no SLURM_VERSION_NUMBER in $h" >&2; exit 1 ;;
esac
major=$((hex >> 16)) minor=$(((hex >> 8) & 255))
[ "${1:-}" = --next ] && minor=$((minor + 1))
printf '%d.%02d\n' "$major" "$minor"
