//! NERSC's podman-hpc (PyPI, 1.2.2) over Debian's podman (4.3.1), as a
//! user runs it in a step: `srun --desi-gpu-map=METHOD podman-hpc run ...
//! IMAGE CMD`. What reaches the application in the container: without
//! the module that this project ships (`packaging/podman-hpc/
//! desi-gpu-map.yaml`), none of the task's binding; with it
//! (`podman-hpc run --desi-gpu-map`), each task's own list and flag, the
//! rows of the same step without a container, and under MPS the step's
//! pipe directory, through which the real control daemon answers from
//! inside the container.
//!
//! Rootless, as the test user alice: each user's images and containers
//! are in podman-hpc's per-uid storage under /tmp, one machine for every
//! node. `tests/containers/podman-hpc.sh` installs podman-hpc with this
//! machine's site configuration (run once per test binary); each test
//! imports the image (a busybox-static root, nothing pulled) and removes
//! it. The containers see the node's host name (`--uts=host`) and get
//! their rank and local id (`-e SLURM_PROCID -e SLURM_LOCALID`: podman-hpc's
//! run passes no Slurm variable either), so that each prints the probe
//! row the tasks print without a container ([`probe::GPU`], in busybox's
//! sh).
//!
//! Run on the first cluster of the host's series only (22.05): the Slurm
//! roots of the other series lack podman. These tests fail, never skip,
//! when the cluster or podman cannot start.

use crate::common::layouts::{Case, EVERY_LAYOUT};
use crate::common::*;
use std::sync::OnceLock;

const ALICE: &str = USERS[0].0;

/// The test image, as each user imports it.
const IMAGE: &str = "localhost/dgm-busybox";

/// podman-hpc's install, made once per test binary: the wrapper's path
/// and the image's tarball.
fn installed() -> &'static (String, String) {
    static INSTALLED: OnceLock<(String, String)> = OnceLock::new();
    INSTALLED.get_or_init(|| {
        let wrapper = script("tests/containers/podman-hpc.sh", &[])
            .trim()
            .to_string();
        let tar = std::path::Path::new(&wrapper)
            .with_file_name("image.tar")
            .display()
            .to_string();
        (wrapper, tar)
    })
}

fn podman_hpc() -> String {
    installed().0.clone()
}

/// `podman-hpc ARGS` as alice, outside Slurm.
fn alice_podman(args: &[&str]) -> Ran {
    let out = slurm_as(ALICE, &podman_hpc(), args)
        .output()
        .expect("run podman-hpc");
    Ran {
        line: format!("({ALICE}) podman-hpc {}", args.join(" ")),
        out,
    }
}

/// The image in alice's storage for one test; removed when dropped, with
/// every container of hers, even when the test fails.
struct Image;

impl Image {
    fn import() -> Image {
        let tar = installed().1.clone();
        // Rootless podman maps the container's ids into these ranges
        // (useradd gives them to cluster.sh's users).
        for file in ["/etc/subuid", "/etc/subgid"] {
            let ranges = std::fs::read_to_string(file).unwrap_or_default();
            assert!(
                ranges.lines().any(|l| l.starts_with(&format!("{ALICE}:"))),
                "{file} has no range for {ALICE}: rootless podman cannot run as her"
            );
        }
        let image = Image;
        alice_podman(&["import", &tar, IMAGE]).ok();
        image
    }
}

impl Drop for Image {
    fn drop(&mut self) {
        let _ = alice_podman(&["rm", "-a", "-f"]);
        let _ = alice_podman(&["rmi", "-f", IMAGE]);
        // Stops her rootless pause process, which would outlive the test.
        let _ = alice_podman(&["system", "migrate"]);
    }
}

/// Where each container writes what its command prints, through a bind
/// mount, read back once the step is over: podman 4.3's attach can drop
/// a short-lived container's output (a loaded run once saw 7 rows of 8,
/// with every task exiting 0). Removed when dropped.
struct Outputs(std::path::PathBuf);

impl Outputs {
    fn new() -> Outputs {
        use std::os::unix::fs::PermissionsExt;
        static COUNT: std::sync::atomic::AtomicUsize = std::sync::atomic::AtomicUsize::new(0);
        let n = COUNT.fetch_add(1, std::sync::atomic::Ordering::Relaxed);
        let dir = std::path::PathBuf::from(format!(
            "{}/podman-out.{}.{n}",
            state_dir(),
            std::process::id()
        ));
        let _ = std::fs::remove_dir_all(&dir);
        std::fs::create_dir_all(&dir).expect("make the containers' output folder");
        // Alice's containers write here as her (rootless root maps to her).
        std::fs::set_permissions(&dir, std::fs::Permissions::from_mode(0o777))
            .expect("open the containers' output folder");
        Outputs(dir)
    }

    /// podman's words that bind the folder in, then the command: `sh -c`
    /// that runs `script` with its output in a file of its own there.
    fn command(&self, script: &str) -> Vec<String> {
        let run = format!("f=$(mktemp /out/run.XXXXXX) && {{ {script}\n}} >\"$f\" 2>&1");
        [
            "-v",
            &format!("{}:/out", self.0.display()),
            IMAGE,
            "sh",
            "-c",
            &run,
        ]
        .map(String::from)
        .to_vec()
    }

    /// `ran` with what every container printed as its stdout.
    fn read(&self, mut ran: Ran) -> Ran {
        let mut files: Vec<_> = std::fs::read_dir(&self.0)
            .expect("read the containers' output folder")
            .map(|entry| entry.expect("an output file").path())
            .collect();
        files.sort();
        ran.out.stdout = files
            .iter()
            .flat_map(|file| std::fs::read(file).expect("read a container's output"))
            .collect();
        ran
    }
}

impl Drop for Outputs {
    fn drop(&mut self) {
        let _ = std::fs::remove_dir_all(&self.0);
    }
}

/// `srun WORDS podman-hpc run --rm [--desi-gpu-map] PODMAN... IMAGE sh -c
/// SCRIPT` as alice, which must succeed: what the containers printed.
fn contained(words: &str, podman: &[&str], script: &str) -> Ran {
    let outputs = Outputs::new();
    let ran = srun(words)
        .user(ALICE)
        .arg(podman_hpc())
        .words(&["run", "--rm"])
        .words(podman)
        .words(
            &outputs
                .command(script)
                .iter()
                .map(String::as_str)
                .collect::<Vec<_>>(),
        )
        .ok();
    outputs.read(ran)
}

/// [`contained`], with the node's host name and the task's rank and local
/// id, and with the module or without.
fn in_container(words: &str, module: bool, script: &str) -> Ran {
    let mut podman = vec!["--uts=host", "-e", "SLURM_PROCID", "-e", "SLURM_LOCALID"];
    if module {
        podman.insert(0, "--desi-gpu-map");
    }
    contained(words, &podman, script)
}

/// The same step's rows without a container, then in podman-hpc's
/// container with the module: each task inside has its own list and the
/// flag, the rows of the step outside, written out in the case.
fn check(cases: &[&Case]) {
    for case in cases {
        let _c = setup("required", case.plugstack);
        let _image = Image::import();
        srun(case.srun)
            .user(ALICE)
            .probe(probe::GPU)
            .ok()
            .rows_are(case.rows);
        in_container(case.srun, true, probe::GPU).rows_are(case.rows);
    }
}

/// The variables of `env`'s output that the plugin sets, one `name=value`
/// line each, sorted.
fn binding_lines(ran: &Ran) -> Vec<String> {
    sorted_lines(&ran.out.stdout, |l| {
        l.starts_with("CUDA_VISIBLE_DEVICES=")
            || l.starts_with("DESI_GPU_MAP")
            || l.starts_with("CUDA_MPS_")
    })
}

#[test]
fn without_the_module_no_binding_reaches_the_container() {
    let _c = setup("required", &[]);
    let _image = Image::import();
    let words = TWO_NODES_EIGHT_TASKS.to_string() + " --desi-gpu-map=contiguous";
    // Outside, each task has its own GPU and the flag.
    srun(&words)
        .user(ALICE)
        .probe(probe::GPU)
        .ok()
        .rows_are(&EIGHT_ONE_GPU_EACH);
    // podman-hpc's run passes neither: every task in its container has no
    // list (the image sets none) and no flag.
    in_container(&words, false, probe::GPU).rows_are(&[
        "0 n1 0 unset unset",
        "1 n1 1 unset unset",
        "2 n1 2 unset unset",
        "3 n1 3 unset unset",
        "4 n2 0 unset unset",
        "5 n2 1 unset unset",
        "6 n2 2 unset unset",
        "7 n2 3 unset unset",
    ]);
    // `env` as the application: eight containers ran, and none has a
    // variable of the binding.
    let env = contained(&words, &[], "env");
    assert_eq!(
        env.lines("container=podman").len(),
        8,
        "one env per task: {env}"
    );
    assert_eq!(binding_lines(&env), Vec::<String>::new(), "{env}");
}

#[test]
fn with_the_module_each_task_keeps_its_own_gpu_in_the_container() {
    // Both methods on both kinds of node split: 4 tasks on each node's 4
    // GPUs, and 11 tasks on two whole nodes (6 and 5).
    let cases: Vec<&Case> = EVERY_LAYOUT
        .iter()
        .filter(|c| {
            c.srun.starts_with("-N2 -n8 --ntasks-per-node=4 -w n[1-2]")
                || c.srun
                    .starts_with("-N2 -n11 --exclusive -w n[1-2] --gpus-per-node=4")
        })
        .collect();
    assert_eq!(cases.len(), 4, "the layouts this test names");
    check(&cases);
}

#[test]
fn with_the_module_env_shows_each_tasks_binding() {
    let _c = setup("required", &[]);
    let _image = Image::import();
    let env = contained(
        "-N1 -n2 -w n1 --gpus-per-node=2 --desi-gpu-map=roundrobin",
        &["--desi-gpu-map"],
        "env",
    );
    let lines = binding_lines(&env);
    let step: Vec<&String> = lines
        .iter()
        .filter(|l| l.starts_with("DESI_GPU_MAP_STEP="))
        .collect();
    assert_eq!(step.len(), 2, "{env}");
    let others: Vec<&String> = lines
        .iter()
        .filter(|l| !l.starts_with("DESI_GPU_MAP_STEP="))
        .collect();
    assert_eq!(
        others,
        [
            "CUDA_VISIBLE_DEVICES=0",
            "CUDA_VISIBLE_DEVICES=1",
            "DESI_GPU_MAPPED=1",
            "DESI_GPU_MAPPED=1",
            "DESI_GPU_MAP_GPUS=0",
            "DESI_GPU_MAP_GPUS=1",
            "DESI_GPU_MAP_METHOD=roundrobin",
            "DESI_GPU_MAP_METHOD=roundrobin",
            "DESI_GPU_MAP_NODE_GPUS=2",
            "DESI_GPU_MAP_NODE_GPUS=2",
        ],
        "{env}"
    );
}

/// Under MPS, `T rank node local GPU mps-flag share answer`: `answer` is
/// the reply of the daemon at `CUDA_MPS_PIPE_DIRECTORY` to
/// `get_default_active_thread_percentage`, asked with the real control
/// client CONTROL (`none`: no pipe variable; `nodir`: the directory is
/// not there).
const MPS_PROBE: &str = r#"
a=none
if [ -n "${CUDA_MPS_PIPE_DIRECTORY-}" ]; then
  a=nodir
  if [ -d "$CUDA_MPS_PIPE_DIRECTORY" ]; then
    for i in $(seq 100); do
      a=$(echo get_default_active_thread_percentage | CONTROL 2>/dev/null) && [ -n "$a" ] && break
      a=failed; sleep 0.05
    done
  fi
fi
echo "T $SLURM_PROCID $(hostname) $SLURM_LOCALID ${CUDA_VISIBLE_DEVICES-unset} ${DESI_GPU_MAP_MPS-unset} ${CUDA_MPS_ACTIVE_THREAD_PERCENTAGE-unset} $a"
"#;

/// Where the container finds the control client, which the test binds in
/// with the host's glibc (the image has none).
const CONTROL_INSIDE: &str = "/usr/bin/nvidia-cuda-mps-control";

#[test]
fn under_mps_the_steps_daemon_answers_in_the_container_through_the_modules_bind() {
    let control = format!("{}/mps/bin/nvidia-cuda-mps-control", state_dir());
    assert!(
        std::path::Path::new(&control).is_file(),
        "{control} is missing: run tests/nvidia/fetch.sh (make nvidia), then cluster.sh up"
    );
    let _c = setup("required", &[&format!("mps_control={control}")]);
    let _image = Image::import();
    let words = "-n2 -w n1 --gpus-per-node=2 --desi-gpu-map=contiguous,mps";
    let client = format!("{control}:{CONTROL_INSIDE}:ro");
    let inside = MPS_PROBE.replace("CONTROL", CONTROL_INSIDE);
    // extra: podman's words before the image (the client and its glibc).
    let run = |extra: &[&str]| {
        let mut podman = vec!["--uts=host", "-e", "SLURM_PROCID", "-e", "SLURM_LOCALID"];
        podman.extend([
            "-v",
            "/usr/lib/x86_64-linux-gnu:/usr/lib/x86_64-linux-gnu:ro",
            "-v",
            &client,
        ]);
        podman.extend(extra);
        contained(words, &podman, &inside)
    };
    let served = [
        "0 n1 0 GPU-fake-n1-0 1 unset 100.0",
        "1 n1 1 GPU-fake-n1-1 1 unset 100.0",
    ];
    // Outside: each task's own GPU, served by the step's daemon.
    srun(words)
        .user(ALICE)
        .probe(&MPS_PROBE.replace("CONTROL", &control))
        .ok()
        .rows_are(&served);
    // The module: the same rows inside, the daemon reached through the
    // pipe directory it binds.
    run(&["--desi-gpu-map"]).rows_are(&served);
    // Without it, nothing of the step.
    run(&[]).rows_are(&[
        "0 n1 0 unset unset unset none",
        "1 n1 1 unset unset unset none",
    ]);
    // The variables carried in by hand, without the bind: the task is told
    // of a pipe directory that is not there in its container.
    run(&[
        "-e",
        "CUDA_VISIBLE_DEVICES",
        "-e",
        "DESI_GPU_MAP_MPS",
        "-e",
        "CUDA_MPS_PIPE_DIRECTORY",
    ])
    .rows_are(&[
        "0 n1 0 GPU-fake-n1-0 1 unset nodir",
        "1 n1 1 GPU-fake-n1-1 1 unset nodir",
    ]);
}
