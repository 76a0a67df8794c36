//! The plugin's daemon: one per step and node as the job's user, serving
//! every task with its share and its GPUs by UUID; its teardown however the
//! step ends; and who can reach it (another user, another job, eight steps
//! side by side, a nested step).

use super::*;

// ------------------------------------------------------------ serving

#[test]
fn one_daemon_per_step_per_node_as_the_user_serves_every_task() {
    let _c = mps_setup(&[]);
    clear_what_others_left();
    let _busy = Burner::on_every_core();
    let out = alice_step(&format!(
        "{TWO_NODES_EIGHT_TASKS} --desi-gpu-map=contiguous,mps"
    ))
    .ok();
    assert_one_daemon_per_node_serves_all(&out);
    assert_nothing_left("a normal end");
}

#[test]
fn mps_share_even_gives_each_task_its_share_of_its_gpu() {
    let _c = mps_setup(&["mps_share=even"]);
    // 6 tasks on 4 GPUs, contiguous: 2, 2, 1, 1 tasks per GPU.
    let out = alice_step("-n6 -w n1 --gpus-per-node=4 --desi-gpu-map=mps,contiguous").ok();
    assert_even_shares_of_six_on_four(&out);
    assert_nothing_left("mps_share=even");
}

#[test]
fn slurm_indices_become_the_uuids_of_the_same_gpus() {
    let _c = mps_setup(&[]);
    // Another job holds GPUs 0 and 1: the step gets 2 and 3.
    let _held = hold("n1", "gpu:2");
    let out = alice_step("-n2 -w n1 --gres=gpu:2 --desi-gpu-map=verbose,contiguous,mps").ok();
    let (rows, daemons) = rows_and_daemons(&out);
    let two = uuids("n1", &[2]);
    let three = uuids("n1", &[3]);
    assert_eq!(
        rows,
        crate::common::rows(&[
            &format!("0 n1 0 {two} 1 unset 100.0 700:{ALICE}"),
            &format!("1 n1 1 {three} 1 unset 100.0 700:{ALICE}"),
        ])
    );
    assert_eq!(daemons.len(), 1, "{daemons:?}");
    assert!(
        daemons[0].ends_with(&format!("CUDA_VISIBLE_DEVICES={two},{three}")),
        "{daemons:?}"
    );
    let verbose = out.said();
    assert!(
        verbose
            .iter()
            .any(|l| l.contains(&format!("gpu={two}")) && l.contains(" mps=/tmp/dgm-mps.")),
        "{verbose:?}"
    );
}

#[test]
fn mps_auto_serves_steps_whose_tasks_outnumber_their_gpus() {
    let _c = mps_setup(&["mps=auto", "default=contiguous"]);
    let out = alice_step("-n4 -w n3 --gpus-per-node=2").run();
    let (rows, daemons) = rows_and_daemons(&out);
    assert!(rows.lines().all(|r| r.contains(" 1 unset 100.0 ")), "{out}");
    assert_eq!(daemons.len(), 1, "{out}");
    alice_step("-n2 -w n3 --gpus-per-node=2").run().rows_are(&[
        &format!("0 n3 0 {} unset unset none none", slurms("n3", 0)),
        &format!("1 n3 1 {} unset unset none none", slurms("n3", 1)),
    ]);
    assert_nothing_left("mps=auto");
}

// ------------------------------------------------------------ teardown

/// Runs a job of ALICE's with three steps that sleep under MPS, the
/// plugin's, exec's and the task prolog's, with sbatch's `words` too and
/// `desi-gpu-map` as every step's task epilog (as a batch script sets it
/// once), waits for their daemons, ends the job with `end` under a
/// [`Burner`], and checks nothing is left, with no sweep.
fn teardown_after(what: &str, words: &str, end: impl FnOnce(&str)) {
    clear_what_others_left();
    let steps = format!(
        "srun --overlap -n1 --gpus-per-node=1 --desi-gpu-map=contiguous,mps sleep 300 & \
         srun --overlap -n2 --gpus-per-node=2 {} sleep 300 & \
         srun --overlap -n2 --gpus-per-node=2 --task-prolog={} sleep 300 & wait",
        exec_mps("contiguous,mps"),
        prolog_bin()
    );
    let job = sbatch(&format!(
        "--parsable -o /dev/null -w n1 -n2 --gpus-per-node=2 {words} --wrap"
    ))
    .user(ALICE)
    .env("SLURM_TASK_EPILOG", &prolog_bin())
    .arg(steps);
    let job = held(prolog_asks(job, "contiguous,mps"));
    assert!(
        wait_for(30, || daemons().len() == 3 && keepers().len() == 2),
        "{what}: the plugin's, exec's and the prolog's daemons did not all start; daemons \
         {:?}, keepers {:?}",
        daemons(),
        keepers()
    );
    let _busy = Burner::on_every_core();
    end(&job.0);
    assert!(
        wait_for(150, || job_done(&job.0)),
        "{what}: the job never ended"
    );
    assert_nothing_left_unswept(what);
}

#[test]
fn teardown_after_scancel() {
    let _c = mps_setup(&[]);
    teardown_after("scancel", "", |job| {
        client("scancel", job).ok();
    });
}

#[test]
fn teardown_after_a_slurmd_restart_during_the_step() {
    let _c = mps_setup(&[]);
    teardown_after("a slurmd restart", "", |job| {
        cluster(&["restart-node", "n1"]);
        assert_eq!(
            daemons().len(),
            3,
            "the steps' daemons outlive slurmd's restart"
        );
        assert_eq!(
            keepers().len(),
            2,
            "exec's and the prolog's keepers outlive it too"
        );
        client("scancel", job).ok();
    });
}

#[test]
fn teardown_after_the_time_limit() {
    let _c = mps_setup(&[]);
    // One minute, Slurm's smallest limit; slurmctld checks every 30 s.
    teardown_after("the time limit", "-t 1", |_| {});
}

#[test]
fn teardown_after_a_crashing_task() {
    let _c = mps_setup(&[]);
    clear_what_others_left();
    let _busy = Burner::on_every_core();
    srun(TWO_ON_N1)
        .user(ALICE)
        .probe("[ $SLURM_LOCALID = 1 ] && kill -SEGV $$; sleep 1")
        .run()
        .fails();
    assert_nothing_left("a crashing task");
}

// ------------------------------------------------------------ isolation

/// Submits a job of `user` on n1 whose step sleeps under MPS; waits until
/// its daemon answers; returns the job and its pipe directory (as the
/// daemon's environment names it).
fn serving_job(user: &str, uid: u32) -> (Held, String) {
    let (job, pid) = serving_job_pid(user, uid);
    let pipe = daemon_env(pid, "CUDA_MPS_PIPE_DIRECTORY").expect("the daemon's pipe");
    (job, pipe)
}

#[test]
fn another_user_on_a_shared_node_cannot_reach_the_daemon() {
    let _c = mps_setup(&[]);
    clear_what_others_left();
    let (job, pipe) = serving_job(ALICE, USERS[0].1);
    let bob = reach_as(BOB, &pipe);
    assert!(bob.contains("Permission denied"), "{bob}");
    assert!(!bob.contains("rc=0"), "bob reached alice's daemon:\n{bob}");
    assert_eq!(daemons().len(), 1, "alice's daemon survives bob's quit");
    drop(job);
    assert_nothing_left("alice's job");
}

#[test]
fn two_jobs_of_one_user_get_separate_daemons_and_neither_stops_the_other() {
    let _c = mps_setup(&[]);
    clear_what_others_left();
    let uid = USERS[0].1;
    let (first, _) = serving_job(ALICE, uid);
    let (second, pipe) = serving_job(ALICE, uid);
    assert_eq!(daemons().len(), 2);
    drop(first);
    assert!(wait_for(20, || daemons().len() == 1), "{:?}", daemons());
    let answer = reach_as(ALICE, &pipe);
    assert!(
        answer.contains("100.0\nrc=0"),
        "the second job's daemon still answers:\n{answer}"
    );
    drop(second);
    assert_nothing_left("both jobs");
}

#[test]
fn eight_concurrent_steps_get_eight_daemons_and_leave_none() {
    let _c = mps_setup(&[]);
    clear_what_others_left();
    let script = format!(
        "for i in $(seq 8); do srun --overlap -n1 --gpus-per-node=1 --desi-gpu-map=contiguous,mps bash -c '{}' & done; wait",
        task().replace('\'', "'\\''")
    );
    let out = salloc("-w n1 -n8 --gpus-per-node=4")
        .user(ALICE)
        .probe(&script)
        .ok();
    assert_eight_steps_each_served_by_its_own(&out);
    assert_nothing_left("8 concurrent steps");
}

#[test]
fn a_nested_step_uses_its_parents_daemon_and_never_stops_it() {
    // mps_share=even: the inherited share is the parent's, not gres/mps.
    let _c = mps_setup(&["verbose", "mps_share=even"]);
    let inner = format!(
        "srun --overlap -n1 --gpus-per-node=1 --desi-gpu-map=contiguous,mps bash -c 'echo inner $CUDA_VISIBLE_DEVICES' 2>&1; \
         echo get_default_active_thread_percentage | {} ; echo outer-rc=$?",
        control()
    );
    let out = srun("-n1 -w n1 --gpus-per-node=2 --desi-gpu-map=contiguous,mps")
        .user(ALICE)
        .probe(&inner)
        .ok();
    let stdout = out.stdout();
    assert!(
        stdout.contains("serves this step; no MPS daemon started"),
        "{stdout}"
    );
    assert!(
        stdout.contains("inner GPU-fake-n1-"),
        "the inner task's GPU by UUID:\n{stdout}"
    );
    assert!(
        stdout.contains("100.0\nouter-rc=0"),
        "the parent's daemon still answers:\n{stdout}"
    );
    assert_nothing_left("a nested step");
}
