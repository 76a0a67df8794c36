//! The plugin on a cluster run as production GPU sites run Slurm:
//! `tests/run-cluster-tests.sh` brings it up with DGM_PRODUCTION=1
//! (proctrack/cgroup, task/cgroup with ConstrainDevices=yes; from 24.11
//! GPUs found by AutoDetect=nvml through the fake NVML; from 26.05
//! Flags=env_uuid, under which Slurm writes UUIDs). Nodes as in the main
//! cluster: n1 and n2 with 4 fake GPUs, n3 with 2, n4 with 2 named by count
//! only. Each case writes its rows out for Slurm's renumbered indices and
//! for its UUIDs. Fails, never skips, when the cluster is not up or is not
//! in production mode.

use crate::common::layouts::{EVERY_LAYOUT, PARTIAL_AND_ROTATE};
use crate::common::*;

/// The mode, which must be a production one.
fn production_mode() -> String {
    let mode = mode();
    assert!(
        production(),
        "the cluster runs in mode {mode:?}: bring it up with DGM_PRODUCTION=1"
    );
    mode
}

/// Tasks beside another job's GPUs get UUIDs: Slurm writes them (26.05's
/// env_uuid), or Slurm found the GPUs by AutoDetect, which sets
/// `CUDA_VISIBLE_DEVICES` alone (`nvidia_gpu_env`): a renumbered list with
/// no companion list to show it is Slurm's is left to NVML, which inside
/// the device cgroup lists the step's GPUs only (src/step/source.rs,
/// `renumbered_by_slurm`). On whole grants the list is Slurm's own.
fn uuids() -> bool {
    production_mode() != "cgroup"
}

/// A step's two GPUs on n1 beside a job holding GPUs 0 and 1 (GPUs 2
/// and 3), as its tasks get them: renumbered, or by UUID ([`uuids`]).
fn beside_held() -> [&'static str; 2] {
    if uuids() {
        ["GPU-fake-n1-2", "GPU-fake-n1-3"]
    } else {
        ["0", "1"]
    }
}

/// Slurm itself writes UUIDs (26.05's env_uuid).
fn slurm_writes_uuids() -> bool {
    production_mode() == "uuid"
}

/// `rows` with each GPU index in the list column (the fourth) written as
/// the fake NVML's UUID of that GPU on the row's node: what Slurm writes
/// under env_uuid for a node's whole grant, where its index is absolute.
fn as_uuids(rows: &[&str]) -> Vec<String> {
    rows.iter()
        .map(|row| {
            let mut words: Vec<String> = row.split(' ').map(String::from).collect();
            if let [_, node, _, list, ..] = words.as_mut_slice() {
                let named: Vec<String> = list
                    .split(',')
                    .map(|i| format!("GPU-fake-{node}-{i}"))
                    .collect();
                *list = named.join(",");
            }
            words.join(" ")
        })
        .collect()
}

/// A case whose rows differ by how Slurm names the step's GPUs.
struct Case {
    srun: &'static str,
    plugstack: &'static [&'static str],
    held: Option<&'static str>,
    /// Slurm's indices, renumbered under ConstrainDevices.
    indices: &'static [&'static str],
    /// UUIDs: under env_uuid, and beside a held job under AutoDetect.
    uuids: &'static [&'static str],
}

impl Case {
    fn rows(&self) -> &'static [&'static str] {
        let renumbered = self.held.is_some();
        if slurm_writes_uuids() || (renumbered && uuids()) {
            self.uuids
        } else {
            self.indices
        }
    }
}

const SHARED_AND_ROTATE: &[Case] = &[
    // Nothing held: Slurm's 0,1 are GPUs 0 and 1.
    Case {
        srun: "-N1 -n3 -w n1 --gres=gpu:2 --desi-gpu-map=contiguous",
        plugstack: &[],
        held: None,
        indices: &["0 n1 0 0 1", "1 n1 1 0 1", "2 n1 2 1 1"],
        uuids: &[
            "0 n1 0 GPU-fake-n1-0 1",
            "1 n1 1 GPU-fake-n1-0 1",
            "2 n1 2 GPU-fake-n1-1 1",
        ],
    },
    // Another job holds GPUs 0 and 1: the step's GPUs 2 and 3 are its
    // 0 and 1 under the device cgroup.
    Case {
        srun: "-N1 -n3 -w n1 --gres=gpu:2 --desi-gpu-map=contiguous",
        plugstack: &[],
        held: Some("gpu:2"),
        indices: &["0 n1 0 0 1", "1 n1 1 0 1", "2 n1 2 1 1"],
        uuids: &[
            "0 n1 0 GPU-fake-n1-2 1",
            "1 n1 1 GPU-fake-n1-2 1",
            "2 n1 2 GPU-fake-n1-3 1",
        ],
    },
    Case {
        srun: "-N1 -n4 -w n1 --gpus-per-node=4 --desi-gpu-map=roundrobin",
        plugstack: &["visible=rotate"],
        held: None,
        indices: &[
            "0 n1 0 0,1,2,3 1",
            "1 n1 1 1,2,3,0 1",
            "2 n1 2 2,3,0,1 1",
            "3 n1 3 3,0,1,2 1",
        ],
        uuids: &[
            "0 n1 0 GPU-fake-n1-0,GPU-fake-n1-1,GPU-fake-n1-2,GPU-fake-n1-3 1",
            "1 n1 1 GPU-fake-n1-1,GPU-fake-n1-2,GPU-fake-n1-3,GPU-fake-n1-0 1",
            "2 n1 2 GPU-fake-n1-2,GPU-fake-n1-3,GPU-fake-n1-0,GPU-fake-n1-1 1",
            "3 n1 3 GPU-fake-n1-3,GPU-fake-n1-0,GPU-fake-n1-1,GPU-fake-n1-2 1",
        ],
    },
    Case {
        srun: "-N1 -n2 -w n1 --gres=gpu:2 --desi-gpu-map=roundrobin",
        plugstack: &["visible=rotate"],
        held: Some("gpu:2"),
        indices: &["0 n1 0 0,1 1", "1 n1 1 1,0 1"],
        uuids: &[
            "0 n1 0 GPU-fake-n1-2,GPU-fake-n1-3 1",
            "1 n1 1 GPU-fake-n1-3,GPU-fake-n1-2 1",
        ],
    },
];

/// The main cluster's layout tables on whole grants: the same rows, with
/// UUIDs where Slurm writes them. (Its one case beside a held job is in
/// [`SHARED_AND_ROTATE`], written out for renumbered lists.)
#[test]
fn every_layout_maps_as_on_the_plain_cluster() {
    let whole = EVERY_LAYOUT
        .iter()
        .chain(PARTIAL_AND_ROTATE)
        .filter(|c| c.held.is_none());
    for case in whole {
        let _c = setup("required", case.plugstack);
        let want: Vec<String> = if slurm_writes_uuids() {
            as_uuids(case.rows)
        } else {
            case.rows.iter().map(|r| r.to_string()).collect()
        };
        let want: Vec<&str> = want.iter().map(String::as_str).collect();
        srun(case.srun).probe(probe::GPU).ok().rows_are(&want);
    }
}

#[test]
fn shared_nodes_and_rotate_map_slurms_renumbered_lists() {
    for case in SHARED_AND_ROTATE {
        let _c = setup("required", case.plugstack);
        let _held = case.held.map(|gres| hold("n1", gres));
        srun(case.srun).probe(probe::GPU).ok().rows_are(case.rows());
    }
}

/// The same cases through `desi-gpu-map exec`, with no plugin.
#[test]
fn exec_gives_the_plugins_rows() {
    for case in SHARED_AND_ROTATE {
        let _c = setup("required", &[]);
        cluster(&["plugin", "off"]);
        let _held = case.held.map(|gres| hold("n1", gres));
        let (words, method) = case
            .srun
            .rsplit_once(" --desi-gpu-map=")
            .expect("a case names its method last");
        let visible = if case.plugstack.is_empty() {
            "single"
        } else {
            "rotate"
        };
        // The fake NVML, which slurmd's plugin finds through its
        // LD_LIBRARY_PATH and a task does not.
        let nvml = fake_nvml();
        let exec = [&bin(), "exec", "--method", method, "--visible", visible];
        srun(words)
            .words(&exec)
            .words(&["--nvml", &nvml, "--"])
            .probe(probe::GPU)
            .ok()
            .rows_are(case.rows());
    }
}

/// Where each list comes from, as `verbose` says beside another job:
/// Slurm's renumbered list with its companion lists (`File=` lines);
/// under AutoDetect, which sets `CUDA_VISIBLE_DEVICES` alone, NVML's
/// list; under env_uuid, Slurm's UUIDs, once NVML confirms they are the
/// GPUs Slurm granted.
#[test]
fn verbose_names_where_each_list_came_from() {
    let _c = setup("required", &[]);
    let _held = hold("n1", "gpu:2");
    let source = match production_mode().as_str() {
        "autodetect" => "source=nvml",
        _ => "source=slurm",
    };
    srun("-N1 -n2 -w n1 --gres=gpu:2 --desi-gpu-map=verbose,contiguous true")
        .ok()
        .says(source);
}

/// Each task opens GPUs 0..3 of n1 and prints, per device, `X` (no
/// driver: the cgroup let it through), `P` (EPERM: the cgroup refused) or
/// `?`, after its row.
const FENCE: &str = r#"d=""; for k in 0 1 2 3; do
  e=$( (exec 3<"$GPU_DIR/nvidia$k") 2>&1 )
  case "$e" in *"No such device or address"*) d="${d}X" ;; *"Operation not permitted"*) d="${d}P" ;; *) d="${d}?" ;; esac
done
echo "T $SLURM_PROCID $(hostname) $SLURM_LOCALID ${CUDA_VISIBLE_DEVICES-unset} ${DESI_GPU_MAPPED-unset} $d""#;

/// On a node another job shares, each task opens its own GPU (which has no
/// driver behind it) and is refused the other job's GPUs.
#[test]
fn a_shared_nodes_tasks_open_their_own_gpus_and_never_the_other_jobs() {
    let _c = setup("required", &[]);
    let _held = hold("n1", "gpu:2");
    let [first, second] = beside_held();
    srun("-N1 -n2 -w n1 --gres=gpu:2 --desi-gpu-map=contiguous")
        .env("GPU_DIR", &format!("{}/gpu/n1", state_dir()))
        .probe(FENCE)
        .ok()
        .rows_are(&[
            &format!("0 n1 0 {first} 1 PPXX"),
            &format!("1 n1 1 {second} 1 PPXX"),
        ]);
}

/// A step nested in a mapped task (`srun --overlap`) maps its own tasks
/// within the outer step's grant.
#[test]
fn a_nested_step_maps_within_its_own_grant() {
    let _c = setup("required", &[]);
    let _held = hold("n1", "gpu:2");
    let inner = format!(
        "srun --overlap -n2 --gres=gpu:2 --desi-gpu-map=roundrobin bash -c '{}'",
        probe::GPU
    );
    let [first, second] = beside_held();
    salloc("-N1 -n2 -w n1 --gres=gpu:2")
        .words(&[
            "srun",
            "-n1",
            "--desi-gpu-map=contiguous",
            "bash",
            "-c",
            &inner,
        ])
        .ok()
        .rows_are(&[&format!("0 n1 0 {first} 1"), &format!("1 n1 1 {second} 1")]);
}

/// `show` in each task names the GPU as Slurm does.
#[test]
fn show_names_each_tasks_gpu_as_slurm_does() {
    let _c = setup("required", &[]);
    let _held = hold("n1", "gpu:2");
    let ran = srun("-N1 -n2 -w n1 --gres=gpu:2 --desi-gpu-map=contiguous")
        .words(&[&bin(), "show"])
        .ok();
    let mut gpus: Vec<String> = ran
        .stdout()
        .lines()
        .filter_map(|l| l.strip_prefix("cuda_visible_devices: "))
        .map(String::from)
        .collect();
    gpus.sort();
    let want = beside_held();
    assert_eq!(gpus, want, "{ran}");
}

/// `closest` locates the step's GPUs, Slurm's renumbered indices or its
/// UUIDs, through NVML inside the device cgroup, where Slurm found the GPUs
/// by AutoDetect (the fake NVML then puts every GPU near every CPU); the
/// tasks, as near one GPU as the other, are placed contiguously.
#[test]
fn closest_locates_slurms_gpus_through_nvml_in_the_device_cgroup() {
    let _c = setup("required", &[]);
    let _held = hold("n1", "gpu:2");
    let [first, second] = beside_held();
    let ran = srun("-N1 -n2 -w n1 --gres=gpu:2 --desi-gpu-map=verbose,closest")
        .probe(probe::GPU)
        .ok()
        .rows_are(&[&format!("0 n1 0 {first} 1"), &format!("1 n1 1 {second} 1")]);
    if production_mode() != "cgroup" {
        ran.never_says("closest:").says("near=");
    }
}

// ------------------------------------------------------------ MPS

/// The plugin with Debian's real control daemon (cluster.sh copied it).
fn with_mps() -> std::sync::MutexGuard<'static, ()> {
    let control = format!("{}/mps/bin/nvidia-cuda-mps-control", state_dir());
    setup("required", &[&format!("mps_control={control}")])
}

/// Local task 0 prints `D CGROUP` for each control daemon here, and `S
/// CGROUP` for itself: their device cgroups.
const CGROUPS: &str = r#"if [ "$SLURM_LOCALID" = 0 ]; then
  for p in /proc/[0-9]*; do
    case "$(readlink $p/exe 2>/dev/null)" in */nvidia-cuda-mps-control) ;; *) continue ;; esac
    tr '\0' '\n' <$p/cmdline | grep -qx -- -f || continue
    echo "D $(sed -n 's/^[0-9]*:devices://p' $p/cgroup)"
  done
  echo "S $(sed -n 's/^[0-9]*:devices://p' /proc/self/cgroup)"
fi"#;

/// The daemon that `user_init` starts is in the step's device cgroup,
/// the tasks' parent: it reaches the step's GPUs and no other.
#[test]
fn the_mps_daemon_is_inside_the_steps_device_cgroup() {
    let _c = with_mps();
    let ran = srun("-N1 -n2 -w n1 --gpus-per-node=2 --desi-gpu-map=contiguous,mps")
        .user(USERS[0].0)
        .probe(CGROUPS)
        .ok();
    let task = ran.lines("S ");
    let step = task
        .first()
        .and_then(|t| t.strip_prefix("S "))
        .and_then(|t| t.rsplit_once("/task_"))
        .map(|(step, _)| step.to_string())
        .unwrap_or_else(|| panic!("no task cgroup: {ran}"));
    assert!(step.contains("/job_") && step.contains("/step_"), "{ran}");
    assert_eq!(ran.lines("D "), [format!("D {step}")], "{ran}");
}

/// Beside another job's GPUs, the daemon gets the step's GPUs by UUID:
/// from Slurm's renumbered indices through NVML inside the device cgroup,
/// or, under env_uuid, Slurm's own UUIDs, with no second NVML load.
#[test]
fn the_mps_daemon_gets_the_steps_gpus_by_uuid_on_a_shared_node() {
    let _c = with_mps();
    let _held = hold("n1", "gpu:2");
    cluster(&["nvml", "clear-log"]);
    let control = format!("{}/mps/bin/nvidia-cuda-mps-control", state_dir());
    let ran = srun("-N1 -n2 -w n1 --gres=gpu:2 --desi-gpu-map=contiguous,mps")
        .user(USERS[0].0)
        .probe(&probe::mps(&control))
        .ok();
    assert_eq!(
        ran.lines("D "),
        ["D n1 3901,3901,3901,3901 CUDA_VISIBLE_DEVICES=GPU-fake-n1-2,GPU-fake-n1-3"],
        "{ran}"
    );
    let tasks: Vec<String> = ran
        .rows()
        .lines()
        .map(|r| r.split(' ').take(6).collect::<Vec<_>>().join(" "))
        .collect();
    assert_eq!(
        tasks,
        [
            "0 n1 0 GPU-fake-n1-2 1 unset",
            "1 n1 1 GPU-fake-n1-3 1 unset"
        ],
        "{ran}"
    );
    // One NVML load for the step on n1: the plan's (Slurm's UUIDs
    // confirmed, or NVML's list), or MPS's for Slurm's indices; never two.
    let inits = cluster(&["nvml", "log"]);
    let loads = inits.lines().filter(|l| l.starts_with("init n1 ")).count();
    assert_eq!(loads, 1, "NVML loads on n1:\n{inits}\n{ran}");
}
