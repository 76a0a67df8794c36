//! Where MPS is not served or is refused: a missing or broken control
//! daemon, the deadline, more than 48 clients a GPU, Slurm's gres/mps, no
//! NVML UUIDs, bad combinations; `show` and `sbatch`; and the edges: where
//! the server is run from, planted directories, nested steps, a stale flag,
//! a base others can write, stand-ins that hang or answer garbage.

use super::*;

// ------------------------------------------------------------ failures

/// A site's control script `name` in the harness's `bin/` (beside the
/// real server's `sbin/`), holding `script`: its `mps_control=` argument.
fn stand_in(name: &str, script: &str) -> String {
    let path = format!("{}/mps/bin/{name}", state_dir());
    std::fs::write(&path, script).unwrap();
    let mode = std::os::unix::fs::PermissionsExt::from_mode(0o755);
    std::fs::set_permissions(&path, mode).unwrap();
    format!("mps_control={path}")
}

/// A step of alice's (srun's `words`) asking for MPS that must run mapped
/// without it, saying `why` once per node, here and in slurmd's log.
fn runs_without(extra: &[&str], words: &str, why: &str) {
    let _c = mps_setup(extra);
    let started = Instant::now();
    let out = alice_step(words).ok();
    let (rows, daemons) = rows_and_daemons(&out);
    assert!(daemons.is_empty(), "{daemons:?}");
    assert!(
        rows.lines().all(|r| r.ends_with(" unset unset none none")),
        "{rows}"
    );
    let lines = out.said();
    assert_eq!(lines.len(), 1, "{lines:?}");
    assert!(
        lines[0].contains(why) && lines[0].ends_with("; running without MPS"),
        "{lines:?}"
    );
    let log = std::fs::read_to_string(format!("{}/log/slurmd-n1.log", state_dir())).unwrap();
    assert!(log.contains(why), "slurmd's log lacks {why:?}");
    assert!(
        started.elapsed() < Duration::from_secs(20),
        "{:?}",
        started.elapsed()
    );
    assert_nothing_left(why);
}

#[test]
fn a_missing_control_binary_runs_the_step_without_mps() {
    runs_without(
        &["mps_control=/nonexistent/nvidia-cuda-mps-control"],
        TWO_ON_N1,
        "cannot start /nonexistent/nvidia-cuda-mps-control: it does not exist (the site's mps_control=)",
    );
}

#[test]
fn a_daemon_that_never_answers_is_bounded_by_the_deadline() {
    let at = stand_in("stuck-control", "#!/bin/sh\nexec sleep 1000\n");
    runs_without(
        &[&at, "nvml_timeout=2"],
        TWO_ON_N1,
        "did not answer within 2 s",
    );
    assert!(
        !std::process::Command::new("pgrep")
            .args(["-fx", "sleep 1000"])
            .status()
            .unwrap()
            .success(),
        "the stand-in was killed"
    );
}

#[test]
fn more_than_48_clients_per_gpu_run_without_mps() {
    runs_without(
        &[],
        "-n49 -w n1 --gres=gpu:1 --desi-gpu-map=contiguous,mps",
        "49 tasks would share one GPU, and MPS serves at most 48 clients per GPU",
    );
}

#[test]
fn slurms_gres_mps_serves_the_step_and_nothing_starts() {
    let _c = mps_setup(&[]);
    let out = alice_step(TWO_ON_N1)
        .env("CUDA_MPS_ACTIVE_THREAD_PERCENTAGE", "25")
        .ok();
    let (rows, daemons) = rows_and_daemons(&out);
    assert!(daemons.is_empty());
    assert_eq!(
        rows,
        crate::common::rows(&[
            &format!("0 n1 0 {} unset 25 none none", slurms("n1", 0)),
            &format!("1 n1 1 {} unset 25 none none", slurms("n1", 1)),
        ])
    );
    assert_eq!(
        out.said(),
        ["desi-gpu-map: node n1: Slurm's gres/mps serves this step \
          (CUDA_MPS_ACTIVE_THREAD_PERCENTAGE=\"25\"); no MPS daemon started"]
    );
}

#[test]
fn without_nvml_uuids_no_daemon_starts_and_nvmls_error_is_said() {
    let real = real_nvml();
    let at = format!("nvml={real}");
    if mode() == "uuid" {
        // Slurm's own UUIDs (env_uuid) need NVML to be confirmed as the
        // step's: without it nothing is mapped, and no daemon starts.
        let _c = mps_setup(&[&at]);
        let out = alice_step(TWO_ON_N1).ok();
        assert!(rows_and_daemons(&out).1.is_empty(), "{out}");
        let said = out.said();
        assert_eq!(said.len(), 1, "{out}");
        assert!(
            said[0].contains("only NVML can confirm they are the step's, and NVML: ")
                && said[0].ends_with("; tasks left unchanged"),
            "{out}"
        );
        assert_nothing_left("NVML's failure");
        return;
    }
    runs_without(
        &[&at],
        TWO_ON_N1,
        "cannot name the step's GPUs by UUID (NVML: ",
    );
}

// ------------------------------------------------------------ refused

#[test]
fn bad_combinations_and_a_site_without_mps_are_refused_before_allocation() {
    let _c = mps_setup(&[]);
    let jobs = job_count();
    for (value, want) in [
        ("none,mps", "none maps no task, and MPS needs mapped tasks"),
        ("help,mps", "help prints the usage and runs nothing"),
        ("mps,mps", "invalid --desi-gpu-map value \"mps,mps\""),
    ] {
        srun("-n1")
            .method(value)
            .arg("true")
            .run()
            .fails()
            .says(want);
    }
    // The site default is none: mps alone names no method.
    sbatch("-n1 --desi-gpu-map=mps --wrap true")
        .run()
        .fails()
        .says("mps needs a method");
    drop(_c);
    let _c = mps_setup(&["mps=off"]);
    srun("-n1 --desi-gpu-map=contiguous,mps true")
        .run()
        .fails()
        .says("this site turned mps off (mps=off in plugstack.conf)");
    assert_eq!(job_count(), jobs, "no job was created");
}

#[test]
fn show_reports_the_mps_daemon_serving_the_task() {
    let _c = mps_setup(&["mps_share=even"]);
    let stdout = srun("-n2 -w n1 --gpus-per-node=1 --desi-gpu-map=contiguous,mps")
        .user(ALICE)
        .arg(bin())
        .args("show --nvml off")
        .ok()
        .stdout();
    assert_eq!(stdout.matches("\nmps: 1\n").count(), 2, "{stdout}");
    assert_eq!(
        stdout
            .matches("\nmps_active_thread_percentage: 50\n")
            .count(),
        2,
        "{stdout}"
    );
    let pipe = format!("\nmps_pipe_directory: /tmp/dgm-mps.{}.", USERS[0].1);
    assert_eq!(stdout.matches(&pipe).count(), 2, "{stdout}");
    assert!(
        stdout.contains("cuda_visible_devices: GPU-fake-n1-0\n"),
        "{stdout}"
    );
    assert_nothing_left("show");
}

#[test]
fn sbatch_and_the_environment_form_ask_for_mps_too() {
    let _c = mps_setup(&[]);
    // The environment form, on srun.
    let out = srun("-n2 -w n1 --gpus-per-node=2")
        .user(ALICE)
        .env(OPTION_ENV, "contiguous,mps")
        .probe(&task())
        .run();
    let (rows, daemons) = rows_and_daemons(&out);
    assert!(
        rows.lines().all(|r| r.contains(" 1 unset 100.0 700:")),
        "{out}"
    );
    assert_eq!(daemons.len(), 1, "{out}");
    // sbatch's option reaches the script's srun.
    let name = format!("dgm-mps-sbatch-{}.out", std::process::id());
    let inside = format!("/tmp/{name}");
    let script = format!("srun -n2 bash -c '{}'", task().replace('\'', "'\\''"));
    let job = held(
        sbatch(&format!(
            "--parsable -o /dev/null -w n1 -n2 --gpus-per-node=2 --desi-gpu-map=contiguous,mps -o {inside} --wrap"
        ))
        .user(ALICE)
        .arg(script),
    );
    assert!(
        wait_for(60, || job_done(&job.0)),
        "the batch job never ended"
    );
    let file = format!("{}{inside}", slurm_root().unwrap_or_default());
    let output = std::fs::read_to_string(&file).unwrap_or_default();
    let _ = std::fs::remove_file(&file);
    let rows = probe_rows(&output);
    assert_eq!(rows.lines().count(), 2, "{output}");
    assert!(
        rows.lines().all(|r| r.contains(" 1 unset 100.0 700:")),
        "{output}"
    );
    assert_nothing_left("sbatch and the environment form");
}

// ------------------------------------------------------------ edges

/// Traces `pid`'s execve calls (and its children's) while `during` runs;
/// the trace.
fn trace_execs(pid: u32, during: impl FnOnce()) -> String {
    let file = format!("{}/log/execve-{pid}.trace", state_dir());
    let mut strace = std::process::Command::new("strace")
        .args(["-f", "-qq", "-e", "trace=execve", "-o", &file, "-p"])
        .arg(pid.to_string())
        .spawn()
        .expect("strace (tests/deps.sh installs it)");
    let traced = wait_for(10, || {
        std::fs::read_to_string(format!("/proc/{pid}/status"))
            .unwrap_or_default()
            .lines()
            .any(|l| l.starts_with("TracerPid:") && l.split_whitespace().nth(1) != Some("0"))
    });
    assert!(traced, "strace never attached to {pid}");
    during();
    std::thread::sleep(Duration::from_millis(500));
    // SIGINT detaches strace from the daemon and ends it.
    client("kill", &format!("-INT {}", strace.id())).run();
    let _ = strace.wait();
    std::fs::read_to_string(&file).unwrap_or_default()
}

#[test]
fn the_daemon_execs_its_server_from_where_the_package_put_it() {
    let _c = mps_setup(&[]);
    clear_what_others_left();
    let (job, pid) = serving_job_pid(ALICE, USERS[0].1);
    let pipe = daemon_env(pid, "CUDA_MPS_PIPE_DIRECTORY").expect("pipe");
    let trace = trace_execs(pid, || {
        let asked = ask_as(
            ALICE,
            &pipe,
            &[&format!("start_server -uid {}", USERS[0].1)],
        );
        assert!(asked.contains("rc=0"), "{asked}");
    });
    let server = format!("{}/mps/sbin/nvidia-cuda-mps-server", state_dir());
    let server = server.trim_start_matches(&slurm_root().unwrap_or_default());
    assert!(
        trace
            .lines()
            .any(|l| l.contains(&format!("execve(\"{server}\"")) && l.ends_with("= 0")),
        "the daemon never exec'd {server}:\n{trace}"
    );
    drop(job);
    assert_nothing_left("the server's job");
}

#[test]
fn a_control_daemon_with_no_server_to_start_runs_the_step_without_mps() {
    // The control binary alone, with no server beside it or in sbin.
    let lonely = format!("{}/mps/lonely/bin/nvidia-cuda-mps-control", state_dir());
    std::fs::create_dir_all(format!("{}/mps/lonely/bin", state_dir())).unwrap();
    std::fs::copy(control(), &lonely).unwrap();
    let at = format!("mps_control={lonely}");
    runs_without(
        &[&at],
        TWO_ON_N1,
        "nvidia-cuda-mps-server, which the control daemon starts for its clients, is not in",
    );
}

#[test]
fn a_planted_directory_neither_denies_mps_nor_receives_the_users_files() {
    let _c = mps_setup(&[]);
    clear_what_others_left();
    let (alice, bob) = (USERS[0].1, USERS[1].1);
    // The next job ids, after a probe job's.
    let probe_job = sbatch("--parsable -o /dev/null --wrap true")
        .user(BOB)
        .run();
    let last: u64 = probe_job.stdout().trim().parse().expect("a job id");
    let tmp = format!("{}/tmp", slurm_root().unwrap_or_default());
    let bait = format!("{tmp}/dgm-bob-bait");
    let mut planted = Vec::new();
    let plant = |script: &str| {
        client("bash", "-c").user(BOB).arg(script).ok();
    };
    plant("mkdir -m 0777 /tmp/dgm-bob-bait");
    for id in last + 1..last + 6 {
        let dir = format!("/tmp/dgm-mps.{alice}.{id}.0.0");
        plant(&format!("mkdir -m 0777 {dir}"));
        planted.push(format!("{tmp}{}", dir.trim_start_matches("/tmp")));
        let link = format!("/tmp/dgm-mps.{alice}.{id}.0.1");
        plant(&format!("ln -s /tmp/dgm-bob-bait {link}"));
        planted.push(format!("{tmp}{}", link.trim_start_matches("/tmp")));
    }
    let out = alice_step(TWO_ON_N1).run();
    let contents: Vec<String> = planted
        .iter()
        .chain([&bait])
        .flat_map(|d| std::fs::read_dir(d).into_iter().flatten().flatten())
        .map(|e| e.path().display().to_string())
        .collect();
    for d in &planted {
        let _ = std::fs::remove_file(d).or_else(|_| std::fs::remove_dir_all(d));
    }
    let _ = std::fs::remove_dir_all(&bait);
    let out = out.ok();
    assert_two_on_n1_served(&out, "the step still gets MPS");
    assert!(contents.is_empty(), "created inside {bob}'s: {contents:?}");
    assert_nothing_left("a planted directory");
}

/// `srun` as alice on n1 from inside an MPS task, in an allocation of
/// salloc's `allocation` words: an outer step of `outer` asking
/// `contiguous,mps`, whose task runs `inner`.
fn nested(allocation: &str, outer: &str, inner: &str) -> Ran {
    salloc(&format!(
        "{allocation} srun {outer} --desi-gpu-map=contiguous,mps"
    ))
    .user(ALICE)
    .probe(inner)
    .run()
}

#[test]
fn a_nested_step_without_mps_names_its_gpus_by_uuid_for_the_parents_daemon() {
    let _c = mps_setup(&[]);
    clear_what_others_left();
    // Another job holds GPUs 0 and 1: the allocation gets 2 and 3.
    let _held = hold("n1", "gpu:2");
    let inner = "srun --overlap -n2 --desi-gpu-map=contiguous bash -c \
                 'echo \"inner $SLURM_LOCALID ${CUDA_VISIBLE_DEVICES-unset} ${DESI_GPU_MAP_MPS-unset} ${CUDA_MPS_PIPE_DIRECTORY:+pipe}\"'";
    let out = nested("-w n1 -n3 --gpus-per-node=2", "-n1", inner).ok();
    assert_eq!(
        out.lines("inner "),
        [
            format!("inner 0 {} 1 pipe", uuids("n1", &[2])),
            format!("inner 1 {} 1 pipe", uuids("n1", &[3])),
        ],
        "{out}"
    );
    assert_nothing_left("a nested step without mps");
}

#[test]
fn a_stale_mps_flag_never_reaches_a_mapped_task() {
    let _c = mps_setup(&[]);
    let out = srun("-n2 -w n1 --gpus-per-node=2")
        .method("contiguous")
        .user(ALICE)
        .env("DESI_GPU_MAP_MPS", "1")
        .probe("echo \"flag ${DESI_GPU_MAP_MPS-unset} ${DESI_GPU_MAPPED-unset}\"")
        .ok();
    assert_eq!(
        out.lines("flag "),
        ["flag unset 1", "flag unset 1"],
        "{out}"
    );
}

#[test]
fn a_nested_mps_step_on_another_node_gets_that_nodes_own_daemon() {
    let _c = mps_setup(&[]);
    clear_what_others_left();
    // Each inner task: its node, its pipe, its daemon's answer, and
    // whether a daemon at that pipe runs in its own node's namespace.
    let probe = format!(
        "a=$(echo get_default_active_thread_percentage | {} 2>/dev/null); own=no; \
         for p in /proc/[0-9]*; do case \"$(readlink $p/exe 2>/dev/null)\" in */nvidia-cuda-mps-control) ;; *) continue ;; esac; \
         tr '\\0' '\\n' <$p/environ 2>/dev/null | grep -qx \"CUDA_MPS_PIPE_DIRECTORY=$CUDA_MPS_PIPE_DIRECTORY\" || continue; \
         [ \"$(readlink $p/ns/uts)\" = \"$(readlink /proc/self/ns/uts)\" ] && own=yes; done; \
         echo \"inner $(hostname) ${{CUDA_MPS_PIPE_DIRECTORY-none}} ${{a:-none}} $own ${{DESI_GPU_MAP_MPS-unset}}\"",
        control()
    );
    let inner = format!(
        "srun --overlap -N2 -n2 --ntasks-per-node=1 --desi-gpu-map=contiguous,mps bash -c '{}'",
        probe.replace('\'', "'\\''")
    );
    let out = nested(
        "-w n1,n2 -N2 -n8 --gpus-per-node=4",
        "-N1 -w n1 -n1",
        &inner,
    )
    .ok();
    let rows = out.lines("inner ");
    assert_eq!(rows.len(), 2, "{out}");
    let fields: Vec<Vec<&str>> = rows.iter().map(|r| r.split(' ').collect()).collect();
    for (f, node) in fields.iter().zip(["n1", "n2"]) {
        assert_eq!(
            (f[1], f[3], f[4], f[5]),
            (node, "100.0", "yes", "1"),
            "each node's task is served by its own node's daemon\n{out}"
        );
    }
    assert_ne!(fields[0][2], fields[1][2], "n2 got n1's pipe\n{out}");
    assert_nothing_left("a nested step on two nodes");
}

#[test]
fn a_base_others_can_write_without_the_sticky_bit_is_refused() {
    let open = format!("{}/mps/open", state_dir());
    std::fs::create_dir_all(&open).unwrap();
    let mode = std::os::unix::fs::PermissionsExt::from_mode(0o777);
    std::fs::set_permissions(&open, mode).unwrap();
    let inside = open.trim_start_matches(&slurm_root().unwrap_or_default());
    let at = format!("mps_dir={inside}");
    runs_without(
        &[&at],
        TWO_ON_N1,
        &format!("the MPS base {inside} is writable by others without the sticky bit"),
    );
}

#[test]
fn a_stand_in_that_hangs_leaves_no_process_behind() {
    let at = stand_in(
        "stuck-child-control",
        "#!/bin/sh\nsleep 1001 &\nexec sleep 1000\n",
    );
    runs_without(
        &[&at, "nvml_timeout=2"],
        TWO_ON_N1,
        "did not answer within 2 s",
    );
    let left = wait_for(5, || {
        !std::process::Command::new("pgrep")
            .args(["-f", "^sleep 100[01]$"])
            .output()
            .unwrap()
            .status
            .success()
    });
    assert!(left, "the stand-in's child was left running");
}

#[test]
fn a_stand_in_that_answers_garbage_is_quoted() {
    let at = stand_in("garbage-control", "#!/bin/sh\nif [ \"$1\" = -f ]; then : >\"$CUDA_MPS_PIPE_DIRECTORY/control\"; exec sleep 1000; fi\nsleep 0.8\necho garbage\n");
    runs_without(
        &[&at, "nvml_timeout=2"],
        TWO_ON_N1,
        "did not answer within 2 s (it answered \"garbage\")",
    );
}
