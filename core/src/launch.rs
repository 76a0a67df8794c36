//! Launchers other than srun: which one started a process, and where its
//! rank sits on the node (its node-local id and the node's rank count), as
//! that launcher writes them into each rank's environment. One table
//! ([`LAUNCHERS`]) declares each launcher; `desi-gpu-map exec`'s help, its
//! refusals and the user guide's table (`docs/user-guide.md`) are read
//! from it.
//!
//! Where a launcher's variables and Slurm's both appear, the launcher's
//! win: inside an allocation `mpirun` and `mpiexec` start one daemon per
//! node through srun, so Slurm's variables describe that daemon step (every
//! rank would read `SLURM_LOCALID=0`), not the ranks.
//!
//! But a launcher's variables count only where that launcher started this
//! process ([`Ancestry`]): srun run from inside an MPI rank, or a job
//! submitted from one, hands the rank's variables to every task, and a
//! launcher nested in another's rank inherits the outer one's. So each
//! launcher's variables are compared with what the process's ancestors
//! had: values that came down unchanged from above slurmstepd are srun's
//! environment, not a launch, and where two launchers placed the rank the
//! nearer launch wins.

use crate::env;
use crate::slurm::tasks::MAX_TASKS_PER_NODE;
use crate::snapshot::{NotANumber, Snapshot, Var};
use crate::text::{one_of, quote};
use std::fmt;

/// A launcher that tells each rank its node-local id and count.
#[derive(Debug, PartialEq, Eq)]
pub struct Launcher {
    /// Its name in messages and `plan --launcher`.
    pub name: &'static str,
    /// What it is, and the commands that start it.
    pub title: &'static str,
    /// The rank's node-local id, from 0.
    pub local_rank: Var,
    /// The number of ranks on the rank's node.
    pub local_size: Var,
    /// The rank's global rank, for the `verbose` line.
    pub(crate) rank: Var,
    /// What tells this launch from another: the first of these variables
    /// that is set, else the pid of the nearest ancestor named `proxy`.
    pub(crate) tag_vars: &'static [Var],
    pub(crate) proxy: Option<&'static str>,
    /// One line that starts ranks under it, for the user guide and the help.
    pub example: &'static str,
}

/// Every launcher exec knows besides srun, in the order they are checked.
pub const LAUNCHERS: [Launcher; 4] = [
    Launcher {
        name: "openmpi",
        title: "Open MPI (mpirun, prterun)",
        local_rank: Var::OmpiLocalRank,
        local_size: Var::OmpiLocalSize,
        rank: Var::OmpiRank,
        tag_vars: &[Var::PmixNamespace, Var::OmpiJobid],
        proxy: None,
        example: "mpirun -np 8 desi-gpu-map exec --method contiguous -- ./app",
    },
    Launcher {
        name: "mpich",
        title: "MPICH Hydra (mpiexec)",
        local_rank: Var::HydraLocalRank,
        local_size: Var::HydraLocalSize,
        rank: Var::PmiRank,
        tag_vars: &[],
        proxy: Some(env::HYDRA_PROXY),
        example: "mpiexec -n 8 desi-gpu-map exec --method contiguous -- ./app",
    },
    Launcher {
        name: "pals",
        title: "Cray PALS (mpiexec; Aurora's variables)",
        local_rank: Var::PalsLocalRank,
        local_size: Var::PalsLocalSize,
        rank: Var::PalsRank,
        tag_vars: &[Var::PalsApid],
        proxy: None,
        example: "mpiexec -n 24 --ppn 12 desi-gpu-map exec --method roundrobin -- ./app",
    },
    Launcher {
        name: "pals-pmi",
        title: "Cray PALS/PMI (mpiexec; Polaris's variables)",
        local_rank: Var::PmiLocalRank,
        local_size: Var::PmiLocalSize,
        rank: Var::PmiRank,
        tag_vars: &[Var::PalsApid],
        proxy: None,
        example: "mpiexec -n 8 --ppn 4 desi-gpu-map exec --method contiguous -- ./app",
    },
];

/// The launcher named `name`, or the valid names.
pub fn launcher_named(name: &str) -> Result<&'static Launcher, String> {
    LAUNCHERS
        .iter()
        .find(|l| l.name == name)
        .ok_or_else(launcher_names)
}

/// `openmpi, mpich, pals or pals-pmi`.
pub(crate) fn launcher_names() -> String {
    let names: Vec<&str> = LAUNCHERS.iter().map(|l| l.name).collect();
    one_of(&names)
}

/// Each launcher's variables, `OMPI_COMM_WORLD_LOCAL_RANK/..._SIZE`, for
/// messages that say what would be needed.
fn every_pair() -> String {
    let pairs: Vec<String> = LAUNCHERS
        .iter()
        .map(|l| format!("{} and {}", l.local_rank, l.local_size))
        .collect();
    let pairs: Vec<&str> = pairs.iter().map(String::as_str).collect();
    one_of(&pairs)
}

/// A rank that a launcher placed.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Launch {
    pub(crate) launcher: &'static Launcher,
    pub(crate) local_id: usize,
    pub(crate) local_count: usize,
    /// Its global rank; the local id where the launcher names none.
    pub(crate) rank: u32,
}

impl Launch {
    /// What tells this launch on this node from any other, nested ones
    /// included (`DESI_GPU_MAP_STEP` records it in place of a Slurm step):
    /// the launcher's job id, else the pid of its proxy above the rank
    /// (`proxy_pid`, asked of the front end), which stays alive, and so
    /// unique, while the rank runs. `None`: neither is known.
    pub(crate) fn tag(
        &self,
        vars: &Snapshot,
        proxy_pid: &dyn Fn(&str) -> Option<u32>,
    ) -> Option<String> {
        let name = self.launcher.name;
        let by_var = self.launcher.tag_vars.iter().find_map(|&var| {
            vars.value(var)
                .map(|v| v.trim().to_string())
                .filter(|v| !v.is_empty())
        });
        match (by_var, self.launcher.proxy) {
            (Some(id), _) => Some(format!("{name}:{id}")),
            (None, Some(proxy)) => proxy_pid(proxy).map(|pid| format!("{name}:{proxy}.{pid}")),
            (None, None) => None,
        }
    }
}

/// Why a rank's launcher variables cannot place it: nothing may run.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Refusal {
    /// One of a launcher's two variables is set, the other not.
    HalfSet {
        /// The launcher's name.
        launcher: &'static str,
        /// The variable that is set.
        set: &'static str,
        /// Its value.
        value: String,
        /// The one that is not.
        missing: &'static str,
    },
    /// A value that is no whole number.
    NotANumber {
        /// The variable.
        var: &'static str,
        /// Its value.
        value: String,
    },
    /// A count of 0 or past Slurm's ceiling, or an id not below the count.
    OutOfRange {
        /// The launcher's name.
        launcher: &'static str,
        /// The variable of the rank's local id.
        id_var: &'static str,
        /// That id.
        id: usize,
        /// The variable of the node's rank count.
        count_var: &'static str,
        /// That count.
        count: usize,
    },
    /// Two launchers place the rank differently.
    Disagree {
        /// Where the first places it.
        first: Box<Launch>,
        /// Where another places it.
        other: Box<Launch>,
    },
    /// Flux: a local id, but no per-node count, in a task the Flux plugin
    /// did not map.
    Flux {
        /// The local id's value.
        value: String,
    },
    /// PMIx alone: its local rank is no variable.
    PmixOnly {
        /// PMIx's global rank.
        rank: String,
    },
}

impl fmt::Display for Refusal {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            Refusal::HalfSet {
                launcher,
                set,
                value,
                missing,
            } => write!(
                f,
                "{set}={} is set but {missing} is not: {launcher}'s variables are half set, so \
                 this rank's place on the node is unknown",
                quote(value)
            ),
            Refusal::NotANumber { var, value } => {
                write!(f, "{var}={} is not a whole number", quote(value))
            }
            Refusal::OutOfRange {
                launcher,
                id_var,
                id,
                count_var,
                count,
            } => write!(
                f,
                "{launcher} says local rank {id_var}={id} of {count_var}={count}; the rank must \
                 be below the count, and the count from 1 to {MAX_TASKS_PER_NODE}"
            ),
            Refusal::Disagree { first, other } => write!(
                f,
                "the launchers' variables disagree: {}={} and {}={} ({}), but {}={} and {}={} \
                 ({}); give the rank one launcher's variables",
                first.launcher.local_rank,
                first.local_id,
                first.launcher.local_size,
                first.local_count,
                first.launcher.name,
                other.launcher.local_rank,
                other.local_id,
                other.launcher.local_size,
                other.local_count,
                other.launcher.name
            ),
            Refusal::Flux { value } => write!(
                f,
                "Flux sets {}={} but no count of this node's tasks, and a GPU cannot be chosen \
                 without one; under Flux, run the job with the desi-gpu-map Flux shell plugin \
                 (flux run -o desi-gpu-map=METHOD) instead of exec; else export the count (one \
                 of {}), or launch with srun, mpirun or mpiexec",
                env::FLUX_LOCAL_ID,
                quote(value),
                every_pair()
            ),
            Refusal::PmixOnly { rank } => write!(
                f,
                "{}={} is set but no node-local rank: PMIx keeps the local rank and count as \
                 PMIx_Get keys (PMIX_LOCAL_RANK, PMIX_LOCAL_SIZE), not in the environment; exec \
                 needs them there (one of {}), or Slurm's srun variables",
                env::PMIX_RANK,
                quote(rank),
                every_pair()
            ),
        }
    }
}

/// How a process was launched, from its environment.
#[derive(Debug, Clone, PartialEq, Eq)]
pub(crate) enum Launched {
    /// A launcher of [`LAUNCHERS`] placed it; its variables win over
    /// Slurm's.
    By(Launch),
    /// A Flux job shell started it (`value`: its `FLUX_TASK_LOCAL_ID`):
    /// Flux names no per-node count, so exec cannot place it, but a task
    /// that the Flux shell plugin mapped runs unchanged. `ignored`: as for
    /// Slurm's.
    Flux {
        value: String,
        ignored: Vec<&'static str>,
    },
    /// No launcher placed it: Slurm's variables decide (a task of an srun
    /// step, a batch script, or no job at all). `ignored`: the variables
    /// that came in through srun from an outer launch, for `verbose`.
    Slurm { ignored: Vec<&'static str> },
}

/// What this process's ancestors had of the variables that tell a launch
/// ([`watched`]), nearest first, as the front end read their
/// environments: where each launcher's values were set.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct Ancestry {
    /// Each readable ancestor's values of [`watched`], from the parent up,
    /// ending below slurmstepd or below the first that could not be read.
    pub(crate) above: Vec<Snapshot>,
    /// The walk ended at slurmstepd: values that every ancestor in `above`
    /// had too came in through srun (the step's environment), and no
    /// launcher of this process set them.
    pub(crate) at_stepd: bool,
}

/// One ancestor as a walk up from this process finds it (nearest first).
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Above {
    /// The step's task: the process whose pid is `SLURM_TASK_PID`, with
    /// its values of [`watched`] where its environment could be read. Its
    /// parent is slurmstepd, and while it lives no other process has its
    /// pid.
    Task(Option<Snapshot>),
    /// A process named slurmstepd.
    Stepd,
    /// A process whose environment was read: its values of [`watched`].
    Read(Snapshot),
    /// A process whose environment cannot be read (another user's, or
    /// hidden by `/proc` mounted `hidepid`).
    Hidden,
}

impl Ancestry {
    /// Where the launchers' values came from, as a walk up from this
    /// process found its ancestors (`walk`, from the parent up). `task`:
    /// `SLURM_TASK_PID` is set, and `is_task`: this process has that pid
    /// (srun started it; its parent is slurmstepd, which `hidepid` may
    /// hide). The step's boundary is slurmstepd or the task, whichever
    /// comes first; where `task` and a hidden ancestor comes before
    /// either, that ancestor is taken for the boundary too: values that
    /// every ancestor read had are then srun's, never a launch, so that a
    /// hidden slurmstepd (or a task not yet exec'd, whose prolog this may
    /// be) never makes stale values count.
    pub fn walked(task: bool, is_task: bool, walk: impl IntoIterator<Item = Above>) -> Ancestry {
        let mut ancestry = Ancestry {
            above: Vec::new(),
            at_stepd: is_task,
        };
        if is_task {
            return ancestry;
        }
        for ancestor in walk {
            match ancestor {
                Above::Read(had) => ancestry.above.push(had),
                Above::Task(had) => {
                    ancestry.above.extend(had);
                    ancestry.at_stepd = true;
                    break;
                }
                Above::Stepd => {
                    ancestry.at_stepd = true;
                    break;
                }
                Above::Hidden => {
                    ancestry.at_stepd = task;
                    break;
                }
            }
        }
        ancestry
    }

    /// How far up `vars` got the values this process has: 1 where its
    /// parent had other values (or none), and so on; `None` where every
    /// ancestor read had them too.
    fn set_at(&self, keys: &[Var], vars: &Snapshot) -> Option<usize> {
        self.above
            .iter()
            .position(|ancestor| {
                keys.iter()
                    .any(|&key| ancestor.value(key) != vars.value(key))
            })
            .map(|i| i + 1)
    }

    /// `keys` came down unchanged from above slurmstepd.
    fn through_srun(&self, keys: &[Var], vars: &Snapshot) -> bool {
        self.at_stepd && self.set_at(keys, vars).is_none()
    }
}

impl Launcher {
    /// The variables one launch of it sets: where the rank sits, and what
    /// tells the launch from another.
    fn launch_vars(&self) -> Vec<Var> {
        let mut vars = vec![self.local_rank, self.local_size];
        vars.extend_from_slice(self.tag_vars);
        vars
    }
}

/// Every variable whose origin `launched` asks of the [`Ancestry`].
pub fn watched() -> Vec<Var> {
    let mut vars: Vec<Var> = LAUNCHERS.iter().flat_map(Launcher::launch_vars).collect();
    vars.extend([Var::FluxLocalId, Var::PmixRank]);
    vars.sort_unstable();
    vars.dedup();
    vars
}

/// Which launcher placed this process, and where; or why its variables
/// cannot say. Checked in order: the launchers of the table whose
/// variables a launch of this process set (`ancestry`: not those that
/// came in through srun; where two placed the rank, the nearer launch
/// wins, and launches at one depth must agree), Flux (no per-node count:
/// [`Refusal::Flux`] unless the Flux plugin mapped the task), an srun step (`SLURM_STEP_ID`, which also sets
/// PMIx's variables under `--mpi=pmix`), and PMIx alone (refused: no
/// local rank).
pub(crate) fn launched(vars: &Snapshot, ancestry: &Ancestry) -> Result<Launched, Refusal> {
    let mut ignored = Vec::new();
    let mut found: Vec<(usize, Launch)> = Vec::new();
    for launcher in &LAUNCHERS {
        if vars.value(launcher.local_rank).is_none() && vars.value(launcher.local_size).is_none() {
            continue;
        }
        let keys = launcher.launch_vars();
        if ancestry.through_srun(&keys, vars) {
            ignored.extend([launcher.local_rank.name(), launcher.local_size.name()]);
            continue;
        }
        if let Some(launch) = placed_by(launcher, vars)? {
            let depth = ancestry.set_at(&keys, vars).unwrap_or(usize::MAX);
            found.push((depth, launch));
        }
    }
    if let Some(launch) = nearest(found)? {
        return Ok(Launched::By(launch));
    }
    let inherited = |key: Var| ancestry.through_srun(&[key], vars);
    match vars.flux_local_id.clone() {
        Some(_) if inherited(Var::FluxLocalId) => ignored.push(env::FLUX_LOCAL_ID),
        Some(value) => return Ok(Launched::Flux { value, ignored }),
        None => {}
    }
    if vars.step_id.is_some() {
        return Ok(Launched::Slurm { ignored });
    }
    match vars.pmix_rank.clone() {
        Some(_) if inherited(Var::PmixRank) => ignored.push(env::PMIX_RANK),
        Some(rank) => return Err(Refusal::PmixOnly { rank }),
        None => {}
    }
    Ok(Launched::Slurm { ignored })
}

/// The launch nearest this process among those that placed it, by how
/// far up each set its variables; those at one depth (PALS writes two
/// spellings, say) must place it alike.
fn nearest(mut found: Vec<(usize, Launch)>) -> Result<Option<Launch>, Refusal> {
    let Some(depth) = found.iter().map(|(depth, _)| *depth).min() else {
        return Ok(None);
    };
    found.retain(|(d, _)| *d == depth);
    let mut launches = found.into_iter().map(|(_, launch)| launch);
    let Some(first) = launches.next() else {
        return Ok(None);
    };
    for other in launches {
        if (first.local_id, first.local_count) != (other.local_id, other.local_count) {
            return Err(Refusal::Disagree {
                first: Box::new(first),
                other: Box::new(other),
            });
        }
    }
    Ok(Some(first))
}

/// Where `launcher` placed the rank; `None` where neither of its
/// variables is set.
fn placed_by(launcher: &'static Launcher, vars: &Snapshot) -> Result<Option<Launch>, Refusal> {
    let (id, count) = match (
        vars.number(launcher.local_rank),
        vars.number(launcher.local_size),
    ) {
        (None, None) => return Ok(None),
        (Some(id), Some(count)) => (id, count),
        (Some(_), None) => return Err(half(launcher, launcher.local_rank, vars)),
        (None, Some(_)) => return Err(half(launcher, launcher.local_size, vars)),
    };
    let local_id = id.map_err(not_a_number)?;
    let local_count = count.map_err(not_a_number)?;
    if local_count == 0 || local_count > MAX_TASKS_PER_NODE || local_id >= local_count {
        return Err(Refusal::OutOfRange {
            launcher: launcher.name,
            id_var: launcher.local_rank.name(),
            id: local_id,
            count_var: launcher.local_size.name(),
            count: local_count,
        });
    }
    let rank = vars
        .number(launcher.rank)
        .and_then(|rank| u32::try_from(rank.ok()?).ok())
        .or_else(|| u32::try_from(local_id).ok())
        .unwrap_or(u32::MAX);
    Ok(Some(Launch {
        launcher,
        local_id,
        local_count,
        rank,
    }))
}

fn half(launcher: &'static Launcher, set: Var, vars: &Snapshot) -> Refusal {
    let missing = if set == launcher.local_rank {
        launcher.local_size
    } else {
        launcher.local_rank
    };
    Refusal::HalfSet {
        launcher: launcher.name,
        set: set.name(),
        value: vars.value(set).unwrap_or_default().to_string(),
        missing: missing.name(),
    }
}

fn not_a_number(bad: NotANumber) -> Refusal {
    Refusal::NotANumber {
        var: bad.var.name(),
        value: bad.value,
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn launched_in(pairs: &[(&str, &str)]) -> Result<Launched, Refusal> {
        launched(&Snapshot::of(pairs), &Ancestry::default())
    }

    /// Launched with `pairs`, under ancestors that had `above` (nearest
    /// first), the walk ending at slurmstepd where `at_stepd`.
    fn launched_under(
        pairs: &[(&str, &str)],
        above: &[&[(&str, &str)]],
        at_stepd: bool,
    ) -> Result<Launched, Refusal> {
        let ancestry = Ancestry {
            above: above.iter().map(|a| Snapshot::of(a)).collect(),
            at_stepd,
        };
        launched(&Snapshot::of(pairs), &ancestry)
    }

    fn place(pairs: &[(&str, &str)]) -> (&'static str, usize, usize, u32) {
        match launched_in(pairs) {
            Ok(Launched::By(l)) => (l.launcher.name, l.local_id, l.local_count, l.rank),
            other => panic!("{pairs:?}: {other:?}"),
        }
    }

    #[test]
    fn each_launcher_places_its_ranks() {
        assert_eq!(
            place(&[
                ("OMPI_COMM_WORLD_LOCAL_RANK", "2"),
                ("OMPI_COMM_WORLD_LOCAL_SIZE", "6"),
                ("OMPI_COMM_WORLD_RANK", "8"),
            ]),
            ("openmpi", 2, 6, 8)
        );
        assert_eq!(
            place(&[
                ("MPI_LOCALRANKID", "1"),
                ("MPI_LOCALNRANKS", "2"),
                ("PMI_RANK", "3")
            ]),
            ("mpich", 1, 2, 3)
        );
        assert_eq!(
            place(&[("PALS_LOCAL_RANKID", "11"), ("PALS_LOCAL_SIZE", "12")]),
            ("pals", 11, 12, 11)
        );
        assert_eq!(
            place(&[
                ("PMI_LOCAL_RANK", "0"),
                ("PMI_LOCAL_SIZE", "4"),
                ("PMI_RANK", "4")
            ]),
            ("pals-pmi", 0, 4, 4)
        );
        // PALS writes both spellings: they agree.
        assert_eq!(
            place(&[
                ("PALS_LOCAL_RANKID", "3"),
                ("PALS_LOCAL_SIZE", "4"),
                ("PMI_LOCAL_RANK", "3"),
                ("PMI_LOCAL_SIZE", " 4"),
            ]),
            ("pals", 3, 4, 3)
        );
        assert_eq!(launched_in(&[]), Ok(Launched::Slurm { ignored: vec![] }));
    }

    #[test]
    fn a_launcher_wins_over_slurms_daemon_step() {
        let daemon_step = [
            ("SLURM_JOB_ID", "7"),
            ("SLURM_STEP_ID", "0"),
            ("SLURM_LOCALID", "0"),
            ("SLURM_STEP_TASKS_PER_NODE", "1"),
            ("PMIX_RANK", "5"),
        ];
        let ranks = [
            ("OMPI_COMM_WORLD_LOCAL_RANK", "3"),
            ("OMPI_COMM_WORLD_LOCAL_SIZE", "4"),
        ];
        assert_eq!(
            place(&[&daemon_step[..], &ranks].concat()),
            ("openmpi", 3, 4, 3)
        );
        // srun --mpi=pmix sets PMIx's variables in a step of its own.
        assert_eq!(
            launched_in(&daemon_step),
            Ok(Launched::Slurm { ignored: vec![] })
        );
    }

    #[test]
    fn half_set_bad_and_out_of_range_values_are_refused() {
        let refused = |pairs: &[(&str, &str)]| launched_in(pairs).unwrap_err().to_string();
        assert_eq!(
            refused(&[("MPI_LOCALRANKID", "1")]),
            "MPI_LOCALRANKID=\"1\" is set but MPI_LOCALNRANKS is not: mpich's variables are \
             half set, so this rank's place on the node is unknown"
        );
        assert_eq!(
            launched_in(&[("PALS_LOCAL_SIZE", "4")]),
            Err(Refusal::HalfSet {
                launcher: "pals",
                set: "PALS_LOCAL_SIZE",
                value: "4".into(),
                missing: "PALS_LOCAL_RANKID"
            })
        );
        assert_eq!(
            refused(&[
                ("OMPI_COMM_WORLD_LOCAL_RANK", "x"),
                ("OMPI_COMM_WORLD_LOCAL_SIZE", "4")
            ]),
            "OMPI_COMM_WORLD_LOCAL_RANK=\"x\" is not a whole number"
        );
        for (id, count) in [("4", "4"), ("0", "0"), ("0", "65534"), ("7", "2")] {
            let said = refused(&[("PMI_LOCAL_RANK", id), ("PMI_LOCAL_SIZE", count)]);
            assert_eq!(
                said,
                format!(
                    "pals-pmi says local rank PMI_LOCAL_RANK={id} of PMI_LOCAL_SIZE={count}; the \
                     rank must be below the count, and the count from 1 to 65533"
                )
            );
        }
        assert!(
            refused(&[("PMI_LOCAL_RANK", "-1"), ("PMI_LOCAL_SIZE", "2")])
                .ends_with("is not a whole number")
        );
    }

    #[test]
    fn disagreeing_launchers_are_refused() {
        let said = launched_in(&[
            ("OMPI_COMM_WORLD_LOCAL_RANK", "0"),
            ("OMPI_COMM_WORLD_LOCAL_SIZE", "2"),
            ("MPI_LOCALRANKID", "1"),
            ("MPI_LOCALNRANKS", "2"),
        ])
        .unwrap_err()
        .to_string();
        assert_eq!(
            said,
            "the launchers' variables disagree: OMPI_COMM_WORLD_LOCAL_RANK=0 and \
             OMPI_COMM_WORLD_LOCAL_SIZE=2 (openmpi), but MPI_LOCALRANKID=1 and \
             MPI_LOCALNRANKS=2 (mpich); give the rank one launcher's variables"
        );
        // A half-set second launcher is refused even where the first is whole.
        assert!(matches!(
            launched_in(&[
                ("OMPI_COMM_WORLD_LOCAL_RANK", "0"),
                ("OMPI_COMM_WORLD_LOCAL_SIZE", "2"),
                ("PMI_LOCAL_SIZE", "2"),
            ]),
            Err(Refusal::HalfSet { .. })
        ));
    }

    #[test]
    fn flux_and_pmix_alone_are_refused_with_what_is_needed() {
        let needed = "OMPI_COMM_WORLD_LOCAL_RANK and OMPI_COMM_WORLD_LOCAL_SIZE, \
                      MPI_LOCALRANKID and MPI_LOCALNRANKS, PALS_LOCAL_RANKID and \
                      PALS_LOCAL_SIZE or PMI_LOCAL_RANK and PMI_LOCAL_SIZE";
        let Ok(Launched::Flux { value, ignored }) =
            launched_in(&[("FLUX_TASK_LOCAL_ID", "1"), ("SLURM_STEP_ID", "0")])
        else {
            panic!("a task of Flux's")
        };
        assert_eq!((value.as_str(), ignored), ("1", vec![]));
        let flux = Refusal::Flux { value }.to_string();
        assert_eq!(
            flux,
            format!(
                "Flux sets FLUX_TASK_LOCAL_ID=\"1\" but no count of this node's tasks, and a GPU \
                 cannot be chosen without one; under Flux, run the job with the desi-gpu-map \
                 Flux shell plugin (flux run -o desi-gpu-map=METHOD) instead of exec; else \
                 export the count (one of {needed}), or launch with srun, mpirun or mpiexec"
            )
        );
        let pmix = launched_in(&[("PMIX_RANK", "3"), ("PMIX_NAMESPACE", "x")])
            .unwrap_err()
            .to_string();
        assert_eq!(
            pmix,
            format!(
                "PMIX_RANK=\"3\" is set but no node-local rank: PMIx keeps the local rank and \
                 count as PMIx_Get keys (PMIX_LOCAL_RANK, PMIX_LOCAL_SIZE), not in the \
                 environment; exec needs them there (one of {needed}), or Slurm's srun variables"
            )
        );
        // Flux with a launcher's variables beside it: the launcher's.
        assert_eq!(
            place(&[
                ("FLUX_TASK_LOCAL_ID", "1"),
                ("PMI_LOCAL_RANK", "1"),
                ("PMI_LOCAL_SIZE", "2")
            ]),
            ("pals-pmi", 1, 2, 1)
        );
    }

    #[test]
    fn a_launch_is_tagged_by_its_job_id_or_its_proxy() {
        let env = Snapshot::of(&[
            ("OMPI_COMM_WORLD_LOCAL_RANK", "0"),
            ("OMPI_COMM_WORLD_LOCAL_SIZE", "1"),
            ("OMPI_MCA_ess_base_jobid", "2053308417"),
        ]);
        let Ok(Launched::By(launch)) = launched(&env, &Ancestry::default()) else {
            panic!()
        };
        let no_proxy = |_: &str| None;
        assert_eq!(
            launch.tag(&env, &no_proxy).as_deref(),
            Some("openmpi:2053308417")
        );
        let hydra = Launch {
            launcher: &LAUNCHERS[1],
            local_id: 0,
            local_count: 1,
            rank: 0,
        };
        let proxy = |name: &str| (name == "hydra_pmi_proxy").then_some(41);
        assert_eq!(
            hydra.tag(&env, &proxy).as_deref(),
            Some("mpich:hydra_pmi_proxy.41")
        );
        assert_eq!(hydra.tag(&env, &no_proxy), None);
        assert_eq!(
            launcher_named("pals").map(|l| l.local_rank.name()),
            Ok("PALS_LOCAL_RANKID")
        );
        assert_eq!(
            launcher_named("srun"),
            Err("openmpi, mpich, pals or pals-pmi".to_string())
        );
    }

    const OMPI_RANK_0_OF_1: [(&str, &str); 3] = [
        ("OMPI_COMM_WORLD_LOCAL_RANK", "0"),
        ("OMPI_COMM_WORLD_LOCAL_SIZE", "1"),
        ("PMIX_NAMESPACE", "prterun-n1-4242@1"),
    ];

    fn with(
        base: &[(&'static str, &'static str)],
        more: &[(&'static str, &'static str)],
    ) -> Vec<(&'static str, &'static str)> {
        base.iter().chain(more).copied().collect()
    }

    #[test]
    fn an_outer_ranks_variables_that_came_through_srun_are_ignored() {
        // mpirun -np 1 srun -n4 ... exec: each task of the step has the
        // rank's variables, and its parent is slurmstepd (or a shell of
        // the task's, which had them too).
        let task = with(
            &OMPI_RANK_0_OF_1,
            &[("SLURM_STEP_ID", "0"), ("FLUX_TASK_LOCAL_ID", "0")],
        );
        let want = Ok(Launched::Slurm {
            ignored: vec![
                "OMPI_COMM_WORLD_LOCAL_RANK",
                "OMPI_COMM_WORLD_LOCAL_SIZE",
                "FLUX_TASK_LOCAL_ID",
            ],
        });
        assert_eq!(launched_under(&task, &[], true), want);
        assert_eq!(launched_under(&task, &[&task], true), want);
        // Stale values are ignored before they are checked: half set is
        // no refusal when it came through srun.
        let half = [("MPI_LOCALRANKID", "x"), ("SLURM_STEP_ID", "0")];
        assert_eq!(
            launched_under(&half, &[], true),
            Ok(Launched::Slurm {
                ignored: vec!["MPI_LOCALRANKID", "MPI_LOCALNRANKS"]
            })
        );
        // Without slurmstepd above (or with an ancestor that could not be
        // read) nothing is known: the launcher's variables count.
        assert!(matches!(
            launched_under(&task, &[], false),
            Ok(Launched::By(_))
        ));
    }

    #[test]
    fn under_hidepid_the_task_or_a_hidden_ancestor_bounds_the_step() {
        let stale = Snapshot::of(&OMPI_RANK_0_OF_1);
        let env = Snapshot::of(&with(&OMPI_RANK_0_OF_1, &[("SLURM_STEP_ID", "0")]));
        let by_launcher =
            |ancestry: &Ancestry| matches!(launched(&env, ancestry), Ok(Launched::By(_)));
        let read = || Above::Read(stale.clone());
        // srun started this process (exec): its parent, slurmstepd, is
        // root's and hidden; the stale values came through srun.
        let exec = Ancestry::walked(true, true, [Above::Hidden]);
        assert_eq!(
            exec,
            Ancestry {
                above: vec![],
                at_stepd: true
            }
        );
        assert!(!by_launcher(&exec));
        // The task prolog: its parent is the task, not yet exec'd and so
        // hidden, whose pid is SLURM_TASK_PID.
        let prolog = Ancestry::walked(true, false, [Above::Task(None), Above::Hidden]);
        assert!(prolog.at_stepd && !by_launcher(&prolog));
        // srun bash -c 'exec ...': the task is the shell, which had them.
        let shell = Ancestry::walked(true, false, [Above::Task(Some(stale.clone()))]);
        assert_eq!(shell.above.len(), 1);
        assert!(!by_launcher(&shell));
        // A hidden ancestor below the task, in a step: the boundary too.
        let hidden = Ancestry::walked(true, false, [read(), Above::Hidden, read()]);
        assert_eq!(hidden.above.len(), 1);
        assert!(hidden.at_stepd && !by_launcher(&hidden));
        // Outside any step, a hidden ancestor says nothing: as before.
        let outside = Ancestry::walked(false, false, [read(), Above::Hidden]);
        assert!(!outside.at_stepd && by_launcher(&outside));
        // Without hidepid: slurmstepd by name, as before.
        let named = Ancestry::walked(false, false, [read(), Above::Stepd, read()]);
        assert_eq!((named.above.len(), named.at_stepd), (1, true));
        // A rank that mpirun's daemon (srun's task, the user's) started:
        // the daemon had none of the rank's values, so the rank's count.
        let rank = Ancestry::walked(
            true,
            false,
            [Above::Task(Some(Snapshot::default())), Above::Hidden],
        );
        assert!(rank.at_stepd && by_launcher(&rank));
        // The walk ran out (init, or too many ancestors): nothing known.
        assert!(!Ancestry::walked(true, false, [read()]).at_stepd);
    }

    #[test]
    fn a_launcher_that_started_this_process_counts_under_slurmstepd() {
        // mpirun in an allocation: the rank's parent is the daemon that
        // srun started (orted, prted), which had no rank variables.
        let rank = [
            ("OMPI_COMM_WORLD_LOCAL_RANK", "3"),
            ("OMPI_COMM_WORLD_LOCAL_SIZE", "4"),
            ("SLURM_STEP_ID", "1"),
            ("SLURM_LOCALID", "0"),
        ];
        let Ok(Launched::By(l)) = launched_under(&rank, &[&[("SLURM_STEP_ID", "1")]], true) else {
            panic!("the rank's own launch")
        };
        assert_eq!(
            (l.launcher.name, l.local_id, l.local_count),
            ("openmpi", 3, 4)
        );
    }

    #[test]
    fn the_nearer_of_two_nested_launches_wins() {
        // mpiexec.mpich inside an mpirun.openmpi rank: the MPICH rank has
        // the outer rank's variables too, which its proxy and mpiexec had.
        let outer = OMPI_RANK_0_OF_1;
        let rank = with(
            &outer,
            &[("MPI_LOCALRANKID", "1"), ("MPI_LOCALNRANKS", "2")],
        );
        let Ok(Launched::By(l)) = launched_under(&rank, &[&outer, &outer, &outer, &[]], false)
        else {
            panic!("the inner launch")
        };
        assert_eq!(
            (l.launcher.name, l.local_id, l.local_count),
            ("mpich", 1, 2)
        );
        // Two launchers set at the same depth must agree.
        let both = [
            ("PALS_LOCAL_RANKID", "1"),
            ("PALS_LOCAL_SIZE", "4"),
            ("PMI_LOCAL_RANK", "2"),
            ("PMI_LOCAL_SIZE", "4"),
        ];
        assert!(matches!(
            launched_under(&both, &[&[]], false),
            Err(Refusal::Disagree { .. })
        ));
    }
}
