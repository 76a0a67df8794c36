//! `desi-gpu-map exec` under MPI launchers inside a Slurm allocation: Open
//! MPI's `mpirun` and MPICH's `mpiexec` start their daemons through srun,
//! one per node, so every rank inherits that daemon step's
//! `SLURM_LOCALID=0`; exec reads the launcher's own variables instead.
//!
//! Run on the host's series only (tests/run-cluster-tests.sh): Debian's
//! `openmpi-bin` and `mpich` are installed on the host (tests/deps.sh), not
//! in the 24.11 and 26.05 roots. Loopback only: Open MPI's `if_include=lo`
//! settings, MPICH's `-iface lo`.

use crate::common::*;
use std::sync::MutexGuard;

/// Takes the cluster ([`setup`]) and takes the plugin out of plugstack.conf.
fn without_the_plugin() -> MutexGuard<'static, ()> {
    let guard = setup("required", &[]);
    cluster(&["plugin", "off"]);
    guard
}

/// Open MPI's loopback settings, for mpirun and every rank.
const OMPI_LO: [(&str, &str); 3] = [
    ("OMPI_MCA_oob_tcp_if_include", "lo"),
    ("OMPI_MCA_btl_tcp_if_include", "lo"),
    ("OMPI_MCA_btl", "self,vader"),
];

/// What each launcher's rank prints: its global rank, node, list, the
/// daemon step's SLURM_LOCALID (the same for every rank) and the flag.
const RANK_ROW: &str = r#"echo "T ${OMPI_COMM_WORLD_RANK-$PMI_RANK} $(hostname) ${CUDA_VISIBLE_DEVICES-unset} ${SLURM_LOCALID-unset} ${DESI_GPU_MAPPED-unset}""#;

/// `salloc ALLOC LAUNCHER... desi-gpu-map exec --method M -- bash -c RANK_ROW`.
fn launched_in(alloc: &str, launcher: &str, method: &str) -> Job {
    let mut job = salloc(alloc).args(launcher);
    for (name, value) in OMPI_LO {
        job = job.env(name, value);
    }
    job.arg(bin())
        .args(&format!("exec --method {method} --"))
        .probe(RANK_ROW)
}

/// Inside an allocation, Open MPI's mpirun starts one orted per node
/// through srun: every rank inherits that daemon step's SLURM_LOCALID=0,
/// and exec reads Open MPI's variables instead, on one node and on two.
#[test]
fn exec_under_open_mpis_mpirun_in_an_allocation_gives_each_rank_its_own_gpu() {
    let _c = without_the_plugin();
    let mpirun = "mpirun.openmpi --allow-run-as-root --oversubscribe -np";
    launched_in(
        "-N1 -w n1 -n4 --gpus-per-node=4",
        &format!("{mpirun} 4"),
        "roundrobin",
    )
    .run()
    .ok()
    .rows_are(&["0 n1 0 0 1", "1 n1 1 0 1", "2 n1 2 0 1", "3 n1 3 0 1"]);
    launched_in(
        "-N2 -w n1,n2 --ntasks-per-node=3 --gpus-per-node=4",
        &format!("{mpirun} 6"),
        "contiguous",
    )
    .run()
    .ok()
    .rows_are(&THREE_A_NODE_CONTIGUOUS);
}

/// MPICH's mpiexec inside an allocation starts its proxies through srun
/// too, on loopback (`-iface lo`).
#[test]
fn exec_under_mpichs_mpiexec_in_an_allocation_gives_each_rank_its_own_gpu() {
    let _c = without_the_plugin();
    launched_in(
        "-N1 -w n1 -n4 --gpus-per-node=4",
        "mpiexec.mpich -iface lo -n 4",
        "roundrobin",
    )
    .run()
    .ok()
    .rows_are(&["0 n1 0 0 1", "1 n1 1 0 1", "2 n1 2 0 1", "3 n1 3 0 1"]);
    launched_in(
        "-N2 -w n1,n2 --ntasks-per-node=2 --gpus-per-node=4",
        "mpiexec.mpich -iface lo -n 4",
        "roundrobin",
    )
    .run()
    .ok()
    // Two ranks a node on four GPUs: every other GPU each.
    .rows_are(&[
        "0 n1 0,2 0 1",
        "1 n1 1,3 0 1",
        "2 n2 0,2 0 1",
        "3 n2 1,3 0 1",
    ]);
}

/// Three ranks a node on four GPUs, contiguous: the first holds two.
const THREE_A_NODE_CONTIGUOUS: [&str; 6] = [
    "0 n1 0,1 0 1",
    "1 n1 2 0 1",
    "2 n1 3 0 1",
    "3 n2 0,1 0 1",
    "4 n2 2 0 1",
    "5 n2 3 0 1",
];

/// What each srun task prints: its rank, node, list, local id and flag.
const TASK_ROW: &str = r#"echo "T ${SLURM_PROCID} $(hostname) ${CUDA_VISIBLE_DEVICES-unset} ${SLURM_LOCALID-unset} ${DESI_GPU_MAPPED-unset}""#;

/// srun run from inside one MPI rank hands the rank's variables to every
/// task of its step: they came in through srun, and Slurm's decide.
fn srun_from_a_rank(launcher: &str, flags: &str) -> Job {
    let mut job = client(launcher, flags).args("-np 1 srun -w n1 -n4 --gpus-per-node=4");
    for (name, value) in OMPI_LO {
        job = job.env(name, value);
    }
    job.arg(bin())
        .args("exec --method roundrobin --verbose --")
        .probe(TASK_ROW)
}

#[test]
fn srun_started_from_inside_an_mpi_rank_maps_its_tasks_by_slurms_variables() {
    let _c = without_the_plugin();
    let rows = ["0 n1 0 0 1", "1 n1 1 1 1", "2 n1 2 2 1", "3 n1 3 3 1"];
    let (openmpi, as_root) = ("mpirun.openmpi", "--allow-run-as-root --oversubscribe");
    let out = srun_from_a_rank(openmpi, as_root).run();
    out.ok().rows_are(&rows).says(
        "OMPI_COMM_WORLD_LOCAL_RANK, OMPI_COMM_WORLD_LOCAL_SIZE came in through srun from an \
         outer launch",
    );
    let out = srun_from_a_rank("mpiexec.mpich", "-iface lo").run();
    out.ok()
        .rows_are(&rows)
        .says("MPI_LOCALRANKID, MPI_LOCALNRANKS came in through srun from an outer launch");
    // A job submitted from a rank: its steps' tasks inherit the rank's
    // variables through sbatch and srun.
    let output = format!("{}/from-a-rank.out", state_dir());
    let _ = std::fs::remove_file(&output);
    let mut job = client(openmpi, as_root)
        .args("-np 1 sbatch --wait -o")
        .arg(&output);
    for (name, value) in OMPI_LO {
        job = job.env(name, value);
    }
    let inner = format!(
        "srun {} exec --method roundrobin -- bash -c '{TASK_ROW}'",
        bin()
    );
    job.args("-w n1 -n4 --gpus-per-node=4 --wrap")
        .arg(inner)
        .ok();
    let batch = std::fs::read_to_string(&output).unwrap_or_default();
    std::fs::remove_file(&output).unwrap();
    assert_eq!(probe_rows(&batch), crate::common::rows(&rows), "{batch}");
}

/// On nodes whose `/proc` hides other users' processes (hidepid), a rank
/// still reads its launcher's variables: its daemon or proxy, which srun
/// started as the step's task, is the user's own and readable, and had
/// none of them. Run as a test user: root sees everything.
#[test]
fn ranks_of_mpirun_and_mpiexec_are_placed_by_their_launcher_under_hidepid() {
    let _c = without_the_plugin();
    let _hidden = crate::hidepid::Hidepid::on(&["n1", "n2"]);
    let alice = USERS[0].0;
    launched_in(
        "-N2 -w n1,n2 --ntasks-per-node=3 --gpus-per-node=4",
        "mpirun.openmpi --oversubscribe -np 6",
        "contiguous",
    )
    .user(alice)
    .run()
    .ok()
    .rows_are(&THREE_A_NODE_CONTIGUOUS);
    launched_in(
        "-N2 -w n1,n2 --ntasks-per-node=2 --gpus-per-node=4",
        "mpiexec.mpich -iface lo -n 4",
        "roundrobin",
    )
    .user(alice)
    .run()
    .ok()
    // Two ranks a node on four GPUs: every other GPU each.
    .rows_are(&[
        "0 n1 0,2 0 1",
        "1 n1 1,3 0 1",
        "2 n2 0,2 0 1",
        "3 n2 1,3 0 1",
    ]);
}
