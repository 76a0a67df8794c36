# Sourced by tests/demo.sh and benches/launch.sh, from the repository
# root: checks that the plugin is built, and tears down any cluster of ours
# now and when the script exits. Sets harness and so.
harness=tests/cluster/cluster.sh
so=$PWD/target/release/libdesi_gpu_map_spank.so
[ -f "$so" ] || { echo "$0: build first (make build)" >&2; exit 1; }
trap 'bash "$harness" down >/dev/null 2>&1 || true' EXIT
trap 'exit 130' INT TERM
bash "$harness" down >/dev/null 2>&1
