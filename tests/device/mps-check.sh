#!/usr/bin/env bash
# mps-check.sh: the device check, for a machine with an NVIDIA GPU and its
# driver (libcuda.so.1, libnvidia-ml.so.1, nvidia-cuda-mps-control).
# Run as root from the repository root after `make build` (the release
# binaries). It prints what it saw and exits non-zero on the first
# broken promise; what the test cluster here cannot answer is what it asks.
#
#  1. NVML: the discovery code the plugin, exec and show share (a child
#     with a deadline, host/src/deadline.rs) against the real libnvidia-ml:
#     exec in a task whose step has GPUs but no CUDA_VISIBLE_DEVICES (the
#     UUIDs; the GPUs' places for closest), and `desi-gpu-map show` in a
#     task mapped to GPU 0, with NVML's details.
#  2. MPS, as the plugin runs it: a control daemon as an unprivileged user,
#     in 0700 directories, CUDA_VISIBLE_DEVICES = the GPU's UUID; RANKS
#     clients (tests/device/cuda_client.py) given the same UUID. One server
#     must serve them all (get_server_list, then show_clients), each client
#     must see exactly its own GPU, and after `quit` nothing may be left.
#  3. Where `srun` works and the plugin is installed (DGM_SRUN=1), the same
#     through the plugin: srun -n RANKS --desi-gpu-map=contiguous,mps.
#  4. `desi-gpu-map exec --method contiguous,mps` as RANKS tasks of one step
#     (their SLURM_* variables set by hand, as slurmstepd sets them): one
#     keeper and one daemon for all, each client on the GPU exec chose, by
#     UUID; `show` inside such a task; nothing left after the last task.
# Usage: tests/device/mps-check.sh [RANKS]   (default 4)
set -euo pipefail
cd "$(dirname "$0")/../.."
ranks=${1:-4}
bin=$PWD/target/release/desi-gpu-map
client=$PWD/tests/device/cuda_client.py
fail() { echo "mps-check: FAILED: $*"; exit 1; }
say() { echo "mps-check: $*"; }
[ -x "$bin" ] || fail "no $bin: run make build first"
control=$(PATH=$PATH:/usr/local/nvidia/bin command -v nvidia-cuda-mps-control || true)
[ -n "$control" ] || fail "nvidia-cuda-mps-control is not on PATH"
nvidia-smi -L || true
# The test user must reach them: copies in a folder anyone can read.
install -d -m 0755 /tmp/dgm-device
cp "$bin" "$client" /tmp/dgm-device/ && chmod a+rx /tmp/dgm-device/*
bin=/tmp/dgm-device/desi-gpu-map client=/tmp/dgm-device/cuda_client.py

say "1. NVML through the discovery code the plugin, exec and show share"
gpus=$(nvidia-smi -L 2>/dev/null | grep -c '^GPU' || true)
[ "${gpus:-0}" -gt 0 ] || gpus=1
nvml_task=(SLURM_JOB_ID=4241 SLURM_STEP_ID=0 SLURM_NODEID=0 SLURMD_NODENAME=$(hostname)
    SLURM_STEP_TASKS_PER_NODE=1 SLURM_GPUS_ON_NODE=$gpus SLURM_LOCALID=0 SLURM_PROCID=0)
for method in contiguous closest; do
    got=$(env -i PATH=/usr/bin:/bin "${nvml_task[@]}" "$bin" exec --method "$method,verbose" -- \
        printenv CUDA_VISIBLE_DEVICES) || fail "exec --method $method through NVML"
    uuid=${got%%,*}
    [[ "$uuid" == GPU-* ]] || fail "no GPU UUID from NVML ($method): '$got'"
done
CUDA_VISIBLE_DEVICES=0 DESI_GPU_MAPPED=1 SLURM_LOCALID=0 "$bin" show || fail "show"

say "2. MPS as the plugin runs it: one daemon for $uuid, $ranks clients"
user=${DGM_DEVICE_USER:-nobody}
dir=$(mktemp -d /tmp/dgm-mps.check.XXXXXX)
mkdir -m 0700 "$dir/pipe" "$dir/log"
chown -R "$user" "$dir"
chmod 0700 "$dir"
as_user() { runuser -u "$user" -- env -i PATH=/usr/bin:/bin CUDA_MPS_PIPE_DIRECTORY="$dir/pipe" \
    CUDA_MPS_LOG_DIRECTORY="$dir/log" CUDA_VISIBLE_DEVICES="$uuid" "$@"; }
cleanup() { echo quit | as_user "$control" >/dev/null 2>&1 || true; rm -rf "$dir"; }
trap cleanup EXIT
as_user "$control" -d || fail "the control daemon did not start"
for r in $(seq 0 $((ranks - 1))); do
    as_user env RANK=$r python3 "$client" 6 >"$dir.client$r" 2>&1 &
done
sleep 3
servers=$(echo get_server_list | as_user "$control")
say "servers: $servers"
[ "$(wc -w <<<"$servers")" = 1 ] || fail "expected one MPS server, got '$servers'"
clients=$(echo "get_client_list $servers" | as_user "$control")
say "clients of server $servers: $(tr '\n' ' ' <<<"$clients")"
[ "$(wc -w <<<"$clients")" = "$ranks" ] || fail "expected $ranks clients"
wait
cat "$dir".client*
for r in $(seq 0 $((ranks - 1))); do
    grep -q "^C $r pid=.* devices=1 uuid=$uuid cvd=$uuid$" "$dir.client$r" || fail "client $r did not see exactly $uuid"
done
rm -f "$dir".client*
echo quit | as_user "$control" >/dev/null
sleep 1
left=$(pgrep -u "$user" -f 'nvidia-cuda-mps-(control|server)' || true)
[ -z "$left" ] || fail "MPS processes left after quit: $left"
say "one server served $ranks clients, each on $uuid; nothing left after quit"

if [ "${DGM_SRUN:-0}" = 1 ]; then
    say "3. through the plugin: srun -n$ranks --desi-gpu-map=verbose,contiguous,mps"
    out=$(runuser -u "$user" -- srun -n"$ranks" --desi-gpu-map=verbose,contiguous,mps bash -c \
        '[ "$SLURM_LOCALID" = 0 ] && (sleep 3; s=$(echo get_server_list | nvidia-cuda-mps-control); echo "S $s $(echo get_client_list $s | nvidia-cuda-mps-control | wc -w)") & python3 '"$client"' 6; wait' 2>&1)
    echo "$out"
    grep -q "^S [0-9]* $ranks$" <<<"$out" || fail "one server serving $ranks clients, through the plugin"
    [ "$(grep -c '^C .* devices=1 uuid=GPU-' <<<"$out")" = "$ranks" ] || fail "each client on one GPU"
    sleep 1
    [ -z "$(find /tmp -maxdepth 1 -name 'dgm-mps.*' ! -name '*.check.*')" ] || fail "MPS directories left"
fi
say "4. exec --method contiguous,mps as $ranks tasks of one step"
step_env=(SLURM_JOB_ID=4242 SLURM_STEP_ID=0 SLURM_NODEID=0 SLURMD_NODENAME=$(hostname)
    SLURM_STEP_TASKS_PER_NODE=$ranks SLURM_GPUS_ON_NODE=1 SLURM_STEP_GPUS=0 CUDA_VISIBLE_DEVICES=0)
exec_task() { runuser -u "$user" -- env -i PATH="$(dirname "$control"):/usr/bin:/bin" "${step_env[@]}" \
    SLURM_LOCALID=$1 SLURM_PROCID=$1 "$bin" exec --method contiguous,mps,verbose -- "${@:2}"; }
out=$(mktemp)
for r in $(seq 0 $((ranks - 1))); do exec_task "$r" python3 "$client" 6 >>"$out" 2>&1 & done
sleep 4
edir=$(ls -d /tmp/dgm-mps.*.4242.0.0.* 2>/dev/null | head -n1)
[ -n "$edir" ] || { cat "$out"; fail "exec made no MPS directory"; }
as_exec() { runuser -u "$user" -- env -i PATH=/usr/bin:/bin CUDA_MPS_PIPE_DIRECTORY="$edir/pipe" "$control"; }
servers=$(echo get_server_list | as_exec)
clients=$(echo "get_client_list $servers" | as_exec)
say "exec's daemon in $edir: server $servers, clients $(tr '\n' ' ' <<<"$clients")"
exec_task 0 "$bin" show --nvml auto || fail "show in an exec,mps task"
wait
cat "$out"
[ "$(wc -w <<<"$servers")" = 1 ] || fail "exec: expected one MPS server, got '$servers'"
[ "$(wc -w <<<"$clients")" = "$ranks" ] || fail "exec: expected $ranks clients of its server"
[ "$(grep -c "^C .* devices=1 uuid=$uuid cvd=$uuid$" "$out")" = "$ranks" ] || fail "exec: each client on $uuid, by UUID"
sleep 1
[ ! -e "$edir" ] || fail "exec: $edir left after the last task"
left=$(pgrep -u "$user" -f 'nvidia-cuda-mps-(control|server)|mps-keeper' || true)
[ -z "$left" ] || fail "exec: processes left after the last task: $left"
rm -f "$out"
say "exec: one keeper's daemon served $ranks clients on $uuid; nothing left"
say "all checks passed"
