//! `roundrobin`: node-local task `l` gets GPU `l mod k`.

/// The GPU of node-local task `l` over `k` GPUs (`k > 0`).
pub fn position(l: usize, k: usize) -> usize {
    l.checked_rem(k).unwrap_or(0)
}

#[cfg(test)]
mod tests {
    use crate::method::tests::all;
    use crate::method::Method;

    #[test]
    fn roundrobin_literal_tables() {
        assert_eq!(all(Method::RoundRobin, 6, 4), [0, 1, 2, 3, 0, 1]);
        assert_eq!(all(Method::RoundRobin, 3, 4), [0, 1, 2]);
        assert_eq!(all(Method::RoundRobin, 5, 2), [0, 1, 0, 1, 0]);
    }
}
