"""One MPI rank of tests/cluster/desi.rs: DESI's own GPU selection, run for real.

    ranks.py round-robin|contiguous [honour]

Calls desispec.gpu.redistribute_gpu_ranks(MPI.COMM_WORLD, method=...) from
the installed desispec (tests/desi/fetch.sh), with the stand-ins of
tests/fakes/python for cupy and numba.cuda, and prints one row:

    T rank host SLURM_LOCALID CUDA_VISIBLE_DEVICES selected physical flag

`selected` is the device index desispec passed to cupy.cuda.Device(i).use(),
`physical` the entry of CUDA_VISIBLE_DEVICES it names, `flag`
DESI_GPU_MAPPED (`unset`). With `honour`, the rank does what the user guide
(docs/user-guide.md) tells applications to do: where DESI_GPU_MAPPED=1 it skips its own
selection and uses device 0. Exits non-zero where MPI did not start the
step's ranks as one world (a rank alone, or the wrong rank or size).
"""

import os
import socket
import sys

from mpi4py import MPI

import cupy
from desispec.gpu import redistribute_gpu_ranks

method = sys.argv[1]
honour = sys.argv[2:] == ["honour"]
comm = MPI.COMM_WORLD
rank, size = comm.Get_rank(), comm.Get_size()
want = (int(os.environ["SLURM_PROCID"]), int(os.environ["SLURM_NTASKS"]))
if (rank, size) != want:
    sys.exit(f"MPI rank {rank} of {size}, but Slurm's task {want[0]} of {want[1]}")

if honour and os.environ.get("DESI_GPU_MAPPED") == "1":
    cupy.cuda.Device(0).use()
    returned = 0
else:
    returned = redistribute_gpu_ranks(comm, method=method)
selected = cupy.cuda.used
if selected is None or returned != selected:
    sys.exit(f"desispec returned device {returned} but used {selected}")

visible = os.environ.get("CUDA_VISIBLE_DEVICES", "unset")
physical = visible.split(",")[selected]
flag = os.environ.get("DESI_GPU_MAPPED", "unset")
local = os.environ["SLURM_LOCALID"]
# Every rank selects before any prints, so no rank's choice waits on output.
comm.Barrier()
print(f"T {rank} {socket.gethostname()} {local} {visible} {selected} {physical} {flag}", flush=True)
