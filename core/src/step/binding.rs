//! When Slurm's own GPU binding wins: Slurm narrows each task's GPUs itself
//! under `--gpus-per-task`, `--ntasks-per-gpu` and any `--gpu-bind` but
//! `none` (its grammar is read in [`crate::slurm::bind`]), and the plugin then
//! keeps Slurm's binding.

use super::aside::Aside;
use super::inputs::TaskInputs;
use super::map::StepMap;
use crate::env;
use crate::error::Error;
use crate::slurm::bind::{parse_gpu_bind, GpuBind};
use crate::snapshot::{Snapshot, BIND_REQUESTS, PER_TASK_REQUESTS};
use crate::text::quote;

/// Names the request under which Slurm already narrows GPUs per task.
/// `--gpus-per-task` and `--ntasks-per-gpu` always bind; a bind request
/// binds unless it is `none` (see [`crate::slurm::bind`]).
pub(super) fn slurm_binds_per_task(vars: &Snapshot) -> Option<Aside> {
    for request in PER_TASK_REQUESTS {
        let Some(value) = vars.value(request) else {
            continue;
        };
        let binds = !BIND_REQUESTS.contains(&request)
            || matches!(parse_gpu_bind(value), GpuBind::PerTask(_));
        if binds {
            let (request, value) = (request.name(), value.to_string());
            return Some(Aside::SlurmBindsStep { request, value });
        }
    }
    None
}

/// Where the task itself plans the step (`desi-gpu-map exec`), the step's
/// lists it reads are the task's, which slurmstepd has already narrowed
/// where it binds per task: a plan from them would find a count that
/// disagrees, or no list of Slurm's. So a task that `SLURMD_TRES_BIND` says
/// Slurm bound stands aside before any plan, with the line the plugin's
/// task would say ([`Aside::SlurmBoundTasks`], routine: said only with
/// `verbose`).
pub(crate) fn slurm_bound_here(tres_bind: Option<&str>) -> Option<Aside> {
    per_task(tres_bind?).map(|why| Aside::SlurmBoundTasks(Error::SlurmBound(why)))
}

/// Why `SLURMD_TRES_BIND` says Slurm binds GPUs per task, if it does.
fn per_task(tres_bind: &str) -> Option<String> {
    match parse_gpu_bind(tres_bind) {
        GpuBind::PerTask(how) => Some(format!(
            "Slurm binds GPUs per task ({}={how})",
            env::TRES_BIND
        )),
        GpuBind::Unbound => None,
    }
}

/// Says why Slurm's own per-task binding applies to this task, if it does.
/// slurmstepd binds after `user_init`, so only the task's environment
/// shows it: `SLURMD_TRES_BIND`, or a list that differs from the step's
/// (unless a container plugin that ran first put its image's there:
/// [`super::container`]).
/// `--gpu-bind=none` binds nothing (`gpu:none` from 22.05 and 23.02, which
/// also remove the list from each task; `gres/gpu:none` from 23.11, which
/// keep it): the step's list, as Slurm allocated it, is then mapped.
pub(super) fn slurm_bound_task(map: &StepMap, task: &TaskInputs) -> Option<String> {
    if let Some(bind) = task.tres_bind {
        return per_task(bind);
    }
    // A container plugin that ran first put its image's list there.
    if map.listed.step_cuda() == task.cuda || task.container.entered() {
        return None;
    }
    Some(format!(
        "Slurm narrowed {} per task (now {})",
        env::CUDA,
        task.cuda.map_or_else(|| "unset".to_string(), quote)
    ))
}

#[cfg(test)]
mod tests {
    use crate::settings::config::Config;
    use crate::settings::option::{Choice, OptionRequest};
    use crate::step::testing::*;
    use crate::step::*;

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
            assert_eq!(
                aside(plan(&pairs)),
                Aside::SlurmBindsStep {
                    request: var,
                    value: value.to_string()
                }
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
    fn mps_asked_where_slurm_binds_is_said_not_dropped() {
        let mut pairs = SLURM_4.to_vec();
        pairs.push(("SLURM_GPUS_PER_TASK", "1"));
        let request = OptionRequest::Use {
            choice: Some(Choice::Map(crate::method::Method::Contiguous)),
            verbose: false,
            mps: true,
        };
        let (plan, _) = plan_req(&Config::default(), Some(request), &pairs, Ok(vec![]));
        let why = aside(plan);
        assert!(!why.is_routine());
        assert_eq!(
            why.to_string(),
            "Slurm binds GPUs per task in this step (SLURM_GPUS_PER_TASK=\"1\"); keeping \
             Slurm's binding, and running without MPS, which starts only for a step whose tasks \
             are mapped here; drop --gpus-per-task or --gpu-bind for MPS"
        );
    }

    #[test]
    fn a_task_planning_for_itself_stands_aside_where_slurm_bound_it() {
        for bind in ["gpu:per_task:1", "gres/gpu:per_task:1", "gres/gpu:closest"] {
            let why = slurm_bound_here(Some(bind)).unwrap();
            assert!(why.is_routine(), "{bind}");
            assert_eq!(
                why.to_string(),
                format!(
                    "Slurm binds GPUs per task (SLURMD_TRES_BIND=\"{bind}\"); keeping Slurm's \
                     binding"
                )
            );
        }
        for bind in [None, Some("gpu:none"), Some("gres/gpu:none"), Some("")] {
            assert_eq!(slurm_bound_here(bind), None, "{bind:?}");
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
    fn a_list_the_user_exported_is_not_slurms_binding() {
        // Flags=no_gpu_env, whole node: NVML lists the GPUs and the user's
        // stale list (from the GPU session they submitted from) survives
        // into every task. It is overwritten, and Slurm is not blamed.
        let config = crate::settings::config::Config {
            verbose: true,
            ..crate::settings::config::Config::default()
        };
        let c = crate::settings::option::Choice::Map(crate::method::Method::Contiguous);
        for stale in ["5,6", "0,0", "0"] {
            let pairs = [
                ("SLURM_GPUS_ON_NODE", "2"),
                ("SLURM_STEP_GPUS", "0,1"),
                ("CUDA_VISIBLE_DEVICES", stale),
            ];
            let (p, calls) = plan_with(&config, c, &pairs, Ok(uuids(2)));
            let map = mapped(p);
            let exported = Some(stale.to_string());
            assert_eq!(map.listed, Listed::Nvml { exported });
            assert_eq!(calls, 1);
            let note = format!(
                "CUDA_VISIBLE_DEVICES=\"{stale}\" was the user's, not Slurm's: replaced by \
                 NVML's list"
            );
            assert!(map.notes.contains(&note), "{:?}", map.notes);
            for l in 0..2 {
                let out = map_task(&map, &task(l, 2, Some(stale)));
                let want = format!("GPU-fake-n1-{l}");
                assert_eq!(get(&out, "CUDA_VISIBLE_DEVICES"), Some(want.as_str()));
                assert_eq!(get(&out, "DESI_GPU_MAPPED"), Some("1"));
                assert!(
                    out.say.iter().all(|l| !l.contains("Slurm narrowed")),
                    "{:?}",
                    out.say
                );
            }
            // A value that changed after the step started was Slurm's doing.
            let out = map_task(&map, &task(0, 2, Some("1")));
            assert!(out.set.is_empty());
            assert!(out.say[0].contains("Slurm narrowed CUDA_VISIBLE_DEVICES per task (now \"1\")"));
        }
        // Nothing exported: the tasks have none, as the step had.
        let pairs = [("SLURM_GPUS_ON_NODE", "2"), ("SLURM_STEP_GPUS", "0,1")];
        let map = mapped(plan_with(&config, c, &pairs, Ok(uuids(2))).0);
        assert_eq!(map.listed, Listed::Nvml { exported: None });
        let out = map_task(&map, &task(1, 2, None));
        assert_eq!(get(&out, "CUDA_VISIBLE_DEVICES"), Some("GPU-fake-n1-1"));
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
}
