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
    readelf:binutils /usr/include/slurm/slurm_version.h:libslurm-dev /bin/busybox:busybox-static

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
# The snippet's name up to 0.1.0 and since 0.1.1 (packaging/README.md, "The
# snippet's name"); tests/names.rs checks both against core/src/env.rs.
new_name=zz-desi-gpu-map.conf
old_name=desi-gpu-map.conf
# only_snippet DIR [TEXT]: DIR's one *.conf is $new_name (holding TEXT); the
# old name is gone, set aside copies included.
only_snippet() {
    local dir=$1 active
    active=$(cd "$dir" && echo *.conf)
    [ "$active" = "$new_name" ] || { echo "  active snippets in $dir: $active"; return 1; }
    [ -z "${2:-}" ] || grep -qF "$2" "$dir/$new_name" || { echo "  $dir/$new_name lacks $2"; return 1; }
    [ -z "$(cd "$dir" && ls -d "$old_name"* 2>/dev/null)" ] || { echo "  left in $dir:" "$dir/$old_name"*; return 1; }
}
edit="# the admin's edit"

# ---------------------------------------------------------------- sources
check "man pages in packaging/man render without warnings" \
    eval 'renders packaging/man/desi-gpu-map.1 && renders packaging/man/desi_gpu_map.8'
check "slurm-series.sh reads the series of another header" eval '
    mkdir -p "$tmp/inc/slurm" &&
    echo "#define SLURM_VERSION_NUMBER 0x180b07" >"$tmp/inc/slurm/slurm_version.h" &&
    [ "$(SLURM_INCLUDE_DIR=$tmp/inc sh packaging/slurm-series.sh) $(SLURM_INCLUDE_DIR=$tmp/inc sh packaging/slurm-series.sh --next)" = "24.11 24.12" ]'

# ---------------------------------------------------------------- plugin_version
# The release build, the prolog's static binary with it (Makefile), as make
# install and the packages take it.
make -s release
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
    local d=$tmp/destdir conf out
    make -s install DESTDIR="$d" PREFIX=/usr >/dev/null || return 1
    (cd "$d" && find . -type f) >"$tmp/install.list"
    lists "$tmp/install.list" ./usr/bin/desi-gpu-map ./usr/bin/desi-gpu-map-prolog ".$deb_plugin" \
        ./usr/libexec/desi-gpu-map/desi-gpu-map \
        ./usr/lib/flux/shell/plugins/desi_gpu_map.so \
        ./usr/share/man/man1/desi-gpu-map.1 ./usr/share/man/man8/desi_gpu_map.8 \
        ./usr/share/desi-gpu-map/podman-hpc/desi-gpu-map.yaml \
        ./etc/slurm/plugstack.conf.d/zz-desi-gpu-map.conf || return 1
    conf=$d/etc/slurm/plugstack.conf.d/zz-desi-gpu-map.conf
    snippet_points_at "$conf" "$deb_plugin" || return 1
    echo "# the admin's edit" >>"$conf"
    out=$(make -s install DESTDIR="$d" PREFIX=/usr)
    grep -q "keeping existing" <<<"$out" || return 1
    # It loads what was just installed: nothing to warn of.
    ! grep -q "warning" <<<"$out" || { echo "  said: $out"; return 1; }
    grep -q "the admin's edit" "$conf" || { echo "  make install overwrote the snippet"; return 1; }
}
check "make install: default SLURM_PLUGIN_DIR, files, snippet kept on reinstall" install_twice
# An old make install's snippet, edited, is renamed as it is, with a warning
# where it loads the plugin from another path; beside a new one it is kept,
# with a warning.
install_over_old() {
    local d=$tmp/destdir-old dir out
    dir=$d/etc/slurm/plugstack.conf.d
    mkdir -p "$dir"
    printf 'required /old/desi_gpu_map.so\n%s\n' "$edit" >"$dir/$old_name"
    out=$(make -s install DESTDIR="$d" PREFIX=/usr)
    grep -q "^renamed .*/$old_name to .*/$new_name" <<<"$out" || { echo "  said: $out"; return 1; }
    # It loads another .so than the one just installed: said, with both paths.
    grep -qF "warning: $dir/$new_name loads /old/desi_gpu_map.so, not $deb_plugin, which make install just installed; edit its path to $deb_plugin" <<<"$out" ||
        { echo "  said: $out"; return 1; }
    only_snippet "$dir" "$edit" || return 1
    grep -q '^required /old/desi_gpu_map.so$' "$dir/$new_name" || return 1
    echo "required /old/desi_gpu_map.so" >"$dir/$old_name"
    out=$(make -s install DESTDIR="$d" PREFIX=/usr)
    grep -q "keeping existing" <<<"$out" && grep -q "warning: .*/$old_name loads the plugin a second time" <<<"$out" ||
        { echo "  said: $out"; return 1; }
    grep -qF "$edit" "$dir/$new_name" && [ -e "$dir/$old_name" ]
}
check "make install: renames 0.1.0's $old_name, edits kept, another .so path said; never overwrites" install_over_old

# ---------------------------------------------------------------- .deb
# The rename from 0.1.0's snippet, by dpkg for real but in a root of its own
# (--root, an empty status file), so that this host's dpkg database and /etc
# stay untouched: the maintainer scripts run outside a chroot
# (--force-script-chrootless) with DPKG_ROOT set, which
# dpkg-maintscript-helper and our scripts honour. The previous version is a
# stand-in: 0.1.0's version, its snippet as its conffile, and its preinst and
# postrm (the set-aside dance) with DPKG_ROOT added; no binaries.
old_deb() {
    local d=$tmp/old-deb
    rm -rf "$d" && mkdir -p "$d/DEBIAN" "$d/etc/slurm/plugstack.conf.d" || return 1
    cp "$tmp/deb/etc/slurm/plugstack.conf.d/$new_name" "$d/etc/slurm/plugstack.conf.d/$old_name" || return 1
    printf '%s\n' "Package: desi-gpu-map" "Version: 0.1.0+slurm$series" \
        "Architecture: $(dpkg --print-architecture)" \
        "Maintainer: desi-gpu-map packagers <root@localhost>" \
        "Description: desi-gpu-map 0.1.0's snippet only, for package-tests.sh" >"$d/DEBIAN/control"
    echo "/etc/slurm/plugstack.conf.d/$old_name" >"$d/DEBIAN/conffiles"
    printf '%s\n' '#!/bin/sh' 'set -e' "conf=\$DPKG_ROOT/etc/slurm/plugstack.conf.d/$old_name" \
        'case "$1" in install | upgrade)' \
        '    if [ ! -e "$conf" ] && [ -e "$conf.dpkg-disabled" ]; then mv -f "$conf.dpkg-disabled" "$conf"; fi ;;' \
        'esac' >"$d/DEBIAN/preinst"
    printf '%s\n' '#!/bin/sh' 'set -e' "conf=\$DPKG_ROOT/etc/slurm/plugstack.conf.d/$old_name" \
        'case "$1" in' \
        '    remove | abort-install | disappear) if [ -e "$conf" ]; then mv -f "$conf" "$conf.dpkg-disabled"; fi ;;' \
        '    purge) rm -f "$conf" "$conf.dpkg-disabled" ;;' \
        'esac' >"$d/DEBIAN/postrm"
    chmod 0755 "$d/DEBIAN/preinst" "$d/DEBIAN/postrm"
    dpkg-deb --root-owner-group --build "$d" "$tmp/old.deb" >/dev/null
}
droot=$tmp/dpkg-root
fresh_root() {
    rm -rf "$droot" && mkdir -p "$droot/var/lib/dpkg/info" "$droot/var/lib/dpkg/updates" &&
        touch "$droot/var/lib/dpkg/status"
}
# in_root ARG...: dpkg on the test root; its output goes to a log, shown on failure.
in_root() {
    dpkg --root="$droot" --force-script-chrootless --force-depends "$@" >>"$tmp/dpkg-root.log" 2>&1 ||
        { echo "  dpkg $* failed:"; tail -n 20 "$tmp/dpkg-root.log" | sed 's/^/  /'; return 1; }
}
# deb_upgrade edited|unedited: 0.1.0 installed, its snippet edited or not,
# then this .deb: one snippet, the new name, the edit kept (the package's
# own as .dpkg-new); dpkg knows the new conffile. dpkg asks nothing (stdin
# is /dev/null: a question would fail the install).
deb_upgrade() {
    local dir=$droot/etc/slurm/plugstack.conf.d dist=$tmp/deb/etc/slurm/plugstack.conf.d/$new_name
    fresh_root && in_root -i "$tmp/old.deb" || return 1
    if [ "$1" = edited ]; then echo "$edit" >>"$dir/$old_name"; fi
    in_root -i "$deb" </dev/null || return 1
    dpkg-query --admindir="$droot/var/lib/dpkg" -W -f='${Conffiles}\n' desi-gpu-map |
        grep -q "^ /etc/slurm/plugstack.conf.d/$new_name [0-9a-f]" || { echo "  dpkg does not know $new_name"; return 1; }
    if [ "$1" = edited ]; then
        only_snippet "$dir" "$edit" || return 1
        cmp -s "$dir/$new_name.dpkg-new" "$dist" || { echo "  not the package's: $new_name.dpkg-new"; return 1; }
    else
        only_snippet "$dir" || return 1
        cmp -s "$dir/$new_name" "$dist" || { echo "  not the package's: $new_name"; return 1; }
        [ ! -e "$dir/$new_name.dpkg-new" ] || { echo "  left: $new_name.dpkg-new"; return 1; }
    fi
}
# After 0.1.0's `dpkg -r` set its edited snippet aside, this .deb puts it back
# under the new name; its own -r, reinstall and purge then work on that name.
deb_after_remove() {
    local dir=$droot/etc/slurm/plugstack.conf.d
    fresh_root && in_root -i "$tmp/old.deb" || return 1
    echo "$edit" >>"$dir/$old_name"
    in_root -r desi-gpu-map || return 1
    [ -e "$dir/$old_name.dpkg-disabled" ] || { echo "  0.1.0's -r: $(ls "$dir")"; return 1; }
    in_root -i "$deb" </dev/null && only_snippet "$dir" "$edit" || return 1
    in_root -r desi-gpu-map || return 1
    [ -z "$(cd "$dir" && ls -- *.conf 2>/dev/null)" ] && [ -e "$dir/$new_name.dpkg-disabled" ] ||
        { echo "  after -r: $(ls "$dir")"; return 1; }
    in_root -i "$deb" </dev/null && only_snippet "$dir" "$edit" || return 1
    in_root --purge desi-gpu-map || return 1
    [ -z "$(ls -A "$dir" 2>/dev/null)" ] || { echo "  after --purge: $(ls "$dir")"; return 1; }
}
deb_migrations() {
    old_deb || { no "a stand-in 0.1.0 .deb"; return; }
    check "deb over 0.1.0 with an edited $old_name: renamed $new_name, edit kept, one snippet" deb_upgrade edited
    check "deb over 0.1.0 with its own $old_name: $new_name only, the package's" deb_upgrade unedited
    check "deb after 0.1.0's dpkg -r: the set-aside $old_name back as $new_name; then -r, reinstall, purge" deb_after_remove
}
deb=target/package/desi-gpu-map_${version}+slurm${series}_$(dpkg --print-architecture).deb
rm -f "$deb"
if bash packaging/deb/build-deb.sh && [ -f "$deb" ]; then
    ok "build-deb.sh builds $deb"
    dpkg-deb -c "$deb" | awk '{print $6}' | sed 's|^\./|/|' >"$tmp/deb.list"
    check "dpkg-deb -c lists the plugin, command, man pages, podman-hpc module and snippet" lists "$tmp/deb.list" \
        "$deb_plugin" /usr/bin/desi-gpu-map /usr/bin/desi-gpu-map-prolog /usr/share/man/man1/desi-gpu-map.1.gz \
        /usr/libexec/desi-gpu-map/desi-gpu-map \
        "/usr/lib/$triplet/flux/shell/plugins/desi_gpu_map.so" \
        /usr/share/desi-gpu-map/podman-hpc/desi-gpu-map.yaml \
        /usr/share/man/man8/desi_gpu_map.8.gz /etc/slurm/plugstack.conf.d/zz-desi-gpu-map.conf
    check "deb Depends on the Slurm $series series" eval \
        'dpkg-deb -f "$deb" Depends | grep -qF "slurm-wlm-basic-plugins (>= $series~), slurm-wlm-basic-plugins (<< $next~)"'
    check "deb conffiles lists the snippet" eval \
        'dpkg-deb --ctrl-tarfile "$deb" | tar -xOf - ./conffiles | grep -qxF /etc/slurm/plugstack.conf.d/zz-desi-gpu-map.conf'
    mkdir -p "$tmp/deb" && dpkg-deb -x "$deb" "$tmp/deb"
    check "deb snippet: one active line, required, naming $deb_plugin" \
        snippet_points_at "$tmp/deb/etc/slurm/plugstack.conf.d/zz-desi-gpu-map.conf" "$deb_plugin"
    check "deb plugin: plugin_version $header_hex" has_version "$tmp/deb$deb_plugin" "$header_hex"
    check "deb man pages render without warnings" eval \
        'renders "$tmp/deb/usr/share/man/man1/desi-gpu-map.1.gz" && renders "$tmp/deb/usr/share/man/man8/desi_gpu_map.8.gz"'
    deb_migrations
else
    no "build-deb.sh"
fi

# ---------------------------------------------------------------- RPM
# The rename from 0.1.0's snippet, by rpm for real but in a root of its own
# (--root: its own database), with busybox for the scriptlets' /bin/sh,
# since rpm runs them chrooted there. The previous version is a stand-in:
# 0.1.0's version and its snippet as %config(noreplace), no binaries.
rroot=$tmp/rpm-root
old_rpm() {
    local top=$tmp/old-rpm
    rm -rf "$top" && mkdir -p "$top" || return 1
    cat >"$top/old.spec" <<EOF
Name: desi-gpu-map
Version: 0.1.0
Release: 1.slurm$series
Summary: desi-gpu-map 0.1.0's snippet only, for package-tests.sh
License: BSD-3-Clause
%description
desi-gpu-map 0.1.0's snippet only, for package-tests.sh
%install
install -D -m 0644 $tmp/rpm/etc/slurm/plugstack.conf.d/$new_name %{buildroot}/etc/slurm/plugstack.conf.d/$old_name
%files
%config(noreplace) /etc/slurm/plugstack.conf.d/$old_name
EOF
    rpmbuild -bb --define "_topdir $top" "$top/old.spec" >"$top/build.log" 2>&1 ||
        { tail -n 20 "$top/build.log"; return 1; }
    old_rpm_file=$(ls "$top"/RPMS/*/desi-gpu-map-0.1.0-*.rpm)
}
fresh_rpm_root() {
    local a
    rm -rf "$rroot" && mkdir -p "$rroot/bin" "$rroot/var/tmp" "$rroot/tmp" || return 1
    cp /bin/busybox "$rroot/bin/" || return 1
    for a in sh mv rm cat md5sum grep echo; do ln -s busybox "$rroot/bin/$a"; done
    rpm --root "$rroot" --initdb
}
# rpm_root ARG...: rpm on the test root; its output goes to a log, shown on failure.
rpm_root() {
    rpm --root "$rroot" --nodeps "$@" >>"$tmp/rpm-root.log" 2>&1 ||
        { echo "  rpm $* failed:"; tail -n 20 "$tmp/rpm-root.log" | sed 's/^/  /'; return 1; }
}
# rpm_upgrade edited|unedited: 0.1.0 installed, its snippet edited or not,
# then rpm -U this RPM: one snippet, the new name, the edit kept (the
# package's own as .rpmnew).
rpm_upgrade() {
    local dir=$rroot/etc/slurm/plugstack.conf.d dist=$tmp/rpm/etc/slurm/plugstack.conf.d/$new_name
    fresh_rpm_root && rpm_root -i "$old_rpm_file" || return 1
    if [ "$1" = edited ]; then echo "$edit" >>"$dir/$old_name"; fi
    rpm_root -U "$rpm" || return 1
    [ "$(rpm --root "$rroot" -q --qf '%{VERSION}\n' desi-gpu-map)" = "$version" ] || { echo "  not upgraded"; return 1; }
    if [ "$1" = edited ]; then
        only_snippet "$dir" "$edit" || return 1
        cmp -s "$dir/$new_name.rpmnew" "$dist" || { echo "  not the package's: $new_name.rpmnew"; return 1; }
    else
        only_snippet "$dir" || return 1
        cmp -s "$dir/$new_name" "$dist" || { echo "  not the package's: $new_name"; return 1; }
        [ "$(ls "$dir")" = "$new_name" ] || { echo "  left: $(ls "$dir")"; return 1; }
    fi
}
rpm_migrations() {
    old_rpm || { no "a stand-in 0.1.0 RPM"; return; }
    check "rpm -U over 0.1.0 with an edited $old_name: renamed $new_name, edit kept, one snippet" rpm_upgrade edited
    check "rpm -U over 0.1.0 with its own $old_name: $new_name only, the package's" rpm_upgrade unedited
}
rpm=target/package/desi-gpu-map-$version-1.slurm$series.$(rpm --eval '%{_arch}').rpm
rm -f "$rpm"
if bash packaging/rpm/build-rpm.sh && [ -f "$rpm" ]; then
    ok "build-rpm.sh builds $rpm"
    rpm -qlp "$rpm" >"$tmp/rpm.list"
    check "rpm -qlp lists the plugin, command, man pages, podman-hpc module and snippet" lists "$tmp/rpm.list" \
        /usr/lib64/slurm/desi_gpu_map.so /usr/bin/desi-gpu-map /usr/bin/desi-gpu-map-prolog /usr/share/man/man1/desi-gpu-map.1.gz \
        /usr/libexec/desi-gpu-map/desi-gpu-map \
        /usr/lib64/flux/shell/plugins/desi_gpu_map.so \
        /usr/share/desi-gpu-map/podman-hpc/desi-gpu-map.yaml \
        /usr/share/man/man8/desi_gpu_map.8.gz /etc/slurm/plugstack.conf.d/zz-desi-gpu-map.conf
    rpm -qp --requires "$rpm" >"$tmp/rpm.requires"
    check "rpm Requires the Slurm $series series: slurm >= $series, < $next" lists "$tmp/rpm.requires" \
        "slurm$(rpm --eval '%{?_isa}') >= $series" "slurm$(rpm --eval '%{?_isa}') < $next"
    check "rpm marks the snippet %config" eval \
        'rpm -qcp "$rpm" | grep -qxF /etc/slurm/plugstack.conf.d/zz-desi-gpu-map.conf'
    mkdir -p "$tmp/rpm" && rpm2archive - <"$rpm" | tar -xzf - -C "$tmp/rpm"
    check "rpm snippet: one active line, required, naming /usr/lib64/slurm/desi_gpu_map.so" \
        snippet_points_at "$tmp/rpm/etc/slurm/plugstack.conf.d/zz-desi-gpu-map.conf" /usr/lib64/slurm/desi_gpu_map.so
    check "rpm plugin: plugin_version $header_hex" has_version "$tmp/rpm/usr/lib64/slurm/desi_gpu_map.so" "$header_hex"
    rpm_migrations
else
    no "build-rpm.sh"
fi

echo "package-tests: $pass passed, $failed failed"
[ "$failed" = 0 ]
