#!/usr/bin/env bash
# Brings up the local test cluster (n1, n2 with 4 fake GPUs, n3 with 2, n4
# with 2 that Slurm names by count only: gres.conf Flags=no_gpu_env),
# runs the integration suites against it (tests/cluster.rs: the mapping;
# tests/faults.rs: load, faults, security; the installed .deb smoke), then
# one node with task/affinity for tests/closest.rs, and
# always tears it down.
# Fails, never skips, when the cluster cannot start.
set -euo pipefail
cd "$(dirname "$0")/.."
harness=tests/cluster/cluster.sh
# Quiet unless it fails, so that the test runner's summary closes the output.
trap 'log=$(bash "$harness" down 2>&1) || { echo "$log" >&2; exit 1; }' EXIT
trap 'exit 130' INT TERM
bash "$harness" down
bash "$harness" up 4 4 2 2:noenv
bash tests/package/deb-smoke.sh
cargo test --locked --features cluster-tests --test cluster --test faults --test promises -- --test-threads=1
# closest with real CPU binding: one node, task/affinity, the host's CPUs.
bash "$harness" down
DGM_TASK_AFFINITY=1 bash "$harness" up 4
cargo test --locked --features cluster-tests --test closest -- --test-threads=1
