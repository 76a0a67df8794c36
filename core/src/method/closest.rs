//! The `closest` rule: each task gets a GPU attached to its own CPUs,
//! balanced within each domain.
//!
//! - A task's *candidates* are the step's GPUs whose local CPUs overlap the
//!   task's CPUs most (by CPU count, overlap > 0). A task with no overlap
//!   anywhere, and an unbound task (all CPUs, which overlap every GPU
//!   alike), has every GPU as candidate: the contiguous rule over all GPUs.
//! - Tasks sharing a candidate set split those GPUs in contiguous blocks
//!   ([`position`] with `contiguous`, numpy.array_split order), in local-id
//!   order: within a domain the load per GPU differs by at most one.
//! - When every task's CPUs are known ([`closest_all`], from Slurm's
//!   per-task masks, where `list_is_slurms`), every task computes the
//!   same answer. Whether they are known is decided alike in every task
//!   of a node (`every_task_bound`): where one task could be unbound, no
//!   task takes the list. When only the task's own CPUs are known
//!   (`closest_own`), see there.
//! - Any step GPU whose local CPUs are unknown makes the whole step fall
//!   back to `contiguous` ([`crate::topology::near_cpus`] says which and why).
//! - Fewer tasks than GPUs: every GPU goes to exactly one task, each task
//!   holding `k / n` or one more (`closest_shares`), the shares chosen by
//!   an exact search (`nearest_shares`): the most tasks holding one of
//!   their candidates, then the most CPUs in common, then the nearest to
//!   `contiguous`'s blocks, so that tasks near every GPU alike hold
//!   `contiguous`'s blocks. A share lists its nearest GPU first. From its
//!   own CPUs only, a task holds `contiguous`'s block, nearest first: it
//!   cannot know what the others would take.
//! - A task's share by the rule (`closest_position`), with what the
//!   node's tasks share read once (`NodeCpus`), and how it was matched
//!   (`Closeness`).

use super::assignment::{assign, Cost};
use crate::cpuset::CpuSet;
use crate::error::Error;
use crate::method::{position, share, Method};
use crate::slurm::cpu_bind::bind_list_cpus;
use crate::text::quote;
use std::cell::OnceCell;
use std::cmp::Reverse;
use std::collections::BTreeMap;
use std::fmt;

/// Why `closest` falls back to `contiguous` for a step.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Fallback {
    /// The topology does not list the step's GPU `token`.
    UnknownGpu(String),
    /// The firmware reports no CPU affinity for GPU `token` (NUMA node -1,
    /// "N/A").
    NoAffinity(String),
    /// The step's GPUs could not be located at all (why).
    Unreadable(String),
}

impl fmt::Display for Fallback {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        let (what, token) = match self {
            Fallback::UnknownGpu(token) => ("cannot locate GPU", token),
            Fallback::NoAffinity(token) => ("no CPU affinity is known for GPU", token),
            Fallback::Unreadable(why) => {
                return write!(f, "closest: {why}; using contiguous");
            }
        };
        write!(f, "closest: {what} {}; using contiguous", quote(token))
    }
}

#[cfg(test)]
thread_local! {
    /// Calls of [`candidates`] on this thread, for tests that count work.
    pub(crate) static CANDIDATE_CALLS: std::cell::Cell<usize> = const { std::cell::Cell::new(0) };
}

/// The positions (in `near`) of the GPUs whose local CPUs overlap `task`
/// most; every position when none overlaps.
pub(crate) fn candidates(task: &CpuSet, near: &[CpuSet]) -> Vec<usize> {
    #[cfg(test)]
    CANDIDATE_CALLS.with(|c| c.set(c.get() + 1));
    let overlaps: Vec<usize> = near.iter().map(|g| g.overlap(task)).collect();
    let best = overlaps.iter().copied().max().unwrap_or(0);
    if best == 0 {
        return (0..near.len()).collect();
    }
    overlaps
        .iter()
        .enumerate()
        .filter(|&(_, &o)| o == best)
        .map(|(i, _)| i)
        .collect()
}

/// Whether a task with CPUs `task` gets no help from `closest`: the step's
/// GPUs sit in more than one place, and the task is as near to every one as
/// to any (unbound, bound across every domain, or near none), so it is
/// placed by the contiguous rule over all GPUs.
pub(crate) fn near_all_alike(task: Option<&CpuSet>, near: &[CpuSet]) -> bool {
    let spread = near.iter().skip(1).any(|g| Some(g) != near.first());
    spread && task.map_or(true, |t| candidates(t, near).len() == near.len())
}

/// Every task's position in the step's GPU list, from every task's CPUs
/// (local-id order): the same answer in every task. In `O(n log n)` for
/// `n` tasks: each task's candidates once, then one ordered count per
/// candidate set (its members before the task, and all of them).
pub fn closest_all(tasks: &[CpuSet], near: &[CpuSet]) -> Result<Vec<usize>, Error> {
    let groups = groups(tasks, near)?;
    let mut members: BTreeMap<&[usize], usize> = BTreeMap::new();
    let ranks: Vec<usize> = groups
        .iter()
        .map(|group| {
            let count = members.entry(group.as_slice()).or_insert(0);
            let rank = *count;
            *count += 1;
            rank
        })
        .collect();
    groups
        .iter()
        .zip(ranks)
        .map(|(group, rank)| {
            let size = members.get(group.as_slice()).copied().unwrap_or(0);
            pick(group, rank, size)
        })
        .collect()
}

/// Task `local_id`'s entry of [`closest_all`], computed alone: what each
/// task does in `task_init`, in `O(n)`: every task's candidates, then a
/// count of those equal to its own before it, and in all.
pub(crate) fn closest_of(
    tasks: &[CpuSet],
    near: &[CpuSet],
    local_id: usize,
) -> Result<usize, Error> {
    pick_of(&groups(tasks, near)?, local_id)
}

/// Every task's share of the step's GPUs, from every task's CPUs
/// (local-id order): [`closest_all`]'s one GPU each where the tasks are as
/// many as the GPUs or more; else every GPU held by exactly one task, the
/// nearest shares ([`nearest_shares`]), each nearest first.
pub fn closest_shares(tasks: &[CpuSet], near: &[CpuSet]) -> Result<Vec<Vec<usize>>, Error> {
    if tasks.len() >= near.len() {
        return Ok(closest_all(tasks, near)?
            .into_iter()
            .map(|p| vec![p])
            .collect());
    }
    let mut held = nearest_shares(tasks, near)?;
    for (own, cpus) in held.iter_mut().zip(tasks) {
        nearest_first(own, cpus, near);
    }
    Ok(held)
}

/// Where one of a task's GPUs sits in its share: the first (its nearest,
/// which makes the task local), the others every task holds (`k / n - 1`),
/// or the spare that `k mod n` tasks hold.
#[derive(Clone, Copy, PartialEq, Eq)]
enum Place {
    First,
    Other,
    Spare,
}

/// `n < k` tasks' shares of `k` GPUs, each `k / n` or one more, every GPU
/// held once, chosen over every way to hand them out: the most tasks
/// holding one of their nearest GPUs (a candidate); then the most CPUs in
/// common, summed over each task and each GPU it holds; then the least
/// distance of each GPU from its task's `contiguous` block, so that tasks
/// near every GPU alike hold `contiguous`'s blocks. Any tie left is broken
/// by the search's fixed order: every task finds the same shares.
///
/// An exact search, [`assign`]: the `k` GPUs against each task's places
/// (`n (k / n + 1) < 2k`), in `O(k³)`: at most 64 GPUs on a node
/// (`MAX_NODE_GPUS`), whatever the tasks.
fn nearest_shares(tasks: &[CpuSet], near: &[CpuSet]) -> Result<Vec<Vec<usize>>, Error> {
    let (n, k) = (tasks.len(), near.len());
    if n == 0 {
        return Ok(Vec::new());
    }
    let blocks = (0..n)
        .map(|l| share(Method::Contiguous, l, n, k))
        .collect::<Result<Vec<_>, _>>()?;
    let common: Vec<Vec<usize>> = tasks
        .iter()
        .map(|cpus| near.iter().map(|g| g.overlap(cpus)).collect())
        .collect();
    // Each task's most CPUs in common with a GPU: its candidates'.
    let best: Vec<usize> = common
        .iter()
        .map(|row| row.iter().copied().max().unwrap_or(0))
        .collect();
    let places: Vec<(usize, Place)> = (0..n)
        .flat_map(|l| {
            let others = std::iter::repeat((l, Place::Other)).take((k / n).saturating_sub(1));
            std::iter::once((l, Place::First))
                .chain(others)
                .chain(std::iter::once((l, Place::Spare)))
        })
        .collect();
    let cost = |g: usize, at: usize| -> Cost {
        let Some(&(l, place)) = places.get(at) else {
            return [0; 4];
        };
        let here = common
            .get(l)
            .and_then(|row| row.get(g))
            .copied()
            .unwrap_or(0);
        let best = best.get(l).copied().unwrap_or(0);
        let far = blocks.get(l).map_or(0, |block| distance(block, g));
        let count = |yes: bool| -i64::from(yes);
        [
            count(place != Place::Spare),
            count(place == Place::First && here == best && best > 0),
            -i64::try_from(here).unwrap_or(i64::MAX),
            i64::try_from(far).unwrap_or(i64::MAX),
        ]
    };
    let at = assign(k, places.len(), cost).ok_or(Error::NoGpusToMap)?;
    let mut held: Vec<Vec<usize>> = vec![Vec::new(); n];
    for (g, place) in at.into_iter().enumerate() {
        let l = places.get(place).map(|&(l, _)| l);
        if let Some(own) = l.and_then(|l| held.get_mut(l)) {
            own.push(g);
        }
    }
    Ok(held)
}

/// How far GPU `g` lies from a `contiguous` block: 0 inside it.
fn distance(block: &[usize], g: usize) -> usize {
    let (first, last) = (block.first().copied(), block.last().copied());
    match (first, last) {
        (Some(first), _) if g < first => first - g,
        (_, Some(last)) if g > last => g - last,
        _ => 0,
    }
}

/// Orders a share by nearness to `cpus` (most CPUs in common first), then
/// by position.
fn nearest_first(own: &mut [usize], cpus: &CpuSet, near: &[CpuSet]) {
    own.sort_by_key(|&g| (Reverse(near.get(g).map_or(0, |n| n.overlap(cpus))), g));
}

/// Each task's candidates.
fn groups(tasks: &[CpuSet], near: &[CpuSet]) -> Result<Vec<Vec<usize>>, Error> {
    if near.is_empty() {
        return Err(Error::NoGpusToMap);
    }
    Ok(tasks.iter().map(|t| candidates(t, near)).collect())
}

/// Task `l`'s block among the tasks with its candidates.
fn pick_of(groups: &[Vec<usize>], l: usize) -> Result<usize, Error> {
    let group = groups.get(l).ok_or(Error::LocalIdOutOfRange {
        local_id: l,
        local_count: groups.len(),
    })?;
    let rank = groups.iter().take(l).filter(|g| *g == group).count();
    let size = groups.iter().filter(|g| *g == group).count();
    pick(group, rank, size)
}

/// One task's position from its own CPUs only (Slurm gave no per-task
/// masks): the task takes candidate `local_id mod c` of its `c`
/// candidates.
///
/// Why it stays balanced: with Slurm's default block distribution of tasks
/// over CPUs, the tasks of one domain have consecutive local ids, and any
/// run of consecutive integers hits each residue mod `c` equally often, give
/// or take one: the loads in the domain differ by at most one, as with
/// [`closest_all`]. It can differ from `closest_all`'s blocks (residues, not
/// blocks), and under a cyclic CPU distribution over `d` domains it is
/// balanced only when `d` and `c` share no factor. An unbound task (every
/// GPU a candidate) takes the contiguous position of its local id among
/// all tasks, over all GPUs; [`closest_all`] places it among the unbound
/// tasks only, and the two agree when every task is unbound.
pub(crate) fn closest_own(
    own: &CpuSet,
    local_id: usize,
    local_count: usize,
    near: &[CpuSet],
) -> Result<usize, Error> {
    let group = candidates(own, near);
    if group.len() == near.len() {
        return position(Method::Contiguous, local_id, local_count, near.len());
    }
    if local_id >= local_count {
        return Err(Error::LocalIdOutOfRange {
            local_id,
            local_count,
        });
    }
    group
        .get(local_id % group.len().max(1))
        .copied()
        .ok_or(Error::NoGpusToMap)
}

/// Member `rank` of `size` tasks sharing `group` gets its contiguous block.
fn pick(group: &[usize], rank: usize, size: usize) -> Result<usize, Error> {
    let at = position(Method::Contiguous, rank, size, group.len())?;
    group.get(at).copied().ok_or(Error::NoGpusToMap)
}

/// Whether task `local_id` may take `listed` (every task's CPUs, from
/// [`crate::slurm::cpu_bind::bind_list_cpus`]) for the CPUs Slurm bound the
/// tasks to: `every_bound` ([`every_task_bound`], the node's half, alike in
/// every task), and the list's entry for it is its own mask `own`.
pub(crate) fn list_is_slurms(
    listed: &[CpuSet],
    own: Option<&CpuSet>,
    local_id: usize,
    every_bound: bool,
) -> bool {
    every_bound && own.is_some() && own == listed.get(local_id)
}

/// Whether `listed` can be Slurm's binding for every task of the node:
/// every entry strictly within `parent`, slurmstepd's mask (the task is
/// slurmstepd's fork, so an unbound task has exactly its parent's mask).
///
/// Why: where Slurm binds no CPUs (task/none) a list the user exported, or
/// asked for, still reaches the task, and an entry that equals an unbound
/// task's mask proves nothing. A task that Slurm bound to all of
/// slurmstepd's CPUs cannot tell Slurm's list from a user's, and the
/// others cannot tell whether it did: so where any entry is not strictly
/// within, no task takes the list, and the node's tasks agree. It reads
/// only what every task of the node reads alike. Unknown masks prove
/// nothing.
pub(crate) fn every_task_bound(listed: &[CpuSet], parent: Option<&CpuSet>) -> bool {
    parent.is_some_and(|parent| listed.iter().all(|e| e.is_strictly_within(parent)))
}

/// How a `closest` task was matched, for the `verbose` line.
#[derive(Debug, Clone, PartialEq, Eq)]
pub(crate) struct Closeness {
    /// The CPUs it was matched by; `None`: unknown (placed contiguously).
    pub(crate) cpus: Option<CpuSet>,
    /// `slurm` (every task's CPUs from SLURM_CPU_BIND_LIST, where Slurm
    /// bound the task), `own` (its own mask only) or `none`.
    pub(crate) from: &'static str,
    /// Its (first) GPU's local CPUs.
    pub(crate) gpu_cpus: CpuSet,
    /// Nearness told no GPU apart (for every task, where all are known):
    /// the tasks were placed by the contiguous rule. Set only for local
    /// task 0, which says so once per node.
    pub(crate) alike: bool,
}

impl Closeness {
    /// Whether the task's CPUs overlap its GPU's local CPUs.
    pub(crate) fn matches(&self) -> bool {
        self.cpus
            .as_ref()
            .is_some_and(|c| c.overlap(&self.gpu_cpus) > 0)
    }
}

/// What `closest` reads alike in every task of a node: Slurm's list of
/// every task's CPUs (`SLURM_CPU_BIND_TYPE`, `SLURM_CPU_BIND_LIST`, read
/// once) and the position the rule gives each task (computed once, on first
/// use, for one step's map). The plugin's task makes one for itself
/// ([`crate::step::assign`]); `desi-gpu-map plan` makes one per node and
/// hands it to [`crate::step::assign_in`] for each of the node's tasks, so that a preview reads each
/// task's CPUs once, not once per task.
pub(crate) struct NodeCpus<'a> {
    bind_type: Option<&'a str>,
    bind_list: Option<&'a str>,
    local_count: usize,
    listed: OnceCell<Option<Vec<CpuSet>>>,
    /// [`every_task_bound`] for the list, with the slurmstepd mask it was
    /// asked for (the same in every task of a node): asked once.
    bound: OnceCell<(Option<CpuSet>, bool)>,
    /// `None`: one task asks, for itself ([`closest_of`]); `Some`: every
    /// task's share, computed once ([`closest_shares`]). The two agree.
    picks: Option<OnceCell<Result<Vec<Vec<usize>>, Error>>>,
}

impl<'a> NodeCpus<'a> {
    /// The node's tasks' shared binding, for all of them: the bind type
    /// and list every task finds in its environment, and their count.
    pub(crate) fn new(
        bind_type: Option<&'a str>,
        bind_list: Option<&'a str>,
        local_count: usize,
    ) -> Self {
        NodeCpus {
            bind_type,
            bind_list,
            local_count,
            listed: OnceCell::new(),
            bound: OnceCell::new(),
            picks: Some(OnceCell::new()),
        }
    }

    /// One task's own view of it, as the plugin's task has it in
    /// `task_init`, asked once.
    pub(crate) fn alone(self) -> Self {
        NodeCpus {
            picks: None,
            ..self
        }
    }

    /// Every task's CPUs from Slurm's list, if it is one.
    fn listed(&self) -> Option<&[CpuSet]> {
        self.listed
            .get_or_init(|| bind_list_cpus(self.bind_type, self.bind_list, self.local_count))
            .as_deref()
    }

    /// Slurm's list of every task's CPUs, where task `local_id`, with its
    /// mask `own` and slurmstepd's `parent`, may take it for Slurm's
    /// ([`list_is_slurms`]).
    fn slurms(
        &self,
        own: Option<&CpuSet>,
        parent: Option<&CpuSet>,
        local_id: usize,
    ) -> Option<&[CpuSet]> {
        let listed = self.listed()?;
        let asked = || (parent.cloned(), every_task_bound(listed, parent));
        let (seen, bound) = self.bound.get_or_init(asked);
        let every_bound = if seen.as_ref() == parent {
            *bound
        } else {
            every_task_bound(listed, parent)
        };
        list_is_slurms(listed, own, local_id, every_bound).then_some(listed)
    }

    /// Task `local_id`'s share by the rule over `listed` (the list's
    /// tasks) and the step's GPUs: alone, or from every task's, made once.
    fn pick(
        &self,
        listed: &[CpuSet],
        near: &[CpuSet],
        local_id: usize,
    ) -> Result<Vec<usize>, Error> {
        let out_of_range = || Error::LocalIdOutOfRange {
            local_id,
            local_count: listed.len(),
        };
        let Some(picks) = &self.picks else {
            if listed.len() >= near.len() {
                return closest_of(listed, near, local_id).map(|p| vec![p]);
            }
            let mut all = closest_shares(listed, near)?;
            return (local_id < all.len())
                .then(|| all.swap_remove(local_id))
                .ok_or_else(out_of_range);
        };
        match picks.get_or_init(|| closest_shares(listed, near)) {
            Ok(picks) => picks.get(local_id).cloned().ok_or_else(out_of_range),
            Err(e) => Err(e.clone()),
        }
    }
}

/// A `closest` task's share (one GPU where the node's tasks are as many as
/// its GPUs or more): from every task's CPUs when Slurm lists them (the
/// same answer in every task), else from its own mask, else contiguous.
/// Task `local_id` of `local_count` has the CPU mask `own`, its slurmstepd
/// `parent`, each where known; `node` is what its node's tasks share.
pub(crate) fn closest_position(
    near: &[CpuSet],
    own: Option<&CpuSet>,
    parent: Option<&CpuSet>,
    (local_id, local_count): (usize, usize),
    node: &NodeCpus,
) -> Result<(Vec<usize>, Closeness), Error> {
    // The list counts only where Slurm bound every task strictly within
    // slurmstepd's CPUs, this one to its entry (a list a user exported, or
    // one in other CPU numbers, does not).
    let all = node.slurms(own, parent, local_id);
    // Only local task 0 says whether nearness told no GPU apart.
    let first = local_id == 0;
    let fewer = local_count < near.len();
    let (at, mine, from, alike) = match (all, own) {
        (Some(all), _) => {
            let at = node.pick(all, near, local_id)?;
            let alike = first && all.iter().all(|t| near_all_alike(Some(t), near));
            (at, all.get(local_id).cloned(), "slurm", alike)
        }
        (None, Some(own)) if fewer => {
            let mut at = share(Method::Contiguous, local_id, local_count, near.len())?;
            nearest_first(&mut at, own, near);
            let alike = first && near_all_alike(Some(own), near);
            (at, Some(own.clone()), "own", alike)
        }
        (None, Some(own)) => {
            let at = closest_own(own, local_id, local_count, near)?;
            let alike = first && near_all_alike(Some(own), near);
            (vec![at], Some(own.clone()), "own", alike)
        }
        (None, None) => {
            let at = share(Method::Contiguous, local_id, local_count, near.len())?;
            (at, None, "none", first && near_all_alike(None, near))
        }
    };
    let gpu_cpus = at
        .first()
        .and_then(|&g| near.get(g))
        .cloned()
        .unwrap_or_default();
    let closeness = Closeness {
        cpus: mine,
        from,
        gpu_cpus,
        alike,
    };
    Ok((at, closeness))
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::topology::near_cpus;
    use crate::topology::{GpuPlace, Preset};

    fn near(preset: Preset) -> Vec<CpuSet> {
        let t = preset.topology();
        near_cpus(&t.tokens(), &t).unwrap()
    }

    /// `n` tasks bound to equal consecutive blocks of the node's cores, as
    /// task/affinity does with `--cpu-bind=cores -c cores/n`.
    fn blocks(preset: Preset, n: usize) -> Vec<CpuSet> {
        let cores: Vec<usize> = preset.topology().cpus.cpus().collect();
        let each = cores.len() / n;
        (0..n)
            .map(|l| CpuSet::of(&cores[l * each..(l + 1) * each]).unwrap())
            .collect()
    }

    fn closest(preset: Preset, n: usize) -> Vec<usize> {
        closest_all(&blocks(preset, n), &near(preset)).unwrap()
    }

    /// Each task's own-mask answer.
    fn own(preset: Preset, n: usize) -> Vec<usize> {
        let near = near(preset);
        blocks(preset, n)
            .iter()
            .enumerate()
            .map(|(l, cpus)| closest_own(cpus, l, n, &near).unwrap())
            .collect()
    }

    fn loads(positions: &[usize], gpus: usize) -> Vec<usize> {
        (0..gpus)
            .map(|g| positions.iter().filter(|&&p| p == g).count())
            .collect()
    }

    #[test]
    fn perlmutter_and_polaris_reverse_the_gpus() {
        for preset in [Preset::Perlmutter, Preset::Polaris] {
            // One task bound to every core overlaps each GPU alike: the
            // contiguous rule, GPU 0.
            assert_eq!(closest(preset, 1), [0], "{preset:?}");
            assert_eq!(closest(preset, 2), [2, 0], "{preset:?}");
            assert_eq!(closest(preset, 4), [3, 2, 1, 0], "{preset:?}");
            assert_eq!(closest(preset, 8), [3, 3, 2, 2, 1, 1, 0, 0], "{preset:?}");
            assert_eq!(
                closest(preset, 16),
                [3, 3, 3, 3, 2, 2, 2, 2, 1, 1, 1, 1, 0, 0, 0, 0],
                "{preset:?}"
            );
            assert_eq!(own(preset, 4), [3, 2, 1, 0]);
            assert_eq!(own(preset, 16), closest(preset, 16));
        }
    }

    #[test]
    fn two_tasks_spanning_two_domains_each_take_one_of_theirs() {
        // Task 0 on NUMA 0-1 (GPUs 3, 2), task 1 on NUMA 2-3 (GPUs 1, 0):
        // each overlaps two GPUs alike and takes the first of its pair.
        let tasks = blocks(Preset::Perlmutter, 2);
        assert_eq!(
            candidates(&tasks[0], &near(Preset::Perlmutter)),
            [2, 3],
            "GPUs 2 and 3, in the step's order"
        );
        assert_eq!(closest(Preset::Perlmutter, 2), [2, 0]);
        // Four tasks, two per spanning pair: the pair splits.
        let wide = [
            CpuSet::parse("0-31").unwrap(),
            CpuSet::parse("0-31").unwrap(),
            CpuSet::parse("32-63").unwrap(),
            CpuSet::parse("32-63").unwrap(),
        ];
        assert_eq!(
            closest_all(&wide, &near(Preset::Perlmutter)).unwrap(),
            [2, 3, 0, 1]
        );
    }

    #[test]
    fn lumi_g_follows_the_ccd_map() {
        // One task per CCD (8 cores): 4,5,2,3,6,7,0,1.
        assert_eq!(closest(Preset::LumiG, 8), [4, 5, 2, 3, 6, 7, 0, 1]);
        assert_eq!(own(Preset::LumiG, 8), [4, 5, 2, 3, 6, 7, 0, 1]);
        assert_eq!(closest(Preset::LumiG, 4), [4, 2, 6, 0]);
        let sixteen = closest(Preset::LumiG, 16);
        assert_eq!(sixteen, [4, 4, 5, 5, 2, 2, 3, 3, 6, 6, 7, 7, 0, 0, 1, 1]);
        assert_eq!(loads(&sixteen, 8), [2; 8]);
        assert_eq!(closest(Preset::LumiG, 2), [2, 0]);
        assert_eq!(closest(Preset::LumiG, 1), [0]);
    }

    #[test]
    fn dgx_a100_follows_its_numa_map() {
        // GPUs 0-7 on NUMA 2,3,0,1,6,7,4,5: NUMA n's task gets the GPU on n.
        assert_eq!(closest(Preset::DgxA100, 8), [2, 3, 0, 1, 6, 7, 4, 5]);
        assert_eq!(
            closest(Preset::DgxA100, 16),
            [2, 2, 3, 3, 0, 0, 1, 1, 6, 6, 7, 7, 4, 4, 5, 5]
        );
        // Four tasks, each on two NUMA nodes: the first GPU of each pair.
        assert_eq!(closest(Preset::DgxA100, 4), [2, 0, 6, 4]);
        assert_eq!(closest(Preset::DgxA100, 2), [0, 4]);
        assert_eq!(own(Preset::DgxA100, 8), [2, 3, 0, 1, 6, 7, 4, 5]);
    }

    #[test]
    fn aurora_splits_each_socket() {
        // n/2 tasks per socket, each on an equal share of its 52 cores, as
        // Slurm binds them (it does not split a task over sockets).
        let per_socket = |n: usize| -> Vec<CpuSet> {
            let (half, each) = (n / 2, 52 / (n / 2));
            (0..n)
                .map(|l| {
                    let first = 52 * (l / half) + each * (l % half);
                    CpuSet::range(first, first + each - 1).unwrap()
                })
                .collect()
        };
        let near = near(Preset::Aurora);
        let on = |n| closest_all(&per_socket(n), &near).unwrap();
        assert_eq!(on(2), [0, 6]);
        // Fewer tasks than GPUs in a socket: one each, from the first.
        assert_eq!(on(4), [0, 1, 6, 7]);
        assert_eq!(on(8), [0, 1, 2, 3, 6, 7, 8, 9]);
        assert_eq!(on(12), (0..12).collect::<Vec<_>>());
        // 8 tasks per socket on its 6 GPUs: array_split blocks.
        let sixteen = on(16);
        assert_eq!(sixteen, [0, 0, 1, 1, 2, 3, 4, 5, 6, 6, 7, 7, 8, 9, 10, 11]);
        assert_eq!(loads(&sixteen, 12), [2, 2, 1, 1, 1, 1, 2, 2, 1, 1, 1, 1]);
        // Even blocks of all 104 cores: task 6 of 12 holds cores 48-55, 4
        // on each socket, so every GPU is its candidate: alone in that
        // group, it takes the first GPU.
        let spanning = closest(Preset::Aurora, 12);
        assert_eq!(spanning, [0, 1, 2, 3, 4, 5, 0, 6, 7, 8, 9, 10]);
        let own16: Vec<usize> = per_socket(16)
            .iter()
            .enumerate()
            .map(|(l, cpus)| closest_own(cpus, l, 16, &near).unwrap())
            .collect();
        // Own masks: residues within the socket, just as balanced.
        assert_eq!(own16, [0, 1, 2, 3, 4, 5, 0, 1, 8, 9, 10, 11, 6, 7, 8, 9]);
        let l = loads(&own16, 12);
        assert_eq!(l, [2, 2, 1, 1, 1, 1, 1, 1, 2, 2, 1, 1]);
    }

    #[test]
    fn unbound_tasks_are_contiguous() {
        let all = CpuSet::range(0, 127).unwrap();
        let near = near(Preset::Perlmutter);
        for n in [1, 2, 4, 6, 8, 16] {
            let tasks = vec![all.clone(); n];
            let want: Vec<usize> = (0..n)
                .map(|l| position(Method::Contiguous, l, n, 4).unwrap())
                .collect();
            assert_eq!(closest_all(&tasks, &near).unwrap(), want, "{n} tasks");
            let own: Vec<usize> = (0..n)
                .map(|l| closest_own(&all, l, n, &near).unwrap())
                .collect();
            assert_eq!(own, want, "{n} tasks, own mask");
        }
    }

    #[test]
    fn partial_allocations_match_only_the_step_gpus() {
        // The step holds GPUs 2 and 3 of a Perlmutter node (NUMA 1 and 0).
        let t = Preset::Perlmutter.topology();
        let near = near_cpus(&["2", "3"], &t).unwrap();
        let tasks = blocks(Preset::Perlmutter, 4);
        // Tasks on NUMA 0 and 1 find their GPUs (positions 1 and 0); tasks
        // on NUMA 2 and 3 overlap neither and split both contiguously.
        assert_eq!(closest_all(&tasks, &near).unwrap(), [1, 0, 0, 1]);
        // Eight tasks: the four far ones split 2+2.
        let tasks = blocks(Preset::Perlmutter, 8);
        assert_eq!(
            closest_all(&tasks, &near).unwrap(),
            [1, 1, 0, 0, 0, 0, 1, 1]
        );
    }

    #[test]
    fn overcommitted_domains_stay_within_one() {
        // 7 tasks on socket 0 of Aurora (6 GPUs) and 1 on socket 1.
        let near = near(Preset::Aurora);
        let mut tasks: Vec<CpuSet> = (0..7).map(|c| CpuSet::of(&[c]).unwrap()).collect();
        tasks.push(CpuSet::of(&[60]).unwrap());
        let got = closest_all(&tasks, &near).unwrap();
        assert_eq!(got, [0, 0, 1, 2, 3, 4, 5, 6]);
    }

    #[test]
    fn unknown_affinity_falls_back_with_one_line() {
        let mut t = Preset::Perlmutter.topology();
        assert_eq!(
            near_cpus(&["0", "7"], &t).unwrap_err().to_string(),
            "closest: cannot locate GPU \"7\"; using contiguous"
        );
        t.gpus[1] = GpuPlace {
            token: "1".to_string(),
            numa: None,
            cpus: None,
        };
        let err = near_cpus(&t.tokens(), &t).unwrap_err();
        assert_eq!(err, Fallback::NoAffinity("1".to_string()));
        assert_eq!(
            err.to_string(),
            "closest: no CPU affinity is known for GPU \"1\"; using contiguous"
        );
        // A partial step that avoids the unknown GPU is fine.
        assert!(near_cpus(&["0", "2"], &t).is_ok());
        assert!(closest_all(&[], &[]).is_err());
        assert!(closest_own(&CpuSet::new(), 0, 1, &[]).is_err());
        assert!(closest_own(&CpuSet::of(&[0]).unwrap(), 2, 2, &near(Preset::Perlmutter)).is_err());
    }

    #[test]
    fn only_where_slurm_bound_every_task_is_the_list_slurms() {
        let cpus = |l: &str| CpuSet::parse(l).unwrap();
        let stepd = cpus("0-7");
        let bound = [cpus("0-3"), cpus("4-7")];
        let is = |listed: &[CpuSet], own: Option<&CpuSet>, parent: Option<&CpuSet>, l| {
            list_is_slurms(listed, own, l, every_task_bound(listed, parent))
        };
        // Bound by Slurm, and the entry agrees.
        assert!(is(&bound, Some(&cpus("0-3")), Some(&stepd), 0));
        assert!(is(&bound, Some(&cpus("4-7")), Some(&stepd), 1));
        // An entry that disagrees with the task's own mask (an unbound
        // task's, under task/none).
        assert!(!is(&bound, Some(&cpus("4-7")), Some(&stepd), 0));
        assert!(!is(&bound, Some(&stepd), Some(&stepd), 0));
        // A task bound to all of slurmstepd's CPUs (or unbound: it cannot
        // tell) keeps every task of the node off the list, those whose
        // entries agree included.
        let mixed = [cpus("0-3"), cpus("4-7"), stepd.clone()];
        assert!(!every_task_bound(&mixed, Some(&stepd)));
        assert!(!is(&mixed, Some(&stepd), Some(&stepd), 2));
        assert!(!is(&mixed, Some(&cpus("0-3")), Some(&stepd), 0));
        // Masks outside slurmstepd's, or a mask unknown.
        assert!(!is(&bound, Some(&cpus("0-3")), Some(&cpus("4-7")), 0));
        assert!(!is(&bound, None, Some(&stepd), 0));
        assert!(!is(&bound, Some(&cpus("0-3")), None, 0));
        // No entry for the task.
        assert!(!is(&bound, Some(&cpus("0-3")), Some(&stepd), 2));
    }

    fn shares(preset: Preset, n: usize) -> Vec<Vec<usize>> {
        closest_shares(&blocks(preset, n), &near(preset)).unwrap()
    }

    #[test]
    fn fewer_tasks_than_gpus_hold_the_nearest_shares() {
        for preset in [Preset::Perlmutter, Preset::Polaris] {
            // One task on the whole node holds every GPU.
            assert_eq!(shares(preset, 1), [vec![0, 1, 2, 3]], "{preset:?}");
            // Each of two tasks spans the two domains of two GPUs: it holds
            // them, its first the one it held alone before.
            assert_eq!(shares(preset, 2), [vec![2, 3], vec![0, 1]], "{preset:?}");
            // As many tasks as GPUs: one each, as before.
            assert_eq!(shares(preset, 4), [[3], [2], [1], [0]], "{preset:?}");
        }
        // Three tasks on Perlmutter's 64 cores, GPUs 3, 2, 1, 0 on 16
        // each: 0-20 (16 by GPU 3, 5 by GPU 2), 21-41 (11 by GPU 2, 10 by
        // GPU 1), 42-62 (6 by GPU 1, 15 by GPU 0). The spare GPU goes
        // where it is nearest: the middle task's 10 cores by GPU 1.
        let got = shares(Preset::Perlmutter, 3);
        assert_eq!(got, [vec![3], vec![2, 1], vec![0]]);
        // Unbound tasks (the whole node each): contiguous's blocks.
        let node = Preset::Perlmutter.topology().cpus;
        let near = near(Preset::Perlmutter);
        let all = closest_shares(&[node.clone(), node.clone(), node], &near).unwrap();
        assert_eq!(all, [vec![0, 1], vec![2], vec![3]]);
    }

    #[test]
    fn shares_keep_the_most_tasks_next_to_their_cpus() {
        // 64 cores, GPUs 0 and 1 next to cores 0-31, 2 and 3 next to
        // 32-63; three tasks on 0-15, 16-31 and 32-47 (srun -n3 -c16).
        let cpus = |l: &str| CpuSet::parse(l).unwrap();
        let near = [cpus("0-31"), cpus("0-31"), cpus("32-63"), cpus("32-63")];
        let tasks = [cpus("0-15"), cpus("16-31"), cpus("32-47")];
        let got = closest_shares(&tasks, &near).unwrap();
        assert_eq!(got, [vec![0], vec![1], vec![2, 3]]);
    }

    #[test]
    fn the_search_is_bounded_by_the_gpus() {
        use crate::method::assignment::COSTS_READ;
        let read = |tasks: &[CpuSet], near: &[CpuSet]| {
            COSTS_READ.with(|n| n.set(0));
            let got = closest_shares(tasks, near).unwrap();
            assert_eq!(got.len(), tasks.len());
            COSTS_READ.with(|n| n.get())
        };
        // 64 GPUs (the most a node lists) in 8 domains of 16 cores, and
        // every count of fewer tasks: at most 4 k³ costs read (k GPUs
        // against fewer than 2k places, each GPU's search at most one pass
        // per place).
        let near: Vec<CpuSet> = (0..64)
            .map(|g| CpuSet::range(16 * (g / 8), 16 * (g / 8) + 15).unwrap())
            .collect();
        for n in [1, 2, 3, 8, 31, 32, 63] {
            let tasks = blocks_of(&CpuSet::range(0, 127).unwrap(), n);
            let costs = read(&tasks, &near);
            assert!(costs <= 4 * 64 * 64 * 64, "{n} tasks: {costs}");
        }
        // As many tasks as GPUs or more (8 GPUs, 128 tasks): no search.
        let eight = &near[..8];
        let tasks = blocks_of(&CpuSet::range(0, 127).unwrap(), 128);
        assert_eq!(read(&tasks, eight), 0);
    }

    /// `n` tasks on equal consecutive blocks of `cpus`.
    fn blocks_of(cpus: &CpuSet, n: usize) -> Vec<CpuSet> {
        let all: Vec<usize> = cpus.cpus().collect();
        let each = (all.len() / n).max(1);
        (0..n)
            .map(|l| CpuSet::of(&all[(l * each) % all.len()..][..each]).unwrap())
            .collect()
    }

    /// Task `l`'s nearness to each GPU it holds: whether it holds one of
    /// its nearest, and the CPUs in common summed over its share.
    fn nearness(tasks: &[CpuSet], near: &[CpuSet], held: &[Vec<usize>]) -> (usize, usize) {
        let mut local = 0;
        let mut common = 0;
        for (cpus, own) in tasks.iter().zip(held) {
            let best = near.iter().map(|g| g.overlap(cpus)).max().unwrap();
            let overlaps: Vec<usize> = own.iter().map(|&g| near[g].overlap(cpus)).collect();
            local += usize::from(best > 0 && overlaps.contains(&best));
            common += overlaps.iter().sum::<usize>();
        }
        (local, common)
    }

    /// Every way to hand `k` GPUs to `n < k` tasks, each holding `k / n` or
    /// one more.
    fn every_share(n: usize, k: usize) -> Vec<Vec<Vec<usize>>> {
        let mut all = Vec::new();
        for code in 0..n.pow(k as u32) {
            let mut held = vec![Vec::new(); n];
            let mut rest = code;
            for g in 0..k {
                held[rest % n].push(g);
                rest /= n;
            }
            if held
                .iter()
                .all(|h| h.len() == k / n || h.len() == k / n + 1)
            {
                all.push(held);
            }
        }
        all
    }

    /// `closest_all` as first written, quadratic in the tasks: each
    /// task's entry by [`pick_of`], counting over all tasks.
    fn closest_all_before(tasks: &[CpuSet], near: &[CpuSet]) -> Result<Vec<usize>, Error> {
        let groups = groups(tasks, near)?;
        (0..tasks.len()).map(|l| pick_of(&groups, l)).collect()
    }

    proptest::proptest! {
        /// Random layouts: each task bound to a random run of a random
        /// node's CPUs (within a domain, across domains, all of them, or
        /// none near a GPU), over the presets and partial steps.
        #[test]
        fn the_one_pass_rule_gives_what_the_quadratic_one_gave(
            runs in proptest::collection::vec((0usize..140, 1usize..130), 0..70),
            preset in 0usize..5,
            drop in proptest::collection::vec(proptest::bool::ANY, 12),
        ) {
            let preset = [Preset::Perlmutter, Preset::Polaris, Preset::LumiG, Preset::DgxA100, Preset::Aurora][preset];
            let t = preset.topology();
            // A partial step: the GPUs not dropped (at least one).
            let mut tokens: Vec<String> = t
                .tokens()
                .into_iter()
                .zip(drop.iter().chain(std::iter::repeat(&false)))
                .filter(|(_, &d)| !d)
                .map(|(token, _)| token)
                .collect();
            if tokens.is_empty() {
                tokens = t.tokens();
            }
            let near = near_cpus(&tokens, &t).unwrap();
            let tasks: Vec<CpuSet> = runs
                .iter()
                .map(|&(first, len)| CpuSet::range(first, first + len - 1).unwrap())
                .collect();
            let want = closest_all_before(&tasks, &near).unwrap();
            let got = closest_all(&tasks, &near).unwrap();
            proptest::prop_assert_eq!(&got, &want);
            for (l, &p) in want.iter().enumerate() {
                proptest::prop_assert_eq!(closest_of(&tasks, &near, l).unwrap(), p);
            }
            proptest::prop_assert!(closest_of(&tasks, &near, tasks.len()).is_err());
        }

        /// Fewer tasks than GPUs, bound anywhere: every GPU held by
        /// exactly one task, each holding `k / n` or one more, its first
        /// GPU as near as any of its share; and a task alone finds what
        /// all of them find together.
        #[test]
        fn fewer_tasks_than_gpus_hold_every_gpu_once(
            runs in proptest::collection::vec((0usize..140, 1usize..130), 1..8),
            preset in 0usize..5,
        ) {
            let preset = [Preset::Perlmutter, Preset::Polaris, Preset::LumiG, Preset::DgxA100, Preset::Aurora][preset];
            let near = near(preset);
            let tasks: Vec<CpuSet> = runs
                .iter()
                .map(|&(first, len)| CpuSet::range(first, first + len - 1).unwrap())
                .take(near.len() - 1)
                .collect();
            let (n, k) = (tasks.len(), near.len());
            let got = closest_shares(&tasks, &near).unwrap();
            let mut held: Vec<usize> = got.iter().flatten().copied().collect();
            held.sort_unstable();
            proptest::prop_assert_eq!(held, (0..k).collect::<Vec<_>>());
            for (own, cpus) in got.iter().zip(&tasks) {
                proptest::prop_assert!(own.len() == k / n || own.len() == k / n + 1, "{:?}", got);
                let first = near[own[0]].overlap(cpus);
                proptest::prop_assert!(own.iter().all(|&g| near[g].overlap(cpus) <= first));
            }
            let node = NodeCpus::new(None, None, n);
            for (l, own) in got.iter().enumerate() {
                proptest::prop_assert_eq!(&node.pick(&tasks, &near, l).unwrap(), own);
                let alone = NodeCpus::new(None, None, n).alone();
                proptest::prop_assert_eq!(&alone.pick(&tasks, &near, l).unwrap(), own);
            }
        }

        /// Few GPUs anywhere, fewer tasks anywhere: no way to hand out the
        /// GPUs keeps more tasks next to one of their nearest GPUs, nor,
        /// with as many, more CPUs in common.
        #[test]
        fn no_share_is_nearer(
            gpus in proptest::collection::vec((0usize..64, 1usize..40), 2..7),
            runs in proptest::collection::vec((0usize..64, 1usize..40), 1..6),
        ) {
            let span = |&(first, len): &(usize, usize)| CpuSet::range(first, first + len - 1).unwrap();
            let near: Vec<CpuSet> = gpus.iter().map(span).collect();
            let tasks: Vec<CpuSet> = runs.iter().map(span).take(near.len() - 1).collect();
            let got = closest_shares(&tasks, &near).unwrap();
            let best = every_share(tasks.len(), near.len())
                .iter()
                .map(|held| nearness(&tasks, &near, held))
                .max()
                .unwrap();
            proptest::prop_assert_eq!(nearness(&tasks, &near, &got), best, "{:?}", got);
        }

        #[test]
        fn each_group_is_balanced_within_one(
            picks in proptest::collection::vec(0usize..8, 1..40),
            preset in 0usize..5,
        ) {
            let preset = [Preset::Perlmutter, Preset::Polaris, Preset::LumiG, Preset::DgxA100, Preset::Aurora][preset];
            let near = near(preset);
            // Task i sits on one core of NUMA node / socket `picks[i]`.
            let tasks: Vec<CpuSet> = picks
                .iter()
                .map(|&p| CpuSet::of(&[near[p % near.len()].cpus().next().unwrap()]).unwrap())
                .collect();
            let got = closest_all(&tasks, &near).unwrap();
            for (l, task) in tasks.iter().enumerate() {
                let group = candidates(task, &near);
                proptest::prop_assert!(group.contains(&got[l]));
                let loads: Vec<usize> = group
                    .iter()
                    .map(|g| (0..tasks.len()).filter(|&m| got[m] == *g && candidates(&tasks[m], &near) == group).count())
                    .collect();
                let (lo, hi) = (loads.iter().min().unwrap(), loads.iter().max().unwrap());
                proptest::prop_assert!(hi - lo <= 1, "loads {:?}", loads);
            }
        }
    }

    #[test]
    fn nearness_that_tells_no_gpu_apart() {
        let p = Preset::Perlmutter.topology();
        let near: Vec<CpuSet> = p.gpus.iter().map(|g| g.cpus.clone().unwrap()).collect();
        let cpus = |l: &str| CpuSet::parse(l).unwrap();
        assert!(near_all_alike(Some(&cpus("0-127")), &near), "unbound");
        assert!(near_all_alike(Some(&cpus("200")), &near), "near none");
        assert!(near_all_alike(None, &near), "unknown");
        assert!(!near_all_alike(Some(&cpus("0-3")), &near));
        assert!(!near_all_alike(Some(&cpus("0-31")), &near), "two of four");
        // One place for every GPU: nearness decides nothing, and is right.
        let one = vec![cpus("0-7"), cpus("0-7")];
        assert!(!near_all_alike(Some(&cpus("0-7")), &one));
        assert!(!near_all_alike(None, &one));
    }
}
