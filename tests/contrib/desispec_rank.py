"""One rank of tests/contrib.rs: desispec's redistribute_gpu_ranks, as
found first on PYTHONPATH (a patched or unpatched copy of desispec 0.70.0),
in a world of ranks that are separate processes but no MPI.

    desispec_rank.py METHOD RANK SIZE WORLD

METHOD is desispec's (round-robin or contiguous); WORLD an empty directory
that the SIZE ranks of one world share. cupy and numba.cuda are the
stand-ins of tests/fakes/python. Prints desiutil's log, then the file
desispec.gpu came from and one row:

    F path/to/desispec/gpu.py
    T rank CUDA_VISIBLE_DEVICES selected physical

`selected` is the device index desispec passed to cupy.cuda.Device(i).use(),
`physical` the entry of CUDA_VISIBLE_DEVICES it names.
"""

import os
import pickle
import sys
import time

import cupy
import desispec.gpu
from desispec.gpu import redistribute_gpu_ranks

TIMEOUT = 60


class FileComm:
    """Enough of an mpi4py communicator for desispec.gpu: rank, size, and
    the lowercase gather and bcast, between processes that meet in the
    directory `world`. Each collective call is numbered; a rank's value for
    call n is the file `n.rank`, written whole (renamed into place)."""

    def __init__(self, world, rank, size):
        self.world, self.rank, self.size = world, rank, size
        self._calls = 0

    def _put(self, name, value):
        tmp = os.path.join(self.world, f".{name}.tmp")
        with open(tmp, "wb") as out:
            pickle.dump(value, out)
        os.rename(tmp, os.path.join(self.world, name))

    def _get(self, name):
        path = os.path.join(self.world, name)
        deadline = time.monotonic() + TIMEOUT
        while not os.path.exists(path):
            if time.monotonic() > deadline:
                sys.exit(f"rank {self.rank}: no {name} from the other ranks in {TIMEOUT} s")
            time.sleep(0.005)
        with open(path, "rb") as src:
            return pickle.load(src)

    def gather(self, value, root=0):
        self._calls += 1
        self._put(f"{self._calls}.{self.rank}", value)
        if self.rank != root:
            return None
        return [self._get(f"{self._calls}.{r}") for r in range(self.size)]

    def bcast(self, value, root=0):
        self._calls += 1
        if self.rank == root:
            self._put(f"{self._calls}.{root}", value)
            return value
        return self._get(f"{self._calls}.{root}")


method, rank, size, world = sys.argv[1], int(sys.argv[2]), int(sys.argv[3]), sys.argv[4]
returned = redistribute_gpu_ranks(FileComm(world, rank, size), method=method)
selected = cupy.cuda.used
if selected is None or returned != selected:
    sys.exit(f"desispec returned device {returned} but used {selected}")
visible = os.environ["CUDA_VISIBLE_DEVICES"]
physical = visible.split(",")[selected]
sys.stdout.flush()
print(f"F {desispec.gpu.__file__}")
print(f"T {rank} {visible} {selected} {physical}", flush=True)
