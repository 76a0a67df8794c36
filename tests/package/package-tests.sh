#!/usr/bin/env bash
# Package tests that need no cluster: `make install`, the .deb, the RPM, the
# man pages, and the plugin_version each build carries. Run as root on Debian
# (missing tools are installed). The .deb on a live cluster: deb-smoke.sh,
# beside this file.
set -euo pipefail
cd "$(dirname "$0")/../.."
repo=$(pwd)
pass=0 failed=0
ok() { pass=$((pass + 1)); echo "ok   $*"; }
no() { failed=$((failed + 1)); echo "FAIL $*"; }
# check NAME CMD...: runs CMD (errexit is off inside an `if`), counts the result.
check() { if "${@:2}"; then ok "$1"; else no "$1"; fi; }

bash packaging/apt-need.sh rpmbuild:rpm rpm2archive:rpm2cpio man:man-db groff:groff-base \
    readelf:binutils /usr/include/slurm/slurm_version.h:libslurm-dev

tmp=$(mktemp -d)
trap 'rm -rf "$tmp"' EXIT
version=$(awk -F'"' '/^version *=/ {print $2; exit}' Cargo.toml)
series=$(sh packaging/slurm-series.sh)
next=$(sh packaging/slurm-series.sh --next)
header_hex=$(awk '$2 == "SLURM_VERSION_NUMBER" {print $3; exit}' /usr/include/slurm/slurm_version.h)
triplet=$(dpkg-architecture -qDEB_HOST_MULTIARCH 2>/dev/null || gcc -print-multiarch)
deb_plugin=/usr/lib/$triplet/slurm-wlm/desi_gpu_map.so

# The value of the `plugin_version` symbol in an ELF file, read from the file
# (dlopen would need Slurm's symbols): symbol address -> section -> file offset.
plugin_version() {
    local so=$1 addr ndx sec_addr sec_off
    read -r addr ndx < <(readelf -Ws --dyn-syms "$so" | awk '$8 == "plugin_version" {print $2, $7; exit}')
    [ -n "${ndx:-}" ] || return 1
    read -r sec_addr sec_off < <(readelf -SW "$so" | sed -n "s/^ *\[ *$ndx\] //p" | awk '{print $3, $4}')
    local off=$((16#$addr - 16#$sec_addr + 16#$sec_off))
    printf '0x%06x\n' "$((16#$(od -An -tx4 -j "$off" -N4 "$so" | tr -d ' ')))"
}
# has_version SO HEX: the file's plugin_version is HEX.
has_version() {
    local got
    got=$(plugin_version "$1") || { echo "  no plugin_version symbol in $1"; return 1; }
    [ "$got" = "$2" ] || { echo "  $1: plugin_version $got, want $2"; return 1; }
}
# lists FILE-LISTING PATH...: every PATH is a line of the listing.
lists() {
    local listing=$1 p rc=0
    shift
    for p in "$@"; do
        grep -qxF "$p" "$listing" || { echo "  missing $p"; rc=1; }
    done
    return $rc
}
# renders PAGE: man formats it without a warning.
renders() {
    local err
    err=$(MANWIDTH=80 man --warnings -l "$1" 2>&1 >/dev/null) && [ -z "$err" ] ||
        { echo "  $1: ${err:-man failed}"; return 1; }
}
# snippet_points_at FILE SO: one active plugstack line, required, naming SO.
snippet_points_at() {
    local active
    active=$(grep -v '^[[:space:]]*\(#\|$\)' "$1")
    [ "$active" = "required $2" ] || { echo "  active lines in $1: $active"; return 1; }
}

# ---------------------------------------------------------------- sources
check "man pages in packaging/man render without warnings" \
    eval 'renders packaging/man/desi-gpu-map.1 && renders packaging/man/desi_gpu_map.8'
check "slurm-series.sh reads the series of another header" eval '
    mkdir -p "$tmp/inc/slurm" &&
    echo "#define SLURM_VERSION_NUMBER 0x180b07" >"$tmp/inc/slurm/slurm_version.h" &&
    [ "$(SLURM_INCLUDE_DIR=$tmp/inc sh packaging/slurm-series.sh) $(SLURM_INCLUDE_DIR=$tmp/inc sh packaging/slurm-series.sh --next)" = "24.11 24.12" ]'

# ---------------------------------------------------------------- plugin_version
cargo build --release --workspace --locked
check "default build: plugin_version $header_hex (from /usr/include, Slurm $series)" \
    has_version target/release/libdesi_gpu_map_spank.so "$header_hex"
check "default build: plugin_version is 0x160508 (Debian bookworm's 22.05.8)" \
    has_version target/release/libdesi_gpu_map_spank.so 0x160508
# Another Slurm series, built into its own target dir so target/release stays
# the default build. A debug build: the symbol is the same, the build faster.
if SLURM_INCLUDE_DIR=$tmp/inc CARGO_TARGET_DIR=target/alt-slurm \
    cargo build --locked -p desi-gpu-map-spank; then
    check "SLURM_INCLUDE_DIR build (24.11.7 header): plugin_version 0x180b07" \
        has_version target/alt-slurm/debug/libdesi_gpu_map_spank.so 0x180b07
else
    no "SLURM_INCLUDE_DIR build (24.11.7 header) failed"
fi

# Without the header the build stops and names the package to install.
missing_header() {
    local log=$tmp/missing-header.log
    ! SLURM_INCLUDE_DIR=$tmp/nowhere CARGO_TARGET_DIR=target/alt-slurm \
        cargo build --locked -p desi-gpu-map-spank >"$log" 2>&1 &&
        grep -q 'apt-get install libslurm-dev' "$log" && grep -q 'slurm-devel' "$log"
}
check "a missing slurm_version.h stops the build, naming libslurm-dev and slurm-devel" missing_header

# ---------------------------------------------------------------- make install
install_twice() {
    local d=$tmp/destdir conf
    make -s install DESTDIR="$d" PREFIX=/usr >/dev/null || return 1
    (cd "$d" && find . -type f) >"$tmp/install.list"
    lists "$tmp/install.list" ./usr/bin/desi-gpu-map ".$deb_plugin" \
        ./usr/share/man/man1/desi-gpu-map.1 ./usr/share/man/man8/desi_gpu_map.8 \
        ./etc/slurm/plugstack.conf.d/desi-gpu-map.conf || return 1
    conf=$d/etc/slurm/plugstack.conf.d/desi-gpu-map.conf
    snippet_points_at "$conf" "$deb_plugin" || return 1
    echo "# the admin's edit" >>"$conf"
    make -s install DESTDIR="$d" PREFIX=/usr | grep -q "keeping existing" || return 1
    grep -q "the admin's edit" "$conf" || { echo "  make install overwrote the snippet"; return 1; }
}
check "make install: default SLURM_PLUGIN_DIR, files, snippet kept on reinstall" install_twice

# ---------------------------------------------------------------- .deb
deb=target/package/desi-gpu-map_${version}+slurm${series}_$(dpkg --print-architecture).deb
rm -f "$deb"
if bash packaging/deb/build-deb.sh && [ -f "$deb" ]; then
    ok "build-deb.sh builds $deb"
    dpkg-deb -c "$deb" | awk '{print $6}' | sed 's|^\./|/|' >"$tmp/deb.list"
    check "dpkg-deb -c lists the plugin, command, man pages and snippet" lists "$tmp/deb.list" \
        "$deb_plugin" /usr/bin/desi-gpu-map /usr/share/man/man1/desi-gpu-map.1.gz \
        /usr/share/man/man8/desi_gpu_map.8.gz /etc/slurm/plugstack.conf.d/desi-gpu-map.conf
    check "deb Depends on the Slurm $series series" eval \
        'dpkg-deb -f "$deb" Depends | grep -qF "slurm-wlm-basic-plugins (>= $series~), slurm-wlm-basic-plugins (<< $next~)"'
    check "deb conffiles lists the snippet" eval \
        'dpkg-deb --ctrl-tarfile "$deb" | tar -xOf - ./conffiles | grep -qxF /etc/slurm/plugstack.conf.d/desi-gpu-map.conf'
    mkdir -p "$tmp/deb" && dpkg-deb -x "$deb" "$tmp/deb"
    check "deb snippet: one active line, required, naming $deb_plugin" \
        snippet_points_at "$tmp/deb/etc/slurm/plugstack.conf.d/desi-gpu-map.conf" "$deb_plugin"
    check "deb plugin: plugin_version $header_hex" has_version "$tmp/deb$deb_plugin" "$header_hex"
    check "deb man pages render without warnings" eval \
        'renders "$tmp/deb/usr/share/man/man1/desi-gpu-map.1.gz" && renders "$tmp/deb/usr/share/man/man8/desi_gpu_map.8.gz"'
else
    no "build-deb.sh"
fi

# ---------------------------------------------------------------- RPM
rpm=target/package/desi-gpu-map-$version-1.slurm$series.$(rpm --eval '%{_arch}').rpm
rm -f "$rpm"
if bash packaging/rpm/build-rpm.sh && [ -f "$rpm" ]; then
    ok "build-rpm.sh builds $rpm"
    rpm -qlp "$rpm" >"$tmp/rpm.list"
    check "rpm -qlp lists the plugin, command, man pages and snippet" lists "$tmp/rpm.list" \
        /usr/lib64/slurm/desi_gpu_map.so /usr/bin/desi-gpu-map /usr/share/man/man1/desi-gpu-map.1.gz \
        /usr/share/man/man8/desi_gpu_map.8.gz /etc/slurm/plugstack.conf.d/desi-gpu-map.conf
    rpm -qp --requires "$rpm" >"$tmp/rpm.requires"
    check "rpm Requires the Slurm $series series: slurm >= $series, < $next" lists "$tmp/rpm.requires" \
        "slurm$(rpm --eval '%{?_isa}') >= $series" "slurm$(rpm --eval '%{?_isa}') < $next"
    check "rpm marks the snippet %config" eval \
        'rpm -qcp "$rpm" | grep -qxF /etc/slurm/plugstack.conf.d/desi-gpu-map.conf'
    mkdir -p "$tmp/rpm" && rpm2archive - <"$rpm" | tar -xzf - -C "$tmp/rpm"
    check "rpm snippet: one active line, required, naming /usr/lib64/slurm/desi_gpu_map.so" \
        snippet_points_at "$tmp/rpm/etc/slurm/plugstack.conf.d/desi-gpu-map.conf" /usr/lib64/slurm/desi_gpu_map.so
    check "rpm plugin: plugin_version $header_hex" has_version "$tmp/rpm/usr/lib64/slurm/desi_gpu_map.so" "$header_hex"
else
    no "build-rpm.sh"
fi

echo "package-tests: $pass passed, $failed failed"
[ "$failed" = 0 ]
