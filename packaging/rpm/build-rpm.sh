#!/usr/bin/env bash
# Builds the RPM on Debian with rpmbuild from Debian's `rpm` package, for
# checking the spec and the package's contents: target/package/*.rpm.
# The Rust build is done once, here, and handed to the spec (prebuilt_dir).
# On a RHEL-family machine, use the spec directly (packaging/README.md).
set -euo pipefail
cd "$(dirname "$0")/../.."
umask 022
repo=$(pwd)

bash packaging/apt-need.sh rpmbuild:rpm /usr/include/slurm/slurm_version.h:libslurm-dev
version=$(awk -F'"' '/^version *=/ {print $2; exit}' Cargo.toml)
spec_version=$(awk '$1 == "Version:" {print $2; exit}' packaging/rpm/desi-gpu-map.spec)
if [ "$version" != "$spec_version" ]; then
    echo "build-rpm.sh: Version $spec_version in the spec differs from $version in Cargo.toml" >&2
    exit 1
fi

make -s release

top=$repo/target/package/rpmbuild
rm -rf "$top"
mkdir -p "$top"/{SOURCES,SPECS,BUILD,RPMS,SRPMS}
# The source tarball: the working tree as git sees it (committed or not),
# without build output.
name=desi-gpu-map-$version
if git rev-parse --is-inside-work-tree >/dev/null 2>&1; then
    git ls-files -z --cached --others --exclude-standard |
        while IFS= read -r -d '' f; do [ -e "$f" ] && printf '%s\0' "$f"; done |
        tar --null -T - --transform "s|^|$name/|" -czf "$top/SOURCES/$name.tar.gz"
else
    tar --exclude=./target --exclude=./.git --transform "s|^\./|$name/|" \
        -czf "$top/SOURCES/$name.tar.gz" .
fi
cp packaging/rpm/desi-gpu-map.spec "$top/SPECS/"

echo "build-rpm.sh: rpmbuild --nodeps: Debian cannot satisfy the spec's BuildRequires" \
    "(slurm-devel, cargo, rust as RPMs); Slurm's headers come from libslurm-dev here." >&2
# Debian's brp-compress needs bash (`read -d`), not dash, to gzip the man pages.
rpmbuild -bb --nodeps --quiet \
    --define "_topdir $top" \
    --define "prebuilt_dir $repo/target/release" \
    --define "__brp_compress bash %{_rpmconfigdir}/brp-compress %{?_prefix}" \
    "$top/SPECS/desi-gpu-map.spec"
find "$top/RPMS" -name '*.rpm' -exec mv -f {} target/package/ \;
rm -rf "$top"
ls target/package/desi-gpu-map-"$version"-*.rpm | sed 's/^/built /'
