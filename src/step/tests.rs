//! Unit tests of the step plan, compiled only under #[cfg(test)] (see step.rs).

use super::*;
use crate::config::{parse_args, NvmlSource};
use crate::vendor::{Chosen, Vendor};
use std::collections::HashMap;

/// Every case here renders for NVIDIA; src/vendor/tests.rs covers the others.
fn nvidia() -> Chosen {
    Chosen {
        vendor: Vendor::Nvidia,
        why: "test".to_string(),
    }
}

fn env_of(pairs: &[(&str, &str)]) -> HashMap<String, String> {
    pairs
        .iter()
        .map(|(k, v)| (k.to_string(), v.to_string()))
        .collect()
}

/// The user's option giving `choice`.
fn asking(choice: Choice) -> Request {
    Request::Use {
        choice: Some(choice),
        verbose: false,
    }
}

/// Plans step 0 with `request`; returns the plan and how often NVML was
/// called.
fn plan_req(
    config: &Config,
    request: Option<Request>,
    pairs: &[(&str, &str)],
    nvml: Result<Vec<String>, Error>,
) -> (StepPlan, usize) {
    plan_step_id(0, config, request, pairs, nvml)
}

fn plan_step_id(
    step_id: u32,
    config: &Config,
    request: Option<Request>,
    pairs: &[(&str, &str)],
    nvml: Result<Vec<String>, Error>,
) -> (StepPlan, usize) {
    let vars = env_of(pairs);
    let lookup = |name: &str| vars.get(name).cloned();
    let mut calls = 0;
    let mut nvml_fn = || {
        calls += 1;
        nvml.clone()
    };
    let config = Ok(config.clone());
    let request = request.map(Ok);
    let facts = StepFacts {
        step_id: Ok(step_id),
        config: Some(&config),
        request: request.as_ref(),
        vendor: &|_| nvidia(),
    };
    let plan = plan_step(&facts, &lookup, &mut nvml_fn);
    (plan, calls)
}

/// Plans with the user asking for `choice`.
fn plan_with(
    config: &Config,
    choice: Choice,
    pairs: &[(&str, &str)],
    nvml: Result<Vec<String>, Error>,
) -> (StepPlan, usize) {
    plan_req(config, Some(asking(choice)), pairs, nvml)
}

fn plan(pairs: &[(&str, &str)]) -> StepPlan {
    let config = Config::default();
    plan_with(&config, Choice::Map(Method::Contiguous), pairs, Ok(vec![])).0
}

fn mapped(plan: StepPlan) -> StepMap {
    match plan {
        StepPlan::Map(map) => map,
        other => panic!("expected a mapping, got {other:?}"),
    }
}

/// The reason a step stands aside with; panics when it maps or is silent.
fn aside(plan: StepPlan) -> String {
    match plan {
        StepPlan::Unmapped(Unmapped { why: Some(why), .. }) => why,
        other => panic!("expected to stand aside, got {other:?}"),
    }
}

fn quiet(plan: StepPlan) -> Unmapped {
    match plan {
        StepPlan::Unmapped(u) if u.why.is_none() => u,
        other => panic!("expected a silent stand-aside, got {other:?}"),
    }
}

fn task(local_id: usize, local_count: usize, cuda: Option<&str>) -> TaskInputs<'_> {
    TaskInputs {
        node: "n1",
        local_id,
        local_count,
        rank: local_id as u32,
        cuda,
        tres_bind: None,
    }
}

fn get<'a>(out: &'a TaskOutcome, name: &str) -> Option<&'a str> {
    out.set
        .iter()
        .find(|(k, _)| k == name)
        .map(|(_, v)| v.as_str())
}

/// What Slurm 22.05 sets for `--gpus-per-node=4` (measured on the test
/// cluster; it also sets ZE_AFFINITY_MASK, left out here to test that
/// lists are narrowed only where Slurm set them).
const SLURM_4: [(&str, &str); 5] = [
    ("CUDA_VISIBLE_DEVICES", "0,1,2,3"),
    ("GPU_DEVICE_ORDINAL", "0,1,2,3"),
    ("ROCR_VISIBLE_DEVICES", "0,1,2,3"),
    ("SLURM_GPUS_ON_NODE", "4"),
    ("SLURM_STEP_GPUS", "0,1,2,3"),
];

#[test]
fn slurm_list_is_mapped_and_other_vendors_lists_are_left() {
    let map = mapped(plan(&SLURM_4));
    assert_eq!(map.gpus, ["0", "1", "2", "3"]);
    let cvd: Vec<String> = (0..6)
        .map(|l| {
            let out = map_task(&map, &task(l, 6, Some("0,1,2,3")));
            // NVIDIA: only CUDA's list carries the GPU; ROCm's lists stay
            // as Slurm set them, and ZE_AFFINITY_MASK is never added.
            assert_eq!(get(&out, "ROCR_VISIBLE_DEVICES"), None);
            assert_eq!(get(&out, "GPU_DEVICE_ORDINAL"), None);
            assert_eq!(get(&out, "ZE_AFFINITY_MASK"), None);
            assert_eq!(get(&out, "CUDA_DEVICE_ORDER"), Some("PCI_BUS_ID"));
            assert_eq!(get(&out, "DESI_GPU_MAPPED"), Some("1"));
            assert_eq!(get(&out, "DESI_GPU_MAP_METHOD"), Some("contiguous"));
            assert_eq!(get(&out, "DESI_GPU_MAP_NODE_GPUS"), Some("4"));
            get(&out, "CUDA_VISIBLE_DEVICES").unwrap().to_string()
        })
        .collect();
    assert_eq!(cvd, ["0", "0", "1", "1", "2", "3"]);
}

#[test]
fn partial_allocation_keeps_slurm_tokens() {
    let map = mapped(plan(&[
        ("CUDA_VISIBLE_DEVICES", "2,3"),
        ("SLURM_GPUS_ON_NODE", "2"),
        ("SLURM_STEP_GPUS", "2,3"),
    ]));
    let out = map_task(&map, &task(2, 3, Some("2,3")));
    assert_eq!(get(&out, "CUDA_VISIBLE_DEVICES"), Some("3"));
    let out = map_task(&map, &task(0, 3, Some("2,3")));
    assert_eq!(get(&out, "CUDA_VISIBLE_DEVICES"), Some("2"));
}

#[test]
fn rotate_and_custom_flag() {
    let config = parse_args(&["visible=rotate", "flag=MY_FLAG"]).unwrap();
    let (plan, _) = plan_with(
        &config,
        Choice::Map(Method::RoundRobin),
        &SLURM_4,
        Ok(vec![]),
    );
    let map = mapped(plan);
    let out = map_task(&map, &task(2, 4, Some("0,1,2,3")));
    assert_eq!(get(&out, "CUDA_VISIBLE_DEVICES"), Some("2,3,0,1"));
    assert_eq!(get(&out, "ROCR_VISIBLE_DEVICES"), None);
    assert_eq!(get(&out, "MY_FLAG"), Some("1"));
    assert_eq!(get(&out, "DESI_GPU_MAPPED"), None);
}

#[test]
fn off_steps_only_lose_stale_flags_and_special_steps_are_untouched() {
    let config = Config::default();
    let (p, calls) = plan_with(&config, Choice::Off, &SLURM_4, Ok(vec![]));
    let u = quiet(p);
    assert_eq!(
        u.clear,
        [
            "DESI_GPU_MAPPED",
            "DESI_GPU_MAP_METHOD",
            "DESI_GPU_MAP_NODE_GPUS"
        ]
    );
    assert_eq!(calls, 0);
    let (p, _) = plan_req(&config, None, &SLURM_4, Ok(vec![]));
    quiet(p);
    let custom = parse_args(&["flag=MY_FLAG"]).unwrap();
    let (p, _) = plan_req(&custom, None, &[], Ok(vec![]));
    assert_eq!(quiet(p).clear[0], "MY_FLAG");
    for step_id in [0xffff_fffa, 0xffff_fffb, 0xffff_fffc] {
        let c = Some(asking(Choice::Map(Method::Contiguous)));
        let (p, _) = plan_step_id(step_id, &config, c, &SLURM_4, Ok(vec![]));
        assert_eq!(p, StepPlan::Untouched, "step {step_id:#x}");
        let out = task_outcome(&p, &task(0, 1, Some("0,1,2,3")));
        assert_eq!(out, TaskOutcome::default());
    }
}

#[test]
fn unmapped_tasks_lose_the_flag_and_the_first_says_why() {
    let plan = StepPlan::aside("DESI_GPU_MAPPED", "because".to_string());
    let first = task_outcome(&plan, &task(0, 2, None));
    assert_eq!(first.say, ["desi-gpu-map: node n1: because"]);
    assert!(first.set.is_empty());
    assert_eq!(first.unset[0], "DESI_GPU_MAPPED");
    let second = task_outcome(&plan, &task(1, 2, None));
    assert!(second.say.is_empty());
    assert_eq!(second.unset, first.unset);
    let out = unreadable_task(&plan, "n1", "cannot read");
    assert_eq!(out.unset, first.unset);
}

#[test]
fn unreadable_facts_stand_aside_with_the_reason() {
    let vars = env_of(&SLURM_4);
    let lookup = |name: &str| vars.get(name).cloned();
    let bad_config = Err(Error::new("bad plugstack argument \"x\""));
    let bad_request = Err(Error::new("invalid --desi-gpu-map value \"y\""));
    let config = Ok(Config::default());
    let cases: [(StepFacts, &str); 4] = [
        (
            StepFacts {
                step_id: Err("no id".to_string()),
                config: Some(&config),
                request: None,
                vendor: &|_| nvidia(),
            },
            "cannot read the step id (no id)",
        ),
        (
            StepFacts {
                step_id: Ok(1),
                config: Some(&bad_config),
                request: None,
                vendor: &|_| nvidia(),
            },
            "plugin misconfigured, ask your administrators: bad plugstack argument",
        ),
        (
            StepFacts {
                step_id: Ok(1),
                config: None,
                request: None,
                vendor: &|_| nvidia(),
            },
            "plugin not initialised",
        ),
        (
            StepFacts {
                step_id: Ok(1),
                config: Some(&config),
                request: Some(&bad_request),
                vendor: &|_| nvidia(),
            },
            "invalid --desi-gpu-map value \"y\"; tasks left unchanged",
        ),
    ];
    for (facts, want) in cases {
        let why = aside(plan_step(&facts, &lookup, &mut || Ok(vec![])));
        assert!(why.contains(want), "{why}");
    }
}

#[test]
fn per_task_binding_by_slurm_is_kept() {
    for (var, value) in [
        ("SLURM_GPUS_PER_TASK", "1"),
        ("SLURM_NTASKS_PER_GPU", "2"),
        ("SLURM_GPU_BIND", "map_gpu:0,1"),
        ("SLURM_TRES_BIND", "gres/gpu:single:1"),
    ] {
        let mut pairs = SLURM_4.to_vec();
        pairs.push((var, value));
        let why = aside(plan(&pairs));
        assert!(
            why.contains(var) && why.contains("keeping Slurm's binding"),
            "{why}"
        );
    }
    for (var, value) in [
        ("SLURM_GPU_BIND", "none"),
        ("SLURM_GPU_BIND", "verbose,none"),
        ("SLURM_TRES_BIND", "gres/gpu:none"),
    ] {
        let mut pairs = SLURM_4.to_vec();
        pairs.push((var, value));
        mapped(plan(&pairs));
    }
}

#[test]
fn task_narrowed_by_slurm_is_left_alone() {
    let map = mapped(plan(&SLURM_4));
    let out = map_task(&map, &task(0, 4, Some("1")));
    assert!(out.set.is_empty());
    assert_eq!(out.say.len(), 1);
    assert!(
        out.say[0].contains("keeping Slurm's binding"),
        "{:?}",
        out.say
    );
    let out = map_task(&map, &task(1, 4, Some("1")));
    assert!(
        out.set.is_empty() && out.say.is_empty(),
        "said once per node"
    );
}

#[test]
fn slurm_tres_binding_is_kept_but_gpu_bind_none_is_mapped() {
    let map = mapped(plan(&SLURM_4));
    for bind in [
        "gpu:closest",
        "gpu:per_task:1",
        "gpu:map_gpu:1,0",
        "gres/gpu:single:1",
        "gres/gpu:map:1,0",
    ] {
        let t = TaskInputs {
            tres_bind: Some(bind),
            ..task(0, 4, Some("0,1,2,3"))
        };
        let out = map_task(&map, &t);
        assert!(out.set.is_empty(), "{bind}");
        assert!(
            out.say[0].contains(bind) && out.say[0].contains("keeping Slurm's binding"),
            "{:?}",
            out.say
        );
    }
    // --gpu-bind=none: 22.05 removes the list from each task and writes
    // `gpu:none`; 23.11 and later keep it and write `gres/gpu:none`.
    for (bind, cuda) in [
        ("gpu:none", None),
        ("gpu:verbose,none", None),
        ("gres/gpu:none", Some("0,1,2,3")),
        ("gres/gpu:verbose,none", Some("0,1,2,3")),
    ] {
        let t = TaskInputs {
            tres_bind: Some(bind),
            ..task(1, 4, cuda)
        };
        let out = map_task(&map, &t);
        assert_eq!(get(&out, "CUDA_VISIBLE_DEVICES"), Some("1"), "{bind}");
    }
}

#[test]
fn inherited_or_odd_lists_are_not_trusted() {
    let why = aside(plan(&[("CUDA_VISIBLE_DEVICES", "0,1")]));
    assert!(why.contains("inherited"), "{why}");
    let why = aside(plan(&[
        ("CUDA_VISIBLE_DEVICES", ""),
        ("SLURM_GPUS_ON_NODE", "2"),
        ("SLURM_STEP_GPUS", "0,1"),
    ]));
    assert!(why.contains("is empty"), "{why}");
    let why = aside(plan(&[
        ("CUDA_VISIBLE_DEVICES", "0,1"),
        ("SLURM_GPUS_ON_NODE", "4"),
        ("SLURM_STEP_GPUS", "0,1"),
    ]));
    assert!(
        why.contains("lists 2 GPUs but SLURM_GPUS_ON_NODE=4"),
        "{why}"
    );
    let why = aside(plan(&[
        ("CUDA_VISIBLE_DEVICES", "NoDevFiles"),
        ("SLURM_STEP_GPUS", "0"),
        ("SLURM_GPUS_ON_NODE", "1"),
    ]));
    assert!(why.contains("NoDevFiles"), "{why}");
    let why = aside(plan(&[]));
    assert!(why.contains("no GPUs are allocated"), "{why}");
}

#[test]
fn other_list_of_another_length_is_left_alone() {
    let map = mapped(plan(&[
        ("CUDA_VISIBLE_DEVICES", "0,1"),
        ("SLURM_GPUS_ON_NODE", "2"),
        ("SLURM_STEP_GPUS", "0,1"),
        ("ZE_AFFINITY_MASK", "0"),
    ]));
    assert!(map.others.is_empty());
    assert!(
        map.notes
            .iter()
            .any(|n| n == "ZE_AFFINITY_MASK left as is: 1 entries, not 2"),
        "{:?}",
        map.notes
    );
    let out = map_task(&map, &task(1, 2, Some("0,1")));
    assert_eq!(get(&out, "ZE_AFFINITY_MASK"), None);
}

fn uuids(n: usize) -> Vec<String> {
    (0..n).map(|i| format!("GPU-fake-n1-{i}")).collect()
}

#[test]
fn nvml_is_used_only_when_its_count_matches() {
    let config = Config::default();
    let c = Choice::Map(Method::RoundRobin);
    let (p, calls) = plan_with(&config, c, &[("SLURM_GPUS_ON_NODE", "4")], Ok(uuids(4)));
    let map = mapped(p);
    assert_eq!(calls, 1);
    assert_eq!(map.cuda, None);
    let out = map_task(&map, &task(5, 8, None));
    assert_eq!(get(&out, "CUDA_VISIBLE_DEVICES"), Some("GPU-fake-n1-1"));

    let (p, _) = plan_with(&config, c, &[("SLURM_GPUS_ON_NODE", "4")], Ok(uuids(2)));
    assert!(aside(p).contains("NVML finds 2 GPUs but SLURM_GPUS_ON_NODE=4"));
    let (p, _) = plan_with(
        &config,
        c,
        &[("SLURM_GPUS_ON_NODE", "4")],
        Err(Error::new("NVML: init failed")),
    );
    assert!(aside(p).contains("NVML: init failed"));
    let (p, calls) = plan_with(&config, c, &[("SLURM_GPUS_ON_NODE", "0")], Ok(uuids(4)));
    assert!(aside(p).contains("no GPUs"));
    assert_eq!(calls, 0);
    let (p, calls) = plan_with(&config, c, &[], Ok(uuids(4)));
    assert!(aside(p).contains("no GPUs"));
    assert_eq!(
        calls, 0,
        "no count and not the whole node: NVML is not even loaded"
    );

    let off = Config {
        nvml: NvmlSource::Off,
        ..Config::default()
    };
    let (p, calls) = plan_with(&off, c, &[("SLURM_GPUS_ON_NODE", "4")], Ok(uuids(4)));
    assert!(aside(p).contains("nvml=off"));
    assert_eq!(calls, 0);
}

#[test]
fn without_a_count_nvml_is_used_only_where_the_site_opts_in() {
    let c = Choice::Map(Method::Contiguous);
    // A CPU-only step beside a working NVML: no GPUs, NVML not even loaded.
    let (p, calls) = plan_with(&Config::default(), c, &[], Ok(uuids(4)));
    assert!(aside(p).contains("no GPUs are allocated"));
    assert_eq!(calls, 0);
    // Not asked (a site default): silent.
    let site = parse_args(&["default=contiguous"]).unwrap();
    let (p, calls) = plan_req(&site, None, &[], Ok(uuids(4)));
    quiet(p);
    assert_eq!(calls, 0);
    // untracked=whole-node: every GPU NVML finds.
    let whole = parse_args(&["untracked=whole-node"]).unwrap();
    let (p, calls) = plan_with(&whole, c, &[], Ok(uuids(2)));
    assert_eq!(mapped(p).gpus, uuids(2));
    assert_eq!(calls, 1);
    // ... and on a node without NVML, silence unless asked.
    let whole_default = parse_args(&["untracked=whole-node", "default=contiguous"]).unwrap();
    let (p, _) = plan_req(
        &whole_default,
        None,
        &[],
        Err(Error::new("NVML: no library")),
    );
    quiet(p);
    let (p, _) = plan_with(&whole, c, &[], Err(Error::new("NVML: no library")));
    assert!(aside(p).contains("NVML: no library"));
    // A count of zero is no GPUs, whatever the site says.
    let (p, calls) = plan_with(&whole, c, &[("SLURM_GPUS_ON_NODE", "0")], Ok(uuids(2)));
    assert!(aside(p).contains("no GPUs"));
    assert_eq!(calls, 0);
}

#[test]
fn nvml_lists_are_checked_like_slurm_lists() {
    let c = Choice::Map(Method::Contiguous);
    let config = Config::default();
    let count = [("SLURM_GPUS_ON_NODE", "2")];
    for bad in [
        vec!["GPU-x,100".to_string(), "GPU-y".to_string()],
        vec!["GPU-a".to_string(), "GPU-a".to_string()],
    ] {
        let (p, _) = plan_with(&config, c, &count, Ok(bad.clone()));
        let why = aside(p);
        assert!(why.contains("NVML's device list is unusable"), "{why}");
    }
}

#[test]
fn a_list_the_user_exported_on_a_no_gpu_env_node_is_not_trusted() {
    let c = Choice::Map(Method::Contiguous);
    let config = Config::default();
    // Flags=no_gpu_env: Slurm sets only the count and its own list; the
    // user's CUDA_VISIBLE_DEVICES survives (measured on 22.05). The step
    // has GPUs 2,3; the user's list names others.
    for user in ["0,1,2,3", "3,2", "1,2", "0"] {
        let pairs = [
            ("SLURM_GPUS_ON_NODE", "2"),
            ("SLURM_STEP_GPUS", "2,3"),
            ("CUDA_VISIBLE_DEVICES", user),
        ];
        let (p, calls) = plan_with(&config, c, &pairs, Ok(uuids(2)));
        assert_eq!(calls, 1, "{user}: NVML, not the user's list");
        assert_eq!(mapped(p).gpus, uuids(2), "{user}");
    }
    // Slurm's list and a matching CUDA list exported into a step without a
    // count from Slurm (Slurm removes the user's count): no GPUs.
    let pairs = [("SLURM_STEP_GPUS", "0,1"), ("CUDA_VISIBLE_DEVICES", "0,1")];
    let (p, calls) = plan_with(&config, c, &pairs, Ok(uuids(2)));
    assert!(aside(p).contains("no GPUs are allocated"));
    assert_eq!(calls, 0);
    // Without Slurm's own list, a list is never Slurm's.
    let pairs = [("SLURM_GPUS_ON_NODE", "2"), ("CUDA_VISIBLE_DEVICES", "0,1")];
    let (p, calls) = plan_with(&config, c, &pairs, Ok(uuids(2)));
    assert_eq!((mapped(p).gpus, calls), (uuids(2), 1));
    // 0..n-1 alone is not Slurm's renumbering: the user's 0 on a step
    // granted GPU 1 (the cluster test's case).
    let pairs = [
        ("SLURM_GPUS_ON_NODE", "1"),
        ("SLURM_STEP_GPUS", "1"),
        ("CUDA_VISIBLE_DEVICES", "0"),
    ];
    let (p, calls) = plan_with(&config, c, &pairs, Ok(uuids(1)));
    assert_eq!((mapped(p).gpus, calls), (uuids(1), 1));
    // A list that agrees with Slurm's is Slurm's, and so is 0..n-1 with
    // Slurm's companion list renumbered alike, as under cgroup device
    // constraint.
    for (cuda, rocr) in [("2,3", "2,3"), ("2,3", "x"), ("0,1", "0,1")] {
        let pairs = [
            ("SLURM_GPUS_ON_NODE", "2"),
            ("SLURM_STEP_GPUS", "2,3"),
            ("CUDA_VISIBLE_DEVICES", cuda),
            ("ROCR_VISIBLE_DEVICES", rocr),
        ];
        let (p, calls) = plan_with(&config, c, &pairs, Ok(uuids(2)));
        let map = mapped(p);
        assert_eq!(calls, 0, "{cuda}");
        assert_eq!(map.cuda.as_deref(), Some(cuda));
    }
}

#[test]
fn verbose_reports_each_task() {
    let config = Config {
        verbose: true,
        ..Config::default()
    };
    let want = resolve(None, &config);
    assert_eq!(
        (want.choice, want.verbose, want.asked),
        (Choice::Off, true, false)
    );
    let (p, _) = plan_with(
        &config,
        Choice::Map(Method::Contiguous),
        &SLURM_4,
        Ok(vec![]),
    );
    let map = mapped(p);
    assert!(map.verbose);
    let out = map_task(
        &map,
        &TaskInputs {
            node: "n2",
            local_id: 3,
            local_count: 4,
            rank: 7,
            cuda: Some("0,1,2,3"),
            tres_bind: None,
        },
    );
    assert_eq!(
        out.say,
        ["desi-gpu-map: node=n2 rank=7 local=3/4 gpu=3 visible=3 gpus=0,1,2,3 method=contiguous source=slurm"]
    );
}

#[test]
fn resolve_prefers_the_user() {
    let config = parse_args(&["default=roundrobin"]).unwrap();
    let rr = Choice::Map(Method::RoundRobin);
    let c = Choice::Map(Method::Contiguous);
    let got = |request: Option<Request>| {
        let r = resolve(request, &config);
        (r.choice, r.verbose, r.asked)
    };
    assert_eq!(got(None), (rr, false, false));
    assert_eq!(got(Some(asking(Choice::Off))), (Choice::Off, false, false));
    let verbose = |choice| Request::Use {
        choice,
        verbose: true,
    };
    assert_eq!(got(Some(verbose(Some(c)))), (c, true, true));
    assert_eq!(got(Some(verbose(None))), (rr, true, true));
}
