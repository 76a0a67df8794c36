//! `contiguous`: consecutive blocks of node-local tasks share a GPU.

/// The GPU of node-local task `l` of `n` over `k` GPUs (`k > 0`): the
/// block holding `l` when `0..n` is split like
/// `numpy.array_split(range(n), k)`: the first `n % k` blocks hold
/// `n / k + 1` items, the others `n / k`.
pub fn position(l: usize, n: usize, k: usize) -> usize {
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

#[cfg(test)]
mod tests {
    use crate::method::tests::all;
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
}
