"""The batch scripts desispec's generator writes, for tests/contrib.rs.

    write_scripts.py

With a desispec tree first on PYTHONPATH and DESI_SPECTRO_REDUX and
SPECPROD naming where the scripts go, calls
`desispec.workflow.batch_writer` for perlmutter-gpu and perlmutter-cpu: the
tilenight script of one tile and the desi_proc scripts of an arc, a flat,
a science and a prestdstar exposure (with nightlybias for the flat).
Prints each script's text after a line `=== SYSTEM JOB`, and nothing else
on standard output (desispec's own messages go to standard error).
"""

import contextlib
import sys

from desispec.workflow import batch_writer

NIGHT, TILE, EXPID = 20260616, 1000, 200
texts = []
with contextlib.redirect_stdout(sys.stderr):
    for system in ('perlmutter-gpu', 'perlmutter-cpu'):
        path = batch_writer.create_desi_proc_tilenight_batch_script(
            night=NIGHT, exp=[EXPID], tileid=TILE, ncameras=30, queue='regular',
            system_name=system)
        with open(path) as f:
            texts.append((system, 'tilenight', f.read()))
        for jobdesc in ('arc', 'flat', 'science', 'prestdstar'):
            extra = ' --nightlybias' if jobdesc == 'flat' else ''
            path = batch_writer.create_desi_proc_batch_script(
                night=NIGHT, exp=EXPID, cameras='a0123456789', jobdesc=jobdesc,
                queue='regular', system_name=system, nightlybias=bool(extra),
                cmdline=f'desi_proc -n {NIGHT} -e {EXPID} --cameras a0123456789{extra}')
            with open(path) as f:
                texts.append((system, jobdesc, f.read()))
for system, job, text in texts:
    print(f'=== {system} {job}')
    print(text, end='')
