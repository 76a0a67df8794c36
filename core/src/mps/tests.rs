//! Compiled only under #[cfg(test)] (see mps/mod.rs).
//! MPS as a planned step gets it, through the step's own planning.

use super::*;
use crate::env;
use crate::error::NvmlFailure;
use crate::files::Stat;
use crate::method::Method;
use crate::settings::config::Config;
use crate::settings::option::{Choice, OptionRequest};
use crate::settings::site::parse_args;
use crate::step::testing::*;
use crate::step::{plan_step, task_outcome, StepFacts, StepPlan};
use std::path::{Path, PathBuf};

/// NVML's place lines for 4 GPUs, minor i at bus i+1.
fn places() -> Result<Vec<String>, crate::Error> {
    Ok((0..4)
        .map(|i| format!("GPU-u{i} 00000000:0{}:00.0 {i} -", i + 1))
        .collect())
}

const USER: MpsFacts = MpsFacts {
    uid: 1000,
    gid: 100,
    local_tasks: 6,
    node_id: 3,
    token: 0xabc,
    kept: false,
    dir_step: None,
};

/// Plans step 0 of job 7 with `--desi-gpu-map=contiguous,mps` (or
/// `asked: false`, contiguous alone) under plugstack `args`.
fn plan_mps_with(
    args: &[&str],
    asked: bool,
    pairs: &[(&str, &str)],
    nvml: Result<Vec<String>, crate::Error>,
    facts: Option<MpsFacts>,
) -> (StepPlan, usize) {
    plan_mps_files(args, asked, pairs, nvml, facts, |_| {})
}

/// [`plan_mps_with`] on a node whose files `change` changed.
fn plan_mps_files(
    args: &[&str],
    asked: bool,
    pairs: &[(&str, &str)],
    nvml: Result<Vec<String>, crate::Error>,
    facts: Option<MpsFacts>,
    change: impl FnOnce(&mut FakeFiles),
) -> (StepPlan, usize) {
    // The fake node has this control binary, and its server beside it.
    let mut all = vec!["mps_control=/opt/nv/nvidia-cuda-mps-control"];
    all.extend_from_slice(args);
    let config = parse_args(&all).unwrap();
    let request = OptionRequest::Use {
        choice: Some(Choice::Map(Method::Contiguous)),
        verbose: false,
        mps: asked,
    };
    let mut env = vec![("SLURM_JOB_ID", "7")];
    env.extend_from_slice(pairs);
    let mut node = FakeNode::new(&env, nvml);
    change(&mut node.files);
    let facts = StepFacts {
        step: crate::step::StepIdentity::Slurm(0),
        config: &config,
        request: Some(request),
        method_variable: None,
        vars: &node.vars(),
        mps: facts,
    };
    (plan_step(&facts, &node), node.calls.get())
}

/// The four GPUs R gives a Flux job, as the Flux plugin hands them over
/// for MPS: by UUID, where NVML names them.
const FLUX_UUIDS: &str = "GPU-u0,GPU-u1,GPU-u2,GPU-u3";

/// Plans Flux job 42 on this node (its GPUs from R, `cuda`, as the Flux
/// plugin hands them over) with `-o desi-gpu-map=contiguous,mps`, and
/// `pairs` in the job's environment, on a node whose files `change`
/// changed.
fn plan_flux_files(
    cuda: &str,
    pairs: &[(&str, &str)],
    nvml: Result<Vec<String>, crate::Error>,
    change: impl FnOnce(&mut FakeFiles),
) -> StepPlan {
    let config = parse_args(&["mps_control=/opt/nv/nvidia-cuda-mps-control"]).unwrap();
    let request = parse_option_mps();
    let mut env = vec![("CUDA_VISIBLE_DEVICES", cuda)];
    env.extend_from_slice(pairs);
    let mut node = FakeNode::new(&env, nvml);
    change(&mut node.files);
    let facts = StepFacts {
        step: crate::step::StepIdentity::Launch {
            tag: Some("flux-42".to_string()),
            given: Some(crate::step::Given::Granted(&crate::flux::GRANT)),
        },
        config: &config,
        request: Some(request),
        method_variable: None,
        vars: &node.vars(),
        mps: Some(USER),
    };
    plan_step(&facts, &node)
}

fn mps_of(plan: &StepPlan) -> Mps {
    mapped(plan.clone()).mps
}

fn without(plan: &StepPlan) -> String {
    match mps_of(plan) {
        Mps::Without { why, loud: true } => why.to_string(),
        other => panic!("expected no MPS, got {other:?}"),
    }
}

#[test]
fn a_daemon_for_slurms_gpus_named_by_uuid_with_even_shares() {
    let (plan, calls) = plan_mps_with(&["mps_share=even"], true, &SLURM_4, places(), Some(USER));
    assert_eq!(calls, 1, "NVML asked once, for the UUIDs");
    let Mps::Start(d) = mps_of(&plan) else {
        panic!("{plan:?}")
    };
    assert_eq!(d.gpus, ["GPU-u0", "GPU-u1", "GPU-u2", "GPU-u3"]);
    // 6 tasks, contiguous on 4 GPUs: 2 2 1 1.
    assert_eq!(d.shares, [Some(50), Some(50), Some(100), Some(100)]);
    let dir = PathBuf::from("/tmp/dgm-mps.1000.7.0.3.00000abc");
    assert_eq!(
        (&d.dir(), &d.pipe(), &d.log()),
        (&dir, &dir.join("pipe"), &dir.join("log"))
    );
    assert_eq!((d.uid, d.gid, d.keep_log), (1000, 100, false));
    assert!(d
        .env()
        .contains(&(env::CUDA, "GPU-u0,GPU-u1,GPU-u2,GPU-u3".to_string())));
    // Once it answers, each task is its client.
    let mut map = mapped(plan);
    map.mps_started(*d);
    let plan = StepPlan::Map(map);
    let out = task_outcome(&plan, &task(4, 6, Some("0,1,2,3")));
    assert_eq!(get(&out, env::CUDA), Some("GPU-u2"));
    assert_eq!(
        get(&out, env::MPS_PIPE),
        Some("/tmp/dgm-mps.1000.7.0.3.00000abc/pipe")
    );
    assert_eq!(
        get(&out, env::MPS_LOG),
        Some("/tmp/dgm-mps.1000.7.0.3.00000abc/log")
    );
    assert_eq!(get(&out, env::MPS_SHARE), Some("100"));
    assert_eq!(get(&out, env::MPS), Some("1"));
    assert_eq!(get(&out, "DESI_GPU_MAPPED"), Some("1"));
    // A failed start: mapped as before, one line from local task 0.
    let (plan, _) = plan_mps_with(&[], true, &SLURM_4, places(), Some(USER));
    let mut map = mapped(plan);
    map.mps_failed("the daemon did not answer within 10 s".to_string());
    let plan = StepPlan::Map(map);
    let first = task_outcome(&plan, &task(0, 6, Some("0,1,2,3")));
    assert_eq!(get(&first, env::CUDA), Some("0"));
    assert_eq!(get(&first, env::MPS_PIPE), None);
    assert_eq!(
        first.say,
        ["desi-gpu-map: node n1: the daemon did not answer within 10 s; running without MPS"]
    );
    assert!(task_outcome(&plan, &task(1, 6, Some("0,1,2,3")))
        .say
        .is_empty());
}

#[test]
fn renumbered_indices_name_the_step_gpus_by_their_absolute_minors() {
    let pairs = [
        ("CUDA_VISIBLE_DEVICES", "0,1"),
        ("GPU_DEVICE_ORDINAL", "0,1"),
        ("SLURM_STEP_GPUS", "2,3"),
        ("SLURM_GPUS_ON_NODE", "2"),
    ];
    let (plan, _) = plan_mps_with(&[], true, &pairs, places(), Some(USER));
    let Mps::Start(d) = mps_of(&plan) else {
        panic!("{plan:?}")
    };
    assert_eq!(d.gpus, ["GPU-u2", "GPU-u3"]);
    let mut map = mapped(plan);
    map.mps_started(*d);
    let out = task_outcome(&StepPlan::Map(map), &task(1, 2, Some("0,1")));
    assert_eq!(get(&out, env::CUDA), Some("GPU-u3"));
}

#[test]
fn each_reason_to_run_without_mps_is_one_line() {
    let root = MpsFacts { uid: 0, ..USER };
    let crowd = MpsFacts {
        local_tasks: 4 * MAX_CLIENTS + 1,
        ..USER
    };
    let failed = Err(crate::Error::Discovery {
        kind: NvmlFailure::Init,
        why: "NVML: cannot initialise libnvidia-ml.so.1: Driver Not Loaded".to_string(),
    });
    for (args, facts, nvml, want) in [
        (
            &[][..],
            Some(root),
            places(),
            "the job runs as root, and the MPS daemon never does",
        ),
        (
            &[],
            Some(crowd),
            places(),
            "49 tasks would share one GPU, and MPS serves at most 48",
        ),
        (
            &[],
            None,
            places(),
            "only the plugin, in slurmstepd, starts MPS daemons",
        ),
        (
            &["mps=off"],
            Some(USER),
            places(),
            "this site turned mps off (mps=off)",
        ),
        (
            &[],
            Some(USER),
            failed,
            "cannot name the step's GPUs by UUID (NVML: cannot initialise",
        ),
    ] {
        let (plan, _) = plan_mps_with(args, true, &SLURM_4, nvml, facts);
        let why = without(&plan);
        assert!(why.starts_with(want), "{why}");
    }
    // Not found in the standard places (the fake node has no files).
    let config = Config::default();
    let request = parse_option_mps();
    let node = FakeNode::new(&[&SLURM_4[..], &[("SLURM_JOB_ID", "7")]].concat(), places());
    let facts = StepFacts {
        step: crate::step::StepIdentity::Slurm(0),
        config: &config,
        request: Some(request),
        method_variable: None,
        vars: &node.vars(),
        mps: Some(USER),
    };
    let why = without(&plan_step(&facts, &node));
    assert!(
        why.starts_with("nvidia-cuda-mps-control is not in /usr/bin, /usr/local/bin")
            && why.ends_with("the site's mps_control= names it"),
        "{why}"
    );
}

fn parse_option_mps() -> OptionRequest {
    crate::settings::option::parse_option("contiguous,mps").unwrap()
}

#[test]
fn another_mps_serves_where_slurm_or_the_step_names_one() {
    for (var, value, want) in [
        (
            env::MPS_SHARE,
            "25",
            "Slurm's gres/mps serves this step (CUDA_MPS_ACTIVE_THREAD_PERCENTAGE=\"25\")",
        ),
        (
            env::MPS_PIPE,
            "/site/mps",
            "the MPS daemon at CUDA_MPS_PIPE_DIRECTORY=\"/site/mps\" serves this step",
        ),
    ] {
        let pairs = [&SLURM_4[..], &[(var, value)]].concat();
        let (plan, calls) = plan_mps_with(&[], true, &pairs, places(), Some(USER));
        let asked = usize::from(var == env::MPS_PIPE);
        assert_eq!(calls, asked, "NVML only for a pipe directory's daemon");
        let Mps::Theirs {
            why, loud: true, ..
        } = mps_of(&plan)
        else {
            panic!("{plan:?}")
        };
        assert!(
            why.starts_with(want) && why.ends_with("; no MPS daemon started"),
            "{why}"
        );
        let out = task_outcome(&plan, &task(0, 6, Some("0,1,2,3")));
        assert_eq!(out.say.len(), 1);
        assert_eq!(get(&out, env::MPS_PIPE), None, "the step's own values stay");
        // A daemon at a pipe directory: the tasks name their GPU by UUID.
        let gpu = if var == env::MPS_PIPE { "GPU-u0" } else { "0" };
        assert_eq!(get(&out, env::CUDA), Some(gpu));
    }
    // The user's log directory stays too.
    let pairs = [&SLURM_4[..], &[(env::MPS_LOG, "/home/u/log")]].concat();
    let (plan, _) = plan_mps_with(&[], true, &pairs, places(), Some(USER));
    let Mps::Start(d) = mps_of(&plan) else {
        panic!("{plan:?}")
    };
    assert!(d.keep_log);
}

#[test]
fn auto_serves_only_where_tasks_outnumber_gpus() {
    let four = MpsFacts {
        local_tasks: 4,
        ..USER
    };
    let (plan, calls) = plan_mps_with(&["mps=auto"], false, &SLURM_4, places(), Some(four));
    assert_eq!((mps_of(&plan), calls), (Mps::Off, 0));
    let (plan, _) = plan_mps_with(&["mps=auto"], false, &SLURM_4, places(), Some(USER));
    assert!(matches!(mps_of(&plan), Mps::Start(_)), "{plan:?}");
    let (plan, _) = plan_mps_with(&[], false, &SLURM_4, places(), Some(USER));
    assert_eq!(mps_of(&plan), Mps::Off, "allow: only on request");
    // Under auto alone a failure is said only with verbose.
    let root = MpsFacts { uid: 0, ..USER };
    let (plan, _) = plan_mps_with(&["mps=auto"], false, &SLURM_4, places(), Some(root));
    let quiet = mps_of(&plan);
    assert!(
        matches!(quiet, Mps::Without { loud: false, .. }),
        "{quiet:?}"
    );
    assert_eq!(mps_line(&quiet, false), None);
    assert!(mps_line(&quiet, true).is_some());
    // auto's own notes are quiet unless verbose; failures are not.
    let theirs = Mps::Theirs {
        why: "x".to_string(),
        loud: false,
        gpus: None,
        ours: false,
    };
    assert_eq!(mps_line(&theirs, false), None);
    assert_eq!(mps_line(&theirs, true).as_deref(), Some("x"));
}

#[test]
fn a_nested_steps_inherited_values_are_its_parents() {
    // The parent's share and pipe, inherited: not gres/mps; the
    // parent's daemon where it runs here (the fake node has no files,
    // so it does not), else a daemon of the step's own.
    let inherited = [
        &SLURM_4[..],
        &[
            (env::MPS, "1"),
            (env::MPS_SHARE, "50"),
            (env::MPS_PIPE, "/tmp/dgm-mps.1000.7.0.3.00000abc/pipe"),
            (env::MPS_LOG, "/tmp/dgm-mps.1000.7.0.3.00000abc/log"),
        ],
    ]
    .concat();
    let (plan, _) = plan_mps_with(&[], true, &inherited, places(), Some(USER));
    let Mps::Start(d) = mps_of(&plan) else {
        panic!("{plan:?}")
    };
    assert!(!d.keep_log, "the parent's log directory is not the user's");
    assert_eq!(even_share(8), 12);
    assert_eq!(even_share(0), 100);
}

#[test]
fn directories_go_under_the_site_base_else_tmpdir_else_tmp() {
    let tmpdir = [&SLURM_4[..], &[("TMPDIR", "/local/job7")]].concat();
    let (plan, _) = plan_mps_with(&[], true, &tmpdir, places(), Some(USER));
    let Mps::Start(d) = mps_of(&plan) else {
        panic!()
    };
    assert!(d.dir().starts_with("/local/job7"), "{:?}", d.dir());
    let (plan, _) = plan_mps_with(&["mps_dir=/var/mps"], true, &tmpdir, places(), Some(USER));
    let Mps::Start(d) = mps_of(&plan) else {
        panic!()
    };
    assert_eq!(
        d.dir(),
        PathBuf::from("/var/mps/dgm-mps.1000.7.0.3.00000abc")
    );
    assert_eq!(dir_name(5, "1/../2.0", 1), "dgm-mps.5.1..2.0.1");
    let long = format!("/{}", "d".repeat(80));
    let deep = [&SLURM_4[..], &[("TMPDIR", long.as_str())]].concat();
    let (plan, _) = plan_mps_with(&[], true, &deep, places(), Some(USER));
    assert!(without(&plan).contains("longer than the MPS control daemon takes"));
    assert_eq!(dir_name(5, "./x", 0), "dgm-mps.5.x.0");
    // The daemon binds pipe/control and pipe/control_privileged, and
    // NVIDIA's starts only where the longer one is at most 106 bytes (one
    // short of a socket's 107): a base where it is 106 is taken; one byte
    // more is refused, naming the path, its length and the limit. Exec's keeper marks its directory's name, so
    // the same base is too long for a kept daemon.
    let (plan, _) = plan_mps_with(&["mps_dir=/var/mps"], true, &SLURM_4, places(), Some(USER));
    let Mps::Start(d) = mps_of(&plan) else {
        panic!("{plan:?}")
    };
    let below = d.pipe().as_os_str().len() - "/var/mps".len();
    let longest = "/control_privileged".len();
    let fits = format!("/{}", "b".repeat(106 - longest - below - 1));
    assert_eq!(below + fits.len() + longest, 106);
    let with = |base: &str, facts: MpsFacts| {
        plan_mps_with(
            &[&format!("mps_dir={base}")],
            true,
            &SLURM_4,
            places(),
            Some(facts),
        )
        .0
    };
    // The base is no folder of the fake node's: past the length check, it
    // is refused for that, not for its length.
    let why = without(&with(&fits, USER));
    assert!(!why.contains("longer than the MPS control daemon"), "{why}");
    let why = without(&with(&format!("{fits}b"), USER));
    assert!(
        why.contains(
            "control_privileged is 107 bytes, longer than the MPS control daemon takes \
             (at most 106); a shorter base is needed"
        ),
        "{why}"
    );
    let kept = MpsFacts { kept: true, ..USER };
    let why = without(&with(&fits, kept));
    assert!(why.contains(".k."), "{why}");
    assert!(
        why.contains("longer than the MPS control daemon takes"),
        "{why}"
    );
}

#[test]
fn closest_steps_are_counted_in_blocks() {
    let (plan, _) = plan_mps_with(&[], true, &SLURM_4, places(), Some(USER));
    let map = mapped(plan);
    let count = |tasks| tasks_per_gpu(map.method_used(), map.gpus.len(), tasks);
    assert_eq!(count(6), [2, 2, 1, 1]);
    assert_eq!(count(0), [0, 0, 0, 0]);
}

#[test]
fn the_daemons_path_finds_its_server_beside_it_in_sbin_or_the_systems() {
    assert_eq!(
        server_path(
            Path::new("/opt/nv/bin/nvidia-cuda-mps-control"),
            Path::new("/opt/nv/bin/nvidia-cuda-mps-control")
        ),
        [
            "/opt/nv/bin",
            "/opt/nv/sbin",
            "/usr/sbin",
            "/sbin",
            "/usr/bin",
            "/bin"
        ]
        .map(PathBuf::from)
    );
    assert_eq!(
        server_path(
            Path::new("/usr/bin/nvidia-cuda-mps-control"),
            Path::new("/usr/bin/nvidia-cuda-mps-control")
        ),
        ["/usr/bin", "/usr/sbin", "/sbin", "/bin"].map(PathBuf::from)
    );
    let (plan, _) = plan_mps_with(&[], true, &SLURM_4, places(), Some(USER));
    let Mps::Start(d) = mps_of(&plan) else {
        panic!("{plan:?}")
    };
    assert!(d.env().contains(&(
        "PATH",
        "/opt/nv:/opt/sbin:/usr/sbin:/sbin:/usr/bin:/bin".to_string()
    )));
    // No server on that path: every client would fail, so no daemon.
    let (plan, _) = plan_mps_files(&[], true, &SLURM_4, places(), Some(USER), |f| {
        f.exists.retain(|p| !p.ends_with(env::MPS_SERVER))
    });
    let why = without(&plan);
    assert!(
        why.starts_with(
            "nvidia-cuda-mps-server, which the control daemon starts for its clients, \
             is not in /opt/nv, /opt/sbin, /usr/sbin"
        ),
        "{why}"
    );
}

#[test]
fn a_linked_control_daemon_finds_its_server_beside_the_file_it_names() {
    let link = "/usr/local/bin/nvidia-cuda-mps-control";
    let real = "/opt/nvidia/bin/nvidia-cuda-mps-control";
    assert_eq!(
        server_path(Path::new(link), Path::new(real)),
        [
            "/opt/nvidia/bin",
            "/opt/nvidia/sbin",
            "/usr/local/bin",
            "/usr/local/sbin",
            "/usr/sbin",
            "/sbin",
            "/usr/bin",
            "/bin"
        ]
        .map(PathBuf::from)
    );
    // The site's mps_control= of the fake node, a link here.
    let site = "/opt/nv/nvidia-cuda-mps-control";
    let (plan, _) = plan_mps_files(&[], true, &SLURM_4, places(), Some(USER), |f| {
        f.exists = ["control", "server"]
            .map(|b| PathBuf::from(format!("/opt/nvidia/bin/nvidia-cuda-mps-{b}")))
            .into();
        f.links = [(PathBuf::from(site), PathBuf::from(real))].into();
    });
    let Mps::Start(d) = mps_of(&plan) else {
        panic!("{plan:?}")
    };
    assert_eq!(d.control, PathBuf::from(site));
    assert_eq!(d.path.first(), Some(&PathBuf::from("/opt/nvidia/bin")));
}

#[test]
fn a_name_taken_gives_another_random_name_in_the_same_base() {
    let (plan, _) = plan_mps_with(&[], true, &SLURM_4, places(), Some(USER));
    let Mps::Start(d) = mps_of(&plan) else {
        panic!("{plan:?}")
    };
    let other = d.with_token(0xfeed);
    let dir = PathBuf::from("/tmp/dgm-mps.1000.7.0.3.0000feed");
    assert_eq!((&other.dir(), &other.pipe()), (&dir, &dir.join("pipe")));
    assert_eq!(other.host.as_deref(), Some("n1"));
}

#[test]
fn a_flux_jobs_daemon_is_named_the_jobs_in_what_is_said() {
    // Served: the job's own daemon, its directory named by the job's tag.
    // Where NVML could not name the GPUs for the plugin, the core asks it
    // again, and says why not.
    let plan = plan_flux_files(FLUX_UUIDS, &[], places(), |_| {});
    let Mps::Start(d) = mps_of(&plan) else {
        panic!("a daemon of the job's own: {plan:?}")
    };
    assert_eq!(d.gpus, ["GPU-u0", "GPU-u1", "GPU-u2", "GPU-u3"]);
    assert!(
        d.dir().display().to_string().contains(".flux-42."),
        "{:?}",
        d.dir()
    );
    let failed = Err(crate::Error::Discovery {
        kind: NvmlFailure::Init,
        why: "NVML: cannot initialise".to_string(),
    });
    let why = without(&plan_flux_files("0,1,2,3", &[], failed, |_| {}));
    assert!(
        why.starts_with("cannot name the job's GPUs by UUID (NVML: cannot initialise"),
        "{why}"
    );
    let open = Stat {
        uid: 0,
        mode: 0o777,
        is_dir: true,
    };
    let why = without(&plan_flux_files(FLUX_UUIDS, &[], places(), |f| {
        f.stats.insert(PathBuf::from("/tmp"), open);
    }));
    assert!(
        why.contains("so another user could replace the job's directory;"),
        "{why}"
    );
    for (var, value, want) in [
        (
            env::MPS_SHARE,
            "25",
            "CUDA_MPS_ACTIVE_THREAD_PERCENTAGE=\"25\" came with the job: an MPS daemon \
             serves it already; no MPS daemon started",
        ),
        (
            env::MPS_PIPE,
            "/site/mps",
            "the MPS daemon at CUDA_MPS_PIPE_DIRECTORY=\"/site/mps\" serves this job; no MPS \
             daemon started",
        ),
    ] {
        let plan = plan_flux_files(FLUX_UUIDS, &[(var, value)], places(), |_| {});
        let Mps::Theirs { why, .. } = mps_of(&plan) else {
            panic!("{var}: another's daemon")
        };
        assert_eq!(why, want);
        assert!(!why.contains("Slurm") && !why.contains("step"), "{why}");
    }
}

#[test]
fn a_base_others_could_empty_is_refused() {
    let stat = |uid, mode, is_dir| Stat { uid, mode, is_dir };
    for (base, why) in [
        (
            stat(0, 0o777, true),
            "is writable by others without the sticky bit (mode 0777)",
        ),
        (
            stat(0, 0o775, true),
            "is writable by others without the sticky bit (mode 0775)",
        ),
        (
            stat(2000, 0o1777, true),
            "belongs to uid 2000, neither root nor the job's user",
        ),
        (stat(0, 0o1777, false), "is not a directory"),
    ] {
        let (plan, _) = plan_mps_files(&[], true, &SLURM_4, places(), Some(USER), |f| {
            f.stats.insert(PathBuf::from("/tmp"), base);
        });
        let got = without(&plan);
        assert!(
            got.starts_with(&format!("the MPS base /tmp {why}")),
            "{got}"
        );
    }
    let (plan, _) = plan_mps_files(&[], true, &SLURM_4, places(), Some(USER), |f| {
        f.stats.clear()
    });
    assert!(without(&plan).starts_with("cannot use the MPS base /tmp: "));
    // The user's own, or root's sticky one, serve.
    for ok in [
        stat(1000, 0o700, true),
        stat(0, 0o1777, true),
        stat(0, 0o755, true),
    ] {
        let (plan, _) = plan_mps_files(&[], true, &SLURM_4, places(), Some(USER), |f| {
            f.stats.insert(PathBuf::from("/tmp"), ok);
        });
        assert!(matches!(mps_of(&plan), Mps::Start(_)), "{ok:?}");
    }
}

/// What task `local` of a planned step gets: its GPU, and what it loses.
fn gpu_and_unset(plan: &StepPlan, local: usize) -> (String, Vec<String>) {
    let out = task_outcome(plan, &task(local, 2, Some("0,1,2,3")));
    (get(&out, env::CUDA).unwrap_or("-").to_string(), out.unset)
}

#[test]
fn a_task_that_keeps_a_daemons_pipe_gets_its_gpu_by_uuid() {
    // Inside a parent's MPS task on this host, without asking for mps.
    let parent = [
        &SLURM_4[..],
        &[
            (env::MPS, "1"),
            (env::MPS_HOST, "n1"),
            (env::MPS_PIPE, "/tmp/d/pipe"),
            (env::MPS_LOG, "/tmp/d/log"),
        ],
    ]
    .concat();
    let socket = |f: &mut FakeFiles| f.exists.push(PathBuf::from("/tmp/d/pipe/control"));
    let (plan, _) = plan_mps_files(&[], false, &parent, places(), Some(USER), socket);
    assert!(matches!(mps_of(&plan), Mps::Theirs { ours: true, .. }));
    // Two tasks on four GPUs: task 1 holds the second half.
    assert_eq!(
        gpu_and_unset(&plan, 1),
        ("GPU-u2,GPU-u3".to_string(), vec![])
    );
    // A site's (or the user's) daemon: UUIDs too, and no flag of ours.
    let site = [&SLURM_4[..], &[(env::MPS_PIPE, "/site/mps")]].concat();
    let (plan, _) = plan_mps_with(&[], false, &site, places(), Some(USER));
    assert!(matches!(
        mps_of(&plan),
        Mps::Theirs {
            ours: false,
            loud: false,
            ..
        }
    ));
    assert_eq!(
        gpu_and_unset(&plan, 0),
        ("GPU-u0,GPU-u1".to_string(), vec![])
    );
    // A stale flag alone goes.
    let stale = [&SLURM_4[..], &[(env::MPS, "1")]].concat();
    let (plan, _) = plan_mps_with(&[], false, &stale, places(), Some(USER));
    assert_eq!(mps_of(&plan), Mps::Off);
    assert_eq!(
        gpu_and_unset(&plan, 0),
        ("0,1".to_string(), vec![env::MPS.to_string()])
    );
}

#[test]
fn another_hosts_daemon_is_never_this_steps() {
    let elsewhere = [
        &SLURM_4[..],
        &[
            (env::MPS, "1"),
            (env::MPS_HOST, "n2"),
            (env::MPS_PIPE, "/tmp/d/pipe"),
            (env::MPS_SHARE, "50"),
        ],
    ]
    .concat();
    // The socket is visible (a shared /tmp), but the host is another.
    let socket = |f: &mut FakeFiles| f.exists.push(PathBuf::from("/tmp/d/pipe/control"));
    let (plan, _) = plan_mps_files(&[], true, &elsewhere, places(), Some(USER), socket);
    let Mps::Start(d) = mps_of(&plan) else {
        panic!("{plan:?}")
    };
    // Its own daemon; the parent's share is not given.
    let mut map = mapped(plan);
    map.mps_started(*d);
    let plan = StepPlan::Map(map);
    assert_eq!(
        gpu_and_unset(&plan, 0),
        (
            "GPU-u0,GPU-u1".to_string(),
            vec![env::MPS_SHARE.to_string()]
        )
    );
    // Not asking: the other host's variables all go.
    let (plan, _) = plan_mps_files(&[], false, &elsewhere, places(), Some(USER), socket);
    assert_eq!(mps_of(&plan), Mps::Off);
    let (gpu, mut unset) = gpu_and_unset(&plan, 0);
    unset.sort();
    assert_eq!(gpu, "0,1");
    assert_eq!(
        unset,
        [env::MPS_SHARE, env::MPS_PIPE, env::MPS, env::MPS_HOST].map(String::from)
    );
}

#[test]
fn a_container_that_cannot_see_the_pipe_runs_its_tasks_without_mps_and_says_so() {
    use crate::step::Container;
    let (plan, _) = plan_mps_with(&[], true, &SLURM_4, places(), Some(USER));
    let Mps::Start(d) = mps_of(&plan) else {
        panic!("{plan:?}")
    };
    let mut map = mapped(plan);
    map.mps_started(*d);
    let plan = StepPlan::Map(map);
    let mut t = task(0, 6, Some("0,1,2,3"));
    t.container = Container::Entered { pipe_seen: false };
    let out = task_outcome(&plan, &t);
    assert_eq!(get(&out, env::MPS_PIPE), None);
    assert_eq!(get(&out, env::CUDA), Some("GPU-u0"), "still bound, by UUID");
    assert_eq!(get(&out, env::DEFAULT_FLAG), Some("1"));
    let dir = "/tmp/dgm-mps.1000.7.0.3.00000abc";
    assert_eq!(
        out.say,
        [format!(
            "desi-gpu-map: node n1: the container does not see the MPS pipe directory \
             {dir}/pipe; mount /tmp into it (pyxis: --container-mounts=/tmp; enroot: a line \
             in a mounts.d file); running without MPS"
        )]
    );
    t.container = Container::Entered { pipe_seen: true };
    let out = task_outcome(&plan, &t);
    assert_eq!(get(&out, env::MPS_PIPE), Some(&*format!("{dir}/pipe")));
}

#[test]
fn the_protocol_starts_the_daemon_the_plan_names_or_the_step_runs_without_it() {
    use crate::step::{start_daemon, FrontEnd};
    /// Starts every daemon it is asked for, and says for which task.
    struct Starts(Option<Option<usize>>);
    impl FrontEnd for Starts {
        type NoDaemon = std::convert::Infallible;
        fn start_daemon(
            &mut self,
            daemon: &Daemon,
            task: Option<usize>,
        ) -> Result<Daemon, Self::NoDaemon> {
            self.0 = Some(task);
            Ok(daemon.clone())
        }
        fn own_cpus(&self) -> Option<crate::cpuset::CpuSet> {
            None
        }
        fn stepd_cpus(&self) -> Option<crate::cpuset::CpuSet> {
            None
        }
    }
    let (planned, _) = plan_mps_with(&["mps_share=even"], true, &SLURM_4, places(), Some(USER));
    let mut plan = planned.clone();
    let mut front = Starts(None);
    start_daemon(&mut plan, &mut front, None);
    assert_eq!(front.0, Some(None), "asked once, for no task");
    assert!(matches!(mps_of(&plan), Mps::Serving(_)), "{plan:?}");
    let mut plan = planned;
    let mut failing = FakeFront::default();
    start_daemon(&mut plan, &mut failing, Some(2));
    assert_eq!(failing.asked.get().0, 1);
    assert_eq!(without(&plan), "not started");
    // Nothing to start: the front end is not asked.
    let (mut quiet, _) = plan_mps_with(&[], false, &SLURM_4, places(), Some(USER));
    let mut front = Starts(None);
    start_daemon(&mut quiet, &mut front, None);
    assert_eq!(front.0, None);
}

#[test]
fn a_flux_jobs_lines_name_no_slurm_term() {
    // R's indices NVML could not name for the plugin: the core cannot
    // tell them from renumbered ones either, and says so in Flux's words.
    let why = without(&plan_flux_files("0,1,2,3", &[], places(), |_| {}));
    assert!(!why.contains("SLURM"), "{why}");
    assert!(
        why.starts_with(
            "cannot name the job's GPUs by UUID (R gives GPU indices, which NVML's list \
             could not locate)"
        ),
        "{why}"
    );
    // The control daemon as the conf table names it, not as a plugstack
    // line would.
    let not_found = |on_path: Option<PathBuf>, site: Option<&str>| {
        let mut settings = crate::settings::config::MpsSettings {
            control: site.map(PathBuf::from),
            ..Default::default()
        };
        granted_control(&mut settings, on_path, &crate::flux::GRANT);
        settings
    };
    let unnamed = not_found(None, None);
    let line = NoMps::ControlNotFound {
        named_by: unnamed.control_named_by,
    }
    .to_string();
    assert!(
        line.ends_with(
            "the site's mps_control = \"...\" in the plugin's conf, or the job's PATH, names it"
        ),
        "{line}"
    );
    let site = not_found(Some(PathBuf::from("/bin/x")), Some("/opt/nope"));
    assert_eq!(site.control.as_deref(), Some(Path::new("/opt/nope")));
    let line = NoMps::NoControl {
        path: PathBuf::from("/opt/nope"),
        named_by: site.control_named_by,
    }
    .to_string();
    assert_eq!(
        line,
        "cannot start /opt/nope: it does not exist (the site's mps_control = \"...\" in the \
         plugin's conf)"
    );
    let found = not_found(Some(PathBuf::from("/bin/x")), None);
    assert_eq!(found.control.as_deref(), Some(Path::new("/bin/x")));
    assert_eq!(found.control_named_by, "the job's PATH");
}

#[test]
fn realistic_bases_fit_the_daemons_sockets() {
    // Exec's keeper under a site's TMPDIR of 33 bytes: a 7-digit uid, an
    // 8-digit job, step 12 on node 15, the longest token.
    let kept = Daemon {
        base: PathBuf::from("/local/scratch/slurm/job.12345678"),
        stem: dir_name(1_234_567, "12345678.12", 15),
        token: u32::MAX,
        ..Daemon::default()
    };
    assert_eq!(super::dirs::check_socket(&kept, true), Ok(()));
    // A Flux job's under the same TMPDIR: an 18-digit job id named as its
    // FLUX_JOB_ID shows it (f and 11 base-58 digits), rank 15. Named by
    // its tag (the record's `flux-JOBID.INSTANCE`) it would not fit.
    let jobid = 123_456_789_012_345_678;
    let flux = Daemon {
        base: PathBuf::from("/local/scratch/slurm/job.12345678"),
        stem: dir_name(1_234_567, &crate::flux::f58(jobid), 15),
        token: u32::MAX,
        ..Daemon::default()
    };
    let by_tag = Daemon {
        stem: dir_name(1_234_567, &crate::flux::tag(jobid, Some("local:///x")), 15),
        ..flux.clone()
    };
    assert!(super::dirs::check_socket(&by_tag, false).is_err());
    assert_eq!(super::dirs::check_socket(&flux, false), Ok(()));
}
