//! Unit tests of rendering and the vendor setting, compiled only under
//! #[cfg(test)] (see runtime/mod.rs). Detection reads a node's files: it
//! is tested on real trees, through the host's files
//! (`host/tests/kernel_files.rs`).
//!
//! The rendering is checked against a model of each runtime's documented
//! layering ([`device_seen`]): which physical GPUs a task's runtime exposes,
//! in which order, given the variables the task ends up with.

use super::*;
use crate::method::visible_list;
use crate::method::Method;
use crate::settings::config::Config;
use crate::settings::option::{Choice, OptionRequest};
use crate::settings::site::parse_args;
use crate::slurm::gpus::join;
use crate::step::testing::{plan_on, FakeNode};
use crate::step::{map_task, Aside, StepMap, StepPlan, TaskCpus, TaskInputs, Unmapped};
use std::cell::Cell;
use std::collections::HashMap;

// ------------------------------------------------------------ the model

/// A node's physical GPUs, numbered in PCI bus order as Slurm and NVML
/// number them (File= order, `0..NODE`).
const NODE: usize = 4;

/// The order CUDA enumerates the node's GPUs in by default (FASTEST_FIRST),
/// as PCI positions: deliberately not the PCI order.
const FASTEST_FIRST: [usize; NODE] = [2, 0, 3, 1];

#[derive(Debug, Clone, Copy)]
enum Runtime {
    /// CUDA: `CUDA_VISIBLE_DEVICES` selects and orders devices; indices
    /// follow FASTEST_FIRST unless `CUDA_DEVICE_ORDER=PCI_BUS_ID`; an invalid
    /// entry ends the list (CUDA Programming Guide, environment variables).
    Cuda,
    /// ROCm HIP: `ROCR_VISIBLE_DEVICES` first (reorders; an invalid or
    /// repeated entry ends it: ROCR-Runtime RvdFilter), then
    /// `HIP_VISIBLE_DEVICES`, or `CUDA_VISIBLE_DEVICES` when that is unset,
    /// as indices into what ROCR left (CLR rocdevice.cpp: an invalid entry
    /// ends it, a repeated one is skipped).
    Hip,
    /// ROCm OpenCL: `ROCR_VISIBLE_DEVICES`, then `GPU_DEVICE_ORDINAL` as
    /// indices into what ROCR left (same code as HIP's list).
    RocmOpenCl,
    /// Level Zero: `ZE_AFFINITY_MASK` selects devices, never reorders them.
    LevelZero,
}

fn all_devices() -> Vec<usize> {
    (0..NODE).collect()
}

/// Applies an index list to `base`. A token that is not an index into
/// `base` ends the list; `repeat_ends` says whether a repeated device ends
/// it too (ROCR, CUDA) or is skipped (HIP, OpenCL). `GPU-<n>` names
/// physical GPU `n` (the tests' UUIDs).
fn select(base: &[usize], list: &str, repeat_ends: bool) -> Vec<usize> {
    let mut seen = Vec::new();
    for token in list.split(',') {
        let device = match token.strip_prefix("GPU-") {
            Some(n) => n.parse::<usize>().ok().filter(|d| base.contains(d)),
            None => token
                .parse::<usize>()
                .ok()
                .and_then(|i| base.get(i).copied()),
        };
        match device {
            None => break,
            Some(d) if seen.contains(&d) && repeat_ends => break,
            Some(d) if seen.contains(&d) => {}
            Some(d) => seen.push(d),
        }
    }
    seen
}

/// The physical GPUs the runtime exposes to a process with `env`, in the
/// order it numbers them: device 0 first.
fn device_seen(runtime: Runtime, env: &HashMap<String, String>) -> Vec<usize> {
    let var = |name: &str| env.get(name).map(String::as_str);
    let rocr = || match var("ROCR_VISIBLE_DEVICES") {
        None => all_devices(),
        Some(list) => select(&all_devices(), list, true),
    };
    let layered = |base: Vec<usize>, list: Option<&str>| match list {
        Some(list) if !list.is_empty() => select(&base, list, false),
        _ => base,
    };
    match runtime {
        Runtime::Cuda => {
            let base = match var("CUDA_DEVICE_ORDER") {
                Some("PCI_BUS_ID") => all_devices(),
                _ => FASTEST_FIRST.to_vec(),
            };
            match var("CUDA_VISIBLE_DEVICES") {
                Some(list) => select(&base, list, true),
                None => base,
            }
        }
        Runtime::Hip => {
            let list = var("HIP_VISIBLE_DEVICES")
                .filter(|l| !l.is_empty())
                .or(var("CUDA_VISIBLE_DEVICES"));
            layered(rocr(), list)
        }
        Runtime::RocmOpenCl => layered(rocr(), var("GPU_DEVICE_ORDINAL")),
        Runtime::LevelZero => match var("ZE_AFFINITY_MASK") {
            Some(mask) if !mask.is_empty() => {
                let wanted: Vec<&str> = mask.split(',').collect();
                all_devices()
                    .into_iter()
                    .filter(|d| wanted.contains(&d.to_string().as_str()))
                    .collect()
            }
            _ => all_devices(),
        },
    }
}

fn runtimes(vendor: Vendor) -> &'static [Runtime] {
    match vendor {
        Vendor::Nvidia => &[Runtime::Cuda],
        Vendor::Amd => &[Runtime::Hip, Runtime::RocmOpenCl],
        Vendor::Intel => &[Runtime::LevelZero],
    }
}

#[test]
fn the_model_follows_the_documented_layering() {
    let env = |pairs: &[(&str, &str)]| -> HashMap<String, String> {
        pairs
            .iter()
            .map(|(k, v)| (k.to_string(), v.to_string()))
            .collect()
    };
    // The trap gres.conf(5) and the issue describe: ROCR=1 then CUDA=1.
    let e = env(&[("ROCR_VISIBLE_DEVICES", "1"), ("CUDA_VISIBLE_DEVICES", "1")]);
    assert_eq!(device_seen(Runtime::Hip, &e), Vec::<usize>::new());
    let e = env(&[
        ("ROCR_VISIBLE_DEVICES", "3,1"),
        ("CUDA_VISIBLE_DEVICES", "1"),
    ]);
    assert_eq!(device_seen(Runtime::Hip, &e), [1]);
    let e = env(&[
        ("ROCR_VISIBLE_DEVICES", "3,1"),
        ("HIP_VISIBLE_DEVICES", "1,0"),
    ]);
    assert_eq!(device_seen(Runtime::Hip, &e), [1, 3]);
    let e = env(&[("ROCR_VISIBLE_DEVICES", "2,3"), ("GPU_DEVICE_ORDINAL", "0")]);
    assert_eq!(device_seen(Runtime::RocmOpenCl, &e), [2]);
    let e = env(&[("CUDA_VISIBLE_DEVICES", "1")]);
    assert_eq!(device_seen(Runtime::Cuda, &e), [0], "FASTEST_FIRST");
    let e = env(&[("CUDA_VISIBLE_DEVICES", "1,5,2")]);
    assert_eq!(device_seen(Runtime::Cuda, &e), [0], "ends at 5");
    let e = env(&[
        ("CUDA_VISIBLE_DEVICES", "1"),
        ("CUDA_DEVICE_ORDER", "PCI_BUS_ID"),
    ]);
    assert_eq!(device_seen(Runtime::Cuda, &e), [1]);
    let e = env(&[("ZE_AFFINITY_MASK", "3,1")]);
    assert_eq!(device_seen(Runtime::LevelZero, &e), [1, 3], "not reordered");
}

// ------------------------------------------------------------ rendering

fn chosen(vendor: Vendor) -> Chosen {
    Chosen {
        vendor,
        why: format!("vendor={} in plugstack.conf", vendor.name()),
    }
}

/// The step environment Slurm 22.05 gives with no gres.conf env flags: the
/// same list in all four variables (measured on the test cluster).
fn slurm_env(alloc: &[usize]) -> HashMap<String, String> {
    let list = alloc
        .iter()
        .map(usize::to_string)
        .collect::<Vec<_>>()
        .join(",");
    let mut env = HashMap::new();
    for name in [
        "CUDA_VISIBLE_DEVICES",
        "ROCR_VISIBLE_DEVICES",
        "GPU_DEVICE_ORDINAL",
        "ZE_AFFINITY_MASK",
        "SLURM_STEP_GPUS",
    ] {
        env.insert(name.to_string(), list.clone());
    }
    env.insert("SLURM_GPUS_ON_NODE".to_string(), alloc.len().to_string());
    env
}

fn plan_for(vendor: Vendor, config: &Config, env: &HashMap<String, String>) -> StepMap {
    match plan_of(vendor, config, env) {
        StepPlan::Map(map) => map,
        other => panic!("expected a mapping, got {other:?}"),
    }
}

/// The plan for a `roundrobin` step with `env` on a `vendor` node, where
/// NVML lists the node's GPUs as `GPU-0`...
fn plan_of(vendor: Vendor, config: &Config, env: &HashMap<String, String>) -> StepPlan {
    let config = Config {
        vendor: VendorSetting::Fixed(vendor),
        ..config.clone()
    };
    let request = OptionRequest::Use {
        choice: Some(Choice::Map(Method::RoundRobin)),
        verbose: true,
        mps: false,
    };
    let node = FakeNode {
        env: env.clone(),
        files: Default::default(),
        nvml: Ok((0..NODE).map(|i| format!("GPU-{i}")).collect()),
        calls: Cell::new(0),
        places: None,
    };
    plan_on(&node, 0, &config, Some(request))
}

/// Why a step stands aside on a `vendor` node; panics when it maps.
fn unbindable(vendor: Vendor, env: &HashMap<String, String>) -> Unbindable {
    match plan_of(vendor, &Config::default(), env) {
        StepPlan::Unmapped(Unmapped {
            why: Some(Aside::Unbindable(why)),
            ..
        }) => why,
        other => panic!("expected to stand aside, got {other:?}"),
    }
}

/// The environment task `local` of `count` ends up with.
fn task_env(
    map: &StepMap,
    env: &HashMap<String, String>,
    local: usize,
    count: usize,
) -> HashMap<String, String> {
    let cuda = env.get("CUDA_VISIBLE_DEVICES").cloned();
    let out = map_task(
        map,
        &TaskInputs {
            node: "n1",
            local_id: local,
            local_count: count,
            rank: local as u32,
            cuda: cuda.as_deref(),
            tres_bind: None,
            cpus: TaskCpus::default(),
            container: Default::default(),
        },
    );
    assert!(!out.set.is_empty(), "{:?}", out.say);
    let mut env = env.clone();
    env.extend(out.set);
    env
}

fn rotation(alloc: &[usize], p: usize) -> Vec<usize> {
    alloc[p..].iter().chain(&alloc[..p]).copied().collect()
}

const ALLOCATIONS: [&[usize]; 3] = [&[0, 1, 2, 3], &[2, 3], &[1, 3]];

#[test]
fn every_runtime_ends_up_on_the_task_gpu() {
    for vendor in [Vendor::Nvidia, Vendor::Amd, Vendor::Intel] {
        for visible in ["single", "rotate"] {
            let config = parse_args(&[format!("visible={visible}")]).unwrap();
            for alloc in ALLOCATIONS {
                let env = slurm_env(alloc);
                let map = plan_for(vendor, &config, &env);
                for p in 0..alloc.len() {
                    let task = task_env(&map, &env, p, alloc.len());
                    for &runtime in runtimes(vendor) {
                        let seen = device_seen(runtime, &task);
                        let case = format!("{vendor:?} visible={visible} alloc={alloc:?} task {p} {runtime:?}: {task:?}");
                        // Level Zero cannot reorder: rotate becomes single.
                        let want = if visible == "rotate" && vendor != Vendor::Intel {
                            rotation(alloc, p)
                        } else {
                            vec![alloc[p]]
                        };
                        assert_eq!(seen, want, "{case}");
                    }
                }
            }
        }
    }
}

#[test]
fn every_runtime_ends_up_on_the_task_share_with_fewer_tasks_than_gpus() {
    for vendor in [Vendor::Nvidia, Vendor::Amd, Vendor::Intel] {
        for visible in ["single", "rotate"] {
            let config = parse_args(&[format!("visible={visible}")]).unwrap();
            let alloc: &[usize] = &[0, 1, 2, 3];
            let env = slurm_env(alloc);
            let map = plan_for(vendor, &config, &env);
            // roundrobin (the tests' default): 2 tasks on 4 GPUs hold 0,2
            // and 1,3; rotate adds the rest after them.
            for (l, share, rotated) in [(0, [0, 2], [0, 2, 1, 3]), (1, [1, 3], [1, 3, 2, 0])] {
                let task = task_env(&map, &env, l, 2);
                for &runtime in runtimes(vendor) {
                    let seen = device_seen(runtime, &task);
                    let case =
                        format!("{vendor:?} visible={visible} task {l} {runtime:?}: {task:?}");
                    let want: Vec<usize> = if visible == "rotate" && vendor != Vendor::Intel {
                        rotated.to_vec()
                    } else {
                        share.to_vec()
                    };
                    assert_eq!(seen, want, "{case}");
                }
            }
        }
    }
}

/// What the plugin wrote before vendors were told apart: every list Slurm
/// set narrowed to the same entries, and no CUDA_DEVICE_ORDER.
fn lockstep(
    env: &HashMap<String, String>,
    alloc: &[usize],
    p: usize,
    visible: Visible,
) -> HashMap<String, String> {
    let tokens: Vec<String> = alloc.iter().map(usize::to_string).collect();
    let mine = join(&visible_list(&tokens, &[p], visible));
    let mut env = env.clone();
    for name in [
        "CUDA_VISIBLE_DEVICES",
        "ROCR_VISIBLE_DEVICES",
        "GPU_DEVICE_ORDINAL",
        "ZE_AFFINITY_MASK",
    ] {
        env.insert(name.to_string(), mine.clone());
    }
    env
}

#[test]
fn the_old_lockstep_narrowing_fails_the_model() {
    // AMD, single, whole node: task 1 gets ROCR=1 CUDA=1 and sees nothing.
    let env = lockstep(&slurm_env(&[0, 1, 2, 3]), &[0, 1, 2, 3], 1, Visible::Single);
    assert_eq!(device_seen(Runtime::Hip, &env), Vec::<usize>::new());
    assert_eq!(device_seen(Runtime::RocmOpenCl, &env), Vec::<usize>::new());
    // AMD, single, partial (2,3): task 0 gets ROCR=2 CUDA=2: nothing either.
    let env = lockstep(&slurm_env(&[2, 3]), &[2, 3], 0, Visible::Single);
    assert_eq!(device_seen(Runtime::Hip, &env), Vec::<usize>::new());
    // AMD, rotate: task 1 gets ROCR=1,2,3,0 CUDA=1,2,3,0 and lands on GPU 2.
    let env = lockstep(&slurm_env(&[0, 1, 2, 3]), &[0, 1, 2, 3], 1, Visible::Rotate);
    assert_eq!(device_seen(Runtime::Hip, &env), [2, 3, 0, 1]);
    // NVIDIA by index without CUDA_DEVICE_ORDER: task 1 lands on GPU 0.
    let env = lockstep(&slurm_env(&[0, 1, 2, 3]), &[0, 1, 2, 3], 1, Visible::Single);
    assert_eq!(device_seen(Runtime::Cuda, &env), [0]);
    // Intel, rotate: ZE=1,2,3,0 is not reordered, so task 1 is on GPU 0.
    let env = lockstep(&slurm_env(&[0, 1, 2, 3]), &[0, 1, 2, 3], 1, Visible::Rotate);
    assert_eq!(device_seen(Runtime::LevelZero, &env), [0, 1, 2, 3]);
}

fn get<'a>(set: &'a HashMap<String, String>, name: &str) -> Option<&'a str> {
    set.get(name).map(String::as_str)
}

#[test]
fn literal_values_for_each_vendor() {
    let config = parse_args(&["visible=rotate"]).unwrap();
    let env = slurm_env(&[2, 3]);
    // Task 1 of 2 on the step's GPUs 2,3.
    let amd = task_env(&plan_for(Vendor::Amd, &config, &env), &env, 1, 2);
    assert_eq!(get(&amd, "ROCR_VISIBLE_DEVICES"), Some("3,2"));
    assert_eq!(get(&amd, "CUDA_VISIBLE_DEVICES"), Some("0,1"));
    assert_eq!(get(&amd, "GPU_DEVICE_ORDINAL"), Some("0,1"));
    assert_eq!(
        get(&amd, "ZE_AFFINITY_MASK"),
        Some("2,3"),
        "as Slurm set it"
    );
    assert_eq!(get(&amd, "CUDA_DEVICE_ORDER"), None);
    let nvidia = task_env(&plan_for(Vendor::Nvidia, &config, &env), &env, 1, 2);
    assert_eq!(get(&nvidia, "CUDA_VISIBLE_DEVICES"), Some("3,2"));
    assert_eq!(get(&nvidia, "CUDA_DEVICE_ORDER"), Some("PCI_BUS_ID"));
    for name in [
        "ROCR_VISIBLE_DEVICES",
        "GPU_DEVICE_ORDINAL",
        "ZE_AFFINITY_MASK",
    ] {
        assert_eq!(get(&nvidia, name), Some("2,3"), "{name} as Slurm set it");
    }
    let map = plan_for(Vendor::Intel, &config, &env);
    assert!(
        map.notes
            .iter()
            .any(|n| n.contains("visible=rotate cannot apply")),
        "{:?}",
        map.notes
    );
    let intel = task_env(&map, &env, 1, 2);
    assert_eq!(get(&intel, "ZE_AFFINITY_MASK"), Some("3"));
    assert_eq!(get(&intel, "CUDA_VISIBLE_DEVICES"), Some("3"));
    assert_eq!(get(&intel, "ROCR_VISIBLE_DEVICES"), Some("2,3"));
    assert_eq!(get(&intel, "GPU_DEVICE_ORDINAL"), Some("2,3"));
}

#[test]
fn amd_node_where_slurm_set_only_cuda_visible_devices() {
    for visible in ["single", "rotate"] {
        let config = parse_args(&[format!("visible={visible}")]).unwrap();
        let mut env = slurm_env(&[1, 3]);
        env.remove("ROCR_VISIBLE_DEVICES");
        env.remove("GPU_DEVICE_ORDINAL");
        env.remove("ZE_AFFINITY_MASK");
        let map = plan_for(Vendor::Amd, &config, &env);
        assert!(map
            .notes
            .iter()
            .any(|n| n.contains("ROCR_VISIBLE_DEVICES not set by Slurm")));
        let task = task_env(&map, &env, 1, 2);
        let want = if visible == "single" { "3" } else { "3,1" };
        assert_eq!(get(&task, "CUDA_VISIBLE_DEVICES"), Some(want));
        for name in [
            "ROCR_VISIBLE_DEVICES",
            "GPU_DEVICE_ORDINAL",
            "ZE_AFFINITY_MASK",
        ] {
            assert_eq!(get(&task, name), None, "{name} never added");
        }
        assert_eq!(device_seen(Runtime::Hip, &task)[0], 3);
    }
    // GPU_DEVICE_ORDINAL without ROCR: each list filters the node directly.
    let mut env = slurm_env(&[1, 3]);
    env.remove("ROCR_VISIBLE_DEVICES");
    let task = task_env(&plan_for(Vendor::Amd, &Config::default(), &env), &env, 1, 2);
    assert_eq!(device_seen(Runtime::Hip, &task), [3]);
    assert_eq!(device_seen(Runtime::RocmOpenCl, &task), [3]);
}

#[test]
fn intel_node_without_ze_affinity_mask_stands_aside() {
    // Level Zero reads ZE_AFFINITY_MASK only: without Slurm's, every task
    // would see every GPU, so no task may get the flag. A mask the user
    // exported is not Slurm's either.
    let mut env = slurm_env(&[0, 1, 2, 3]);
    env.remove("ZE_AFFINITY_MASK");
    for user in [None, Some("2"), Some("0,1,2,3,4")] {
        let mut env = env.clone();
        if let Some(mask) = user {
            env.insert("ZE_AFFINITY_MASK".to_string(), mask.to_string());
        }
        let why = unbindable(Vendor::Intel, &env);
        assert_eq!(why, Unbindable::NoZeList(chosen(Vendor::Intel)), "{user:?}");
        assert_eq!(
            why.to_string(),
            "Slurm set no ZE_AFFINITY_MASK for this step, the one list Level Zero reads (vendor=intel in \
             plugstack.conf)"
        );
    }
}

/// The environment of a step on a `Flags=no_gpu_env` node holding all of
/// its GPUs: Slurm's count and own list, and `exports` the user's.
fn no_gpu_env(exports: &[(&str, &str)]) -> HashMap<String, String> {
    let mut env: HashMap<String, String> = exports
        .iter()
        .map(|(k, v)| (k.to_string(), v.to_string()))
        .collect();
    env.insert("SLURM_GPUS_ON_NODE".to_string(), NODE.to_string());
    env.insert("SLURM_STEP_GPUS".to_string(), "0,1,2,3".to_string());
    env
}

#[test]
fn nvml_uuids_bind_nvidia_tasks_only() {
    // NVML names NVIDIA GPUs by UUID: ROCm finds no such GPU in HIP's list
    // and ROCR and Level Zero would see every GPU, so AMD and Intel nodes
    // stand aside, whatever the user exported.
    for exports in [
        vec![],
        vec![("ROCR_VISIBLE_DEVICES", "7,9"), ("ZE_AFFINITY_MASK", "7,9")],
        // Stale from the GPU session the user submitted from.
        vec![
            ("CUDA_VISIBLE_DEVICES", "0,1"),
            ("ROCR_VISIBLE_DEVICES", "0,1"),
        ],
    ] {
        let env = no_gpu_env(&exports);
        for vendor in [Vendor::Amd, Vendor::Intel] {
            let why = unbindable(vendor, &env);
            assert_eq!(why, Unbindable::NvmlUuids(chosen(vendor)), "{exports:?}");
        }
        // NVIDIA: CUDA_VISIBLE_DEVICES carries the UUID; the user's other
        // lists stay theirs.
        let map = plan_for(Vendor::Nvidia, &Config::default(), &env);
        assert!(map.others.is_empty());
        let task = task_env(&map, &env, 1, NODE);
        assert_eq!(get(&task, "CUDA_VISIBLE_DEVICES"), Some("GPU-1"));
        assert_eq!(device_seen(Runtime::Cuda, &task), [1]);
        for (name, value) in &exports {
            if *name != "CUDA_VISIBLE_DEVICES" {
                assert_eq!(get(&task, name), Some(*value), "{name}");
            }
        }
    }
    assert_eq!(
        unbindable(Vendor::Amd, &no_gpu_env(&[])).to_string(),
        "only NVML lists the step's GPUs, as NVIDIA UUIDs, which amd runtimes do not read \
         (vendor=amd in plugstack.conf)"
    );
}

#[test]
fn an_amd_node_with_the_users_rocr_list_stands_aside() {
    // Slurm set CUDA_VISIBLE_DEVICES (gres.conf without amd_gpu_env) and the
    // user's ROCR_VISIBLE_DEVICES survived: ROCm applies it first, so the
    // index list written on top would name the user's GPUs.
    let mut env = slurm_env(&[2, 3]);
    env.insert("ROCR_VISIBLE_DEVICES".to_string(), "0,1".to_string());
    env.remove("GPU_DEVICE_ORDINAL");
    let why = unbindable(Vendor::Amd, &env);
    assert_eq!(why, Unbindable::UsersRocr(chosen(Vendor::Amd)));
    assert_eq!(
        why.to_string(),
        "ROCR_VISIBLE_DEVICES is the user's, not Slurm's, and ROCm applies it before \
         CUDA_VISIBLE_DEVICES (vendor=amd in plugstack.conf)"
    );
    // The user's HIP_VISIBLE_DEVICES: HIP reads it instead of the list the
    // plugin writes.
    let mut env = slurm_env(&[2, 3]);
    env.insert("HIP_VISIBLE_DEVICES".to_string(), "1".to_string());
    let why = unbindable(Vendor::Amd, &env);
    assert_eq!(why, Unbindable::UsersHip(chosen(Vendor::Amd)));
    assert_eq!(
        why.to_string(),
        "HIP_VISIBLE_DEVICES is the user's, and HIP reads it instead of CUDA_VISIBLE_DEVICES \
         (vendor=amd in plugstack.conf)"
    );
    // The user's GPU_DEVICE_ORDINAL alone: HIP's list carries the GPU, and
    // OpenCL's stays the user's.
    let mut env = slurm_env(&[2, 3]);
    env.remove("ROCR_VISIBLE_DEVICES");
    env.insert("GPU_DEVICE_ORDINAL".to_string(), "7,9".to_string());
    let map = plan_for(Vendor::Amd, &Config::default(), &env);
    let task = task_env(&map, &env, 1, 2);
    assert_eq!(device_seen(Runtime::Hip, &task), [3]);
    assert_eq!(get(&task, "GPU_DEVICE_ORDINAL"), Some("7,9"));
}

// ------------------------------------------------------------ CUDA_DEVICE_ORDER

#[test]
fn pci_bus_order_is_set_only_where_nvidia_gpus_are_named_by_index() {
    let config = Config::default();
    let env = slurm_env(&[0, 1, 2, 3]);
    let task = task_env(&plan_for(Vendor::Nvidia, &config, &env), &env, 1, 4);
    assert_eq!(get(&task, "CUDA_DEVICE_ORDER"), Some("PCI_BUS_ID"));
    assert_eq!(device_seen(Runtime::Cuda, &task), [1]);

    // The user's own choice is kept, and verbose says so.
    let mut user = env.clone();
    user.insert("CUDA_DEVICE_ORDER".to_string(), "FASTEST_FIRST".to_string());
    let map = plan_for(Vendor::Nvidia, &config, &user);
    assert!(!map.rendering.pci_order);
    assert!(
        map.notes.iter().any(|n| n == "CUDA_DEVICE_ORDER=\"FASTEST_FIRST\" kept as set; Slurm's indices follow the PCI bus order"),
        "{:?}",
        map.notes
    );
    let task = task_env(&map, &user, 1, 4);
    assert_eq!(get(&task, "CUDA_DEVICE_ORDER"), Some("FASTEST_FIRST"));

    // UUIDs name one GPU whatever the order: nothing to set.
    let mut uuids = HashMap::new();
    uuids.insert(
        "CUDA_VISIBLE_DEVICES".to_string(),
        "GPU-2,GPU-3".to_string(),
    );
    uuids.insert("SLURM_GPUS_ON_NODE".to_string(), "2".to_string());
    uuids.insert("SLURM_STEP_GPUS".to_string(), "GPU-2,GPU-3".to_string());
    let task = task_env(&plan_for(Vendor::Nvidia, &config, &uuids), &uuids, 1, 2);
    assert_eq!(get(&task, "CUDA_DEVICE_ORDER"), None);
    assert_eq!(device_seen(Runtime::Cuda, &task), [3]);

    // NVML's list is UUIDs too.
    let mut count_only = HashMap::new();
    count_only.insert("SLURM_GPUS_ON_NODE".to_string(), NODE.to_string());
    let task = task_env(
        &plan_for(Vendor::Nvidia, &config, &count_only),
        &count_only,
        3,
        4,
    );
    assert_eq!(get(&task, "CUDA_VISIBLE_DEVICES"), Some("GPU-3"));
    assert_eq!(get(&task, "CUDA_DEVICE_ORDER"), None);

    for vendor in [Vendor::Amd, Vendor::Intel] {
        let task = task_env(&plan_for(vendor, &config, &env), &env, 1, 4);
        assert_eq!(get(&task, "CUDA_DEVICE_ORDER"), None, "{vendor:?}");
    }
}

#[test]
fn vendor_values() {
    assert_eq!("auto".parse(), Ok(VendorSetting::Auto));
    assert_eq!("amd".parse(), Ok(VendorSetting::Fixed(Vendor::Amd)));
    let err = parse_args(&["vendor=rocm"]).unwrap_err();
    assert_eq!(
        err.to_string().split("; valid").next(),
        Some("bad plugstack argument \"vendor=rocm\": vendor must be auto, nvidia, amd or intel, not \"rocm\"")
    );
}
