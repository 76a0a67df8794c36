//! `desi-gpu-map exec` under real launchers on this host: Debian's Open MPI
//! `mpirun.openmpi` and MPICH `mpiexec.mpich`, on loopback only; PALS's
//! variables set one rank at a time, as PALS sets them. A missing launcher
//! fails these tests (tests/deps.sh installs both).

use std::path::{Path, PathBuf};
use std::process::{Command, Output, Stdio};

const BIN: &str = env!("CARGO_BIN_EXE_desi-gpu-map");

/// What each rank prints: its local rank, list, flag, tag and parent.
const REPORT: &str = r#"echo "${LOCAL} ${CUDA_VISIBLE_DEVICES-unset} ${DESI_GPU_MAPPED-unset} ${DESI_GPU_MAP_STEP-unset} $(cat /proc/$PPID/comm)"; exit ${EXIT-0}"#;

/// Loopback only: no other address may be used on this machine.
const OMPI_LO: [(&str, &str); 3] = [
    ("OMPI_MCA_oob_tcp_if_include", "lo"),
    ("OMPI_MCA_btl_tcp_if_include", "lo"),
    ("OMPI_MCA_btl", "self,vader"),
];

/// A launcher's command with only `PATH`, `HOME` and `vars` around it.
fn clean(program: &str, vars: &[(&str, &str)]) -> Command {
    let mut cmd = Command::new(program);
    cmd.env_clear()
        .env("PATH", std::env::var("PATH").unwrap_or_default())
        .env("HOME", std::env::temp_dir())
        .envs(vars.iter().copied());
    cmd
}

/// A launcher run to its end, its output captured, with a standard input
/// that stays open and empty until then, as a terminal nobody types into.
/// Not /dev/null: MPICH's mpiexec forwards the end of its input to rank
/// 0's proxy, and where the proxy already exited (one `poll` returned both
/// the input's end and the proxy's exit, which it read first; seen under
/// a CPU burner per core, as strace showed) that write kills mpiexec with
/// SIGPIPE, status 141 and no output, or its Open MPI rank when nested.
///
/// Each run has a `TMPDIR` (and `HOME`) of its own, removed after: Open
/// MPI makes its session directory `ompi.HOST.UID` there, one per user,
/// and one mpirun that removes it at its end while another makes it fails
/// the other ("unable to create the desired directory ... File exists"),
/// as this file's tests run side by side; and no launcher reads settings
/// someone left in a shared `HOME`.
fn finished(mut cmd: Command, launcher: &str) -> Output {
    static RUNS: std::sync::atomic::AtomicUsize = std::sync::atomic::AtomicUsize::new(0);
    let run = RUNS.fetch_add(1, std::sync::atomic::Ordering::Relaxed);
    let tmp = std::env::temp_dir().join(format!("dgm-launch-tmp-{}-{run}", std::process::id()));
    std::fs::create_dir(&tmp).expect("make the launcher's TMPDIR");
    let mut child = cmd
        .env("TMPDIR", &tmp)
        .env("HOME", &tmp)
        .stdin(Stdio::piped())
        .stdout(Stdio::piped())
        .stderr(Stdio::piped())
        .spawn()
        .unwrap_or_else(|e| panic!("cannot run the {launcher} launcher (tests/deps.sh): {e}"));
    let input = child.stdin.take();
    let out = child.wait_with_output().expect("wait for the launcher");
    drop(input);
    std::fs::remove_dir_all(&tmp).expect("remove the launcher's TMPDIR");
    out
}

/// `np` ranks of `exec ARGS -- sh -c REPORT` under `launcher`, with
/// `vars` (and the launcher's loopback settings).
fn launch(launcher: &str, np: usize, vars: &[(&str, &str)], args: &[&str]) -> Output {
    let np = np.to_string();
    let mut cmd = match launcher {
        "openmpi" => {
            let mut cmd = clean("mpirun.openmpi", &[&OMPI_LO[..], vars].concat());
            cmd.args(["--allow-run-as-root", "--oversubscribe", "-np", &np]);
            cmd
        }
        "mpich" => {
            let mut cmd = clean("mpiexec.mpich", vars);
            cmd.args(["-iface", "lo", "-n", &np]);
            cmd
        }
        other => panic!("no launcher {other}"),
    };
    let local = match launcher {
        "openmpi" => "OMPI_COMM_WORLD_LOCAL_RANK",
        _ => "MPI_LOCALRANKID",
    };
    let script = format!("LOCAL=${local}; {REPORT}");
    cmd.arg(BIN).arg("exec").args(args);
    cmd.args(["--", "sh", "-c", &script]);
    finished(cmd, launcher)
}

/// Each rank's line, by local rank, as words.
fn ranks(out: &Output) -> Vec<Vec<String>> {
    let text = String::from_utf8_lossy(&out.stdout);
    let mut lines: Vec<Vec<String>> = text
        .lines()
        .map(|l| l.split_whitespace().map(String::from).collect())
        .collect();
    lines.sort_by_key(|w| w.first().and_then(|l| l.parse::<usize>().ok()));
    lines
}

/// The list each rank got, by local rank.
fn lists(out: &Output) -> Vec<String> {
    ranks(out).iter().map(|w| w[1].clone()).collect()
}

#[test]
fn open_mpi_ranks_split_an_inherited_list_and_keep_the_launchers_pid_and_exit_code() {
    let cvd = [("CUDA_VISIBLE_DEVICES", "4,5,6,7")];
    // 6 ranks on 4 GPUs.
    for (method, want) in [
        ("contiguous", ["4", "4", "5", "5", "6", "7"]),
        ("roundrobin", ["4", "5", "6", "7", "4", "5"]),
    ] {
        let out = launch("openmpi", 6, &cvd, &["--method", method]);
        assert!(out.status.success(), "{out:?}");
        assert_eq!(lists(&out), want, "{method}: {out:?}");
        let tags: Vec<String> = ranks(&out).iter().map(|w| w[3].clone()).collect();
        for words in ranks(&out) {
            assert_eq!(words[2], "1", "the flag: {words:?}");
            // exec became the rank: its parent is mpirun itself.
            assert_eq!(words[4], "mpirun.openmpi", "{words:?}");
            assert!(words[3].starts_with("openmpi:"), "{words:?}");
            assert_eq!(words[3], tags[0], "one launch, one tag");
        }
    }
    // The ranks' exit code is mpirun's (it aborts the others on the first).
    let out = launch("openmpi", 2, &[&cvd[..], &[("EXIT", "3")]].concat(), &[]);
    assert_eq!(out.status.code(), Some(3), "{out:?}");
}

#[test]
fn mpich_ranks_split_a_uuid_list_and_keep_the_proxy_as_parent() {
    let uuids = "GPU-a,GPU-b,GPU-c,GPU-d";
    let out = launch(
        "mpich",
        6,
        &[("CUDA_VISIBLE_DEVICES", uuids)],
        &["--method", "roundrobin"],
    );
    assert!(out.status.success(), "{out:?}");
    assert_eq!(
        lists(&out),
        ["GPU-a", "GPU-b", "GPU-c", "GPU-d", "GPU-a", "GPU-b"],
        "{out:?}"
    );
    for words in ranks(&out) {
        assert_eq!(words[2], "1");
        assert_eq!(words[4], "hydra_pmi_proxy", "{words:?}");
        assert!(words[3].starts_with("mpich:hydra_pmi_proxy."), "{words:?}");
    }
    let out = launch(
        "mpich",
        6,
        &[("CUDA_VISIBLE_DEVICES", "0,1,2,3")],
        &["--method", "contiguous"],
    );
    assert_eq!(lists(&out), ["0", "0", "1", "1", "2", "3"], "{out:?}");
    let exit = [("CUDA_VISIBLE_DEVICES", uuids), ("EXIT", "3")];
    assert_eq!(launch("mpich", 2, &exit, &[]).status.code(), Some(3));
}

/// A kernel tree with `n` NVIDIA GPUs, their UUIDs `GPU-kN`.
fn kernel_tree(name: &str, n: usize) -> PathBuf {
    let root = std::env::temp_dir().join(format!("dgm-launch-{name}-{}", std::process::id()));
    for i in 0..n {
        let dir = root.join(format!("proc/driver/nvidia/gpus/0000:0{}:00.0", i + 1));
        std::fs::create_dir_all(&dir).unwrap();
        let info = format!("GPU UUID: GPU-k{i}\nDevice Minor: {i}\n");
        std::fs::write(dir.join("information"), info).unwrap();
    }
    root
}

#[test]
fn with_no_list_and_no_job_ranks_share_every_gpu_of_the_node() {
    let root = kernel_tree("node", 3);
    let root_arg = root.display().to_string();
    let args = [
        "--nvml",
        "off",
        "--vendor",
        "nvidia",
        "--kernel-root",
        &root_arg,
        "--method",
        "contiguous",
    ];
    let out = launch("openmpi", 3, &[], &args);
    assert_eq!(lists(&out), ["GPU-k0", "GPU-k1", "GPU-k2"], "{out:?}");
    // Inside a Slurm job (a batch script's mpirun), only an inherited
    // list is the job's: nothing is mapped, and the ranks still run.
    let out = launch("openmpi", 2, &[("SLURM_JOB_ID", "7")], &args);
    assert!(out.status.success(), "{out:?}");
    assert_eq!(lists(&out), ["unset", "unset"], "{out:?}");
    std::fs::remove_dir_all(root).unwrap();
}

/// `exec` run directly with only these variables, as one PALS rank.
fn rank_with(vars: &[(&str, &str)], args: &[&str], script: &str) -> Output {
    let mut cmd = clean(BIN, vars);
    cmd.arg("exec").args(args).args(["--", "sh", "-c", script]);
    cmd.output().expect("run desi-gpu-map exec")
}

#[test]
fn pals_ranks_one_at_a_time_and_a_nested_launch_maps_afresh() {
    let script = "echo ${CUDA_VISIBLE_DEVICES-unset} ${DESI_GPU_MAP_STEP-unset}";
    let list = [("CUDA_VISIBLE_DEVICES", "4,5,6,7"), ("PALS_APID", "77")];
    for (vars, want) in [
        ([("PALS_LOCAL_RANKID", "5"), ("PALS_LOCAL_SIZE", "6")], "7"),
        ([("PMI_LOCAL_RANK", "1"), ("PMI_LOCAL_SIZE", "6")], "4"),
        ([("PMI_LOCAL_RANK", "2"), ("PMI_LOCAL_SIZE", "6")], "5"),
    ] {
        let out = rank_with(&[&list[..], &vars].concat(), &[], script);
        let text = String::from_utf8_lossy(&out.stdout).into_owned();
        let words: Vec<&str> = text.split_whitespace().collect();
        assert_eq!(words.first(), Some(&want), "{vars:?}: {out:?}");
        assert!(words[1].starts_with("pals"), "{out:?}");
        assert!(words[1].ends_with(":77"), "{out:?}");
    }
    let rank = [("PALS_LOCAL_RANKID", "1"), ("PALS_LOCAL_SIZE", "2")];
    // This launch mapped already: unchanged.
    let done = [
        ("DESI_GPU_MAP_STEP", "pals:77"),
        ("CUDA_VISIBLE_DEVICES", "6"),
    ];
    let out = rank_with(&[&list[..], &rank, &done].concat(), &[], script);
    assert_eq!(String::from_utf8_lossy(&out.stdout), "6 pals:77\n");
    // An outer launch's record (another APID): mapped afresh.
    let outer = [("DESI_GPU_MAP_STEP", "pals:76")];
    let out = rank_with(&[&list[..], &rank, &outer].concat(), &[], script);
    // Rank 1 of 2 on four GPUs holds the second half.
    assert_eq!(String::from_utf8_lossy(&out.stdout), "6,7 pals:77\n");
}

#[test]
fn bad_launcher_variables_are_refused_and_nothing_runs() {
    let marker = std::env::temp_dir().join(format!("dgm-launch-bad-{}", std::process::id()));
    let touch = format!("touch {}", marker.display());
    for (vars, says) in [
        (
            &[("MPI_LOCALRANKID", "1")][..],
            "MPI_LOCALRANKID=\"1\" is set but MPI_LOCALNRANKS is not",
        ),
        (
            &[("PALS_LOCAL_RANKID", "6"), ("PALS_LOCAL_SIZE", "6")][..],
            "pals says local rank PALS_LOCAL_RANKID=6 of PALS_LOCAL_SIZE=6",
        ),
        (
            &[
                ("OMPI_COMM_WORLD_LOCAL_RANK", "0"),
                ("OMPI_COMM_WORLD_LOCAL_SIZE", "2"),
                ("PMI_LOCAL_RANK", "1"),
                ("PMI_LOCAL_SIZE", "2"),
            ][..],
            "the launchers' variables disagree",
        ),
        (
            &[("FLUX_TASK_LOCAL_ID", "0")][..],
            "Flux sets FLUX_TASK_LOCAL_ID=\"0\" but no count of this node's tasks",
        ),
        (
            &[("PMIX_RANK", "0"), ("PMIX_NAMESPACE", "x")][..],
            "PMIX_RANK=\"0\" is set but no node-local rank",
        ),
    ] {
        let vars = [vars, &[("CUDA_VISIBLE_DEVICES", "0,1")]].concat();
        let out = rank_with(&vars, &[], &touch);
        let err = String::from_utf8_lossy(&out.stderr);
        assert_eq!(out.status.code(), Some(2), "{vars:?}: {out:?}");
        assert!(err.starts_with("desi-gpu-map exec: "), "{err}");
        assert!(err.contains(says), "{err}");
        assert!(err.trim_end().ends_with("; nothing was run"), "{err}");
        assert!(!Path::new(&marker).exists(), "{vars:?} ran the application");
    }
}

/// The launcher table, which moved from the README to the user guide
/// (`docs/user-guide.md`, "Under `mpirun`, `mpiexec` and PALS"), is
/// `src/launch.rs`'s, row for row.
#[test]
fn the_readmes_launcher_table_is_the_cores() {
    let guide = std::fs::read_to_string(concat!(env!("CARGO_MANIFEST_DIR"), "/docs/user-guide.md"))
        .expect("read docs/user-guide.md");
    for l in &desi_gpu_map_core::launch::LAUNCHERS {
        let row = format!(
            "| {} | `{}` | `{}` | `{}` |",
            l.title, l.local_rank, l.local_size, l.example
        );
        assert!(
            guide.contains(&row),
            "docs/user-guide.md lacks the row {row}"
        );
    }
}

/// mpiexec.mpich inside an mpirun.openmpi rank: its ranks carry the outer
/// rank's variables too, and the nearer launch (MPICH's) places them.
#[test]
fn a_launch_nested_in_another_launchers_rank_is_placed_by_the_inner_one() {
    let vars = [&OMPI_LO[..], &[("CUDA_VISIBLE_DEVICES", "4,5")]].concat();
    let mut cmd = clean("mpirun.openmpi", &vars);
    cmd.args(["--allow-run-as-root", "-np", "1", "mpiexec.mpich"])
        .args([
            "-iface",
            "lo",
            "-n",
            "2",
            BIN,
            "exec",
            "--method",
            "roundrobin",
        ])
        .args([
            "--",
            "sh",
            "-c",
            &format!("LOCAL=$MPI_LOCALRANKID; {REPORT}"),
        ]);
    let out = finished(cmd, "openmpi");
    assert!(out.status.success(), "{out:?}");
    assert_eq!(lists(&out), ["4", "5"], "{out:?}");
    for words in ranks(&out) {
        assert_eq!(words[2], "1", "{words:?}");
        assert!(words[3].starts_with("mpich:"), "{words:?}");
    }
}
