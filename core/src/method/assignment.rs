//! A least-cost assignment, for `closest`'s shares: each row (a GPU) gets a
//! column (a place in a task's share) of its own, the sum of their costs
//! least, by the Hungarian method in `O(rows² · cols)`.
//!
//! A cost is a vector compared in order (lexicographically), so that a rule
//! ranks what matters first without scaling numbers into one: the method
//! only adds, subtracts and compares costs, which vectors allow.

/// A cost: its first entry matters most.
pub(crate) type Cost = [i64; 4];

#[cfg(test)]
thread_local! {
    /// Costs looked at by [`assign`] on this thread, for tests that count
    /// work.
    pub(crate) static COSTS_READ: std::cell::Cell<usize> = const { std::cell::Cell::new(0) };
}

/// The column of each row, for `rows <= cols` rows and columns whose cost
/// `cost(row, col)` gives: a set of distinct columns whose costs sum
/// least. `None` where there are more rows than columns.
pub(crate) fn assign(
    rows: usize,
    cols: usize,
    cost: impl Fn(usize, usize) -> Cost,
) -> Option<Vec<usize>> {
    if rows > cols {
        return None;
    }
    // Index 0 of each is the method's dummy row and column; row r and
    // column c are held at r + 1 and c + 1.
    let mut row_price = vec![[0; 4]; rows + 1];
    let mut col_price = vec![[0; 4]; cols + 1];
    let mut row_of = vec![0usize; cols + 1];
    let mut came_from = vec![0usize; cols + 1];
    for row in 1..=rows {
        set(&mut row_of, 0, row);
        let mut col = 0;
        let mut least = vec![[i64::MAX; 4]; cols + 1];
        let mut used = vec![false; cols + 1];
        // Grow a tree of tight edges from `row` until it reaches a free
        // column, moving the prices by the least slack each time.
        while at(&row_of, col) != 0 {
            set(&mut used, col, true);
            let from = at(&row_of, col);
            let (mut slack, mut next) = ([i64::MAX; 4], None);
            for c in (1..=cols).filter(|&c| !at(&used, c)) {
                #[cfg(test)]
                COSTS_READ.with(|n| n.set(n.get() + 1));
                let reduced = minus(
                    minus(cost(from - 1, c - 1), at(&row_price, from)),
                    at(&col_price, c),
                );
                if reduced < at(&least, c) {
                    set(&mut least, c, reduced);
                    set(&mut came_from, c, col);
                }
                if at(&least, c) < slack {
                    (slack, next) = (at(&least, c), Some(c));
                }
            }
            for c in 0..=cols {
                if at(&used, c) {
                    let r = at(&row_of, c);
                    update(&mut row_price, r, |p| plus(p, slack));
                    update(&mut col_price, c, |p| minus(p, slack));
                } else {
                    update(&mut least, c, |l| minus(l, slack));
                }
            }
            col = next?;
        }
        // Flip the path back to the dummy column.
        while col != 0 {
            let before = at(&came_from, col);
            let row = at(&row_of, before);
            set(&mut row_of, col, row);
            col = before;
        }
    }
    let mut col_of = vec![0; rows];
    for (c, &r) in row_of.iter().enumerate().skip(1) {
        if r != 0 {
            set(&mut col_of, r - 1, c - 1);
        }
    }
    Some(col_of)
}

fn at<T: Copy + Default>(values: &[T], i: usize) -> T {
    values.get(i).copied().unwrap_or_default()
}

fn set<T: Copy>(values: &mut [T], i: usize, value: T) {
    update(values, i, |_| value);
}

fn update<T: Copy>(values: &mut [T], i: usize, change: impl FnOnce(T) -> T) {
    if let Some(slot) = values.get_mut(i) {
        *slot = change(*slot);
    }
}

fn plus(mut a: Cost, b: Cost) -> Cost {
    for (x, y) in a.iter_mut().zip(b) {
        *x = x.saturating_add(y);
    }
    a
}

fn minus(mut a: Cost, b: Cost) -> Cost {
    for (x, y) in a.iter_mut().zip(b) {
        *x = x.saturating_sub(y);
    }
    a
}

#[cfg(test)]
mod tests {
    use super::*;

    /// Every way to give `rows` rows distinct columns of `cols`.
    fn every(rows: usize, cols: usize) -> Vec<Vec<usize>> {
        if rows == 0 {
            return vec![Vec::new()];
        }
        let mut all = Vec::new();
        for head in every(rows - 1, cols) {
            for c in (0..cols).filter(|c| !head.contains(c)) {
                let mut next = head.clone();
                next.push(c);
                all.push(next);
            }
        }
        all
    }

    fn total(picks: &[usize], cost: &[Vec<Cost>]) -> Cost {
        picks
            .iter()
            .enumerate()
            .fold([0; 4], |sum, (r, &c)| plus(sum, cost[r][c]))
    }

    #[test]
    fn the_first_entry_of_a_cost_matters_most() {
        // Row 0 prefers column 0 by the second entry, row 1 needs it by
        // the first.
        let cost = [[[0, -5, 0, 0], [0; 4]], [[-1, 0, 0, 0], [0, -9, 0, 0]]];
        assert_eq!(assign(2, 2, |r, c| cost[r][c]), Some(vec![1, 0]));
        assert_eq!(assign(3, 2, |_, _| [0; 4]), None);
        assert_eq!(assign(0, 2, |_, _| [0; 4]), Some(vec![]));
    }

    proptest::proptest! {
        /// Small tables: the least sum of any assignment.
        #[test]
        fn it_finds_the_least_sum(
            rows in 1usize..5,
            extra in 0usize..3,
            entries in proptest::collection::vec((-3i64..3, -9i64..9), 28),
        ) {
            let cols = rows + extra;
            let cost: Vec<Vec<Cost>> = (0..rows)
                .map(|r| (0..cols).map(|c| {
                    let (a, b) = entries[r * cols + c];
                    [a, b, a - b, 0]
                }).collect())
                .collect();
            let got = assign(rows, cols, |r, c| cost[r][c]).unwrap();
            let mut seen = got.clone();
            seen.sort_unstable();
            seen.dedup();
            proptest::prop_assert_eq!(seen.len(), rows);
            let best = every(rows, cols).iter().map(|p| total(p, &cost)).min().unwrap();
            proptest::prop_assert_eq!(total(&got, &cost), best);
        }
    }
}
