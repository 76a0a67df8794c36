"""Stand-in for cupy, enough for desispec.gpu (tests/cluster/desi.rs): the visible
devices are CUDA_VISIBLE_DEVICES's entries, as the CUDA runtime counts them;
`cuda.Device(i).use()` records `i` in `cuda.used`. No GPU is touched."""

from . import cuda


def is_available():
    return cuda.runtime.getDeviceCount() > 0


class _MemoryPool:
    def free_all_blocks(self):
        pass


_pool = _MemoryPool()


def get_default_memory_pool():
    return _pool
