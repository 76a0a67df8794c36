//! Each rule of a task about to start, on the step's fakes
//! (`crate::step::testing`): the verdict a front end gets, and what the
//! task then gets.

use super::*;
use crate::launch::Ancestry;
use crate::method::Method;
use crate::settings::config::Config;
use crate::settings::option::{Choice, OptionRequest};
use crate::snapshot::Snapshot;
use crate::step::testing::{get, FakeFront, FakeNode, SLURM_4};
use crate::step::{Aside, StepPlan};

/// A task of srun step 7.3, the node's second of four, on SLURM_4's GPUs.
const TASK_1_OF_4: [(&str, &str); 7] = [
    ("SLURM_JOB_ID", "7"),
    ("SLURM_STEP_ID", "3"),
    ("SLURM_LOCALID", "1"),
    ("SLURM_NODEID", "0"),
    ("SLURM_STEP_TASKS_PER_NODE", "4"),
    ("SLURM_PROCID", "1"),
    ("SLURMD_NODENAME", "gpu1"),
];

/// Open MPI's rank 1 of 2 on the node, launch `prterun-n1-42@1`.
const OMPI_1_OF_2: [(&str, &str); 4] = [
    ("OMPI_COMM_WORLD_LOCAL_RANK", "1"),
    ("OMPI_COMM_WORLD_LOCAL_SIZE", "2"),
    ("OMPI_COMM_WORLD_RANK", "3"),
    ("PMIX_NAMESPACE", "prterun-n1-42@1"),
];

fn no_proxy(_: &str) -> Option<u32> {
    None
}

fn facts(verbose: bool, mps: bool) -> TaskFacts<'static> {
    TaskFacts {
        request: OptionRequest::Use {
            choice: Some(Choice::Map(Method::Contiguous)),
            verbose,
            mps,
        },
        vars: Snapshot::default(),
        allow_outside: false,
        config: Config::default(),
        ancestry: Ancestry::default(),
        ancestor_pid: &no_proxy,
        uid: 1000,
        gid: 1000,
        token: 7,
    }
}

fn decide_in(pairs: &[&[(&str, &str)]], facts: &TaskFacts) -> Start {
    let node = FakeNode::new(&pairs.concat(), Ok(vec![]));
    let facts = TaskFacts {
        vars: node.vars(),
        ..facts.clone()
    };
    decide(&facts, &node)
}

fn verdict_in(pairs: &[&[(&str, &str)]], facts: &TaskFacts) -> Verdict {
    decide_in(pairs, facts).verdict
}

fn mapping(verdict: Verdict) -> Mapping {
    match verdict {
        Verdict::Map(mapping) => *mapping,
        other => panic!("expected a mapping, got {other:?}"),
    }
}

fn refusal(verdict: Verdict) -> WhyRefused {
    match verdict {
        Verdict::Refuse(why) => why,
        other => panic!("expected a refusal, got {other:?}"),
    }
}

fn unchanged_why(verdict: Verdict) -> (WhyUnchanged, bool) {
    match verdict {
        Verdict::Unchanged { why, said } => (why, said),
        other => panic!("expected to run unchanged, got {other:?}"),
    }
}

#[test]
fn outside_any_job_nothing_runs_unless_allowed() {
    assert_eq!(
        refusal(verdict_in(&[], &facts(false, false))),
        WhyRefused::OutsideJob
    );
    // Allowed: planned as step 0, on this host's name; no ids to read.
    let allowed = TaskFacts {
        allow_outside: true,
        ..facts(true, false)
    };
    let m = mapping(verdict_in(&[], &allowed));
    assert_eq!(m.vars.node, "n1");
    assert_eq!(m.ids, Err(UnreadableIds::NotSet("SLURM_LOCALID")));
    assert!(matches!(m.plan, StepPlan::Unmapped(_)));
    assert_eq!(
        m.outcome(&FakeFront::default()).say,
        [
            "desi-gpu-map: node n1: no GPUs are allocated to this step on this node; tasks left \
          unchanged"
        ]
    );
}

#[test]
fn the_batch_interactive_and_extern_steps_run_unchanged() {
    for (id, name) in [
        ("4294967291", "the batch step"),
        ("-5", "the batch step"),
        ("4294967290", "the interactive step"),
        ("4294967292", "the extern step"),
    ] {
        let step = [("SLURM_JOB_ID", "7"), ("SLURM_STEP_ID", id)];
        for verbose in [false, true] {
            let (why, said) = unchanged_why(verdict_in(&[&step, &SLURM_4], &facts(verbose, false)));
            assert_eq!(
                why,
                WhyUnchanged::NeverMapped {
                    name,
                    value: id.to_string()
                }
            );
            assert_eq!(said, verbose);
        }
    }
}

#[test]
fn a_job_outside_any_step_runs_unchanged() {
    for var in ["SLURM_JOB_ID", "SLURM_JOBID"] {
        let (why, said) = unchanged_why(verdict_in(&[&[(var, "7")]], &facts(false, false)));
        assert_eq!(
            why,
            WhyUnchanged::OutsideStep {
                var,
                value: "7".to_string()
            }
        );
        assert!(!said);
    }
}

#[test]
fn a_step_the_plugin_mapped_runs_unchanged_and_an_outer_steps_record_counts_for_nothing() {
    let mine = [("DESI_GPU_MAP_STEP", "7.3")];
    let (why, said) = unchanged_why(verdict_in(
        &[&TASK_1_OF_4, &SLURM_4, &mine],
        &facts(true, false),
    ));
    assert_eq!(why, WhyUnchanged::StepMapped);
    assert!(said);
    let outer = [("DESI_GPU_MAP_STEP", "7.2")];
    let m = mapping(verdict_in(
        &[&TASK_1_OF_4, &SLURM_4, &outer],
        &facts(false, false),
    ));
    let out = m.outcome(&FakeFront::default());
    assert_eq!(get(&out, "CUDA_VISIBLE_DEVICES"), Some("1"));
    assert_eq!(get(&out, "DESI_GPU_MAP_STEP"), Some("7.3"));
}

#[test]
fn a_task_of_an_srun_step_is_mapped_and_records_its_step() {
    let m = mapping(verdict_in(&[&TASK_1_OF_4, &SLURM_4], &facts(false, false)));
    assert_eq!(
        m.ids,
        Ok(TaskIds {
            local_id: 1,
            local_count: 4,
            rank: 1
        })
    );
    assert_eq!((m.vars.node.as_str(), m.launched), ("gpu1", false));
    let StepPlan::Map(map) = &m.plan else {
        panic!("mapped: {:?}", m.plan)
    };
    assert_eq!(map.step.as_deref(), Some("7.3"));
    let mut front = FakeFront::default();
    m.clone().start_daemon(&mut front);
    assert_eq!(front.asked.get().0, 0, "no daemon to join");
    let out = m.outcome(&FakeFront::default());
    assert_eq!(get(&out, "DESI_GPU_MAPPED"), Some("1"));
    // A mapped task's lines are news: said without verbose.
    assert!(!m.said(vec!["line".to_string()]).is_empty());
}

#[test]
fn slurms_own_per_task_binding_stands_aside_before_any_plan() {
    let bound = [("SLURMD_TRES_BIND", "gres/gpu:per_task:1")];
    let why = Aside::SlurmBoundTasks(crate::error::Error::SlurmBound(
        "Slurm binds GPUs per task (SLURMD_TRES_BIND=\"gres/gpu:per_task:1\")".to_string(),
    ));
    for mps in [false, true] {
        let m = mapping(verdict_in(
            &[&TASK_1_OF_4, &SLURM_4, &bound],
            &facts(false, mps),
        ));
        let flag = crate::settings::config::DEFAULT_FLAG;
        assert_eq!(m.plan, StepPlan::slurm_binds(flag, why.clone(), mps));
        // Routine, said under verbose only; with MPS asked it is news.
        assert_eq!(m.said(vec!["line".to_string()]).is_empty(), !mps);
    }
}

#[test]
fn a_task_whose_ids_cannot_be_read_runs_unmapped_and_says_why() {
    let cases: [(&str, Option<&str>, UnreadableIds); 4] = [
        (
            "SLURM_LOCALID",
            None,
            UnreadableIds::NotSet("SLURM_LOCALID"),
        ),
        (
            "SLURM_NODEID",
            Some("x"),
            UnreadableIds::NotANumber {
                name: "SLURM_NODEID",
                value: "x".to_string(),
            },
        ),
        (
            "SLURM_NODEID",
            Some("1"),
            UnreadableIds::NoTaskCount {
                counts: "4".to_string(),
                node_id: 1,
            },
        ),
        (
            "SLURM_PROCID",
            Some("4294967296"),
            UnreadableIds::RankTooLarge,
        ),
    ];
    for (var, value, want) in cases {
        let mut pairs: Vec<(&str, &str)> = [&TASK_1_OF_4[..], &SLURM_4].concat();
        pairs.retain(|(name, _)| *name != var);
        pairs.extend(value.map(|v| (var, v)));
        let m = mapping(verdict_in(&[&pairs], &facts(false, false)));
        assert_eq!(m.ids, Err(want.clone()), "{var}");
        let front = FakeFront::default();
        let out = m.outcome(&front);
        assert_eq!(front.asked.get(), (0, 0, 0), "no CPUs read");
        assert!(out.set.is_empty());
        assert!(out.unset.contains(&"DESI_GPU_MAPPED".to_string()));
        assert_eq!(
            out.say,
            [format!(
                "desi-gpu-map: node gpu1: {want}; task left unchanged"
            )]
        );
    }
}

#[test]
fn a_launchers_rank_is_its_launch_not_a_step_of_slurms() {
    // In a batch script (a job, no step): the list it inherited.
    let job = [("SLURM_JOB_ID", "7"), ("CUDA_VISIBLE_DEVICES", "4,5")];
    let bind = [
        ("SLURM_CPU_BIND_TYPE", "mask_cpu:"),
        ("SLURM_CPU_BIND_LIST", "0x1"),
    ];
    let m = mapping(verdict_in(
        &[&OMPI_1_OF_2, &job, &bind],
        &facts(false, false),
    ));
    assert_eq!(
        m.ids,
        Ok(TaskIds {
            local_id: 1,
            local_count: 2,
            rank: 3
        })
    );
    assert_eq!((m.vars.node.as_str(), m.launched), ("n1", true));
    assert_eq!(
        (m.vars.bind_type.as_deref(), m.vars.bind_list.as_deref()),
        (None, None)
    );
    let StepPlan::Map(map) = &m.plan else {
        panic!("mapped: {:?}", m.plan)
    };
    assert_eq!(map.listed.source(), "inherited");
    let out = m.outcome(&FakeFront::default());
    assert_eq!(get(&out, "CUDA_VISIBLE_DEVICES"), Some("5"));
    assert_eq!(
        get(&out, "DESI_GPU_MAP_STEP"),
        Some("openmpi:prterun-n1-42@1")
    );
    // MPICH's launch is told by its proxy's pid, asked of the front end.
    let mpich = [("MPI_LOCALRANKID", "0"), ("MPI_LOCALNRANKS", "1")];
    let proxy = |name: &str| (name == "hydra_pmi_proxy").then_some(41);
    let by_proxy = TaskFacts {
        ancestor_pid: &proxy,
        ..facts(false, false)
    };
    let m = mapping(verdict_in(&[&mpich, &job], &by_proxy));
    let out = m.outcome(&FakeFront::default());
    assert_eq!(
        get(&out, "DESI_GPU_MAP_STEP"),
        Some("mpich:hydra_pmi_proxy.41")
    );
    // No tag: nothing recorded (no made-up step of Slurm's either).
    let m = mapping(verdict_in(&[&mpich, &job], &facts(false, false)));
    assert_eq!(
        get(&m.outcome(&FakeFront::default()), "DESI_GPU_MAP_STEP"),
        None
    );
    // In an srun step (its daemon's): that step's list as Slurm set it,
    // and still the launch's record.
    let step = [("SLURM_JOB_ID", "7"), ("SLURM_STEP_ID", "0")];
    let m = mapping(verdict_in(
        &[&OMPI_1_OF_2, &step, &SLURM_4],
        &facts(false, false),
    ));
    let out = m.outcome(&FakeFront::default());
    // Rank 1 of 2 on four GPUs: the second half.
    assert_eq!(get(&out, "CUDA_VISIBLE_DEVICES"), Some("2,3"));
    assert_eq!(
        get(&out, "DESI_GPU_MAP_STEP"),
        Some("openmpi:prterun-n1-42@1")
    );
    // In the batch step itself: mapped all the same, never untouched.
    let batch = [("SLURM_JOB_ID", "7"), ("SLURM_STEP_ID", "4294967291")];
    let m = mapping(verdict_in(
        &[&OMPI_1_OF_2, &batch, &job[1..]],
        &facts(false, false),
    ));
    assert!(matches!(m.plan, StepPlan::Map(_)));
}

#[test]
fn a_launch_mapped_by_an_earlier_exec_runs_unchanged() {
    let mine = [("DESI_GPU_MAP_STEP", "openmpi:prterun-n1-42@1")];
    let (why, said) = unchanged_why(verdict_in(&[&OMPI_1_OF_2, &mine], &facts(false, false)));
    assert_eq!(why, WhyUnchanged::LaunchMapped);
    assert!(!said);
    // Another launch's record (an outer one) counts for nothing.
    let outer = [
        ("DESI_GPU_MAP_STEP", "openmpi:prterun-n1-41@1"),
        ("CUDA_VISIBLE_DEVICES", "0,1"),
    ];
    mapping(verdict_in(&[&OMPI_1_OF_2, &outer], &facts(false, false)));
}

/// A task of Flux job 15602810880 (`ƒQmmV5h`), the node's second, inside
/// srun step 7.3 (the broker's), as `flux run` gives the broker's
/// variables to every task.
const FLUX_TASK_1: [(&str, &str); 3] = [
    ("FLUX_TASK_LOCAL_ID", "1"),
    ("FLUX_JOB_ID", "ƒQmmV5h"),
    ("FLUX_URI", FLUX_URI),
];

/// The instance that runs it.
const FLUX_URI: &str = "local:///tmp/flux-Ab12Cd/local-0";

/// The record the Flux plugin writes for job ƒQmmV5h of that instance.
fn flux_record() -> String {
    crate::flux::tag(15602810880, Some(FLUX_URI))
}

#[test]
fn a_task_the_flux_plugin_mapped_runs_unchanged_and_another_jobs_record_counts_for_nothing() {
    for verbose in [false, true] {
        for mps in [false, true] {
            let record = flux_record();
            let mine = [("DESI_GPU_MAP_STEP", record.as_str())];
            let (why, said) =
                unchanged_why(verdict_in(&[&FLUX_TASK_1, &mine], &facts(verbose, mps)));
            assert_eq!((why, said), (WhyUnchanged::FluxMapped, verbose));
            // Inside a Slurm step, the broker's: the job's record still.
            let (why, _) = unchanged_why(verdict_in(
                &[&FLUX_TASK_1, &TASK_1_OF_4, &SLURM_4, &mine],
                &facts(verbose, mps),
            ));
            assert_eq!(why, WhyUnchanged::FluxMapped);
        }
    }
    // ASCII's prefix, and the decimal the shell falls back to.
    let record = flux_record();
    for id in ["fQmmV5h", "15602810880"] {
        let task = [
            ("FLUX_TASK_LOCAL_ID", "0"),
            ("FLUX_JOB_ID", id),
            ("FLUX_URI", FLUX_URI),
            ("DESI_GPU_MAP_STEP", record.as_str()),
        ];
        let (why, _) = unchanged_why(verdict_in(&[&task], &facts(false, false)));
        assert_eq!(why, WhyUnchanged::FluxMapped, "{id}");
    }
    // Unmapped, or another job's record (an outer job's, a Slurm step's,
    // a launch's), or no readable job id: refused, naming the Flux plugin.
    let refused = |more: &[(&str, &str)]| {
        let why = refusal(verdict_in(&[&FLUX_TASK_1, more], &facts(false, false)));
        assert_eq!(
            why,
            WhyRefused::Unplaced(crate::launch::Refusal::Flux {
                value: "1".to_string()
            }),
            "{more:?}"
        );
        assert!(why.to_string().contains("flux run -o desi-gpu-map=METHOD"));
    };
    refused(&[]);
    refused(&[("DESI_GPU_MAP_STEP", "flux-15602810881")]);
    let next = crate::flux::tag(15602810881, Some(FLUX_URI));
    refused(&[("DESI_GPU_MAP_STEP", next.as_str())]);
    // The same id in another instance: a job of an instance nested in the
    // mapped one (ids start afresh there), or the id alone.
    let nested = crate::flux::tag(15602810880, Some("local:///tmp/flux-Xy34Zw/local-0"));
    refused(&[("DESI_GPU_MAP_STEP", nested.as_str())]);
    refused(&[("DESI_GPU_MAP_STEP", "flux-15602810880")]);
    refused(&[("DESI_GPU_MAP_STEP", "7.3")]);
    refused(&[("DESI_GPU_MAP_STEP", "flux-ƒQmmV5h")]);
    for id in [None, Some("ƒ0"), Some("ƒ"), Some("x")] {
        let mut task = vec![("FLUX_TASK_LOCAL_ID", "1"), ("DESI_GPU_MAP_STEP", "flux-0")];
        task.extend(id.map(|id| ("FLUX_JOB_ID", id)));
        assert!(
            matches!(
                refusal(verdict_in(&[&task], &facts(false, false))),
                WhyRefused::Unplaced(crate::launch::Refusal::Flux { .. })
            ),
            "{id:?}"
        );
    }
    // A launcher's ranks inside the Flux task are the launcher's, as before.
    let mine = [
        ("DESI_GPU_MAP_STEP", record.as_str()),
        ("CUDA_VISIBLE_DEVICES", "0,1"),
    ];
    mapping(verdict_in(
        &[&FLUX_TASK_1, &OMPI_1_OF_2, &mine],
        &facts(false, false),
    ));
}

#[test]
fn a_flux_tasks_local_id_that_came_through_srun_is_an_outer_launchs() {
    // srun run from inside a Flux task: the step's tasks have the Flux
    // task's variables, and the record of its job, which came through
    // srun: the step is mapped as any other, and the record is no match.
    let through_srun = TaskFacts {
        ancestry: Ancestry {
            above: Vec::new(),
            at_stepd: true,
        },
        ..facts(true, false)
    };
    let record = flux_record();
    let flux_mapped = [("DESI_GPU_MAP_STEP", record.as_str())];
    let start = decide_in(
        &[&FLUX_TASK_1, &flux_mapped, &TASK_1_OF_4, &SLURM_4],
        &through_srun,
    );
    assert_eq!(
        start.outer,
        Some(OuterLaunch {
            names: vec!["FLUX_TASK_LOCAL_ID"]
        })
    );
    let m = mapping(start.verdict);
    assert_eq!(m.ids.map(|ids| ids.local_count), Ok(4));
}

#[test]
fn mps_under_a_launcher_and_unplaceable_ranks_are_refused() {
    assert_eq!(
        refusal(verdict_in(&[&OMPI_1_OF_2], &facts(false, true))),
        WhyRefused::MpsUnderLauncher {
            launcher: "Open MPI (mpirun, prterun)"
        }
    );
    let half = [("MPI_LOCALRANKID", "1")];
    let why = refusal(verdict_in(&[&half], &facts(false, false)));
    assert!(matches!(why, WhyRefused::Unplaced(_)), "{why:?}");
    assert_eq!(
        why.to_string(),
        "MPI_LOCALRANKID=\"1\" is set but MPI_LOCALNRANKS is not: mpich's variables are half \
         set, so this rank's place on the node is unknown; nothing was run"
    );
}

#[test]
fn an_outer_launchs_variables_are_noted_under_verbose_only() {
    let through_srun = TaskFacts {
        ancestry: Ancestry {
            above: Vec::new(),
            at_stepd: true,
        },
        ..facts(true, false)
    };
    let start = decide_in(&[&OMPI_1_OF_2, &TASK_1_OF_4, &SLURM_4], &through_srun);
    assert_eq!(
        start.outer,
        Some(OuterLaunch {
            names: vec!["OMPI_COMM_WORLD_LOCAL_RANK", "OMPI_COMM_WORLD_LOCAL_SIZE"]
        })
    );
    let m = mapping(start.verdict);
    assert_eq!(m.ids.map(|ids| ids.local_count), Ok(4));
    let quiet = TaskFacts {
        ancestry: through_srun.ancestry.clone(),
        ..facts(false, false)
    };
    let start = decide_in(&[&OMPI_1_OF_2, &TASK_1_OF_4, &SLURM_4], &quiet);
    assert!(start.outer.is_none());
}

#[test]
fn a_routine_stand_aside_is_said_under_verbose_only_and_news_always() {
    // No GPUs here: routine.
    for verbose in [false, true] {
        let m = mapping(verdict_in(&[&TASK_1_OF_4], &facts(verbose, false)));
        assert_eq!(m.said(vec!["line".to_string()]).is_empty(), !verbose);
    }
    // A list no task may be given: news.
    let bad = [
        ("CUDA_VISIBLE_DEVICES", "0,0"),
        ("SLURM_STEP_GPUS", "0,0"),
        ("SLURM_GPUS_ON_NODE", "2"),
    ];
    let m = mapping(verdict_in(&[&TASK_1_OF_4, &bad], &facts(false, false)));
    assert!(matches!(m.plan, StepPlan::Unmapped(_)), "{:?}", m.plan);
    assert!(!m.said(vec!["line".to_string()]).is_empty());
}

#[test]
fn a_closest_task_asks_for_its_cpus_and_slurmstepds_but_a_rank_only_its_own() {
    let closest = TaskFacts {
        request: OptionRequest::Use {
            choice: Some(Choice::Map(Method::Closest)),
            verbose: false,
            mps: false,
        },
        ..facts(false, false)
    };
    let m = mapping(verdict_in(&[&TASK_1_OF_4, &SLURM_4], &closest));
    // The fake node's GPUs are not located: nothing to read.
    let cpus_read = |m: &Mapping| {
        let front = FakeFront::default();
        m.outcome(&front);
        let (_, own, stepd) = front.asked.get();
        (own > 0, stepd > 0)
    };
    assert_eq!(cpus_read(&m), (false, false));
    let mut located = m.clone();
    let StepPlan::Map(map) = &mut located.plan else {
        panic!()
    };
    let cpus = crate::cpuset::CpuSet::parse_list("0").unwrap();
    map.near = crate::step::GpuCpus::Located(vec![cpus; 4]);
    assert_eq!(cpus_read(&located), (true, true));
    located.launched = true;
    assert_eq!(cpus_read(&located), (true, false));
}

#[test]
fn the_option_wins_over_the_variable_and_contiguous_over_nothing() {
    let roundrobin = OptionRequest::Use {
        choice: Some(Choice::Map(Method::RoundRobin)),
        verbose: false,
        mps: false,
    };
    // What the task is asked, under exec's settings (`verbose`: its
    // `--verbose`), as its rules read it: the method, verbose, mps.
    let asked = |option, variable, verbose| {
        let facts = TaskFacts {
            request: request(option, variable)?,
            config: Config {
                default: DEFAULT_METHOD,
                verbose,
                ..Config::default()
            },
            ..facts(false, false)
        };
        let wanted = facts.wanted();
        Ok::<_, NoMethod>((wanted.choice, wanted.verbose, wanted.mps))
    };
    assert_eq!(
        asked(Some(roundrobin), Some("closest,verbose"), false),
        Ok((Choice::Map(Method::RoundRobin), false, false))
    );
    assert_eq!(
        asked(None, Some("closest,verbose,mps"), false),
        Ok((Choice::Map(Method::Closest), true, true))
    );
    assert_eq!(
        asked(None, None, true),
        Ok((Choice::Map(Method::Contiguous), true, false))
    );
    let bad = asked(None, Some("x"), false).unwrap_err();
    let NoMethod::BadVariable { value, why } = &bad else {
        panic!("{bad:?}")
    };
    assert_eq!(value, "x");
    assert!(
        matches!(**why, crate::error::Error::BadMethod { .. }),
        "{why:?}"
    );
    let bad = bad.to_string();
    assert!(
        bad.starts_with("DESI_GPU_MAP_METHOD=\"x\": invalid --method \"x\"; valid values: ")
            && bad.ends_with("; give --method"),
        "{bad}"
    );
    assert_eq!(
        asked(Some(OptionRequest::Help), None, false),
        Err(NoMethod::Help)
    );
}

#[test]
fn a_task_given_only_slurms_variables_is_told_what_did_not_arrive_once_per_node() {
    let task_0 = [("SLURM_LOCALID", "0"), ("SLURM_EXPORT_ENV", "NONE")];
    let vars = |extra: &[(&str, &str)]| {
        FakeNode::new(&[&TASK_1_OF_4[..], &task_0, extra].concat(), Ok(vec![])).vars()
    };
    // FakeNode answers the last of a name given twice: local task 0.
    let said = not_passed(&vars(&[])).expect("said");
    assert_eq!(
        said,
        NotPassed {
            export: Some("NONE".to_string())
        }
    );
    let said = said.to_string();
    for part in [
        "SLURM_EXPORT_ENV=\"NONE\"",
        "no PATH",
        "DESI_GPU_MAP_METHOD",
        "contiguous, without mps",
        "srun --export=ALL",
        "export SLURM_EXPORT_ENV=ALL",
        "--export=NONE,DESI_GPU_MAP_METHOD=roundrobin",
    ] {
        assert!(said.contains(part), "{part}: {said}");
    }
    // The environment came (PATH), or one of ours did, or another task.
    assert_eq!(not_passed(&vars(&[("PATH", "/usr/bin")])), None);
    assert_eq!(
        not_passed(&vars(&[("DESI_GPU_MAP_METHOD", "roundrobin")])),
        None
    );
    assert_eq!(
        not_passed(&vars(&[("DESI_GPU_MAP_MPS_SHARE", "even")])),
        None
    );
    assert_eq!(not_passed(&vars(&[("SLURM_LOCALID", "1")])), None);
}

/// exec and the task prolog join the daemon task by task: a task whose
/// own join failed says why, whatever its local id, and once; a task
/// served, or a daemon not asked for (`mps=auto`, quiet), says nothing.
#[test]
fn every_task_whose_join_failed_says_why_once() {
    use crate::mps::{Daemon, Mps};
    let with_mps = |local: &str, asked: bool| {
        let ids = [("SLURM_LOCALID", local)];
        let mut m = mapping(verdict_in(
            &[&TASK_1_OF_4, &ids, &SLURM_4],
            &facts(false, false),
        ));
        let StepPlan::Map(map) = &mut m.plan else {
            panic!("expected a mapped plan: {:?}", m.plan);
        };
        map.mps = Mps::Start(Box::new(Daemon {
            asked,
            ..Daemon::default()
        }));
        m
    };
    let line = "desi-gpu-map: node gpu1: not started; running without MPS";
    for local in ["0", "1", "3"] {
        let mut m = with_mps(local, true);
        m.start_daemon(&mut FakeFront::default());
        let said = m.outcome(&FakeFront::default()).say;
        assert_eq!(
            said.iter().filter(|l| *l == line).count(),
            1,
            "{local}: {said:?}"
        );
        let mut quiet = with_mps(local, false);
        quiet.start_daemon(&mut FakeFront::default());
        let said = quiet.outcome(&FakeFront::default()).say;
        assert!(!said.iter().any(|l| l.contains("MPS")), "{local}: {said:?}");
    }
}
