//! `desi-gpu-map show` as a user runs it: what it reports of a task (text
//! and JSON, escaped), an AMD GPU by its render node, NVML's own errors, and
//! the deadline on a hung NVML, which `exec` keeps too.

mod common;

use common::{exec_said, fake_nvml, stdout};
use std::process::{Command, Output};

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
    let gone = "/nonexistent/dgm-mps.1000.7.0.0.1/pipe";
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
        .env("DESI_GPU_MAP_GPUS", "GPU-fake-n1-2,GPU-fake-n1-3")
        .env("CUDA_VISIBLE_DEVICES", "GPU-fake-n1-2,GPU-fake-n1-3")
        .output()
        .unwrap();
    let text = stdout(&out);
    // Every GPU the task holds.
    assert!(
        text.contains("\"task_gpus\": \"GPU-fake-n1-2,GPU-fake-n1-3\""),
        "{text}"
    );
    assert!(text.contains("\"flag\": \"1\""), "{text}");
    assert!(text.contains("\"method\": \"roundrobin\""), "{text}");
    assert!(text.contains("\"node_gpus\": \"4\""), "{text}");
    assert!(
        text.contains("\"cuda_visible_devices\": \"GPU-fake-n1-2,GPU-fake-n1-3\""),
        "{text}"
    );
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
    // A hung one (nvmlInit sleeps, as when a GPU fell off the bus): the
    // deadline (10 s unless --nvml-timeout says otherwise: the default is
    // src/args.rs's test).
    std::fs::write(dir.join("fake-nvml.conf"), "count=2\nhang=60\n").unwrap();
    let (out, took) = show_within(
        &["--nvml", &lib, "--nvml-timeout", "2"],
        Duration::from_secs(15),
    );
    assert!(out.status.success(), "{out:?}");
    assert!(took >= Duration::from_secs(2), "{took:?}");
    let text = stdout(&out);
    assert!(
        text.contains("\nnvml: NVML did not answer within 2 s (nvml_timeout)\n"),
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
