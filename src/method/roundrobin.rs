//! `roundrobin`: node-local task `l` gets GPU `l mod k`.

/// The GPU of node-local task `l` over `k` GPUs (`k > 0`).
pub fn position(l: usize, k: usize) -> usize {
    l.checked_rem(k).unwrap_or(0)
}

#[cfg(test)]
mod tests {
    use crate::method::{position, Method};

    /// Every task's position through the method's dispatch.
    fn all(method: Method, n: usize, k: usize) -> Vec<usize> {
        (0..n).map(|l| position(method, l, n, k).unwrap()).collect()
    }

    #[test]
    fn roundrobin_literal_tables() {
        assert_eq!(all(Method::RoundRobin, 6, 4), [0, 1, 2, 3, 0, 1]);
        assert_eq!(all(Method::RoundRobin, 3, 4), [0, 1, 2]);
        assert_eq!(all(Method::RoundRobin, 5, 2), [0, 1, 0, 1, 0]);
    }
}
