//! Nodes whose `/proc` is mounted `hidepid=2` (`invisible`), as shared HPC
//! nodes mount it: a user sees only their own dumpable processes, so
//! neither root's slurmstepd nor a task before its exec (whose prolog runs
//! as its child). `cluster.sh hidepid nI on` mounts such a `/proc` in node
//! nI's mount namespace alone; jobs run as a test user, since root sees
//! everything. exec and the task prolog must place each task, reach the
//! node's daemon, and keep other processes out of a step's keeper as they
//! do without it.

use crate::common::*;
use crate::mps::{
    alices_exec_daemon_on_n1, assert_nothing_left, assert_nothing_left_unswept,
    assert_one_daemon_per_node_serves_all, clear_what_others_left, exec_mps, exec_setup,
    prolog_and_epilog, prolog_asks, task, ALICE,
};

/// `/proc` mounted hidepid on `nodes` while it lives; unmounted when
/// dropped, even when a test fails.
pub(crate) struct Hidepid(Vec<&'static str>);

impl Hidepid {
    pub(crate) fn on(nodes: &[&'static str]) -> Hidepid {
        let mut hidden = Hidepid(Vec::new());
        for node in nodes {
            cluster(&["hidepid", node, "on"]);
            hidden.0.push(node);
        }
        hidden
    }
}

impl Drop for Hidepid {
    fn drop(&mut self) {
        for node in &self.0 {
            let _ = std::process::Command::new("bash")
                .arg(repo().join("tests/cluster/cluster.sh"))
                .args(["hidepid", node, "off"])
                .status();
        }
    }
}

/// Open MPI's and MPICH's rank variables, as a job submitted from inside
/// a rank exports them to every task: stale, never a launch.
const STALE_RANK: [(&str, &str); 4] = [
    ("OMPI_COMM_WORLD_LOCAL_RANK", "0"),
    ("OMPI_COMM_WORLD_LOCAL_SIZE", "1"),
    ("MPI_LOCALRANKID", "0"),
    ("MPI_LOCALNRANKS", "1"),
];

/// `job` with [`STALE_RANK`] in its environment.
fn with_stale_rank(job: Job) -> Job {
    STALE_RANK
        .iter()
        .fold(job, |job, (name, value)| job.env(name, value))
}

/// 4 tasks on n1's 4 GPUs, contiguous: one GPU each.
const FOUR_ON_N1: &str = "-w n1 -n4 --gpus-per-node=4";
const ONE_GPU_EACH: [&str; 4] = ["0 n1 0 0 1", "1 n1 1 1 1", "2 n1 2 2 1", "3 n1 3 3 1"];

#[test]
fn exec_ignores_a_ranks_stale_variables_under_hidepid() {
    let _c = exec_setup();
    let _hidden = Hidepid::on(&["n1"]);
    with_stale_rank(srun(FOUR_ON_N1).user(ALICE))
        .arg(bin())
        .args("exec --method contiguous --")
        .probe(probe::GPU)
        .ok()
        .rows_are(&ONE_GPU_EACH);
}

#[test]
fn the_prolog_ignores_a_ranks_stale_variables_under_hidepid() {
    let _c = exec_setup();
    let _hidden = Hidepid::on(&["n1"]);
    let job = srun(FOUR_ON_N1)
        .user(ALICE)
        .args(&format!("--task-prolog={}", prolog_bin()))
        .env("DESI_GPU_MAP_METHOD", "contiguous");
    with_stale_rank(job)
        .probe(probe::GPU)
        .ok()
        .rows_are(&ONE_GPU_EACH);
}

#[test]
fn exec_mps_serves_every_task_under_hidepid() {
    let _c = exec_setup();
    clear_what_others_left();
    let _hidden = Hidepid::on(&["n1", "n2"]);
    let out = srun(TWO_NODES_EIGHT_TASKS)
        .user(ALICE)
        .args(&exec_mps("contiguous,mps"))
        .probe(&task())
        .ok();
    assert_one_daemon_per_node_serves_all(&out);
    assert_nothing_left("exec's step under hidepid");
}

#[test]
fn the_prolog_mps_serves_every_task_under_hidepid() {
    let _c = exec_setup();
    clear_what_others_left();
    let _hidden = Hidepid::on(&["n1", "n2"]);
    let job = srun(TWO_NODES_EIGHT_TASKS)
        .user(ALICE)
        .args(&prolog_and_epilog());
    let out = prolog_asks(job, "contiguous,mps").probe(&task()).ok();
    assert_one_daemon_per_node_serves_all(&out);
    assert_nothing_left_unswept("the prolog's step under hidepid");
}

#[test]
fn a_process_outside_the_step_cannot_join_execs_keeper_under_hidepid() {
    let _c = exec_setup();
    clear_what_others_left();
    let _hidden = Hidepid::on(&["n1"]);
    let (job, pipe) = alices_exec_daemon_on_n1();
    let dir = pipe.trim_end_matches("/pipe");
    let stem = &dir[dir.rfind('/').unwrap() + 1..dir.rfind('.').unwrap()];
    // Alice herself, from outside the step (the host's Python: abstract
    // sockets are the host's), asks to join as a task would.
    // A refusal may come, and the socket close, before the request is
    // sent: what was answered is read all the same.
    let join = "import socket,sys\n\
         s = socket.socket(socket.AF_UNIX)\n\
         s.connect(b'\\0' + sys.argv[1].encode())\n\
         try:\n    s.sendall(b'join\\n')\n\
         except OSError:\n    pass\n\
         print('K', s.recv(200).decode().strip())\n";
    let answer = std::process::Command::new("runuser")
        .args(["-u", ALICE, "--", "/usr/bin/python3", "-c", join, stem])
        .output()
        .expect("run python3 as alice");
    let said = String::from_utf8_lossy(&answer.stdout);
    assert!(
        said.contains("K no pid ") && said.contains("is not a process of this step"),
        "{answer:?}"
    );
    drop(job);
    assert_nothing_left("alice's job, after her knock from outside it");
}
