#!/usr/bin/env bash
# Runs each fuzz target for a bounded time (default 60 s) and prints the
# number of executions and the result. Not part of CI: see docs/testing.md.
# Needs `cargo install cargo-fuzz`; RUSTC_BOOTSTRAP lets a stable toolchain
# accept the sanitizer flags cargo-fuzz passes.
set -euo pipefail
cd "$(dirname "$0")"
seconds=${1:-60}
export RUSTC_BOOTSTRAP=1
for target in option plugstack gpu_list closest; do
    log=$(mktemp)
    if cargo fuzz run "$target" -- -max_total_time="$seconds" -max_len=4096 >"$log" 2>&1; then
        result=ok
    else
        result=FAILED
    fi
    runs=$(grep -o 'Done [0-9]* runs' "$log" | tail -n 1 | awk '{print $2}')
    echo "fuzz $target: ${runs:-?} executions in ${seconds}s: $result"
    [ "$result" = ok ] || tail -n 30 "$log"
    rm -f "$log"
done
