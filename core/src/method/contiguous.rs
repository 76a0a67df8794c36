//! `contiguous`: consecutive blocks of node-local tasks share a GPU; with
//! fewer tasks than GPUs, each task holds a consecutive block of GPUs.

use std::ops::Range;

/// The GPU of node-local task `l` of `n` over `k` GPUs (`k > 0`): the
/// block holding `l` when `0..n` is split like
/// `numpy.array_split(range(n), k)`: the first `n % k` blocks hold
/// `n / k + 1` items, the others `n / k`.
pub(crate) fn position(l: usize, n: usize, k: usize) -> usize {
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

/// The GPUs node-local task `l` of `n` holds over `k > n` GPUs: block `l`
/// of `numpy.array_split(range(k), n)`, larger blocks first (3 tasks on 4
/// GPUs hold `0,1`, `2` and `3`). Where `n` divides `k`, its first GPU is
/// desispec's `int(rank / (size / ngpu))`.
pub(crate) fn block(l: usize, n: usize, k: usize) -> Range<usize> {
    let small = k.checked_div(n).unwrap_or(0);
    let big_blocks = k.checked_rem(n).unwrap_or(0);
    let start = l * small + l.min(big_blocks);
    let len = small + usize::from(l < big_blocks);
    start..start + len
}

#[cfg(test)]
mod tests {
    use crate::method::tests::{all, shares};
    use crate::method::{position, Method};

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
    fn fewer_tasks_than_gpus_hold_blocks() {
        assert_eq!(shares(Method::Contiguous, 1, 4), [vec![0, 1, 2, 3]]);
        assert_eq!(shares(Method::Contiguous, 2, 4), [vec![0, 1], vec![2, 3]]);
        assert_eq!(
            shares(Method::Contiguous, 3, 4),
            [vec![0, 1], vec![2], vec![3]]
        );
        assert_eq!(
            shares(Method::Contiguous, 3, 8),
            [vec![0, 1, 2], vec![3, 4, 5], vec![6, 7]]
        );
        // desispec's int(rank / (size / ngpu)) for 2 ranks on 4 GPUs: 0, 2.
        let first: Vec<usize> = shares(Method::Contiguous, 2, 4)
            .iter()
            .map(|s| s[0])
            .collect();
        assert_eq!(first, [0, 2]);
        // As many tasks as GPUs or more: one GPU each, as before.
        assert_eq!(shares(Method::Contiguous, 4, 4), [[0], [1], [2], [3]]);
        assert_eq!(
            shares(Method::Contiguous, 6, 4),
            [[0], [0], [1], [1], [2], [3]]
        );
    }
}
