//! The mapping itself: which of a node's `k` GPUs local task `l` of `n` gets.

use crate::config::Visible;
use crate::error::Error;
use crate::method::Method;

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
        Method::RoundRobin => Ok(local_id % gpu_count),
        // Without the CPUs of the task and its GPUs, `closest` is
        // `contiguous` (crate::closest works with them).
        Method::Contiguous | Method::Closest => Ok(block_of(local_id, local_count, gpu_count)),
    }
}

/// The block holding `l` when `0..n` is split like
/// `numpy.array_split(range(n), k)`: the first `n % k` blocks hold
/// `n / k + 1` items, the others `n / k`.
fn block_of(l: usize, n: usize, k: usize) -> usize {
    let small = n / k;
    let big_blocks = n % k;
    let in_big = big_blocks * (small + 1);
    if l < in_big {
        l / (small + 1)
    } else {
        // l >= in_big implies small > 0, since with small == 0 every task
        // sits in a big block; checked_div keeps that reasoning panic-free.
        big_blocks + (l - in_big).checked_div(small).unwrap_or(0)
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
mod tests {
    use super::*;
    use proptest::prelude::*;

    fn all(method: Method, n: usize, k: usize) -> Vec<usize> {
        (0..n).map(|l| position(method, l, n, k).unwrap()).collect()
    }

    #[test]
    fn contiguous_literal_tables() {
        assert_eq!(all(Method::Contiguous, 6, 4), [0, 0, 1, 1, 2, 3]);
        assert_eq!(all(Method::Contiguous, 3, 4), [0, 1, 2]);
        assert_eq!(all(Method::Contiguous, 4, 4), [0, 1, 2, 3]);
        assert_eq!(all(Method::Contiguous, 5, 2), [0, 0, 0, 1, 1]);
        assert_eq!(all(Method::Contiguous, 7, 3), [0, 0, 0, 1, 1, 2, 2]);
        assert_eq!(all(Method::Contiguous, 1, 4), [0]);
        let mut eight_each = Vec::new();
        for gpu in 0..4 {
            eight_each.extend([gpu; 8]);
        }
        assert_eq!(all(Method::Contiguous, 32, 4), eight_each);
        // The reported bug: rank 31 of 32 must get GPU 3, not 7.
        assert_eq!(position(Method::Contiguous, 31, 32, 4), Ok(3));
    }

    #[test]
    fn roundrobin_literal_tables() {
        assert_eq!(all(Method::RoundRobin, 6, 4), [0, 1, 2, 3, 0, 1]);
        assert_eq!(all(Method::RoundRobin, 3, 4), [0, 1, 2]);
        assert_eq!(all(Method::RoundRobin, 5, 2), [0, 1, 0, 1, 0]);
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
