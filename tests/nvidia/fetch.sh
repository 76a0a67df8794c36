#!/usr/bin/env bash
# fetch.sh  Prints the directory holding Debian's real NVIDIA user space,
# unpacked (never installed): libnvidia-ml1 (the real NVML) and
# nvidia-cuda-mps (the MPS control daemon and server), from Debian's
# non-free component, version ${DGM_NVIDIA_VERSION:-535.261.03-1}.
# Cached in ${DGM_NVIDIA_CACHE:-/var/tmp/desi-gpu-map-nvidia}/VERSION, with
# CACHE/current pointing at it. In that directory:
#   root/                 both packages as `dpkg-deb -x` unpacks them
#   libnvidia-ml.so.1     the real NVML (a link into root/)
#   nvidia-cuda-mps-control, nvidia-cuda-mps-server   (links into root/)
# The non-free component is added in a sources file of its own,
# /etc/apt/sources.list.d/desi-gpu-map-non-free.sources, on the mirror the
# machine already uses for its release; the machine's own files are never
# edited. Only that file's lists are updated. Idempotent: a complete cache
# is used as it is. Must run as root unless the cache is complete.
set -euo pipefail

die() { echo "fetch.sh: $*" >&2; exit 1; }
version=${DGM_NVIDIA_VERSION:-535.261.03-1}
upstream=${version%-*}
cache=${DGM_NVIDIA_CACHE:-/var/tmp/desi-gpu-map-nvidia}
case "$cache" in /?*) ;; *) die "DGM_NVIDIA_CACHE must be an absolute path (got '$cache')" ;; esac
[[ "$version" =~ ^[0-9][0-9.]*-[0-9A-Za-z.~+]+$ ]] || die "DGM_NVIDIA_VERSION must be a Debian version such as 535.261.03-1 (got '$version')"
dir=$cache/$version
packages=(libnvidia-ml1 nvidia-cuda-mps)
sources=/etc/apt/sources.list.d/desi-gpu-map-non-free.sources

# complete DIR: the files the tests use are there and are what they claim.
complete() {
    local d=$1
    [ -f "$d/.complete" ] || return 1
    # the real library, by its versioned name, and both MPS binaries
    [ -f "$(readlink -f "$d/libnvidia-ml.so.1")" ] &&
        [[ "$(readlink -f "$d/libnvidia-ml.so.1")" == */libnvidia-ml.so."$upstream" ]] &&
        [ -x "$d/nvidia-cuda-mps-control" ] && [ -x "$d/nvidia-cuda-mps-server" ] &&
        [ "$(head -c 4 "$d/libnvidia-ml.so.1" | od -An -c | tr -d ' ')" = '177ELF' ] &&
        [ "$(head -c 4 "$d/nvidia-cuda-mps-control" | od -An -c | tr -d ' ')" = '177ELF' ]
}

# point_current: CACHE/current names this version (replaced atomically).
point_current() {
    [ "$(readlink "$cache/current" 2>/dev/null)" = "$version" ] && return 0
    ln -sfn "$version" "$cache/current.new"
    mv -T "$cache/current.new" "$cache/current"
}

# mirror: the URI from which the machine's apt takes its release's main.
mirror() {
    apt-get indextargets --format '$(REPO_URI) $(RELEASE) $(COMPONENT) $(TARGET_OF)' |
        awk -v r="$codename" '$2 == r && $3 == "main" && $4 == "deb" {print $1; exit}'
}

if complete "$dir"; then
    [ -w "$cache" ] && point_current
    echo "$dir"
    exit 0
fi
[ "$(id -u)" = 0 ] || die "$dir is not complete; run as root to fetch ${packages[*]} $version"
command -v apt-get >/dev/null || die "needs apt-get (Debian) to fetch ${packages[*]}"
mkdir -p "$cache"
exec 9>"$cache/.lock"
flock 9
complete "$dir" || {
    # Not beside another apt-get of the suite's (tests/deps.sh --start's).
    . "$(dirname "$0")/../../packaging/apt-lock.sh"
    apt_lock
    . /etc/os-release
    codename=${VERSION_CODENAME:-}
    [ -n "$codename" ] || die "/etc/os-release names no VERSION_CODENAME"
    uri=$(mirror)
    if [ -z "$uri" ]; then
        apt-get update -q >/dev/null
        uri=$(mirror)
    fi
    [ -n "$uri" ] || die "no apt source for $codename main found (apt-get indextargets)"
    want=$(printf 'Types: deb\nURIs: %s\nSuites: %s\nComponents: non-free\nSigned-By: /usr/share/keyrings/debian-archive-keyring.gpg\n' "$uri" "$codename")
    if [ "$(cat "$sources" 2>/dev/null)" != "$want" ]; then
        echo "fetch.sh: adding Debian's non-free component ($codename) in $sources" >&2
        printf '%s\n' "$want" >"$sources.tmp"
        chmod 0644 "$sources.tmp"
        mv -f "$sources.tmp" "$sources"
    fi
    # Only our file's lists; another apt run may hold the lists' lock a while.
    for try in 1 2 3 4 5 6; do
        apt-get update -q -o Dir::Etc::SourceList="$sources" -o Dir::Etc::SourceParts=- \
            -o APT::Get::List-Cleanup=0 >"$cache/apt-update.log" 2>&1 && break
        [ $try = 6 ] && { cat "$cache/apt-update.log" >&2; die "apt-get update for $sources failed"; }
        sleep 10
    done
    rm -rf "$dir.new"
    mkdir -p "$dir.new/debs" "$dir.new/root"
    # apt's download sandbox (user _apt) must be able to write there
    ! id _apt >/dev/null 2>&1 || chown _apt "$dir.new/debs"
    (cd "$dir.new/debs" && apt-get download -q "${packages[@]/%/=$version}" >"$cache/apt-download.log" 2>&1) || {
        cat "$cache/apt-download.log" >&2
        echo "versions $codename non-free offers:" >&2
        apt-cache madison "${packages[@]}" >&2 || true
        die "cannot download ${packages[*]} $version (set DGM_NVIDIA_VERSION to one offered)"
    }
    for deb in "$dir.new"/debs/*.deb; do dpkg-deb -x "$deb" "$dir.new/root"; done
    rm -rf "$dir.new/debs"
    lib=$(find "$dir.new/root" -name "libnvidia-ml.so.$upstream" -type f | head -n 1)
    [ -n "$lib" ] || die "libnvidia-ml1 $version unpacked no libnvidia-ml.so.$upstream"
    ln -s "${lib#"$dir.new/"}" "$dir.new/libnvidia-ml.so.1"
    for b in usr/bin/nvidia-cuda-mps-control usr/sbin/nvidia-cuda-mps-server usr/bin/nvidia-cuda-mps-server; do
        [ -x "$dir.new/root/$b" ] && ln -sfn "root/$b" "$dir.new/$(basename "$b")"
    done
    touch "$dir.new/.complete"
    complete "$dir.new" || die "the unpacked packages lack what the tests use: $(cd "$dir.new" && ls -l)"
    rm -rf "$dir"
    mv "$dir.new" "$dir"
    echo "fetch.sh: ${packages[*]} $version unpacked in $dir" >&2
}
point_current
echo "$dir"
