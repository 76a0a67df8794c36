#!/usr/bin/env python3
"""A tiny CUDA client for tests/device/mps-check.sh, through the driver API
(libcuda.so.1, which the NVIDIA driver installs; no toolkit needed).

It creates a context on its device 0 (under MPS: a client of the server),
prints one line `C RANK pid=PID devices=N uuid=GPU-... cvd=VALUE`, holds the
context for SECONDS (default 5), and exits 0; on a failed call it prints
`C RANK error CALL CODE` and exits 1."""
import ctypes
import os
import sys
import time

rank = os.environ.get("SLURM_PROCID", os.environ.get("RANK", "-"))
cuda = ctypes.CDLL("libcuda.so.1")


def check(code, call):
    if code != 0:
        print(f"C {rank} error {call} {code}", flush=True)
        sys.exit(1)


check(cuda.cuInit(0), "cuInit")
count = ctypes.c_int()
check(cuda.cuDeviceGetCount(ctypes.byref(count)), "cuDeviceGetCount")
dev = ctypes.c_int()
check(cuda.cuDeviceGet(ctypes.byref(dev), 0), "cuDeviceGet")
raw = (ctypes.c_ubyte * 16)()
check(cuda.cuDeviceGetUuid(raw, dev), "cuDeviceGetUuid")
h = bytes(raw).hex()
uuid = f"GPU-{h[:8]}-{h[8:12]}-{h[12:16]}-{h[16:20]}-{h[20:]}"
ctx = ctypes.c_void_p()
check(cuda.cuCtxCreate_v2(ctypes.byref(ctx), 0, dev), "cuCtxCreate")
cvd = os.environ.get("CUDA_VISIBLE_DEVICES", "unset")
print(f"C {rank} pid={os.getpid()} devices={count.value} uuid={uuid} cvd={cvd}", flush=True)
time.sleep(float(sys.argv[1]) if len(sys.argv) > 1 else 5)
cuda.cuCtxDestroy_v2(ctx)
