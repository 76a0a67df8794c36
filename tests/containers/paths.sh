# Sourced by tests/containers/build.sh and tests/cluster/cluster.sh, with
# REPO_DIR set: where build.sh installs the suite's own enroot.
# ENROOT_PREFIX: enroot 4.1.2, built with this prefix and its sysconfdir
# (PREFIX/etc/enroot) baked into its script, so that it reads the suite's
# configuration and never a machine's /etc/enroot; inside the repository,
# which cluster.sh binds into a series' root at the same path.
# shellcheck disable=SC2034
ENROOT_PREFIX=$REPO_DIR/target/containers/enroot/prefix
