//! `roundrobin`: node-local task `l` gets GPU `l mod k`; with fewer tasks
//! than GPUs, it holds every `n`-th GPU from `l`.

/// The GPU of node-local task `l` over `k` GPUs (`k > 0`).
pub(crate) fn position(l: usize, k: usize) -> usize {
    l.checked_rem(k).unwrap_or(0)
}

/// The GPUs node-local task `l` of `n` holds over `k > n` GPUs: `l`,
/// `l + n`, `l + 2n`, ... (2 tasks on 4 GPUs hold `0,2` and `1,3`). Its
/// first GPU is `rank % ngpu`'s.
pub(crate) fn stride(l: usize, n: usize, k: usize) -> Vec<usize> {
    (l..k).step_by(n.max(1)).collect()
}

#[cfg(test)]
mod tests {
    use crate::method::tests::{all, shares};
    use crate::method::Method;

    #[test]
    fn roundrobin_literal_tables() {
        assert_eq!(all(Method::RoundRobin, 6, 4), [0, 1, 2, 3, 0, 1]);
        assert_eq!(all(Method::RoundRobin, 3, 4), [0, 1, 2]);
        assert_eq!(all(Method::RoundRobin, 5, 2), [0, 1, 0, 1, 0]);
    }

    #[test]
    fn fewer_tasks_than_gpus_hold_every_nth() {
        assert_eq!(shares(Method::RoundRobin, 1, 4), [vec![0, 1, 2, 3]]);
        assert_eq!(shares(Method::RoundRobin, 2, 4), [vec![0, 2], vec![1, 3]]);
        assert_eq!(
            shares(Method::RoundRobin, 3, 4),
            [vec![0, 3], vec![1], vec![2]]
        );
        assert_eq!(
            shares(Method::RoundRobin, 6, 4),
            [[0], [1], [2], [3], [0], [1]]
        );
    }
}
