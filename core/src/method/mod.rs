//! The mapping methods, declared once (name, aliases, what the usage text
//! says), and the mapping itself: which of a node's `k` GPUs local task `l`
//! of `n` holds (one, where `n >= k`; its share of them, where `n < k`, so
//! that no GPU of the step is left out), and what stays visible to it.
//!
//! This file is the table, [`Visible`] and the dispatch ([`position`]);
//! each rule is a file named for its method, with its literal test table:
//!
//! - `contiguous.rs`: `numpy.array_split` blocks.
//! - `roundrobin.rs`: task `l` gets GPU `l mod k`.
//! - [`closest`]: the GPUs near the task's CPUs, balanced per domain; what
//!   the node's tasks share, read once (`NodeCpus`), and how a task was
//!   matched (`Closeness`).
//! - `assignment.rs`: a least-cost assignment (the Hungarian method, over
//!   costs compared in order), for `closest`'s shares.

mod assignment;
pub mod closest;
pub(crate) mod contiguous;
pub(crate) mod roundrobin;

use crate::error::Error;
use crate::names::{named, with_aliases, Named};
use std::fmt;

/// How tasks are spread over a node's GPUs.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Method {
    /// Consecutive blocks of local tasks per GPU, larger blocks first.
    Contiguous,
    /// Local task `l` gets GPU `l mod k`.
    RoundRobin,
    /// A GPU attached to the task's own CPUs, balanced within each domain
    /// (see `crate::closest`); contiguous where that is unknown.
    Closest,
}

named!(Method {
    Contiguous => "contiguous",
    RoundRobin => "roundrobin" | "round-robin",
    Closest => "closest",
});

impl Method {
    /// What the usage text says of the method, line by line.
    pub(crate) fn described(self) -> &'static [&'static str] {
        match self {
            Method::Contiguous => &[
                "consecutive blocks of node-local tasks share a GPU",
                "(numpy.array_split order: 6 tasks on 4 GPUs -> 0 0 1 1 2 3;",
                "fewer tasks than GPUs hold blocks: 3 on 4 -> 0,1 2 3)",
            ],
            Method::RoundRobin => &[
                "node-local task l gets GPU l mod k; fewer tasks than",
                "GPUs hold every n-th (2 on 4 -> 0,2 1,3)",
            ],
            Method::Closest => &[
                "a GPU attached to the task's own CPUs, split in blocks",
                "among the tasks near the same GPUs (fewer tasks than",
                "GPUs: the shares that keep the most tasks next to their",
                "CPUs, nearest first); the GPUs' CPUs come from the",
                "kernel (sysfs) or NVML; contiguous where they are",
                "unknown (said in one line)",
            ],
        }
    }
}

impl fmt::Display for Method {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(self.name())
    }
}

/// The methods, each with its other spellings: `contiguous, roundrobin (or
/// round-robin)`.
pub fn method_names() -> String {
    with_aliases::<Method>()
}

/// How much of the node's GPU list a task keeps visible.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Visible {
    /// Only the task's own GPU.
    Single,
    /// All of the step's GPUs, the task's own first, the rest wrapping round,
    /// so that peers stay reachable for CUDA IPC.
    Rotate,
}

named!(Visible {
    Single => "single",
    Rotate => "rotate",
});

/// The position in the node's GPU list for local task `local_id` of
/// `local_count` tasks, over `gpu_count` GPUs.
pub fn position(
    method: Method,
    local_id: usize,
    local_count: usize,
    gpu_count: usize,
) -> Result<usize, Error> {
    if gpu_count == 0 {
        return Err(Error::NoGpusToMap);
    }
    if local_id >= local_count {
        return Err(Error::LocalIdOutOfRange {
            local_id,
            local_count,
        });
    }
    match method {
        Method::RoundRobin => Ok(roundrobin::position(local_id, gpu_count)),
        // Without the CPUs of the task and its GPUs, `closest` is
        // `contiguous` (closest.rs works with them).
        Method::Contiguous | Method::Closest => {
            Ok(contiguous::position(local_id, local_count, gpu_count))
        }
    }
}

/// The positions in the node's GPU list that local task `local_id` of
/// `local_count` holds over `gpu_count` GPUs, its first GPU first: one
/// ([`position`]) where the tasks are as many as the GPUs or more; else its
/// share, so that every GPU is held by exactly one task (`contiguous`: a
/// block, `roundrobin`: every `n`-th). `closest` without its CPUs holds
/// `contiguous`'s.
pub fn share(
    method: Method,
    local_id: usize,
    local_count: usize,
    gpu_count: usize,
) -> Result<Vec<usize>, Error> {
    let first = position(method, local_id, local_count, gpu_count)?;
    if local_count >= gpu_count {
        return Ok(vec![first]);
    }
    Ok(match method {
        Method::RoundRobin => roundrobin::stride(local_id, local_count, gpu_count),
        Method::Contiguous | Method::Closest => {
            contiguous::block(local_id, local_count, gpu_count).collect()
        }
    })
}

/// What the task keeps visible, drawn only from `gpus`: the GPUs at
/// `share` (its own, in that order), and under `rotate` every other GPU
/// after them, from the one after its first and wrapping round. Positions
/// past the list are left out.
pub fn visible_list<'a, S: AsRef<str>>(
    gpus: &'a [S],
    share: &[usize],
    visible: Visible,
) -> Vec<&'a str> {
    let own = share.iter().filter_map(|&p| gpus.get(p)).map(AsRef::as_ref);
    match visible {
        Visible::Single => own.collect(),
        Visible::Rotate => {
            let Some(&first) = share.first().filter(|&&p| p < gpus.len()) else {
                return own.collect();
            };
            let rest = (1..gpus.len())
                .map(|i| (first + i) % gpus.len())
                .filter(|p| !share.contains(p))
                .filter_map(|p| gpus.get(p))
                .map(AsRef::as_ref);
            own.chain(rest).collect()
        }
    }
}

#[cfg(test)]
pub(crate) mod tests {
    use super::*;
    use proptest::prelude::*;

    /// Every task's position through the method's dispatch; the method
    /// files' literal tables use it too.
    pub(crate) fn all(method: Method, n: usize, k: usize) -> Vec<usize> {
        (0..n).map(|l| position(method, l, n, k).unwrap()).collect()
    }

    /// Every task's share through the method's dispatch.
    pub(crate) fn shares(method: Method, n: usize, k: usize) -> Vec<Vec<usize>> {
        (0..n).map(|l| share(method, l, n, k).unwrap()).collect()
    }

    #[test]
    fn bad_inputs_are_errors() {
        assert!(position(Method::Contiguous, 0, 4, 0).is_err());
        assert!(position(Method::RoundRobin, 4, 4, 2).is_err());
        assert!(position(Method::Contiguous, 0, 0, 2).is_err());
    }

    #[test]
    fn visible_lists() {
        let g = ["2", "3", "5"];
        assert_eq!(visible_list(&g, &[1], Visible::Single), ["3"]);
        assert_eq!(visible_list(&g, &[0], Visible::Rotate), ["2", "3", "5"]);
        assert_eq!(visible_list(&g, &[2], Visible::Rotate), ["5", "2", "3"]);
        assert!(visible_list(&g, &[9], Visible::Single).is_empty());
        // A share: its GPUs first, then the rest from the one after its first.
        let g = ["0", "1", "2", "3"];
        assert_eq!(visible_list(&g, &[2, 3], Visible::Single), ["2", "3"]);
        assert_eq!(
            visible_list(&g, &[2, 3], Visible::Rotate),
            ["2", "3", "0", "1"]
        );
        assert_eq!(
            visible_list(&g, &[1, 3], Visible::Rotate),
            ["1", "3", "2", "0"]
        );
        assert_eq!(visible_list(&g, &[0, 1, 2, 3], Visible::Rotate), g);
    }

    #[test]
    fn a_share_never_leaves_the_list_and_starts_at_the_position() {
        for method in [Method::Contiguous, Method::RoundRobin, Method::Closest] {
            for k in 1..=9 {
                for n in 1..=12 {
                    for l in 0..n {
                        let s = share(method, l, n, k).unwrap();
                        let expect_len = if n >= k { 1 } else { s.len() };
                        assert_eq!(s.len(), expect_len);
                        assert!(s.iter().all(|&p| p < k), "{method:?} {l}/{n} on {k}: {s:?}");
                        if n >= k {
                            assert_eq!(s, [position(method, l, n, k).unwrap()]);
                        }
                    }
                }
            }
        }
    }

    proptest! {
        #![proptest_config(ProptestConfig::with_cases(2000))]

        #[test]
        fn every_position_is_in_range(n in 1usize..=512, k in 1usize..=16, rr in any::<bool>()) {
            let method = if rr { Method::RoundRobin } else { Method::Contiguous };
            for l in 0..n {
                prop_assert!(position(method, l, n, k)? < k);
            }
        }

        #[test]
        fn contiguous_blocks(n in 1usize..=512, k in 1usize..=16) {
            let p = all(Method::Contiguous, n, k);
            prop_assert!(p.windows(2).all(|w| w[0] <= w[1]), "non-decreasing");
            prop_assert!(p.windows(2).all(|w| w[1] - w[0] <= 1), "no GPU skipped");
            let used = p.last().copied().unwrap_or(0) + 1;
            prop_assert_eq!(used, n.min(k));
            let sizes: Vec<usize> = (0..used).map(|g| p.iter().filter(|&&x| x == g).count()).collect();
            prop_assert!(sizes.windows(2).all(|w| w[0] >= w[1]), "larger blocks first: {:?}", sizes);
            let (lo, hi) = (sizes.iter().min().unwrap(), sizes.iter().max().unwrap());
            prop_assert!(hi - lo <= 1, "sizes {:?}", sizes);
        }

        #[test]
        fn roundrobin_loads_differ_by_at_most_one(n in 1usize..=512, k in 1usize..=16) {
            let p = all(Method::RoundRobin, n, k);
            let loads: Vec<usize> = (0..k).map(|g| p.iter().filter(|&&x| x == g).count()).collect();
            let (lo, hi) = (loads.iter().min().unwrap(), loads.iter().max().unwrap());
            prop_assert!(hi - lo <= 1, "loads {:?}", loads);
        }

        /// Fewer tasks than GPUs: every GPU of the node is held by exactly
        /// one task, and the shares differ in size by at most one.
        #[test]
        fn fewer_tasks_than_gpus_hold_every_gpu_once(k in 2usize..=64, n in 1usize..64, rr in any::<bool>()) {
            let n = 1 + n % (k - 1);
            let method = if rr { Method::RoundRobin } else { Method::Contiguous };
            let s = shares(method, n, k);
            let mut held: Vec<usize> = s.iter().flatten().copied().collect();
            held.sort_unstable();
            prop_assert_eq!(held, (0..k).collect::<Vec<_>>());
            let sizes: Vec<usize> = s.iter().map(Vec::len).collect();
            prop_assert!(sizes.iter().all(|&z| z == k / n || z == k / n + 1), "{:?}", sizes);
            // The first GPU of each share: roundrobin's l, contiguous's
            // block start.
            for (l, own) in s.iter().enumerate() {
                let first = own[0];
                match method {
                    Method::RoundRobin => prop_assert_eq!(first, l),
                    _ => prop_assert_eq!(first, l * (k / n) + l.min(k % n)),
                }
            }
        }

        #[test]
        fn rotate_shows_every_gpu_once_own_first(k in 1usize..=16, n in 1usize..=16, l in 0usize..16, rr in any::<bool>()) {
            let l = l % n;
            let method = if rr { Method::RoundRobin } else { Method::Contiguous };
            let g: Vec<String> = (0..k).map(|i| format!("GPU-{i}")).collect();
            let own = share(method, l, n, k)?;
            let v = visible_list(&g, &own, Visible::Rotate);
            let mut sorted = v.clone();
            sorted.sort_unstable();
            let mut want: Vec<&str> = g.iter().map(String::as_str).collect();
            want.sort_unstable();
            prop_assert_eq!(sorted, want);
            let head: Vec<&str> = own.iter().map(|&p| g[p].as_str()).collect();
            prop_assert_eq!(&v[..own.len()], head.as_slice());
            prop_assert_eq!(visible_list(&g, &own, Visible::Single), head);
        }

        #[test]
        fn rotate_is_a_permutation_starting_at_the_task_gpu(k in 1usize..=16, p in 0usize..16) {
            let p = p % k;
            let g: Vec<String> = (0..k).map(|i| format!("GPU-{i}")).collect();
            let v = visible_list(&g, &[p], Visible::Rotate);
            prop_assert_eq!(v.len(), k);
            prop_assert_eq!(v[0], g[p].as_str());
            let mut sorted: Vec<&str> = v.clone();
            sorted.sort_unstable();
            let mut want: Vec<&str> = g.iter().map(String::as_str).collect();
            want.sort_unstable();
            prop_assert_eq!(sorted, want);
            prop_assert_eq!(visible_list(&g, &[p], Visible::Single), vec![g[p].as_str()]);
        }
    }
}
