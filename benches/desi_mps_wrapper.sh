#!/usr/bin/env bash
# For benchmarking only (benches/mps.sh): a copy of what DESI's
# production `desi_mps_wrapper` (gpu_specter, bin/desi_mps_wrapper) does,
# written from a description of its behaviour, not from its source. Every
# task of the step runs it: srun -n N --overlap bash desi_mps_wrapper.sh CMD...
# Its known bugs are kept on purpose, since they are what is compared:
# - one fixed pipe and log directory, /tmp/nvidia-mps and /tmp/nvidia-log,
#   for every job and user on the node;
# - a fixed `sleep 1` is each task's only check that the daemon is ready;
# - local rank 0 quits the daemon as soon as its own command ends, while the
#   node's other tasks may still be running.
# The GPU choice is left to the application. $CONTROL is the path of
# nvidia-cuda-mps-control (the production wrapper finds it on PATH).
export CUDA_MPS_PIPE_DIRECTORY=/tmp/nvidia-mps
export CUDA_MPS_LOG_DIRECTORY=/tmp/nvidia-log
control=${CONTROL:-nvidia-cuda-mps-control}
if [ "$SLURM_LOCALID" = 0 ]; then
    "$control" -d
fi
sleep 1
"$@"
status=$?
if [ "$SLURM_LOCALID" = 0 ]; then
    echo quit | "$control"
    # The production wrapper runs `killall nvidia-cuda-mps-server`; this copy
    # kills only the user's own servers (pkill -u), never another user's
    # processes. -f matches the command line: the process name is cut to
    # 15 characters, nvidia-cuda-mps, which the control daemon shares.
    pkill -u "$(id -u)" -f '(^|/)nvidia-cuda-mps-server( |$)'
fi
exit "$status"
