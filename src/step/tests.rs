//! Unit tests of the step plan, compiled only under #[cfg(test)] (see step.rs).

use super::*;
use crate::config::{parse_args, NvmlSource};
use std::collections::HashMap;

fn env_of(pairs: &[(&str, &str)]) -> HashMap<String, String> {
    pairs
        .iter()
        .map(|(k, v)| (k.to_string(), v.to_string()))
        .collect()
}

fn plan_with(
    config: &Config,
    choice: Choice,
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
    let step = StepInputs {
        step_id: 0,
        choice,
        verbose: false,
        config,
        whole_node: false,
    };
    let plan = plan_step(&step, &lookup, &mut nvml_fn);
    (plan, calls)
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

fn aside(plan: StepPlan) -> String {
    match plan {
        StepPlan::Aside(why) => why,
        other => panic!("expected to stand aside, got {other:?}"),
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

const SLURM_4: [(&str, &str); 4] = [
    ("CUDA_VISIBLE_DEVICES", "0,1,2,3"),
    ("GPU_DEVICE_ORDINAL", "0,1,2,3"),
    ("ROCR_VISIBLE_DEVICES", "0,1,2,3"),
    ("SLURM_GPUS_ON_NODE", "4"),
];

#[test]
fn slurm_list_is_mapped_and_other_lists_follow() {
    let map = mapped(plan(&SLURM_4));
    assert_eq!(map.gpus, ["0", "1", "2", "3"]);
    let cvd: Vec<String> = (0..6)
        .map(|l| {
            let out = map_task(&map, &task(l, 6, Some("0,1,2,3")));
            assert_eq!(
                get(&out, "ROCR_VISIBLE_DEVICES"),
                get(&out, "CUDA_VISIBLE_DEVICES")
            );
            assert_eq!(
                get(&out, "GPU_DEVICE_ORDINAL"),
                get(&out, "CUDA_VISIBLE_DEVICES")
            );
            assert_eq!(get(&out, "ZE_AFFINITY_MASK"), None, "never added");
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
    assert_eq!(get(&out, "ROCR_VISIBLE_DEVICES"), Some("2,3,0,1"));
    assert_eq!(get(&out, "MY_FLAG"), Some("1"));
    assert_eq!(get(&out, "DESI_GPU_MAPPED"), None);
}

#[test]
fn off_and_special_steps_are_idle() {
    let config = Config::default();
    let (p, calls) = plan_with(&config, Choice::Off, &SLURM_4, Ok(vec![]));
    assert_eq!(p, StepPlan::Idle);
    assert_eq!(calls, 0);
    for step_id in [0xffff_fffa, 0xffff_fffb, 0xffff_fffc] {
        let vars = env_of(&SLURM_4);
        let step = StepInputs {
            step_id,
            choice: Choice::Map(Method::Contiguous),
            verbose: true,
            config: &config,
            whole_node: true,
        };
        let plan = plan_step(&step, &|n: &str| vars.get(n).cloned(), &mut || Ok(vec![]));
        assert_eq!(plan, StepPlan::Idle, "step {step_id:#x}");
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
        assert_eq!(get(&out, "ROCR_VISIBLE_DEVICES"), Some("1"), "{bind}");
    }
}

#[test]
fn inherited_or_odd_lists_are_not_trusted() {
    let why = aside(plan(&[("CUDA_VISIBLE_DEVICES", "0,1")]));
    assert!(why.contains("inherited"), "{why}");
    let why = aside(plan(&[
        ("CUDA_VISIBLE_DEVICES", ""),
        ("SLURM_GPUS_ON_NODE", "2"),
    ]));
    assert!(why.contains("is empty"), "{why}");
    let why = aside(plan(&[
        ("CUDA_VISIBLE_DEVICES", "0,1"),
        ("SLURM_GPUS_ON_NODE", "4"),
    ]));
    assert!(
        why.contains("lists 2 GPUs but SLURM_GPUS_ON_NODE=4"),
        "{why}"
    );
    let why = aside(plan(&[
        ("CUDA_VISIBLE_DEVICES", "NoDevFiles"),
        ("SLURM_STEP_GPUS", "0"),
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
        ("ZE_AFFINITY_MASK", "0"),
    ]));
    assert!(map.others.is_empty());
    assert_eq!(map.notes.len(), 1);
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
fn nvml_for_a_whole_node_without_a_count() {
    let config = Config::default();
    let step = StepInputs {
        step_id: 3,
        choice: Choice::Map(Method::Contiguous),
        verbose: false,
        config: &config,
        whole_node: true,
    };
    let plan = plan_step(&step, &|_: &str| None, &mut || Ok(uuids(2)));
    assert_eq!(mapped(plan).gpus, uuids(2));
}

#[test]
fn verbose_reports_each_task() {
    let config = Config {
        verbose: true,
        ..Config::default()
    };
    let (choice, verbose) = resolve(None, &config);
    assert_eq!(choice, Choice::Off);
    assert!(verbose);
    let vars = env_of(&SLURM_4);
    let step = StepInputs {
        step_id: 1,
        choice: Choice::Map(Method::Contiguous),
        verbose,
        config: &config,
        whole_node: false,
    };
    let map = mapped(plan_step(
        &step,
        &|n: &str| vars.get(n).cloned(),
        &mut || Ok(vec![]),
    ));
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
    assert_eq!(resolve(None, &config), (rr, false));
    assert_eq!(
        resolve(
            Some(Request::Use {
                choice: Some(Choice::Off),
                verbose: false
            }),
            &config
        ),
        (Choice::Off, false)
    );
    assert_eq!(
        resolve(
            Some(Request::Use {
                choice: Some(c),
                verbose: true
            }),
            &config
        ),
        (c, true)
    );
    assert_eq!(
        resolve(
            Some(Request::Use {
                choice: None,
                verbose: true
            }),
            &config
        ),
        (rr, true)
    );
}
