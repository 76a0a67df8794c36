//! What each task of a step gets ([`TaskOutcome`]): the variables written
//! into its environment for its [`Assignment`], or why it is left alone,
//! and the lines it says.

use super::aside::{stale_names, Aside, Unmapped};
use super::assign::{assign, Assignment};
use super::decision::StepPlan;
use super::inputs::TaskInputs;
use super::lines::{aside_line, unbound_line, verbose_line};
use super::map::{GpuCpus, StepMap};
use crate::env;
use crate::error::Error;
use crate::flux::JobGpus;
use crate::mps::{mps_line, mps_unset, mps_variables, Mps};
use crate::runtime::{render, StepLists};
use crate::slurm::gpus::join;

/// What to do to one task.
#[derive(Debug, Clone, PartialEq, Eq, Default)]
pub struct TaskOutcome {
    /// Variables to remove first.
    pub(crate) unset: Vec<String>,
    /// Variables to set, in order.
    pub set: Vec<(String, String)>,
    /// Lines for the task's stderr.
    pub(crate) say: Vec<String>,
}

impl TaskOutcome {
    /// A task the Flux plugin maps records R's ids of the GPUs it holds
    /// beside them (`DESI_GPU_MAP_FLUX_IDS`), for an instance nested in it
    /// (`gpus`: the job's on this node); an unmapped task's is unchanged.
    pub fn record_flux_ids(&mut self, gpus: &JobGpus) {
        let ids = self
            .set
            .iter()
            .find(|(name, _)| name == env::TASK_GPUS)
            .and_then(|(_, held)| gpus.ids_of(held));
        if let Some(ids) = ids {
            self.set.push((env::FLUX_IDS.to_string(), ids));
        }
    }
}

/// What to do to one task of a step planned as `plan`.
pub fn task_outcome(plan: &StepPlan, task: &TaskInputs) -> TaskOutcome {
    match plan {
        StepPlan::Untouched => TaskOutcome::default(),
        StepPlan::Unmapped(unmapped) => unmapped_task(unmapped, task.node, task.local_id),
        StepPlan::Map(map) => map_task(map, task),
    }
}

/// Carries `outcome` out through `unset` and `set`, which change the task's
/// environment, and returns the lines the task says. Removals come first,
/// then each variable in order; a failed one stops the rest, since a
/// half-set environment is better than a wrong flag (the flag is set last).
pub fn carry_out<E: std::fmt::Display>(
    outcome: &TaskOutcome,
    node: &str,
    unset: &mut dyn FnMut(&str) -> Result<(), E>,
    set: &mut dyn FnMut(&str, &str) -> Result<(), E>,
) -> Vec<String> {
    let mut lines = outcome.say.clone();
    for name in &outcome.unset {
        if let Err(e) = unset(name) {
            lines.push(aside_line(node, &format!("cannot unset {name}: {e}")));
        }
    }
    for (name, value) in &outcome.set {
        if let Err(e) = set(name, value) {
            let why = format!("cannot set {name}: {e}; later variables not set");
            lines.push(aside_line(node, &why));
            break;
        }
    }
    lines
}

/// A task whose ids could not be read: it runs unmapped, and says why.
pub(super) fn unreadable_task(plan: &StepPlan, node: &str, why: &str) -> TaskOutcome {
    match plan {
        StepPlan::Untouched => TaskOutcome::default(),
        // Which task is the node's first is unknown: each says why.
        StepPlan::Unmapped(unmapped) => TaskOutcome {
            unset: unmapped.clear.clone(),
            set: Vec::new(),
            say: unmapped
                .why
                .iter()
                .map(|why| aside_line(node, &why.to_string()))
                .collect(),
        },
        StepPlan::Map(map) => TaskOutcome {
            unset: stale_names(&map.flag),
            set: Vec::new(),
            say: vec![aside_line(node, &format!("{why}; task left unchanged"))],
        },
    }
}

/// A task of an unmapped step: stale flags go; the node's first task
/// (local id 0) says why, so that each node says it once.
fn unmapped_task(unmapped: &Unmapped, node: &str, local_id: usize) -> TaskOutcome {
    let say = match &unmapped.why {
        Some(why) if local_id == 0 => vec![aside_line(node, &why.to_string())],
        _ => Vec::new(),
    };
    TaskOutcome {
        unset: unmapped.clear.clone(),
        set: Vec::new(),
        say,
    }
}

/// Maps one task of a mapped step.
pub(crate) fn map_task(map: &StepMap, task: &TaskInputs) -> TaskOutcome {
    match assign(map, task) {
        Ok(assignment) => mapped_task(map, task, &assignment),
        // Said once per node, like a step's stand-aside.
        Err(bound @ Error::SlurmBound(_)) => {
            let unmapped = Unmapped {
                why: Some(Aside::SlurmBoundTasks(bound)),
                clear: stale_names(&map.flag),
            };
            unmapped_task(&unmapped, task.node, task.local_id)
        }
        Err(e) => TaskOutcome {
            unset: stale_names(&map.flag),
            set: Vec::new(),
            say: vec![aside_line(task.node, &format!("{e}; task left unchanged"))],
        },
    }
}

/// The variables a mapped task gets, and its `verbose` lines.
fn mapped_task(map: &StepMap, task: &TaskInputs, assignment: &Assignment) -> TaskOutcome {
    let mps = task.container.mps(&map.mps);
    let mut say = Vec::new();
    if task.local_id == 0 {
        let line = task.container.line(map, task.cuda);
        say.extend(line.map(|why| aside_line(task.node, &why)));
    }
    // A `closest` step that fell back says so once per node, verbose or not.
    if let (GpuCpus::Fallback(why), 0) = (&map.near, task.local_id) {
        say.push(aside_line(task.node, &why.to_string()));
    }
    // So does one whose tasks' CPUs tell no GPU apart.
    if let Some(c) = assignment.closeness.as_ref().filter(|c| c.alike) {
        say.push(aside_line(
            task.node,
            &unbound_line(c, map.listed.granted()),
        ));
    }
    if task.local_id == 0 {
        if let Some(line) = mps_line(&mps, map.verbose) {
            say.push(aside_line(task.node, &line));
        }
    }
    if map.verbose {
        say.push(verbose_line(map, &mps, task, assignment));
        if task.local_id == 0 {
            say.extend(map.notes.iter().map(|n| aside_line(task.node, n)));
        }
    }
    let mut unset = mps_unset(&mps, &map.mps_inherited, assignment.position());
    let mut set = variables_with(map, &mps, assignment);
    if task.container.withholds_flag() {
        set.retain(|(name, _)| *name != map.flag);
        unset.push(map.flag.clone());
    }
    TaskOutcome { unset, set, say }
}

/// Every variable a mapped task gets, in the order they are set: the GPU
/// lists for the node's vendor, then the plugin's own.
#[cfg(test)]
pub(crate) fn variables(map: &StepMap, assignment: &Assignment) -> Vec<(String, String)> {
    variables_with(map, &map.mps, assignment)
}

/// [`variables`], with the step's MPS as this task can use it.
fn variables_with(map: &StepMap, mps: &Mps, assignment: &Assignment) -> Vec<(String, String)> {
    let lists = StepLists::new(map.task_tokens(), map.listed.is_runtimes(), &map.others)
        .granted(map.listed.granted());
    let mut set = render(&map.rendering, &lists, &assignment.share);
    set.extend(mps_variables(mps, assignment.position()));
    set.push((env::METHOD.to_string(), map.method_used().to_string()));
    set.push((env::NODE_GPUS.to_string(), map.gpus.len().to_string()));
    set.push((env::TASK_GPUS.to_string(), join(&assignment.gpus)));
    if let Some(step) = &map.step {
        set.push((env::STEP.to_string(), step.clone()));
    }
    // Last: a task whose variables could not all be set gets no flag.
    set.push((map.flag.clone(), "1".to_string()));
    set
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::cpuset::CpuSet;
    use crate::method::Method;
    use crate::settings::config::Config;
    use crate::settings::option::Choice;
    use crate::settings::site::parse_args;
    use crate::step::testing::*;
    use crate::step::*;

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
        let map = mapped_4(&config, Method::RoundRobin);
        let out = map_task(&map, &task(2, 4, Some("0,1,2,3")));
        assert_eq!(get(&out, "CUDA_VISIBLE_DEVICES"), Some("2,3,0,1"));
        assert_eq!(get(&out, "ROCR_VISIBLE_DEVICES"), None);
        assert_eq!(get(&out, "MY_FLAG"), Some("1"));
        assert_eq!(get(&out, "DESI_GPU_MAPPED"), None);
    }

    #[test]
    fn unmapped_tasks_lose_the_flag_and_the_first_says_why() {
        let plan = StepPlan::aside("DESI_GPU_MAPPED", Aside::NotInitialised);
        let first = task_outcome(&plan, &task(0, 2, None));
        assert_eq!(
            first.say,
            ["desi-gpu-map: node n1: plugin not initialised; tasks left unchanged"]
        );
        assert!(first.set.is_empty());
        assert_eq!(first.unset[0], "DESI_GPU_MAPPED");
        let second = task_outcome(&plan, &task(1, 2, None));
        assert!(second.say.is_empty());
        assert_eq!(second.unset, first.unset);
        let out = unreadable_task(&plan, "n1", "cannot read");
        assert_eq!(out.unset, first.unset);
    }

    #[test]
    fn fewer_tasks_than_gpus_each_hold_a_share_and_say_it() {
        let verbose = Config {
            verbose: true,
            ..Config::default()
        };
        let rotate = parse_args(&["visible=rotate"]).unwrap();
        for (config, method, l, n, cuda, gpus) in [
            (&verbose, Method::Contiguous, 1, 2, "2,3", "2,3"),
            (&verbose, Method::Contiguous, 0, 3, "0,1", "0,1"),
            (&verbose, Method::Contiguous, 2, 3, "3", "3"),
            (&verbose, Method::RoundRobin, 1, 2, "1,3", "1,3"),
            (&verbose, Method::Contiguous, 0, 1, "0,1,2,3", "0,1,2,3"),
            (&rotate, Method::Contiguous, 1, 2, "2,3,0,1", "2,3"),
            (&rotate, Method::RoundRobin, 1, 2, "1,3,2,0", "1,3"),
            // As many tasks as GPUs or more: one GPU, as before.
            (&verbose, Method::RoundRobin, 5, 6, "1", "1"),
        ] {
            let map = mapped_4(config, method);
            let out = map_task(&map, &task(l, n, Some("0,1,2,3")));
            let case = format!("{method:?} {l}/{n}: {out:?}");
            assert_eq!(get(&out, "CUDA_VISIBLE_DEVICES"), Some(cuda), "{case}");
            assert_eq!(get(&out, "DESI_GPU_MAP_GPUS"), Some(gpus), "{case}");
            assert_eq!(get(&out, "DESI_GPU_MAPPED"), Some("1"), "{case}");
            if config.verbose {
                let said = format!("gpu={gpus} visible={cuda} ");
                assert!(out.say.iter().any(|l| l.contains(&said)), "{case}");
            }
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
        let map = mapped_4(&config, Method::Contiguous);
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
                cpus: TaskCpus::default(),
                container: Default::default(),
            },
        );
        assert_eq!(
            out.say,
            ["desi-gpu-map: node=n2 rank=7 local=3/4 gpu=3 visible=3 gpus=0,1,2,3 method=contiguous source=slurm"]
        );
    }

    #[test]
    fn a_failed_variable_stops_the_rest_and_is_said() {
        let outcome = TaskOutcome {
            unset: vec!["A".to_string()],
            set: vec![
                ("B".to_string(), "1".to_string()),
                ("C".to_string(), "2".to_string()),
                ("FLAG".to_string(), "1".to_string()),
            ],
            say: vec!["first".to_string()],
        };
        let mut done = Vec::new();
        let lines = carry_out(
            &outcome,
            "n1",
            &mut |_| Err("no".to_string()),
            &mut |name, _| match name {
                "C" => Err("full".to_string()),
                _ => {
                    done.push(name.to_string());
                    Ok(())
                }
            },
        );
        assert_eq!(done, ["B"], "nothing after the failure, the flag least");
        assert_eq!(
            lines,
            [
                "first",
                "desi-gpu-map: node n1: cannot unset A: no",
                "desi-gpu-map: node n1: cannot set C: full; later variables not set"
            ]
        );
    }

    #[test]
    fn one_assignment_per_task_feeds_the_variables() {
        let config = parse_args(&["visible=rotate"]).unwrap();
        let map = mapped_4(&config, Method::RoundRobin);
        let t = task(2, 4, Some("0,1,2,3"));
        let got = assign(&map, &t).unwrap();
        let want: Vec<String> = ["2", "3", "0", "1"].map(String::from).to_vec();
        assert_eq!(
            (got.position(), got.gpus.as_slice()),
            (2, ["2".to_string()].as_slice())
        );
        assert_eq!(got.visible, want);
        let out = map_task(&map, &t);
        assert_eq!(out.set, variables(&map, &got));
        assert_eq!(get(&out, "CUDA_VISIBLE_DEVICES"), Some("2,3,0,1"));
        assert!(matches!(
            assign(&map, &task(0, 4, Some("1"))),
            Err(Error::SlurmBound(_))
        ));
        assert!(matches!(
            assign(&map, &task(4, 4, Some("0,1,2,3"))),
            Err(Error::LocalIdOutOfRange { .. })
        ));
    }

    #[test]
    fn closest_tasks_take_the_gpu_near_their_cpus() {
        let config = Config {
            verbose: true,
            ..Config::default()
        };
        let mut map = mapped_4(&config, Method::Closest);
        // Not located yet: contiguous, and the first task says why.
        let out = map_task(&map, &task(0, 4, Some("0,1,2,3")));
        assert_eq!(get(&out, "CUDA_VISIBLE_DEVICES"), Some("0"));
        assert_eq!(
            out.say[0],
            "desi-gpu-map: node n1: closest: no topology was given; using contiguous"
        );
        assert!(map_task(&map, &task(1, 4, Some("0,1,2,3")))
            .say
            .iter()
            .all(|l| !l.contains("using contiguous")));
        assert!(!StepPlan::Map(map.clone()).needs_task_cpus(), "not located");
        let perlmutter = crate::topology::Preset::Perlmutter.topology();
        map.near = locate(&map.gpus, Ok(&perlmutter));
        assert!(StepPlan::Map(map.clone()).needs_task_cpus());
        let contiguous = mapped_4(&config, Method::Contiguous);
        assert!(!StepPlan::Map(contiguous).needs_task_cpus());
        let list = "0xffff,0xffff0000,0xffff00000000,0xffff000000000000";
        let gpu_of = |l: usize, cpus: TaskCpus| {
            let t = TaskInputs {
                cpus,
                ..task(l, 4, Some("0,1,2,3"))
            };
            let out = map_task(&map, &t);
            (
                get(&out, "CUDA_VISIBLE_DEVICES").unwrap().to_string(),
                out.say,
            )
        };
        // Slurm bound task l to 16 of slurmstepd's 128 CPUs, as listed.
        let node = || Some(CpuSet::parse("0-127").unwrap());
        let from_slurm = |l: usize| TaskCpus {
            own: CpuSet::range(16 * l, 16 * l + 15),
            parent: node(),
            bind_type: Some("mask_cpu:"),
            bind_list: Some(list),
        };
        let got: Vec<String> = (0..4).map(|l| gpu_of(l, from_slurm(l)).0).collect();
        assert_eq!(got, ["3", "2", "1", "0"]);
        let (_, say) = gpu_of(0, from_slurm(0));
        assert_eq!(
            say[0],
            "desi-gpu-map: node=n1 rank=0 local=0/4 gpu=3 visible=3 gpus=0,1,2,3 method=closest \
              source=slurm cpus=0-15 cpus_from=slurm gpu_cpus=0-15,64-79 near=yes"
        );
        // A list that disagrees with the task's real mask is not used.
        let disagreeing = TaskCpus {
            own: Some(CpuSet::parse("20-23").unwrap()),
            ..from_slurm(1)
        };
        let (gpu, say) = gpu_of(1, disagreeing);
        assert_eq!(gpu, "2");
        assert!(say[0].contains("cpus_from=own"), "{say:?}");
        // Own mask only.
        let own = TaskCpus {
            own: Some(CpuSet::parse("20-23").unwrap()),
            ..TaskCpus::default()
        };
        let (gpu, say) = gpu_of(1, own);
        assert_eq!(gpu, "2");
        assert!(
            say[0].ends_with("cpus=20-23 cpus_from=own gpu_cpus=16-31,80-95 near=yes"),
            "{say:?}"
        );
        // Nothing known: contiguous.
        let (gpu, say) = gpu_of(1, TaskCpus::default());
        assert_eq!(gpu, "1");
        assert!(
            say[0].ends_with("cpus=- cpus_from=none gpu_cpus=32-47,96-111 near=no"),
            "{say:?}"
        );
        // Unbound tasks (every CPU): contiguous, and the first task says
        // so once; a bound task 0 says nothing of it.
        let unbound = || TaskCpus {
            own: Some(CpuSet::parse("0-127").unwrap()),
            ..TaskCpus::default()
        };
        let (gpu, say) = gpu_of(0, unbound());
        assert_eq!(gpu, "0");
        assert_eq!(
            say[0],
            "desi-gpu-map: node n1: closest: the tasks' CPUs (0-127 for local task 0) are as \
             near to every GPU as to any (bind tasks to CPUs, e.g. srun --cpu-bind=cores); \
             using contiguous"
        );
        assert!(!gpu_of(1, unbound()).1.iter().any(|l| l.contains("as near")));
        assert!(!gpu_of(0, from_slurm(0))
            .1
            .iter()
            .any(|l| l.contains("as near")));
        let all_cpus = || TaskCpus {
            own: CpuSet::range(0, 63),
            parent: node(),
            bind_type: Some("mask_cpu:"),
            bind_list: Some("0xffffffffffffffff"),
        };
        assert!(gpu_of(0, all_cpus()).1[0].contains("(0-63 for local task 0) are as near"));
        // A GPU the topology lacks: the step falls back, said once.
        let mut far = mapped(
            plan_with(
                &Config::default(),
                Choice::Map(Method::Closest),
                &[
                    ("CUDA_VISIBLE_DEVICES", "0,7"),
                    ("SLURM_STEP_GPUS", "0,7"),
                    ("SLURM_GPUS_ON_NODE", "2"),
                ],
                Ok(vec![]),
            )
            .0,
        );
        far.near = locate(&far.gpus, Ok(&perlmutter));
        let out = map_task(&far, &task(0, 2, Some("0,7")));
        assert_eq!(
            out.say,
            ["desi-gpu-map: node n1: closest: cannot locate GPU \"7\"; using contiguous"]
        );
        assert_eq!(get(&out, "DESI_GPU_MAP_METHOD"), Some("contiguous"));
    }

    #[test]
    fn a_closest_step_that_falls_back_says_contiguous() {
        let config = Config {
            verbose: true,
            ..Config::default()
        };
        let mut map = mapped_4(&config, Method::Closest);
        let method_of = |map: &StepMap| {
            let out = map_task(map, &task(1, 4, Some("0,1,2,3")));
            let verbose = out.say.iter().find(|l| l.contains(" rank=")).cloned();
            (get(&out, "DESI_GPU_MAP_METHOD").map(String::from), verbose)
        };
        // Not located: the step is placed contiguously, and says so.
        assert_eq!(map.method_used(), Method::Contiguous);
        let (method, verbose) = method_of(&map);
        assert_eq!(method.as_deref(), Some("contiguous"));
        assert!(verbose.unwrap().contains(" method=contiguous "));
        map.near = locate(&map.gpus, Err("no files".to_string()));
        assert_eq!(method_of(&map).0.as_deref(), Some("contiguous"));
        // Located: closest, even where the tasks' CPUs tell no GPU apart
        // (the rule places them contiguously, as closest).
        let perlmutter = crate::topology::Preset::Perlmutter.topology();
        map.near = locate(&map.gpus, Ok(&perlmutter));
        assert_eq!(map.method_used(), Method::Closest);
        let (method, verbose) = method_of(&map);
        assert_eq!(method.as_deref(), Some("closest"));
        assert!(verbose.unwrap().contains(" method=closest "));
        let other = mapped_4(&config, Method::RoundRobin);
        assert_eq!(other.method_used(), Method::RoundRobin);
    }
}
