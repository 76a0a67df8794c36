//! The `desi-gpu-map` command as a user runs it.

use std::process::{Command, Output};

fn run(args: &[&str]) -> Output {
    Command::new(env!("CARGO_BIN_EXE_desi-gpu-map"))
        .args(args)
        .output()
        .expect("run desi-gpu-map")
}

fn stdout(out: &Output) -> String {
    String::from_utf8_lossy(&out.stdout).into_owned()
}

/// The table that docs/user-guide.md (once the README) shows for this line.
#[test]
fn plan_prints_the_readme_table() {
    let out = run(&[
        "plan",
        "-N",
        "2",
        "-n",
        "5",
        "-m",
        "cyclic",
        "--gpus",
        "4,2",
        "--method",
        "contiguous",
    ]);
    assert!(out.status.success());
    let want = "\
method contiguous visible single
  rank  node     local      gpu  visible
     0     0       0/3        0  0
     1     1       0/2        0  0
     2     0       1/3        1  1
     3     1       1/2        1  1
     4     0       2/3        2  2

load per GPU
 node      gpu  tasks
    0        0      1
    0        1      1
    0        2      1
    0        3      0
    1        0      1
    1        1      1
";
    assert_eq!(stdout(&out), want);
}

#[test]
fn plan_json_for_scripts() {
    let out = run(&[
        "plan",
        "--ntasks-per-node",
        "3",
        "--devices",
        "2,3",
        "--visible",
        "rotate",
        "--json",
    ]);
    assert!(out.status.success());
    assert_eq!(
        stdout(&out),
        "{\"method\": \"contiguous\", \"visible\": \"rotate\", \"tasks\": [\
{\"rank\": 0, \"node\": 0, \"local_id\": 0, \"local_count\": 3, \"gpu\": \"2\", \"visible\": \"2,3\"}, \
{\"rank\": 1, \"node\": 0, \"local_id\": 1, \"local_count\": 3, \"gpu\": \"2\", \"visible\": \"2,3\"}, \
{\"rank\": 2, \"node\": 0, \"local_id\": 2, \"local_count\": 3, \"gpu\": \"3\", \"visible\": \"3,2\"}], \
\"load\": [{\"node\": 0, \"gpu\": \"2\", \"tasks\": 2}, {\"node\": 0, \"gpu\": \"3\", \"tasks\": 1}]}\n"
    );
}

#[test]
fn plan_mps_shows_each_tasks_share_and_refuses_49_clients() {
    // The seed's case: 32 ranks on a 4-GPU node, 8 per GPU, 12% each.
    let out = run(&["plan", "-n", "32", "--gpus", "4", "--mps"]);
    assert!(out.status.success(), "{out:?}");
    let text = stdout(&out);
    assert!(
        text.contains("  rank  node     local      gpu share  visible\n"),
        "{text}"
    );
    assert!(
        text.contains("     0     0      0/32        0    12  0\n"),
        "{text}"
    );
    assert!(
        text.contains("    31     0     31/32        3    12  3\n"),
        "{text}"
    );
    let out = run(&["plan", "-n", "6", "--gpus", "4", "--mps", "--json"]);
    let text = stdout(&out);
    let shares: Vec<&str> = text
        .match_indices("\"share\": ")
        .map(|(i, _)| &text[i + 9..i + 12])
        .collect();
    assert_eq!(shares, ["50}", "50}", "50}", "50}", "100", "100"], "{text}");
    assert!(text.contains("\"mps\": true"), "{text}");
    let out = run(&["plan", "-n", "49", "--gpus", "1", "--mps"]);
    assert_eq!(out.status.code(), Some(2), "{out:?}");
    let err = String::from_utf8_lossy(&out.stderr);
    assert!(
        err.contains(
            "node 0: 49 tasks would share GPU 0, and MPS serves at most 48 clients per GPU"
        ),
        "{err}"
    );
    // Without --mps, no share column.
    let text = stdout(&run(&["plan", "-n", "6", "--gpus", "4"]));
    assert!(!text.contains("share"), "{text}");
}

#[test]
fn plan_errors_name_the_bad_value() {
    for (args, want) in [
        (
            &["plan", "--method", "contigous"][..],
            "invalid --method \"contigous\"",
        ),
        (
            &["plan", "--method", "verbose,roundrobin"][..],
            "invalid --method \"verbose,roundrobin\"",
        ),
        (
            &["plan", "-N", "2", "--gpus", "4,4,2"][..],
            "--gpus has 3 values for 2 nodes",
        ),
        (&["plan", "--devices", "0,0"][..], "names \"0\" twice"),
        (
            &["plan", "-N", "3", "-n", "2"][..],
            "2 tasks cannot cover 3 nodes",
        ),
        (
            &["plan", "--gpus", "0"][..],
            "every node needs at least one GPU",
        ),
    ] {
        let out = run(args);
        assert_eq!(out.status.code(), Some(2), "{args:?}");
        let err = String::from_utf8_lossy(&out.stderr);
        assert!(err.contains(want), "{args:?}: {err}");
    }
}

/// The command with its standard output on `out`: its exit code and what
/// it said on stderr.
fn run_into(args: &[&str], out: impl Into<std::process::Stdio>) -> (Option<i32>, String) {
    let done = Command::new(env!("CARGO_BIN_EXE_desi-gpu-map"))
        .args(args)
        .stdout(out)
        .output()
        .expect("run desi-gpu-map");
    let err = String::from_utf8_lossy(&done.stderr).into_owned();
    (done.status.code(), err)
}

#[test]
fn output_that_cannot_be_written_is_said_but_a_closed_pipe_is_quiet() {
    let full = || {
        std::fs::OpenOptions::new()
            .write(true)
            .open("/dev/full")
            .unwrap()
    };
    let no_space = "to standard output: No space left on device (os error 28)\n";
    for (args, said) in [
        (
            &["plan", "-N", "1", "-n", "2"][..],
            "desi-gpu-map plan: cannot write the plan",
        ),
        (
            &["show", "--nvml", "off"],
            "desi-gpu-map show: cannot write the report",
        ),
        (&["--help"], "desi-gpu-map: cannot write the help"),
        (&["plan", "--help"], "desi-gpu-map: cannot write the help"),
        (&["--version"], "desi-gpu-map: cannot write the version"),
    ] {
        let (code, err) = run_into(args, full());
        assert_eq!(
            (code, err),
            (Some(1), format!("{said} {no_space}")),
            "{args:?}"
        );
        // A reader gone (`| head -1`): quiet, as Unix tools are. Its end is
        // closed before the command starts, so every write fails.
        let (ours, _) = std::os::unix::net::UnixStream::pair().unwrap();
        let (code, err) = run_into(args, std::os::fd::OwnedFd::from(ours));
        assert_eq!((code, err.as_str()), (Some(1), ""), "{args:?}");
    }
}

#[test]
fn show_outside_a_task_says_not_mapped() {
    let out = Command::new(env!("CARGO_BIN_EXE_desi-gpu-map"))
        .args(["show", "--nvml", "off"])
        .env_remove("DESI_GPU_MAPPED")
        .env("CUDA_VISIBLE_DEVICES", "1")
        .output()
        .unwrap();
    assert!(out.status.success());
    let text = stdout(&out);
    assert!(text.starts_with("mapped by desi-gpu-map: no\n"), "{text}");
    assert!(text.contains("cuda_visible_devices: 1\n"), "{text}");
    // The task's CPUs, as the kernel reports the child's (inherited) mask.
    let status = std::fs::read_to_string("/proc/self/status").unwrap();
    let mine = status
        .lines()
        .find_map(|l| l.strip_prefix("Cpus_allowed_list:"))
        .unwrap()
        .trim();
    assert!(text.contains(&format!("cpus: {mine}\n")), "{text}");
}

/// `show`'s report (`--json` or text) of a task with the environment `vars`.
fn show_with(vars: &[(&str, &str)], json: bool) -> String {
    let json = if json { &["--json"][..] } else { &[] };
    let out = Command::new(env!("CARGO_BIN_EXE_desi-gpu-map"))
        .args(["show", "--nvml", "off"])
        .args(json)
        .envs(vars.iter().copied())
        .output()
        .unwrap();
    assert!(out.status.success(), "{out:?}");
    stdout(&out)
}

#[test]
fn show_escapes_what_a_terminal_would_act_on() {
    // A terminal title, then a line that would pose as the flag's.
    let cuda = "0\u{1b}]0;owned\u{7}\nmapped by desi-gpu-map: yes";
    let text = show_with(&[("CUDA_VISIBLE_DEVICES", cuda)], false);
    assert!(!text.contains(['\u{1b}', '\u{7}']), "{text:?}");
    assert!(
        text.contains(
            "\ncuda_visible_devices: 0\\u{1b}]0;owned\\u{7}\\nmapped by desi-gpu-map: yes\n"
        ),
        "{text}"
    );
    let posing = text.lines().filter(|l| l.starts_with("mapped by"));
    assert_eq!(posing.count(), 1, "{text}");
    let json = show_with(&[("CUDA_VISIBLE_DEVICES", cuda)], true);
    assert!(json.contains(r#""0\u001b]0;owned\u0007\nmapped"#), "{json}");
}

#[test]
fn show_says_where_the_mps_pipe_directory_is_missing() {
    let gone = "/nonexistent/desi-gpu-map-mps.1000.7.0.0.1/pipe";
    let vars = [("DESI_GPU_MAP_MPS", "1"), ("CUDA_MPS_PIPE_DIRECTORY", gone)];
    let text = show_with(&vars, false);
    let said = format!(
        "\nmps: 1 (but its pipe directory does not exist: no MPS daemon serves this task)\n\
         mps_pipe_directory: {gone} (does not exist)\n"
    );
    assert!(text.contains(&said), "{text}");
    let json = show_with(&vars, true);
    assert!(
        json.contains("\"mps_pipe_directory_missing\": true"),
        "{json}"
    );
    // A directory that is there: as the variables say.
    let here = std::env::temp_dir().display().to_string();
    let vars = [
        ("DESI_GPU_MAP_MPS", "1"),
        ("CUDA_MPS_PIPE_DIRECTORY", &here),
    ];
    let text = show_with(&vars, false);
    assert!(
        text.contains(&format!("\nmps: 1\nmps_pipe_directory: {here}\n")),
        "{text}"
    );
    let json = show_with(&vars, true);
    assert!(
        json.contains("\"mps_pipe_directory_missing\": false"),
        "{json}"
    );
}

#[test]
fn show_reports_the_mapping_it_finds() {
    let out = Command::new(env!("CARGO_BIN_EXE_desi-gpu-map"))
        .args(["show", "--nvml", "off", "--json"])
        .env("DESI_GPU_MAPPED", "1")
        .env("DESI_GPU_MAP_METHOD", "roundrobin")
        .env("DESI_GPU_MAP_NODE_GPUS", "4")
        .env("CUDA_VISIBLE_DEVICES", "GPU-fake-n1-2")
        .output()
        .unwrap();
    let text = stdout(&out);
    assert!(text.contains("\"flag\": \"1\""), "{text}");
    assert!(text.contains("\"method\": \"roundrobin\""), "{text}");
    assert!(text.contains("\"node_gpus\": \"4\""), "{text}");
    assert!(
        text.contains("\"cuda_visible_devices\": \"GPU-fake-n1-2\""),
        "{text}"
    );
}

#[test]
fn plan_closest_with_a_preset() {
    let out = run(&[
        "plan",
        "-n",
        "4",
        "--method",
        "closest",
        "--topology",
        "perlmutter",
    ]);
    assert!(out.status.success(), "{out:?}");
    let want = "\
method closest visible single
  rank  node     local      gpu  visible
     0     0       0/4        3  3  cpus 0-15
     1     0       1/4        2  2  cpus 16-31
     2     0       2/4        1  1  cpus 32-47
     3     0       3/4        0  0  cpus 48-63

load per GPU
 node      gpu  tasks
    0        0      1
    0        1      1
    0        2      1
    0        3      1
";
    assert_eq!(stdout(&out), want);
}

#[test]
fn plan_closest_with_a_file_and_a_partial_step() {
    let dir = std::env::temp_dir().join(format!("dgm-topology-{}", std::process::id()));
    std::fs::create_dir_all(&dir).unwrap();
    let file = dir.join("node.topo");
    // Two sockets of 4 CPUs; GPUs 0,1 on socket 1, GPUs 2,3 on socket 0.
    std::fs::write(&file, "cpus 0-7\n0 1 4-7\n1 1 4-7\n2 0 0-3\n3 0 0-3\n").unwrap();
    let path = file.to_str().unwrap();
    let gpus = |args: &[&str]| -> Vec<String> {
        let mut all = vec!["plan", "--method", "closest", "--topology", path, "--json"];
        all.extend(args);
        let out = run(&all);
        assert!(out.status.success(), "{out:?}");
        let json: serde_json::Value = serde_json::from_slice(&out.stdout).unwrap();
        json["tasks"]
            .as_array()
            .unwrap()
            .iter()
            .map(|t| {
                format!(
                    "{}@{}",
                    t["gpu"].as_str().unwrap(),
                    t["cpus"].as_str().unwrap()
                )
            })
            .collect()
    };
    assert_eq!(gpus(&["-n", "4"]), ["2@0-1", "3@2-3", "0@4-5", "1@6-7"]);
    // The step holds GPUs 0 and 2 only: one per socket.
    assert_eq!(
        gpus(&["-n", "4", "--devices", "0,2"]),
        ["2@0-1", "2@2-3", "0@4-5", "0@6-7"]
    );
    // A GPU without known affinity: the step previews as contiguous.
    std::fs::write(&file, "0 - -\n1 0 0-3\n").unwrap();
    let out = run(&["plan", "-n", "2", "--method", "closest", "--topology", path]);
    assert!(out.status.success());
    assert!(
        stdout(&out).contains("     1     0       1/2        1  1"),
        "{}",
        stdout(&out)
    );
    std::fs::remove_dir_all(&dir).unwrap();
}

#[test]
fn plan_closest_needs_a_topology_and_names_bad_ones() {
    let out = run(&["plan", "--method", "closest"]);
    assert!(!out.status.success());
    let err = String::from_utf8_lossy(&out.stderr);
    assert!(
        err.contains("--method closest needs --topology PRESET|FILE (presets: perlmutter, polaris, lumi-g, dgx-a100, aurora)"),
        "{err}"
    );
    let out = run(&[
        "plan",
        "--method",
        "closest",
        "--topology",
        "/nonexistent/x",
    ]);
    assert!(!out.status.success());
    let err = String::from_utf8_lossy(&out.stderr);
    assert!(err.contains("--topology \"/nonexistent/x\""), "{err}");
}

#[test]
fn show_locates_an_amd_gpu_through_its_render_node() {
    // A fake kernel tree: GCDs 0-3 at 0000:0N:00.0, render nodes 128-131,
    // GCD g next to CPUs 8g..8g+7 on NUMA node g.
    let root = std::env::temp_dir().join(format!("dgm-cli-show-{}", std::process::id()));
    for g in 0..4u32 {
        let bus = format!("0000:0{}:00.0", g + 1);
        let dev = root.join(format!("sys/bus/pci/devices/{bus}"));
        std::fs::create_dir_all(&dev).unwrap();
        for (file, text) in [
            ("vendor", "0x1002".to_string()),
            ("uevent", format!("PCI_SLOT_NAME={bus}")),
            ("numa_node", g.to_string()),
            ("local_cpulist", format!("{}-{}", 8 * g, 8 * g + 7)),
        ] {
            std::fs::write(dev.join(file), format!("{text}\n")).unwrap();
        }
        let node = root.join(format!("sys/class/drm/renderD{}", 128 + g));
        std::fs::create_dir_all(&node).unwrap();
        std::os::unix::fs::symlink(
            format!("../../../bus/pci/devices/{bus}"),
            node.join("device"),
        )
        .unwrap();
    }
    let show = |rocr: &str, step: &str| {
        let out = Command::new(env!("CARGO_BIN_EXE_desi-gpu-map"))
            .args(["show", "--vendor", "amd", "--root"])
            .arg(&root)
            .env("ROCR_VISIBLE_DEVICES", rocr)
            .env("SLURM_STEP_GPUS", step)
            .output()
            .unwrap();
        assert!(out.status.success());
        stdout(&out)
    };
    let text = show("2", "0,1,2,3");
    assert!(text.contains("vendor: amd\n"), "{text}");
    assert!(text.contains("rocr_visible_devices: 2\n"), "{text}");
    assert!(text.contains("device 0: 2 pci 0000:03:00.0\n"), "{text}");
    assert!(
        text.contains("device 0: numa node 2 local cpus 16-23 near this task's cpus: "),
        "{text}"
    );
    // Under device constraint the list is renumbered: 0 is the step's 3.
    let text = show("0", "3");
    assert!(text.contains("device 0: 0 pci 0000:04:00.0\n"), "{text}");
    let text = show("1", "1,3");
    assert!(
        text.contains(
            "device 0: 1 (not located: GPU \"1\" could be Slurm's index or one renumbered"
        ),
        "{text}"
    );
    std::fs::remove_dir_all(&root).unwrap();
}

#[test]
fn show_prints_the_real_nvmls_own_error() {
    // Debian's real libnvidia-ml (tests/nvidia/fetch.sh), which cannot
    // initialise without a driver: NVML_ERROR_DRIVER_NOT_LOADED.
    let dir = std::env::var("DGM_NVIDIA_DIR")
        .unwrap_or_else(|_| "/var/tmp/desi-gpu-map-nvidia/current".to_string());
    let lib = format!("{dir}/libnvidia-ml.so.1");
    assert!(
        std::path::Path::new(&lib).is_file(),
        "{lib} is missing: run tests/nvidia/fetch.sh (make nvidia) as root"
    );
    let want = format!("NVML: cannot initialise {lib}: NVIDIA driver is not loaded");
    let show = |json: bool| {
        let mut args = vec!["show", "--nvml", &lib];
        args.extend(json.then_some("--json"));
        let out = Command::new(env!("CARGO_BIN_EXE_desi-gpu-map"))
            .args(&args)
            .env("CUDA_VISIBLE_DEVICES", "0")
            .output()
            .expect("run desi-gpu-map");
        assert!(out.status.success(), "{out:?}");
        stdout(&out)
    };
    let text = show(false);
    assert!(text.contains(&format!("\nnvml: {want}\n")), "{text}");
    let json = show(true);
    assert!(
        json.contains(&format!("\"nvml_note\": \"{want}\"")),
        "{json}"
    );
}

/// `desi-gpu-map exec ARGS` with a task's Slurm variables (local task
/// `local` of 6 on node 0, 4 GPUs), and nothing else of the caller's.
fn exec_in_task(local: &str, args: &[&str], extra: &[(&str, &str)]) -> Output {
    let task = [
        ("SLURM_JOB_ID", "7"),
        ("SLURM_STEP_ID", "0"),
        ("SLURM_LOCALID", local),
        ("SLURM_PROCID", local),
        ("SLURM_NODEID", "0"),
        ("SLURM_STEP_TASKS_PER_NODE", "6(x2)"),
        ("SLURMD_NODENAME", "n1"),
        ("CUDA_VISIBLE_DEVICES", "0,1,2,3"),
        ("SLURM_STEP_GPUS", "0,1,2,3"),
        ("SLURM_GPUS_ON_NODE", "4"),
    ];
    exec_with(&[&task[..], extra].concat(), args)
}

/// `desi-gpu-map exec ARGS` with only `PATH` and these variables.
fn exec_with(vars: &[(&str, &str)], args: &[&str]) -> Output {
    Command::new(env!("CARGO_BIN_EXE_desi-gpu-map"))
        .env_clear()
        .env("PATH", std::env::var("PATH").unwrap_or_default())
        .envs(vars.iter().copied())
        .arg("exec")
        .args(args)
        .output()
        .expect("run desi-gpu-map exec")
}

/// The words the application printed.
fn words_of(out: &Output) -> Vec<String> {
    stdout(out).split_whitespace().map(String::from).collect()
}

const SHOW_ENV: &str = r#"echo "$$ ${CUDA_VISIBLE_DEVICES-unset} ${DESI_GPU_MAPPED-unset} ${DESI_GPU_MAP_METHOD-unset} ${DESI_GPU_MAP_STEP-unset}""#;

#[test]
fn exec_maps_the_task_then_becomes_the_application() {
    // Local task 3 of 6 on 4 GPUs: contiguous gives GPU 1, roundrobin 3.
    for (method, gpu) in [
        ("contiguous", "1"),
        ("roundrobin", "3"),
        ("round-robin", "3"),
    ] {
        let out = exec_in_task("3", &["--method", method, "--", "sh", "-c", SHOW_ENV], &[]);
        assert!(out.status.success(), "{out:?}");
        let words = words_of(&out);
        let method = method.replace('-', "");
        assert_eq!(words[1..], [gpu, "1", method.as_str(), "7.0"], "{out:?}");
    }
    // $DESI_GPU_MAP_METHOD is the default; the exit code is the application's.
    let out = exec_in_task(
        "3",
        &["--", "sh", "-c", "echo $CUDA_VISIBLE_DEVICES; exit 5"],
        &[("DESI_GPU_MAP_METHOD", "roundrobin")],
    );
    assert_eq!(out.status.code(), Some(5), "{out:?}");
    assert_eq!(stdout(&out), "3\n");
}

#[test]
fn exec_keeps_the_pid_and_steps_aside_for_the_plugins_mapping() {
    let mut cmd = Command::new(env!("CARGO_BIN_EXE_desi-gpu-map"));
    let child = cmd
        .args(["exec", "--allow-outside-slurm", "--", "sh", "-c", "echo $$"])
        .env_remove("SLURM_STEP_ID")
        .stdout(std::process::Stdio::piped())
        .spawn()
        .unwrap();
    let pid = child.id();
    let out = child.wait_with_output().unwrap();
    assert_eq!(stdout(&out).trim(), pid.to_string(), "exec, not a child");
    // The plugin mapped this step (7.0): nothing changes.
    let mapped = [
        ("CUDA_VISIBLE_DEVICES", "2"),
        ("DESI_GPU_MAPPED", "1"),
        ("DESI_GPU_MAP_STEP", "7.0"),
        ("DESI_GPU_MAP_METHOD", "contiguous"),
    ];
    let out = exec_in_task(
        "0",
        &["--method", "roundrobin", "--", "sh", "-c", SHOW_ENV],
        &mapped,
    );
    let words = words_of(&out);
    assert_eq!(words[1..], ["2", "1", "contiguous", "7.0"], "{out:?}");
    // An outer step's mapping (6.0) does not stop it.
    let outer = [("DESI_GPU_MAPPED", "1"), ("DESI_GPU_MAP_STEP", "6.0")];
    let out = exec_in_task(
        "0",
        &["--method", "roundrobin", "--", "sh", "-c", SHOW_ENV],
        &outer,
    );
    let words = words_of(&out);
    assert_eq!(words[1..], ["0", "1", "roundrobin", "7.0"], "{out:?}");
}

#[test]
fn exec_refuses_bad_input_and_runs_nothing() {
    let marker = std::env::temp_dir().join(format!("dgm-exec-{}", std::process::id()));
    let touch = marker.display().to_string();
    for (args, says) in [
        (
            &["--method", "nearest", "--", "touch", touch.as_str()][..],
            "invalid --method \"nearest\"",
        ),
        (&[][..], "no command to run"),
        (&["touch", touch.as_str()][..], "unexpected argument"),
    ] {
        let out = exec_in_task("0", args, &[]);
        assert_eq!(out.status.code(), Some(2), "{args:?}: {out:?}");
        assert!(
            String::from_utf8_lossy(&out.stderr).contains(says),
            "{out:?}"
        );
    }
    let out = exec_in_task(
        "0",
        &["--", "touch", &touch],
        &[("DESI_GPU_MAP_METHOD", "bogus")],
    );
    assert_eq!(out.status.code(), Some(2), "{out:?}");
    // Outside a Slurm step.
    let out = run(&["exec", "--", "touch", &touch]);
    if std::env::var_os("SLURM_STEP_ID").is_none() {
        assert_eq!(out.status.code(), Some(2), "{out:?}");
        assert!(String::from_utf8_lossy(&out.stderr).contains("not inside a Slurm job"));
    }
    assert!(!marker.exists(), "nothing ran");
    // Commands that cannot run: the shell's codes.
    let out = exec_in_task("0", &["--", "no-such-command-here"], &[]);
    assert_eq!(out.status.code(), Some(127), "{out:?}");
    let data = std::env::temp_dir().join(format!("dgm-data-{}", std::process::id()));
    std::fs::write(&data, "data\n").unwrap();
    let out = exec_in_task("0", &["--", &data.display().to_string()], &[]);
    let _ = std::fs::remove_file(&data);
    assert_eq!(out.status.code(), Some(126), "{out:?}");
}

/// A batch script's environment on a 2-GPU node: Slurm sets the job's id
/// (both spellings) and its GPUs, and no SLURM_STEP_ID (only srun steps
/// get one: env_array_for_step in Slurm's src/common/env.c).
const BATCH: [(&str, &str); 5] = [
    ("SLURM_JOB_ID", "7"),
    ("SLURM_JOBID", "7"),
    ("SLURM_JOB_GPUS", "0,1"),
    ("CUDA_VISIBLE_DEVICES", "0,1"),
    ("SLURMD_NODENAME", "n1"),
];

#[test]
fn exec_in_a_batch_script_or_special_step_runs_the_application_unchanged() {
    let special = |id: &'static str| [&BATCH[..], &[("SLURM_STEP_ID", id)]].concat();
    for (vars, why) in [
        (
            BATCH.to_vec(),
            "not in an srun step (SLURM_JOB_ID=\"7\" is set, SLURM_STEP_ID is not",
        ),
        (
            vec![("SLURM_JOBID", "7"), ("CUDA_VISIBLE_DEVICES", "0,1")],
            "not in an srun step (SLURM_JOBID=\"7\" is set, SLURM_STEP_ID is not",
        ),
        (
            special("4294967291"),
            "the batch step (SLURM_STEP_ID=4294967291)",
        ),
        // Slurm 26.05 writes the batch step's id signed.
        (special("-5"), "the batch step (SLURM_STEP_ID=-5)"),
        (
            special("4294967290"),
            "the interactive step (SLURM_STEP_ID=4294967290)",
        ),
        (
            special("4294967292"),
            "the extern step (SLURM_STEP_ID=4294967292)",
        ),
    ] {
        let out = exec_with(
            &vars,
            &["--method", "roundrobin", "--", "sh", "-c", SHOW_ENV],
        );
        assert!(out.status.success(), "{vars:?}: {out:?}");
        let words = words_of(&out);
        assert_eq!(words[1..], ["0,1", "unset", "unset", "unset"], "{out:?}");
        assert_eq!(String::from_utf8_lossy(&out.stderr), "", "silent: {vars:?}");
        let out = exec_with(&vars, &["--verbose", "--", "sh", "-c", "exit 3"]);
        assert_eq!(out.status.code(), Some(3), "{vars:?}: {out:?}");
        let err = String::from_utf8_lossy(&out.stderr);
        assert_eq!(err.lines().count(), 1, "{err}");
        assert!(err.contains(why), "{err}");
        assert!(err.ends_with("; sh runs unchanged\n"), "{err}");
    }
    // The application is exec'd there too: the same pid.
    let child = Command::new(env!("CARGO_BIN_EXE_desi-gpu-map"))
        .env_clear()
        .env("PATH", std::env::var("PATH").unwrap_or_default())
        .envs(BATCH)
        .args(["exec", "--", "sh", "-c", "echo $$"])
        .stdout(std::process::Stdio::piped())
        .spawn()
        .unwrap();
    let pid = child.id();
    let out = child.wait_with_output().unwrap();
    assert_eq!(stdout(&out).trim(), pid.to_string(), "exec, not a child");
    // No job at all: refused, nothing run.
    let marker = std::env::temp_dir().join(format!("dgm-batch-{}", std::process::id()));
    let out = exec_with(&[], &["--", "touch", &marker.display().to_string()]);
    assert_eq!(out.status.code(), Some(2), "{out:?}");
    let err = String::from_utf8_lossy(&out.stderr);
    assert!(
        err.contains("not inside a Slurm job (neither SLURM_STEP_ID nor SLURM_JOB_ID is set)"),
        "{err}"
    );
    assert!(!marker.exists(), "nothing ran");
}

/// The application's ignored and blocked signals (`SigIgn`, `SigBlk` of
/// /proc/self/status) where `parent` started `desi-gpu-map exec` with
/// these variables: `parent` is a shell line ending in `exec "$@"`.
fn signals_of_the_application(parent: &[&str], vars: &[(&str, &str)]) -> (u64, u64) {
    let out = Command::new(parent[0])
        .args(&parent[1..])
        .arg(env!("CARGO_BIN_EXE_desi-gpu-map"))
        .args(["exec", "--", "grep", "^Sig", "/proc/self/status"])
        .env_clear()
        .env("PATH", std::env::var("PATH").unwrap_or_default())
        .envs(vars.iter().copied())
        .output()
        .expect("run the parent");
    assert!(out.status.success(), "{out:?}");
    let text = stdout(&out);
    let mask = |name: &str| {
        let line = text.lines().find_map(|l| l.strip_prefix(name)).unwrap();
        u64::from_str_radix(line.trim(), 16).unwrap()
    };
    (mask("SigIgn:"), mask("SigBlk:"))
}

const SIGPIPE: u64 = 1 << (13 - 1);
const SIGUSR1: u64 = 1 << (10 - 1);

#[test]
fn exec_keeps_the_callers_signal_dispositions_and_mask() {
    let task = [
        ("SLURM_JOB_ID", "7"),
        ("SLURM_STEP_ID", "0"),
        ("SLURM_LOCALID", "0"),
        ("SLURM_PROCID", "0"),
        ("SLURM_NODEID", "0"),
        ("SLURM_STEP_TASKS_PER_NODE", "1"),
        ("CUDA_VISIBLE_DEVICES", "0,1"),
        ("SLURM_STEP_GPUS", "0,1"),
        ("SLURM_GPUS_ON_NODE", "2"),
    ];
    // A mapped task, and one run unchanged (a batch script).
    for vars in [&task[..], &BATCH[..]] {
        let ignoring = ["bash", "-c", "trap '' PIPE; exec \"$@\"", "bash"];
        let (ignored, _) = signals_of_the_application(&ignoring, vars);
        assert_eq!(
            ignored & SIGPIPE,
            SIGPIPE,
            "SIGPIPE stays ignored: {ignored:x}"
        );
        let default = ["bash", "-c", "trap - PIPE; exec \"$@\"", "bash"];
        let (ignored, _) = signals_of_the_application(&default, vars);
        assert_eq!(ignored & SIGPIPE, 0, "SIGPIPE stays default: {ignored:x}");
        let blocking = [
            "perl",
            "-e",
            "use POSIX; sigprocmask(SIG_BLOCK, POSIX::SigSet->new(SIGUSR1)) or die; exec @ARGV",
        ];
        let (_, blocked) = signals_of_the_application(&blocking, vars);
        assert_eq!(
            blocked & SIGUSR1,
            SIGUSR1,
            "SIGUSR1 stays blocked: {blocked:x}"
        );
    }
}

/// exec's lines on stderr for a task of a 2-GPU step (local task 0 of 2)
/// with these variables over the task's own, NVML off unless `args`
/// names one.
fn exec_said(args: &[&str], vars: &[(&str, &str)]) -> (Output, String) {
    let task = [
        ("SLURM_JOB_ID", "7"),
        ("SLURM_STEP_ID", "0"),
        ("SLURM_LOCALID", "0"),
        ("SLURM_PROCID", "0"),
        ("SLURM_NODEID", "0"),
        ("SLURM_STEP_TASKS_PER_NODE", "2"),
        ("SLURMD_NODENAME", "n1"),
        ("SLURM_GPUS_ON_NODE", "2"),
    ];
    // NVML off unless the test names one.
    let mut all = if args.contains(&"--nvml") {
        vec![]
    } else {
        vec!["--nvml", "off"]
    };
    all.extend(args);
    all.extend(["--", "sh", "-c", SHOW_ENV]);
    let out = exec_with(&[&task[..], vars].concat(), &all);
    let err = String::from_utf8_lossy(&out.stderr).into_owned();
    (out, err)
}

/// A list that names some GPUs by index and others by UUID (which no
/// Slurm writes) is refused in one line, and the task runs unchanged.
#[test]
fn exec_refuses_a_list_of_indices_and_uuids_and_runs_unchanged() {
    let (out, err) = exec_said(
        &[],
        &[
            ("CUDA_VISIBLE_DEVICES", "2,GPU-fake-n1-3"),
            ("SLURM_STEP_GPUS", "2,3"),
        ],
    );
    assert!(out.status.success(), "{out:?}");
    assert_eq!(
        words_of(&out)[1..],
        ["2,GPU-fake-n1-3", "unset", "unset", "unset"]
    );
    assert_eq!(
        err,
        "desi-gpu-map: node n1: CUDA_VISIBLE_DEVICES is not Slurm's: GPU list \"2,GPU-fake-n1-3\" \
         mixes indices and UUIDs (\"2\" and \"GPU-fake-n1-3\"); a list must name every GPU one \
         way, and NVML discovery is off (nvml=off); tasks left unchanged\n"
    );
}

/// `plan` keeps its columns aligned under UUIDs (26.05's env_uuid).
#[test]
fn plan_prints_uuid_lists_in_aligned_columns() {
    let out = run(&[
        "plan",
        "-n",
        "3",
        "--devices",
        "GPU-fake-n1-2,GPU-fake-n1-3",
    ]);
    assert!(out.status.success(), "{out:?}");
    assert_eq!(
        stdout(&out),
        "method contiguous visible single
  rank  node     local           gpu  visible
     0     0       0/3 GPU-fake-n1-2  GPU-fake-n1-2
     1     0       1/3 GPU-fake-n1-2  GPU-fake-n1-2
     2     0       2/3 GPU-fake-n1-3  GPU-fake-n1-3

load per GPU
 node           gpu  tasks
    0 GPU-fake-n1-2      2
    0 GPU-fake-n1-3      1
"
    );
}

#[test]
fn exec_says_why_a_list_is_not_slurms() {
    // A list the user set over Slurm's 2-GPU grant: Slurm did set one.
    let (out, err) = exec_said(
        &[],
        &[
            ("CUDA_VISIBLE_DEVICES", "0,1,2,3"),
            ("SLURM_STEP_GPUS", "0,1"),
        ],
    );
    assert!(out.status.success(), "{out:?}");
    assert_eq!(words_of(&out)[1..], ["0,1,2,3", "unset", "unset", "unset"]);
    assert_eq!(
        err,
        "desi-gpu-map: node n1: CUDA_VISIBLE_DEVICES=\"0,1,2,3\" disagrees with Slurm's grant \
         (SLURM_STEP_GPUS=\"0,1\"), so it is not Slurm's, and NVML discovery is off (nvml=off); \
         tasks left unchanged\n"
    );
    // A forged list of 20000 entries: too long to be any node's.
    let forged = (0..20000)
        .map(|i| i.to_string())
        .collect::<Vec<_>>()
        .join(",");
    let (out, err) = exec_said(
        &[],
        &[
            ("CUDA_VISIBLE_DEVICES", &forged),
            ("SLURM_STEP_GPUS", "0,1"),
        ],
    );
    assert!(out.status.success(), "{out:?}");
    assert!(
        err.starts_with(
            "desi-gpu-map: node n1: CUDA_VISIBLE_DEVICES is not Slurm's: GPU list \"0,1,2,"
        ),
        "{err}"
    );
    assert!(
        err.ends_with(
            " has 20000 entries, more than the 1024 any node holds, and NVML discovery is off \
             (nvml=off); tasks left unchanged\n"
        ),
        "{err}"
    );
    assert!(!err.contains("Slurm set no"), "{err}");
    // Where Slurm set none, that is what it says.
    let (_, err) = exec_said(&[], &[("SLURM_STEP_GPUS", "0,1")]);
    assert_eq!(
        err,
        "desi-gpu-map: node n1: Slurm set no CUDA_VISIBLE_DEVICES, and NVML discovery is off \
         (nvml=off); tasks left unchanged\n"
    );
}

#[test]
fn exec_is_quiet_where_slurm_binds_each_task() {
    // --gpus-per-task=1 with 2 tasks: slurmstepd narrowed this task's list
    // to its GPU and says so in SLURMD_TRES_BIND (24.11's spelling and
    // SLURM_TRES_PER_TASK; 22.05 writes gpu:per_task:1), with or without
    // the step's list narrowed alike.
    for (bind, step) in [
        ("gres/gpu:per_task:1", "1"),
        ("gres/gpu:per_task:1", "0,1"),
        ("gpu:per_task:1", "0,1"),
    ] {
        let vars = [
            ("CUDA_VISIBLE_DEVICES", "1"),
            ("SLURM_STEP_GPUS", step),
            ("SLURMD_TRES_BIND", bind),
            ("SLURM_TRES_PER_TASK", "gres/gpu=1"),
        ];
        let (out, err) = exec_said(&["--method", "roundrobin"], &vars);
        assert!(out.status.success(), "{out:?}");
        assert_eq!(words_of(&out)[1..], ["1", "unset", "unset", "unset"]);
        assert_eq!(err, "", "silent without --verbose: {bind} {step}");
        let (_, err) = exec_said(&["--verbose", "--method", "roundrobin"], &vars);
        assert_eq!(
            err,
            format!(
                "desi-gpu-map: node n1: Slurm binds GPUs per task (SLURMD_TRES_BIND=\"{bind}\"); \
                 keeping Slurm's binding\n"
            )
        );
        // MPS asked for is never dropped in silence.
        let (out, err) = exec_said(&["--method", "contiguous,mps"], &vars);
        assert!(out.status.success(), "{out:?}");
        assert_eq!(words_of(&out)[1..], ["1", "unset", "unset", "unset"]);
        assert!(
            err.contains("keeping Slurm's binding, and running without MPS"),
            "{bind} {step}: {err}"
        );
    }
}

/// Outside any job, `--allow-outside-slurm` runs the application with no
/// list: `--verbose` says why, naming this host.
#[test]
fn exec_outside_slurm_says_why_it_maps_nothing() {
    let args = [
        "--allow-outside-slurm",
        "--verbose",
        "--method",
        "contiguous,mps",
    ];
    let out = exec_with(&[], &[&args[..], &["--", "sh", "-c", SHOW_ENV]].concat());
    assert!(out.status.success(), "{out:?}");
    assert_eq!(words_of(&out)[1..], ["unset", "unset", "unset", "unset"]);
    let err = String::from_utf8_lossy(&out.stderr);
    let host = std::fs::read_to_string("/proc/sys/kernel/hostname").unwrap();
    assert_eq!(
        err,
        format!(
            "desi-gpu-map: node {}: no GPUs are allocated to this step on this node; tasks \
             left unchanged\n",
            host.trim()
        )
    );
}

/// The fake NVML (tests/fakes/nvml/fake_nvml.c), built into a directory of this
/// test's own with `conf` as its control file.
fn fake_nvml(name: &str, conf: &str) -> (std::path::PathBuf, String) {
    let dir = std::env::temp_dir().join(format!("dgm-cli-nvml-{name}-{}", std::process::id()));
    std::fs::create_dir_all(&dir).unwrap();
    let control = dir.join("fake-nvml.conf");
    std::fs::write(&control, conf).unwrap();
    let lib = dir.join("libnvidia-ml.so.1");
    let source = concat!(env!("CARGO_MANIFEST_DIR"), "/tests/fakes/nvml/fake_nvml.c");
    let built = Command::new("cc")
        .args(["-shared", "-fPIC", "-O2", "-o"])
        .arg(&lib)
        .arg(source)
        .arg(format!("-DFAKE_NVML_CONF=\"{}\"", control.display()))
        .arg("-lpthread")
        .status()
        .expect("run cc");
    assert!(built.success(), "build the fake NVML");
    (dir, lib.display().to_string())
}

/// `show` with these arguments, killed if it runs past `limit`; its
/// output and how long it took.
fn show_within(args: &[&str], limit: std::time::Duration) -> (Output, std::time::Duration) {
    let started = std::time::Instant::now();
    let mut child = Command::new(env!("CARGO_BIN_EXE_desi-gpu-map"))
        .arg("show")
        .args(args)
        .env("CUDA_VISIBLE_DEVICES", "0")
        .stdout(std::process::Stdio::piped())
        .stderr(std::process::Stdio::piped())
        .spawn()
        .unwrap();
    while child.try_wait().unwrap().is_none() {
        if started.elapsed() > limit {
            child.kill().unwrap();
            let _ = child.wait();
            panic!("show did not return within {limit:?}");
        }
        std::thread::sleep(std::time::Duration::from_millis(20));
    }
    let took = started.elapsed();
    (child.wait_with_output().unwrap(), took)
}

#[test]
fn show_and_exec_give_up_on_a_hung_nvml_at_the_deadline() {
    use std::time::Duration;
    let (dir, lib) = fake_nvml("show", "count=2\n");
    // A working NVML: the device's details, through the same child.
    let (out, _) = show_within(&["--nvml", &lib], Duration::from_secs(20));
    assert!(out.status.success(), "{out:?}");
    let text = stdout(&out);
    let host = String::from_utf8(Command::new("hostname").output().unwrap().stdout).unwrap();
    let want = format!(
        "device 0: 0 uuid GPU-fake-{}-0 pci 00000000:01:00.0 memory used 1 MiB of 81920 MiB\n",
        host.trim()
    );
    assert!(text.contains(&want), "{text}");
    // A hung one (nvmlInit sleeps, as when a GPU fell off the bus): exec's
    // deadline, 10 s unless --nvml-timeout says otherwise.
    std::fs::write(dir.join("fake-nvml.conf"), "count=2\nhang=60\n").unwrap();
    let (out, took) = show_within(&["--nvml", &lib], Duration::from_secs(20));
    assert!(out.status.success(), "{out:?}");
    assert!(took >= Duration::from_secs(10), "{took:?}");
    let text = stdout(&out);
    assert!(
        text.contains("\nnvml: NVML did not answer within 10 s (nvml_timeout)\n"),
        "{text}"
    );
    assert!(text.contains("cuda_visible_devices: 0\n"), "{text}");
    let (out, took) = show_within(
        &["--nvml", &lib, "--nvml-timeout", "1", "--json"],
        Duration::from_secs(8),
    );
    assert!(out.status.success(), "{out:?}");
    assert!(took < Duration::from_secs(5), "{took:?}");
    assert!(
        stdout(&out).contains("\"nvml_note\": \"NVML did not answer within 1 s (nvml_timeout)\""),
        "{}",
        stdout(&out)
    );
    // exec takes the same option, for the same child.
    let started = std::time::Instant::now();
    let (out, err) = exec_said(&["--nvml", &lib, "--nvml-timeout", "1"], &[]);
    assert!(started.elapsed() < Duration::from_secs(5), "{out:?}");
    assert!(out.status.success(), "{out:?}");
    assert!(
        err.contains("Slurm set no CUDA_VISIBLE_DEVICES, and NVML did not answer within 1 s"),
        "{err}"
    );
    std::fs::remove_dir_all(&dir).unwrap();
}

/// `plan --topology FILE` that cannot be read: the message names the file.
fn topology_error(name: &str, make: impl FnOnce(&std::path::Path)) -> (String, String) {
    let dir = std::env::temp_dir().join(format!("dgm-topology-{name}-{}", std::process::id()));
    std::fs::create_dir_all(&dir).unwrap();
    let path = dir.join(name);
    make(&path);
    let shown = path.to_str().unwrap().to_string();
    let out = run(&["plan", "--method", "closest", "--topology", &shown]);
    assert_eq!(out.status.code(), Some(2), "{out:?}");
    let err = String::from_utf8_lossy(&out.stderr).into_owned();
    std::fs::remove_dir_all(&dir).unwrap();
    (err, shown)
}

#[test]
fn plan_topology_file_not_utf8_names_the_file() {
    let (err, path) = topology_error("latin1.topo", |p| {
        std::fs::write(p, b"0 0 0-3 # caf\xe9\n").unwrap()
    });
    assert!(err.contains(&format!("--topology \"{path}\"")), "{err}");
    assert!(err.contains("not UTF-8"), "{err}");
}

#[test]
fn plan_topology_directory_names_the_file() {
    let (err, path) = topology_error("a-directory", |p| std::fs::create_dir(p).unwrap());
    assert!(err.contains(&format!("--topology \"{path}\"")), "{err}");
    assert!(err.contains("is a directory"), "{err}");
}

#[test]
fn plan_topology_file_over_the_bound_is_refused_not_cut() {
    // A GPU line after 1 MiB of comment was cut off silently, which then
    // read as a file without GPUs.
    let size = (1 << 20) + 9;
    let (err, path) = topology_error("huge.topo", |p| {
        let mut text = "#".repeat(1 << 20);
        text.push_str("\n0 0 0-3\n");
        assert_eq!(text.len(), size);
        std::fs::write(p, text).unwrap()
    });
    assert!(err.contains(&format!("--topology \"{path}\"")), "{err}");
    assert!(
        err.contains(&format!("{size} bytes, over the limit of 1048576 bytes")),
        "{err}"
    );
    assert!(!err.contains("no GPU is listed"), "{err}");
}

#[test]
fn plan_refuses_sizes_no_node_or_job_reaches() {
    // Each used to abort allocating gigabytes ("memory allocation of ...
    // failed" and a backtrace). The message names the option, the value
    // and the limit.
    for (args, value, limit) in [
        (
            &["plan", "-N", "10000000000"][..],
            "--nodes 10000000000",
            "1048576 nodes",
        ),
        (
            &["plan", "-n", "10000000000"][..],
            "--ntasks 10000000000",
            "1048576 tasks",
        ),
        (
            &["plan", "--gpus", "100000000000"][..],
            "--gpus 100000000000",
            "1024 GPUs on a node",
        ),
        (
            &["plan", "--ntasks-per-node", "70000"][..],
            "--ntasks-per-node 70000",
            "65533 tasks on a node",
        ),
        // One node: the split puts every task there.
        (
            &["plan", "-n", "70000"][..],
            "--ntasks 70000",
            "65533 tasks on a node",
        ),
        (
            &["plan", "-N", "32", "--ntasks-per-node", "65533"][..],
            "--ntasks-per-node 65533 on 32 nodes is 2097056 tasks",
            "1048576 tasks",
        ),
        (
            &["plan", "-N", "2000", "--gpus", "1024"][..],
            "--gpus 1024 on 2000 nodes is 2048000 GPUs",
            "1048576 GPUs",
        ),
        (
            &["plan", "-N", "300000"][..],
            "--gpus 4 on 300000 nodes is 1200000 GPUs",
            "1048576 GPUs",
        ),
    ] {
        let out = run(args);
        assert_eq!(out.status.code(), Some(2), "{args:?}: {out:?}");
        let err = String::from_utf8_lossy(&out.stderr);
        assert!(err.contains(value), "{args:?}: {err}");
        assert!(
            err.contains(&format!("limit of {limit}")),
            "{args:?}: {err}"
        );
        assert!(!err.contains("memory allocation"), "{args:?}: {err}");
    }
    // At the limits: Slurm's most tasks on a node, the longest GPU list.
    let out = run(&[
        "plan",
        "--ntasks-per-node",
        "65533",
        "--gpus",
        "1024",
        "--json",
    ]);
    assert!(out.status.success(), "{out:?}");
    let json: serde_json::Value = serde_json::from_slice(&out.stdout).unwrap();
    assert_eq!(json["tasks"].as_array().unwrap().len(), 65533);
    assert_eq!(json["load"].as_array().unwrap().len(), 1024);
}

#[test]
fn plan_at_many_nodes_counts_each_gpus_load() {
    // 65536 nodes of one task and one GPU each: every GPU carries its
    // node's task (the load table was counted node by node over every row).
    let out = run(&[
        "plan", "-N", "65536", "--gpus", "1", "-m", "cyclic", "--json",
    ]);
    assert!(out.status.success(), "{out:?}");
    let json: serde_json::Value = serde_json::from_slice(&out.stdout).unwrap();
    let tasks = json["tasks"].as_array().unwrap();
    assert_eq!(tasks.len(), 65536);
    assert_eq!(tasks[65535]["node"], 65535);
    let load = json["load"].as_array().unwrap();
    assert_eq!(load.len(), 65536);
    assert!(load.iter().all(|l| l["tasks"] == 1), "{:?}", &load[..4]);
}

#[test]
fn plan_refuses_rotate_lists_past_the_bound() {
    // Under --visible rotate each task's row lists all its node's GPUs:
    // a million rows of 1024 GPUs would be gigabytes of text.
    let out = run(&[
        "plan",
        "-N",
        "16",
        "--ntasks-per-node",
        "65533",
        "--gpus",
        "1024",
        "--visible",
        "rotate",
    ]);
    assert_eq!(out.status.code(), Some(2), "{out:?}");
    let err = String::from_utf8_lossy(&out.stderr);
    assert!(
        err.contains("--visible rotate lists 1073692672 GPUs"),
        "{err}"
    );
    assert!(err.contains("limit of 16777216 GPUs listed"), "{err}");
    // One node of them is within it.
    let out = run(&[
        "plan",
        "--ntasks-per-node",
        "16384",
        "--gpus",
        "1024",
        "--visible",
        "rotate",
    ]);
    assert!(out.status.success(), "{out:?}");
}

#[test]
fn exec_takes_the_options_words_and_refuses_what_the_plugin_refuses() {
    let marker = std::env::temp_dir().join(format!("dgm-exec-words-{}", std::process::id()));
    let touch = marker.display().to_string();
    for (words, says) in [
        (
            "none,mps",
            "invalid --method \"none,mps\": none maps no task, and MPS needs mapped tasks",
        ),
        (
            "contiguous,mps,mps",
            "invalid --method \"contiguous,mps,mps\"",
        ),
        ("help", "invalid --method \"help\""),
    ] {
        let out = exec_in_task("0", &["--method", words, "--", "touch", &touch], &[]);
        assert_eq!(out.status.code(), Some(2), "{words}: {out:?}");
        let err = String::from_utf8_lossy(&out.stderr);
        assert!(err.contains(says), "{words}: {err}");
    }
    // The environment form, refused the same way and named.
    let out = exec_in_task(
        "0",
        &["--", "touch", &touch],
        &[("DESI_GPU_MAP_METHOD", "none,mps")],
    );
    assert_eq!(out.status.code(), Some(2), "{out:?}");
    let err = String::from_utf8_lossy(&out.stderr);
    assert!(err.contains("DESI_GPU_MAP_METHOD=\"none,mps\""), "{err}");
    assert!(!marker.exists(), "nothing ran");
    // The verbose word, as --verbose.
    let out = exec_in_task("3", &["--method", "verbose,roundrobin", "--", "true"], &[]);
    assert!(out.status.success(), "{out:?}");
    let err = String::from_utf8_lossy(&out.stderr);
    assert!(err.contains("rank=3 local=3/6 gpu=3"), "{err}");
}

/// exec's `mps` starts nothing where a daemon already serves the step: one
/// at the pipe directory it inherited (its GPU then by UUID, for that
/// daemon), or Slurm's gres/mps; local task 0 says which.
#[test]
fn exec_mps_steps_aside_under_a_daemon_it_inherited_or_gres_mps() {
    let (dir, lib) = fake_nvml("mps-aside", "count=4\n");
    let args = [
        "--nvml",
        lib.as_str(),
        "--method",
        "contiguous,mps",
        "--",
        "sh",
        "-c",
        "echo $CUDA_VISIBLE_DEVICES ${CUDA_MPS_PIPE_DIRECTORY-unset}",
    ];
    let site = [("CUDA_MPS_PIPE_DIRECTORY", "/run/site-mps")];
    let out = exec_in_task("0", &args, &site);
    assert!(out.status.success(), "{out:?}");
    let err = String::from_utf8_lossy(&out.stderr);
    assert!(
        err.contains(
            "the MPS daemon at CUDA_MPS_PIPE_DIRECTORY=\"/run/site-mps\" serves this step; no MPS daemon started"
        ),
        "{err}"
    );
    let words = words_of(&out);
    assert!(words[0].starts_with("GPU-fake-"), "{out:?}");
    assert_eq!(words[1], "/run/site-mps", "{out:?}");
    // Another task of the step says nothing.
    let out = exec_in_task("1", &args, &site);
    assert!(out.stderr.is_empty(), "{out:?}");
    let gres = [("CUDA_MPS_ACTIVE_THREAD_PERCENTAGE", "25")];
    let out = exec_in_task("0", &args, &gres);
    assert!(out.status.success(), "{out:?}");
    let err = String::from_utf8_lossy(&out.stderr);
    assert!(
        err.contains("Slurm's gres/mps serves this step (CUDA_MPS_ACTIVE_THREAD_PERCENTAGE=\"25\"); no MPS daemon started"),
        "{err}"
    );
    assert_eq!(words_of(&out), ["0", "unset"], "{out:?}");
    let _ = std::fs::remove_dir_all(dir);
}

#[test]
fn exec_refuses_mps_under_another_launcher() {
    let rank = [
        ("OMPI_COMM_WORLD_LOCAL_RANK", "0"),
        ("OMPI_COMM_WORLD_LOCAL_SIZE", "2"),
        ("CUDA_VISIBLE_DEVICES", "0,1"),
    ];
    let out = exec_with(&rank, &["--method", "contiguous,mps", "--", "echo", "ran"]);
    assert_eq!(out.status.code(), Some(2), "{out:?}");
    assert!(stdout(&out).is_empty(), "nothing ran: {out:?}");
    let err = String::from_utf8_lossy(&out.stderr);
    assert!(
        err.contains("mps is for srun's tasks") && err.ends_with("nothing was run\n"),
        "{err}"
    );
}

#[test]
fn exec_mps_keeps_the_plugins_limit_of_48_clients_per_gpu() {
    // 49 tasks on one GPU: mapped, without MPS, said by local task 0 only.
    let one_gpu = [
        ("SLURM_STEP_TASKS_PER_NODE", "49"),
        ("CUDA_VISIBLE_DEVICES", "0"),
        ("SLURM_STEP_GPUS", "0"),
        ("SLURM_GPUS_ON_NODE", "1"),
    ];
    let args = ["--method", "contiguous,mps", "--", "sh", "-c", SHOW_ENV];
    let out = exec_in_task("0", &args, &one_gpu);
    assert!(out.status.success(), "{out:?}");
    let err = String::from_utf8_lossy(&out.stderr);
    assert!(
        err.contains("49 tasks would share one GPU, and MPS serves at most 48 clients per GPU")
            && err.trim_end().ends_with("; running without MPS"),
        "{err}"
    );
    assert_eq!(words_of(&out)[1..3], ["0", "1"], "{out:?}");
    let out = exec_in_task("7", &args, &one_gpu);
    assert!(out.stderr.is_empty(), "{out:?}");
}

// ------------------------------------------------ exec's MPS keeper

/// The user the keeper tests' tasks run as.
const TASKS_USER: &str = "nobody";

fn tasks_uid() -> u32 {
    let out = Command::new("id")
        .args(["-u", TASKS_USER])
        .output()
        .unwrap();
    stdout(&out).trim().parse().unwrap()
}

/// One step's tasks on this host, run as srun would run them (no
/// slurmstepd above them) as user `nobody` (MPS never serves root): a
/// stand-in control daemon, a fake NVML with 2 GPUs, and a base folder
/// of the test's own. Removed when dropped.
struct KeptStep {
    dir: std::path::PathBuf,
    lib: String,
    step: u32,
}

impl KeptStep {
    fn new(name: &str, step: u32) -> KeptStep {
        let (dir, lib) = fake_nvml(&format!("k{name}"), "count=2\n");
        // `-f` makes its socket and sleeps; a question gets a number,
        // `quit` ends it.
        let control = "#!/bin/sh\nif [ \"$1\" = -f ]; then echo $$ > \"$CUDA_MPS_PIPE_DIRECTORY/pid\"\n\
             touch \"$CUDA_MPS_PIPE_DIRECTORY/control\"; exec sleep 60; fi\nread cmd\n\
             case $cmd in quit) kill $(cat \"$CUDA_MPS_PIPE_DIRECTORY/pid\");; *) echo 100.0;; esac\n";
        // The server is looked for beside the control daemon.
        for (name, text) in [
            ("nvidia-cuda-mps-control", control),
            ("nvidia-cuda-mps-server", "#!/bin/sh\n"),
        ] {
            let path = dir.join(name);
            std::fs::write(&path, text).unwrap();
            let mode = std::os::unix::fs::PermissionsExt::from_mode(0o755);
            std::fs::set_permissions(&path, mode).unwrap();
        }
        for tmp in ["t0", "t1"] {
            std::fs::create_dir_all(dir.join(tmp)).unwrap();
        }
        let owned = Command::new("chown")
            .arg("-R")
            .arg(TASKS_USER)
            .arg(&dir)
            .status();
        assert!(owned.is_ok_and(|s| s.success()), "chown {}", dir.display());
        KeptStep { dir, lib, step }
    }

    /// The keeper's socket name, which the step's tasks meet at.
    fn name(&self) -> String {
        let uid = tasks_uid();
        format!(
            "desi-gpu-map-mps.{uid}.{}.{}.0.keeper",
            std::process::id(),
            self.step
        )
    }

    /// Local task `local` of 2, its `TMPDIR` the folder `tmp` of the
    /// step's, running `script` under exec METHOD,mps.
    fn task(&self, local: usize, tmp: &str, script: &str) -> std::process::Child {
        self.as_task(local, 2, tmp)
            .arg(env!("CARGO_BIN_EXE_desi-gpu-map"))
            .args(["exec", "--nvml", &self.lib, "--mps-control"])
            .arg(self.dir.join("nvidia-cuda-mps-control"))
            .args(["--method", "contiguous,mps", "--", "sh", "-c", script])
            .stdout(std::process::Stdio::piped())
            .stderr(std::process::Stdio::piped())
            .spawn()
            .expect("start desi-gpu-map exec")
    }

    /// `runuser` as the tasks' user, with the variables of local task
    /// `local` of `count`; its command to follow.
    fn as_task(&self, local: usize, count: usize, tmp: &str) -> Command {
        let gpus = ["0", "0,1"][count - 1];
        let mut cmd = Command::new("runuser");
        cmd.args(["-u", TASKS_USER, "--"])
            .env_clear()
            .env("PATH", std::env::var("PATH").unwrap_or_default())
            .env("TMPDIR", self.dir.join(tmp))
            .envs([
                ("SLURM_JOB_ID", std::process::id().to_string()),
                ("SLURM_STEP_ID", self.step.to_string()),
                ("SLURM_LOCALID", local.to_string()),
                ("SLURM_PROCID", local.to_string()),
                ("SLURM_NODEID", "0".to_string()),
                ("SLURM_STEP_TASKS_PER_NODE", count.to_string()),
                ("SLURMD_NODENAME", "n1".to_string()),
                ("CUDA_VISIBLE_DEVICES", gpus.to_string()),
                ("SLURM_STEP_GPUS", gpus.to_string()),
                ("SLURM_GPUS_ON_NODE", count.to_string()),
            ]);
        cmd
    }

    /// Both tasks at once, each with its own `TMPDIR`; their outputs.
    fn both(&self, script: &str) -> [Output; 2] {
        let tasks = [self.task(0, "t0", script), self.task(1, "t1", script)];
        tasks.map(|t| t.wait_with_output().expect("wait for a task"))
    }

    /// The keeper's directories left in either task's base.
    fn left(&self) -> Vec<String> {
        ["t0", "t1"]
            .iter()
            .flat_map(|t| std::fs::read_dir(self.dir.join(t)).unwrap())
            .filter_map(|e| e.ok()?.file_name().to_str().map(String::from))
            .collect()
    }

    /// Nothing is left once the tasks are gone: no directory, no keeper,
    /// no daemon of this step's.
    fn assert_nothing_left(&self) {
        let deadline = std::time::Instant::now() + std::time::Duration::from_secs(10);
        while (!self.left().is_empty() || !self.processes().is_empty())
            && std::time::Instant::now() < deadline
        {
            std::thread::sleep(std::time::Duration::from_millis(50));
        }
        assert_eq!(self.left(), Vec::<String>::new(), "directories left");
        assert_eq!(self.processes(), Vec::<u32>::new(), "keeper or daemon left");
    }

    /// The step's keepers (their command line names the step's socket)
    /// and their children (the daemon).
    fn processes(&self) -> Vec<u32> {
        let name = self.name();
        let pids: Vec<u32> = std::fs::read_dir("/proc")
            .unwrap()
            .filter_map(|e| e.ok()?.file_name().to_str()?.parse::<u32>().ok())
            .collect();
        let keepers: Vec<u32> = pids
            .iter()
            .copied()
            .filter(|pid| {
                let bytes = std::fs::read(format!("/proc/{pid}/cmdline")).unwrap_or_default();
                String::from_utf8_lossy(&bytes).contains(&name)
            })
            .collect();
        let parent = |pid: u32| {
            let stat = std::fs::read_to_string(format!("/proc/{pid}/stat")).unwrap_or_default();
            let after = stat
                .rsplit_once(')')
                .map(|(_, r)| r.to_string())
                .unwrap_or_default();
            after
                .split_whitespace()
                .nth(1)
                .and_then(|p| p.parse::<u32>().ok())
        };
        let children = pids
            .iter()
            .copied()
            .filter(|&pid| parent(pid).is_some_and(|p| keepers.contains(&p)));
        let mut all: Vec<u32> = keepers.iter().copied().chain(children).collect();
        all.sort_unstable();
        all
    }
}

/// Each of `pids` with its state, parent and command line, for a failure's
/// message.
fn described(pids: &[u32]) -> String {
    let one = |pid: &u32| {
        let stat = std::fs::read_to_string(format!("/proc/{pid}/stat")).unwrap_or_default();
        let fields: Vec<&str> = stat
            .rsplit_once(')')
            .map_or("", |(_, r)| r)
            .split_whitespace()
            .take(2)
            .collect();
        let cmdline = std::fs::read(format!("/proc/{pid}/cmdline")).unwrap_or_default();
        let cmdline = String::from_utf8_lossy(&cmdline).replace('\0', " ");
        format!("{pid} {fields:?} {cmdline}")
    };
    pids.iter().map(one).collect::<Vec<_>>().join("; ")
}

impl Drop for KeptStep {
    fn drop(&mut self) {
        for pid in self.processes() {
            let _ = Command::new("kill").args(["-9", &pid.to_string()]).status();
        }
        let _ = std::fs::remove_dir_all(&self.dir);
    }
}

/// What each task prints: its GPU, whether its pipe directory is there,
/// and that directory.
const PIPE: &str = r#"test -d "$CUDA_MPS_PIPE_DIRECTORY" && t=there || t=missing; echo "$CUDA_VISIBLE_DEVICES $t $CUDA_MPS_PIPE_DIRECTORY"; sleep 1"#;

/// Both tasks were served by one daemon, each on its own GPU, in a pipe
/// directory that was there: that directory.
fn served_alike(out: &[Output; 2]) -> String {
    let words: Vec<Vec<String>> = out.iter().map(words_of).collect();
    for (i, w) in words.iter().enumerate() {
        assert_eq!(w.len(), 3, "task {i}: {:?}", out[i]);
        let gpu = &w[0];
        let own = gpu.starts_with("GPU-fake-") && gpu.ends_with(&format!("-{i}"));
        assert!(own, "task {i}: {:?}", out[i]);
        assert_eq!(w[1], "there", "task {i}: {:?}", out[i]);
    }
    assert_eq!(words[0][2], words[1][2], "one daemon: {out:?}");
    words[0][2].clone()
}

#[test]
fn tasks_with_their_own_tmpdir_are_told_the_keepers_directory() {
    let step = KeptStep::new("t", 1);
    let pipe = served_alike(&step.both(PIPE));
    assert!(pipe.contains(".keeper."), "named as a keeper's: {pipe}");
    step.assert_nothing_left();
}

#[test]
fn a_name_another_process_holds_neither_denies_nor_delays_mps() {
    let step = KeptStep::new("s", 2);
    // Bound and never listening: a connect is refused, a bind finds the
    // name in use.
    let squat = rustix::net::socket(
        rustix::net::AddressFamily::UNIX,
        rustix::net::SocketType::STREAM,
        None,
    )
    .unwrap();
    let name = rustix::net::SocketAddrUnix::new_abstract_name(step.name().as_bytes()).unwrap();
    rustix::net::bind(&squat, &name).unwrap();
    let started = std::time::Instant::now();
    let pipe = served_alike(&step.both(PIPE));
    // Local task 0 started the keeper, without the name.
    assert!(
        pipe.starts_with(&step.dir.join("t0").display().to_string()),
        "{pipe}"
    );
    // Each task sleeps 1 s; the name's grace is a quarter of that.
    assert!(
        started.elapsed() < std::time::Duration::from_secs(5),
        "{started:?}"
    );
    step.assert_nothing_left();
    drop(squat);
    // Another user (root, here) listening on the name: found out at the
    // first connect.
    let step = KeptStep::new("l", 3);
    use std::os::linux::net::SocketAddrExt;
    let name = std::os::unix::net::SocketAddr::from_abstract_name(step.name().as_bytes()).unwrap();
    let squatter = std::os::unix::net::UnixListener::bind_addr(&name).unwrap();
    served_alike(&step.both(PIPE));
    step.assert_nothing_left();
    drop(squatter);
}

#[test]
fn the_keeper_holds_none_of_the_tasks_descriptors_and_takes_its_daemon_along() {
    let step = KeptStep::new("f", 4);
    let file = step.dir.join("task-file");
    // The task holds a file open without close-on-exec when it runs exec,
    // as after `exec 3>FILE` in a shell.
    let script = format!(
        "exec 3>{}; exec {} exec --nvml {} --mps-control {} --method contiguous,mps -- sh -c 'echo ok; sleep 3'",
        file.display(),
        env!("CARGO_BIN_EXE_desi-gpu-map"),
        step.lib,
        step.dir.join("nvidia-cuda-mps-control").display()
    );
    let mut cmd = step.as_task(0, 1, "t0");
    cmd.args(["sh", "-c", &script])
        .stdout(std::process::Stdio::piped())
        .stderr(std::process::Stdio::inherit());
    let mut task = cmd.spawn().unwrap();
    let mut line = String::new();
    std::io::BufRead::read_line(
        &mut std::io::BufReader::new(task.stdout.take().unwrap()),
        &mut line,
    )
    .unwrap();
    assert_eq!(line.trim(), "ok", "{:?}", task.stderr);
    // A child the keeper runs for a moment (a control client) may be
    // listed beside them: the two are what stays.
    let deadline = std::time::Instant::now() + std::time::Duration::from_secs(5);
    let mut kept = step.processes();
    while kept.len() != 2 && std::time::Instant::now() < deadline {
        std::thread::sleep(std::time::Duration::from_millis(20));
        kept = step.processes();
    }
    assert_eq!(
        kept.len(),
        2,
        "a keeper and its daemon: {}",
        described(&kept)
    );
    for pid in &kept {
        let fds = std::fs::read_dir(format!("/proc/{pid}/fd")).unwrap();
        for fd in fds.flatten() {
            let to = std::fs::read_link(fd.path()).unwrap_or_default();
            assert_ne!(
                to,
                file,
                "pid {pid} holds the task's file as {:?}",
                fd.path()
            );
        }
    }
    // A keeper killed by pid takes its daemon along.
    let keeper = kept
        .iter()
        .find(|pid| {
            std::fs::read(format!("/proc/{pid}/cmdline"))
                .is_ok_and(|c| String::from_utf8_lossy(&c).contains("mps-keeper"))
        })
        .expect("the keeper");
    Command::new("kill")
        .args(["-9", &keeper.to_string()])
        .status()
        .unwrap();
    let deadline = std::time::Instant::now() + std::time::Duration::from_secs(5);
    while !step.processes().is_empty() && std::time::Instant::now() < deadline {
        std::thread::sleep(std::time::Duration::from_millis(20));
    }
    assert_eq!(
        step.processes(),
        Vec::<u32>::new(),
        "the daemon outlived its keeper"
    );
    task.wait().unwrap();
}

/// The next keeper's sweep, run in another network namespace (as a keeper
/// on another node of a shared base runs it), keeps a live keeper's
/// directory: the keeper's sockets are not seen there, its lock is.
#[test]
fn a_sweep_from_another_network_namespace_keeps_a_live_keepers_directory() {
    use std::io::{BufRead, Read, Write};
    let step = KeptStep::new("n", 5);
    // The task says its pipe directory, waits for a line, and says whether
    // the directory is still there.
    let script = r#"echo "$CUDA_MPS_PIPE_DIRECTORY"; read line; test -d "$CUDA_MPS_PIPE_DIRECTORY" && echo there || echo missing"#;
    let mut cmd = step.as_task(0, 1, "t0");
    cmd.arg(env!("CARGO_BIN_EXE_desi-gpu-map"))
        .args(["exec", "--nvml", &step.lib, "--mps-control"])
        .arg(step.dir.join("nvidia-cuda-mps-control"))
        .args(["--method", "contiguous,mps", "--", "sh", "-c", script])
        .stdin(std::process::Stdio::piped())
        .stdout(std::process::Stdio::piped())
        .stderr(std::process::Stdio::inherit());
    let mut task = cmd.spawn().unwrap();
    let mut out = std::io::BufReader::new(task.stdout.take().unwrap());
    let mut pipe = String::new();
    out.read_line(&mut pipe).unwrap();
    let kept = std::path::Path::new(pipe.trim()).parent();
    let kept = kept.unwrap_or_else(|| panic!("the task was not served: {pipe:?}"));
    assert!(kept.join("pipe").is_dir(), "served: {pipe}");
    let swept = Command::new("unshare")
        .args(["--net", "runuser", "-u", TASKS_USER, "--"])
        .arg(env!("CARGO_BIN_EXE_desi-gpu-map"))
        .args([
            "mps-keeper",
            "--serve",
            "--sweep",
            "--control",
            "/bin/false",
        ])
        .arg("--base")
        .arg(kept.parent().unwrap())
        .args(["--stem", "unused", "--token", "0"])
        .args(["--timeout-ms", "1000", "--tasks", "1"])
        .stdin(std::process::Stdio::null())
        .status()
        .expect("run unshare (util-linux)");
    assert!(swept.success(), "the sweep: {swept}");
    assert!(kept.is_dir(), "a live keeper's directory was swept: {pipe}");
    writeln!(task.stdin.take().unwrap(), "on").unwrap();
    let mut rest = String::new();
    out.read_to_string(&mut rest).unwrap();
    assert_eq!(rest, "there\n", "the task's directory, after the sweep");
    assert!(task.wait().unwrap().success());
    step.assert_nothing_left();
}

// ------------------------------------ the variables that mirror options

/// `desi-gpu-map exec ARGS -- touch MARKER` (or, with no `args`, the task
/// prolog) as local task 0 of 6 on 4 GPUs, with `var` set to `value`'s
/// bytes, which need not be UTF-8.
fn with_raw(var: &str, value: &[u8], args: &[&str], marker: &str) -> Output {
    use std::os::unix::ffi::OsStrExt;
    let mut cmd = Command::new(env!("CARGO_BIN_EXE_desi-gpu-map"));
    cmd.env_clear()
        .env("PATH", std::env::var("PATH").unwrap_or_default())
        .envs([
            ("SLURM_JOB_ID", "7"),
            ("SLURM_STEP_ID", "0"),
            ("SLURM_LOCALID", "0"),
            ("SLURM_PROCID", "0"),
            ("SLURM_NODEID", "0"),
            ("SLURM_STEP_TASKS_PER_NODE", "6"),
            ("SLURMD_NODENAME", "n1"),
            ("CUDA_VISIBLE_DEVICES", "0,1,2,3"),
            ("SLURM_STEP_GPUS", "0,1,2,3"),
            ("SLURM_GPUS_ON_NODE", "4"),
        ])
        .env(var, std::ffi::OsStr::from_bytes(value));
    match args {
        [] => cmd.env("SLURM_SCRIPT_CONTEXT", "prolog_task"),
        _ => cmd.arg("exec").args(args).args(["--", "touch", marker]),
    };
    cmd.output().expect("run desi-gpu-map")
}

/// A bad value in a variable that mirrors one of exec's options: exec
/// says `says` (every part, on one line) and runs nothing; the prolog
/// prints one `print` line that says it, and sets nothing.
#[track_caller]
fn refused_in_exec_and_prolog(var: &str, value: &[u8], says: &[&str]) {
    let marker = std::env::temp_dir().join(format!("dgm-raw-{}", std::process::id()));
    let touch = marker.display().to_string();
    let out = with_raw(var, value, &["--method", "contiguous"], &touch);
    // Removed before any assertion: a failing run leaves nothing either.
    let ran = std::fs::remove_file(&marker).is_ok();
    let err = String::from_utf8_lossy(&out.stderr).into_owned();
    assert_eq!(out.status.code(), Some(2), "{var}: {out:?}");
    assert!(!ran, "{var}: exec ran the application");
    let line = err.lines().find(|l| l.contains("invalid")).unwrap_or("");
    for part in says {
        assert!(
            line.contains(part),
            "{var}: {part:?} not in {line:?}\n{err}"
        );
    }
    let out = with_raw(var, value, &[], &touch);
    assert!(out.status.success(), "{var}: {out:?}");
    let lines: Vec<String> = stdout(&out).lines().map(String::from).collect();
    assert_eq!(lines.len(), 1, "{var}: one line only\n{lines:?}");
    let line = &lines[0];
    assert!(
        line.starts_with("print desi-gpu-map: ") && line.ends_with("; the task runs unchanged"),
        "{var}: {line}"
    );
    for part in says {
        assert!(line.contains(part), "{var}: {part:?} not in {line:?}");
    }
}

/// A value that is not UTF-8 (a no-break space pasted from a web page) in
/// any variable that mirrors an option is a bad value: named, quoted with
/// U+FFFD for the bytes, with the valid choices; never read as unset.
#[test]
fn a_mirrored_value_that_is_not_utf8_is_a_bad_value_named_with_its_choices() {
    let choices = |var, value: &[u8], flag, shown, valid| {
        let quoted = format!("invalid {flag} \"{shown}\"");
        let from = format!("(from ${var})");
        let valid = format!("valid values: {valid}");
        refused_in_exec_and_prolog(var, value, &[&quoted, &valid, &from]);
    };
    choices(
        "DESI_GPU_MAP_VISIBLE",
        b"rotate\xa0",
        "--visible",
        "rotate\u{fffd}",
        "single, rotate",
    );
    choices(
        "DESI_GPU_MAP_VENDOR",
        b"nvidia\xa0",
        "--vendor",
        "nvidia\u{fffd}",
        "auto, nvidia",
    );
    choices(
        "DESI_GPU_MAP_NVML",
        b"/opt/libnvidia-ml.so\xa0",
        "--nvml",
        "/opt/libnvidia-ml.so\u{fffd}",
        "auto, off, /ABSOLUTE/PATH",
    );
    choices(
        "DESI_GPU_MAP_NVML_TIMEOUT",
        b"5\xa0",
        "--nvml-timeout",
        "5\u{fffd}",
        "whole seconds from 1 to",
    );
    choices(
        "DESI_GPU_MAP_MPS_SHARE",
        b"even\xa0",
        "--mps-share",
        "even\u{fffd}",
        "even, none",
    );
    choices(
        "DESI_GPU_MAP_MPS_DIR",
        b"/tmp/mps\xa0",
        "--mps-dir",
        "/tmp/mps\u{fffd}",
        "a path in UTF-8 text",
    );
    choices(
        "DESI_GPU_MAP_MPS_CONTROL",
        b"/opt/nvidia-cuda-mps-control\xa0",
        "--mps-control",
        "/opt/nvidia-cuda-mps-control\u{fffd}",
        "a path in UTF-8 text",
    );
}

/// The method's variable too: not read as unset (contiguous without MPS),
/// but refused as a UTF-8 typo is, exec's `--method` over it excepted.
#[test]
fn a_method_variable_that_is_not_utf8_is_refused_not_read_as_unset() {
    let marker = std::env::temp_dir().join(format!("dgm-raw-method-{}", std::process::id()));
    let touch = marker.display().to_string();
    let var = "DESI_GPU_MAP_METHOD";
    let value = b"roundrobin,mps\xa0";
    let says = [
        "DESI_GPU_MAP_METHOD=\"roundrobin,mps\u{fffd}\"",
        "invalid --method \"roundrobin,mps\u{fffd}\"",
        "valid values: contiguous, roundrobin",
    ];
    let out = with_raw(var, value, &["--verbose"], &touch);
    let ran = std::fs::remove_file(&marker).is_ok();
    let err = String::from_utf8_lossy(&out.stderr).into_owned();
    assert_eq!(out.status.code(), Some(2), "{out:?}");
    assert!(!ran, "exec ran the application");
    assert!(says.iter().all(|part| err.contains(part)), "{err}");
    let out = with_raw(var, value, &[], &touch);
    let said = stdout(&out);
    assert!(out.status.success(), "{out:?}");
    assert_eq!(said.lines().count(), 1, "{said}");
    assert!(!said.contains("export "), "the task is unchanged: {said}");
    assert!(says.iter().all(|part| said.contains(part)), "{said}");
    // exec's own option wins over the variable, as with a UTF-8 typo.
    let out = with_raw(var, value, &["--method", "roundrobin"], &touch);
    let _ = std::fs::remove_file(&marker);
    assert!(out.status.success(), "{out:?}");
}

/// A newline inside a mirrored value is quoted whole (`\n`), so that the
/// one line that says it names the value and the valid values.
#[test]
fn a_newline_in_a_mirrored_value_is_quoted_whole() {
    for (var, value, flag, valid) in [
        (
            "DESI_GPU_MAP_VISIBLE",
            "rotate\nsingle",
            "--visible",
            "single, rotate",
        ),
        (
            "DESI_GPU_MAP_VENDOR",
            "amd\nnvidia",
            "--vendor",
            "auto, nvidia",
        ),
        (
            "DESI_GPU_MAP_MPS_SHARE",
            "even\nnone",
            "--mps-share",
            "even, none",
        ),
        (
            "DESI_GPU_MAP_NVML_TIMEOUT",
            "5\n6",
            "--nvml-timeout",
            "whole seconds",
        ),
        ("DESI_GPU_MAP_NVML", "auto\noff", "--nvml", "auto, off"),
        // A path too: its messages would be cut at the newline, and no
        // line slurmstepd reads could carry it to the task.
        (
            "DESI_GPU_MAP_NVML",
            "/opt/lib\nnvml.so",
            "--nvml",
            "auto, off",
        ),
        (
            "DESI_GPU_MAP_MPS_DIR",
            "/tmp/a\nb",
            "--mps-dir",
            "a path in UTF-8 text",
        ),
        (
            "DESI_GPU_MAP_MPS_CONTROL",
            "/opt/a\nb",
            "--mps-control",
            "a path in UTF-8 text",
        ),
    ] {
        let quoted = format!("invalid {flag} \"{}\"", value.replace('\n', "\\n"));
        let from = format!("(from ${var})");
        let valid = format!("valid values: {valid}");
        refused_in_exec_and_prolog(var, value.as_bytes(), &[&quoted, &valid, &from]);
    }
}

/// What the task prolog says reads `desi-gpu-map: ...` once: the verbose
/// row and every other line the outcome gives are prefixed already.
#[test]
fn the_prologs_lines_carry_one_prefix() {
    let out = with_raw("DESI_GPU_MAP_METHOD", b"roundrobin,verbose", &[], "");
    let said = stdout(&out);
    assert!(out.status.success(), "{out:?}");
    assert!(said.contains("export CUDA_VISIBLE_DEVICES=0\n"), "{said}");
    let printed: Vec<&str> = said.lines().filter(|l| l.starts_with("print ")).collect();
    assert!(
        printed.iter().any(|l| l.contains(" rank=0 ")),
        "the verbose row: {said}"
    );
    for line in printed {
        assert!(line.starts_with("print desi-gpu-map: "), "{line}");
        assert!(!line.contains("desi-gpu-map: desi-gpu-map:"), "{line}");
    }
}

/// `desi-gpu-map --help` says the command is also the task prolog and
/// epilog, which take no argument and so no help of their own.
#[test]
fn the_help_says_the_command_is_also_the_task_prolog_and_epilog() {
    let out = run(&["--help"]);
    let help = stdout(&out);
    assert!(out.status.success(), "{out:?}");
    for part in [
        "--task-prolog",
        "--task-epilog",
        "SLURM_TASK_PROLOG",
        "DESI_GPU_MAP_METHOD",
    ] {
        assert!(help.contains(part), "{part} not in\n{help}");
    }
}
