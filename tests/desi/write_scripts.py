"""The batch scripts desispec's own generator writes, for tests/cluster/desi.rs
and benches/desi.sh.

    write_scripts.py

With desispec's branch (patched or not) first on PYTHONPATH and
DESI_SPECTRO_REDUX and SPECPROD naming where the scripts go, calls
`desispec.workflow.batch_writer` as desi_proc and desi_run_night do for
perlmutter-gpu: the tilenight script of one tile (all 30 cameras, one
exposure) and the desi_proc script of one prestdstar exposure, each at
DESI's GPU shape (64 ranks, -c 2, one node with 4 GPUs). Prints
`script PATH` for each, tilenight first (desiutil's log writes to stdout
too).
"""

import contextlib
import io
import sys

from desispec.workflow import batch_writer

NIGHT, TILE, EXPID = 20260616, 1000, 200
with contextlib.redirect_stdout(io.StringIO()) as said:
    tilenight = batch_writer.create_desi_proc_tilenight_batch_script(
        night=NIGHT, exp=[EXPID], tileid=TILE, ncameras=30, queue='regular',
        system_name='perlmutter-gpu')
    proc = batch_writer.create_desi_proc_batch_script(
        night=NIGHT, exp=EXPID, cameras='a0123456789', jobdesc='prestdstar',
        queue='regular', system_name='perlmutter-gpu',
        cmdline=f'desi_proc -n {NIGHT} -e {EXPID} --cameras a0123456789')
print(said.getvalue(), end='', file=sys.stderr)
print(f'script {tilenight}')
print(f'script {proc}')
