"""A batch script of tests/contrib.rs, written by desispec's own batch
writer (desispec.workflow.batch_writer, as found first on PYTHONPATH: a
patched or unpatched copy of desispec 0.70.0).

    desispec_batch.py tilenight SYSTEM OUTDIR
    desispec_batch.py proc SYSTEM JOBDESC OUTDIR

`tilenight` calls create_desi_proc_tilenight_batch_script, `proc`
create_desi_proc_batch_script for job JOBDESC (science, flat, arc, ...), for
batch system SYSTEM (perlmutter-gpu, perlmutter-cpu), writing under OUTDIR.
Prints `SCRIPT path` of the script written.

batch_writer's own code runs unchanged; what it imports from elsewhere,
which needs numpy, astropy, fitsio and yaml, is stood in for here: numpy's
few calls it makes, desispec.io (where scripts go), desispec.io.util (never
called with these arguments), and desispec.workflow.batch (the two systems'
settings, copied from desispec 0.70.0's data/batch_config.yaml, and fixed
resources).
"""

import os
import sys
import types

import desispec
import desispec.workflow

args = sys.argv[1:]
outdir = args[-1]


def stand_in(name, **attrs):
    module = types.ModuleType(name)
    module.__dict__.update(attrs)
    sys.modules[name] = module
    return module


def not_here(*args, **kwargs):
    raise RuntimeError("not in tests/contrib/desispec_batch.py's stand-ins")


def isscalar(value):
    return isinstance(value, (str, bytes, int, float, complex, bool))


def atleast_1d(value):
    return list(value) if isinstance(value, (list, tuple)) else [value]


stand_in("numpy", isscalar=isscalar, atleast_1d=atleast_1d, where=not_here, array=not_here)
desispec.io = stand_in("desispec.io", findfile=not_here, specprod_root=lambda: outdir)
desispec.io.util = stand_in("desispec.io.util", decode_camword=not_here, parse_cameras=not_here)

CONFIG = {
    "perlmutter-gpu": dict(site="NERSC", cores_per_node=64, threads_per_core=2, memory=256,
                           timefactor=0.5, gpus_per_node=4,
                           batch_opts=["--constraint=gpu", "--gpus-per-node=4"]),
    "perlmutter-cpu": dict(site="NERSC", cores_per_node=128, threads_per_core=2, memory=512,
                           timefactor=0.7, gpus_per_node=0,
                           batch_opts=["--constraint=cpu"]),
}


def get_config(name):
    return dict(CONFIG[name], name=name)


def determine_resources(ncameras, jobdesc, nexps=1, forced_runtime=None, queue=None,
                        system_name=None):
    # ncores, nodes, runtime (minutes)
    return 61, 2, 30


desispec.workflow.batch = stand_in(
    "desispec.workflow.batch",
    get_config=get_config,
    default_system=not_here,
    determine_resources=determine_resources,
)

from desispec.workflow import batch_writer  # noqa: E402

if args[0] == "tilenight":
    system = args[1]
    script = batch_writer.create_desi_proc_tilenight_batch_script(
        night=20240101, exp=[1234, 1235], tileid=1000, ncameras=30, queue="regular",
        system_name=system)
elif args[0] == "proc":
    system, jobdesc = args[1], args[2]
    script = batch_writer.create_desi_proc_batch_script(
        night=20240101, exp=1234, cameras=["b0", "r0", "z0"], jobdesc=jobdesc,
        queue="regular", batchdir=outdir, jobname=f"{jobdesc}-20240101-00001234",
        cmdline="desi_proc -n 20240101 -e 1234 --cameras b0,r0,z0", system_name=system)
else:
    sys.exit(f"unknown script kind {args[0]}")
print(f"SCRIPT {script}")
