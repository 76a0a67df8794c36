//! The mapping methods and how users ask for them: srun, sbatch, salloc,
//! the environment form, the site default and `verbose`. Real clients
//! against the local test cluster that `tests/run-cluster-tests.sh` brings
//! up (nodes n1 and n2 with 4 fake GPUs each, n3 with 2). Every case writes
//! out the expected values per task; none is computed by the code under
//! test.
//!
//! srun places tasks where the allocation has CPUs: each node has 64, so
//! multi-node cases fix the split with `--ntasks-per-node`, or take whole
//! nodes (`--exclusive`) for srun's even split of uneven counts.
//!
//! Run through `make test` (or `bash tests/run-cluster-tests.sh`): these
//! tests fail, never skip, when the cluster is not up.

use crate::common::layouts::{Case, EVERY_LAYOUT, PARTIAL_AND_ROTATE};
use crate::common::*;

/// Runs each case on the cluster and compares every task's row.
fn check(cases: &[Case]) {
    for case in cases {
        let _c = setup("required", case.plugstack);
        let _held = case.held.map(|(node, gres)| hold(node, gres));
        srun(case.srun).probe(probe::GPU).ok().rows_are(case.rows);
    }
}

/// Two tasks on n1's 4 GPUs, then `words`, each task printing its
/// [`probe::GPU`] row.
fn two_on_n1(words: &str) -> Job {
    srun("-N1 -n2 -w n1 --gpus-per-node=4")
        .args(words)
        .probe(probe::GPU)
}

/// Both tasks of [`two_on_n1`], untouched: the step's list, no flag.
const TWO_UNTOUCHED: [&str; 2] = ["0 n1 0 0,1,2,3 unset", "1 n1 1 0,1,2,3 unset"];

#[test]
fn both_methods_in_every_layout() {
    check(EVERY_LAYOUT);
}

#[test]
fn partial_allocations_and_rotate() {
    check(PARTIAL_AND_ROTATE);
}

#[test]
fn verbose_reports_each_task() {
    let _c = setup("required", &[]);
    let ran = srun("-N1 -n2 -w n1 --gpus-per-node=4 --desi-gpu-map=verbose,contiguous true").ok();
    assert_eq!(
        sorted_lines(&ran.out.stderr, |l| l.contains("desi-gpu-map: node=")),
        [
            "desi-gpu-map: node=n1 rank=0 local=0/2 gpu=0,1 visible=0,1 gpus=0,1,2,3 method=contiguous source=slurm",
            "desi-gpu-map: node=n1 rank=1 local=1/2 gpu=2,3 visible=2,3 gpus=0,1,2,3 method=contiguous source=slurm",
        ],
        "{ran}"
    );
}

#[test]
fn no_option_leaves_the_environment_untouched() {
    let _c = setup("required", &[]);
    two_on_n1("").ok().rows_are(&TWO_UNTOUCHED);
}

/// One worker per visible GPU, as `torchrun --nproc-per-node=4` starts
/// them: worker `i` takes the `i`-th visible device (its LOCAL_RANK), and
/// prints `W rank worker device` where the task's list has one for it, or
/// `W rank worker none` where CUDA would say "invalid device ordinal".
const TORCHRUN_SHAPE: &str = r#"
IFS=, read -ra gpus <<<"${CUDA_VISIBLE_DEVICES-}"
for i in 0 1 2 3; do
  (echo "W $SLURM_PROCID $i ${gpus[$i]:-none}") &
done
wait"#;

#[test]
fn a_site_default_leaves_one_task_a_node_every_gpu_of_its_node() {
    // The README's advice: default=contiguous maps every step. A task per
    // node (torchrun, flux start, Dask, Ray) keeps all four GPUs.
    let _c = setup("required", &["default=contiguous"]);
    srun("-N2 --ntasks-per-node=1 -w n[1-2] --gpus-per-node=4")
        .probe(probe::FULL)
        .ok()
        .rows_are(&[
            "0 n1 0 0,1,2,3 1 contiguous 4",
            "1 n2 0 0,1,2,3 1 contiguous 4",
        ]);
    let ran = srun("-N2 --ntasks-per-node=1 -w n[1-2] --gpus-per-node=4")
        .probe(TORCHRUN_SHAPE)
        .ok();
    let mut want: Vec<String> = Vec::new();
    for rank in 0..2 {
        for i in 0..4 {
            want.push(format!("W {rank} {i} {i}"));
        }
    }
    assert_eq!(ran.lines("W "), want, "every worker has its GPU: {ran}");
    // Two tasks on the node: each drives its half, every GPU busy.
    srun("-N1 -n2 -w n1 --gpus-per-node=4")
        .probe(probe::GPU)
        .ok()
        .rows_are(&["0 n1 0 0,1 1", "1 n1 1 2,3 1"]);
}

#[test]
fn site_default_and_none() {
    let _c = setup("required", &["default=roundrobin"]);
    two_on_n1("")
        .ok()
        .rows_are(&["0 n1 0 0,2 1", "1 n1 1 1,3 1"]);
    two_on_n1("--desi-gpu-map=none")
        .ok()
        .rows_are(&TWO_UNTOUCHED);
}

#[test]
fn sbatch_option_reaches_the_steps_and_the_batch_script_keeps_all_gpus() {
    let _c = setup("required", &[]);
    let script = format!(
        "#!/bin/bash\n#SBATCH -N2 -n8 --ntasks-per-node=4 -w n[1-2] --gpus-per-node=4\n#SBATCH --desi-gpu-map=roundrobin\n\
         echo \"B $(hostname) ${{CUDA_VISIBLE_DEVICES-unset}} ${{DESI_GPU_MAPPED-unset}}\"\n\
         srun -n4 -N1 -w n2 bash -c '{}'\n",
        probe::GPU
    );
    let path = format!("{}/batch-option.sh", state_dir());
    let output = format!("{}/batch-option.out", state_dir());
    std::fs::write(&path, script).unwrap();
    sbatch("--wait -o").arg(&output).arg(&path).ok();
    let log = std::fs::read_to_string(&output).unwrap();
    assert!(log.lines().any(|l| l == "B n1 0,1,2,3 unset"), "{log}");
    assert_eq!(
        probe_rows(&log),
        rows(&["0 n2 0 0 1", "1 n2 1 1 1", "2 n2 2 2 1", "3 n2 3 3 1"]),
        "{log}"
    );
}

#[test]
fn environment_form_and_salloc() {
    let _c = setup("required", &[]);
    two_on_n1("")
        .env(OPTION_ENV, "roundrobin")
        .run()
        .rows_are(&["0 n1 0 0,2 1", "1 n1 1 1,3 1"]);
    salloc("-N1 -n2 -w n2 --gpus-per-node=4 --desi-gpu-map=contiguous srun -n2")
        .probe(probe::GPU)
        .run()
        .rows_are(&["0 n2 0 0,1 1", "1 n2 1 2,3 1"]);
}

#[test]
fn export_none_still_carries_the_option() {
    // SPANK options travel in the launch request, not in the environment,
    // so --export=NONE keeps them (it also drops PATH: bash by full path).
    let _c = setup("required", &[]);
    srun("--export=NONE -N1 -n2 -w n1 --gpus-per-node=4 --desi-gpu-map=roundrobin")
        .words(&["/bin/bash", "-c", probe::GPU])
        .ok()
        .rows_are(&["0 n1 0 0,2 1", "1 n1 1 1,3 1"]);
}
