//! The mapping methods, declared once (name, aliases, what the usage text
//! says), and the mapping itself: which of a node's `k` GPUs local task `l`
//! of `n` gets, and what stays visible to it.

pub mod closest;
pub mod contiguous;
pub mod roundrobin;

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
    /// (see [`crate::closest`]); contiguous where that is unknown.
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
                "(numpy.array_split order: 6 tasks on 4 GPUs -> 0 0 1 1 2 3)",
            ],
            Method::RoundRobin => &["node-local task l gets GPU l mod k"],
            Method::Closest => &[
                "a GPU attached to the task's own CPUs, split in blocks",
                "among the tasks near the same GPUs; the GPUs' CPUs come",
                "from the kernel (sysfs) or NVML; contiguous where they",
                "are unknown (said in one line)",
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

/// What the task keeps visible, drawn only from `gpus`: its own GPU, or
/// every GPU starting at its own and wrapping round.
pub fn visible_list<S: AsRef<str>>(gpus: &[S], position: usize, visible: Visible) -> Vec<&str> {
    let (before, from) = gpus.split_at(position.min(gpus.len()));
    match visible {
        Visible::Single => from.first().map(AsRef::as_ref).into_iter().collect(),
        Visible::Rotate => from.iter().chain(before).map(AsRef::as_ref).collect(),
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

    #[test]
    fn bad_inputs_are_errors() {
        assert!(position(Method::Contiguous, 0, 4, 0).is_err());
        assert!(position(Method::RoundRobin, 4, 4, 2).is_err());
        assert!(position(Method::Contiguous, 0, 0, 2).is_err());
    }

    #[test]
    fn visible_lists() {
        let g = ["2", "3", "5"];
        assert_eq!(visible_list(&g, 1, Visible::Single), ["3"]);
        assert_eq!(visible_list(&g, 0, Visible::Rotate), ["2", "3", "5"]);
        assert_eq!(visible_list(&g, 2, Visible::Rotate), ["5", "2", "3"]);
        assert!(visible_list(&g, 9, Visible::Single).is_empty());
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

        #[test]
        fn rotate_is_a_permutation_starting_at_the_task_gpu(k in 1usize..=16, p in 0usize..16) {
            let p = p % k;
            let g: Vec<String> = (0..k).map(|i| format!("GPU-{i}")).collect();
            let v = visible_list(&g, p, Visible::Rotate);
            prop_assert_eq!(v.len(), k);
            prop_assert_eq!(v[0], g[p].as_str());
            let mut sorted: Vec<&str> = v.clone();
            sorted.sort_unstable();
            let mut want: Vec<&str> = g.iter().map(String::as_str).collect();
            want.sort_unstable();
            prop_assert_eq!(sorted, want);
            prop_assert_eq!(visible_list(&g, p, Visible::Single), vec![g[p].as_str()]);
        }
    }
}
