//! When the keeper is done: the node's tasks, as far as it knows them.

use std::time::{Duration, Instant};

/// When the keeper is done: the node's tasks, as far as it knows them.
#[derive(Debug, Clone, Copy)]
pub(super) struct Tally {
    /// The step's tasks on this node (`SLURM_STEP_TASKS_PER_NODE`).
    expected: usize,
    /// How many slurmstepd had forked when the keeper started.
    forked: usize,
    /// How many joined, or asked and were refused ([`Tally::apart`]).
    joined: usize,
    /// How long to wait for more tasks once every known one has exited,
    /// where not all are known.
    grace: Duration,
    /// Since when no known task has lived: the keeper's start, then the
    /// last known task's exit; `None` while a task that joined may live.
    quiet_since: Option<Instant>,
}

impl Tally {
    pub(super) fn new(expected: usize, forked: usize, grace: Duration, now: Instant) -> Tally {
        Tally {
            expected,
            forked,
            joined: 0,
            grace,
            quiet_since: Some(now),
        }
    }

    pub(super) fn joined(&mut self) {
        self.joined += 1;
        self.quiet_since = None;
    }

    /// A task of the step that the keeper will not serve (outside its
    /// pid namespace) asked: known, never live.
    pub(super) fn apart(&mut self) {
        self.joined += 1;
    }

    pub(super) fn exited(&mut self, now: Instant) {
        self.quiet_since = Some(now);
    }

    /// Every task is known: slurmstepd's children were read (it forks all
    /// of the node's tasks before any runs), or all joined.
    pub(super) fn all_known(&self) -> bool {
        self.forked >= self.expected || self.joined >= self.expected
    }

    /// Done: no known task lives, and either every task was known or none
    /// joined within the grace.
    pub(super) fn done(&self, live: usize, now: Instant) -> bool {
        live == 0 && (self.all_known() || self.quiet_since.is_some_and(|t| now >= t + self.grace))
    }

    /// How long to wait for the next event: forever while tasks live.
    pub(super) fn wait(&self, live: usize, now: Instant) -> Option<Duration> {
        match (live, self.quiet_since) {
            (0, Some(t)) => Some((t + self.grace).saturating_duration_since(now)),
            (0, None) => Some(self.grace),
            _ => None,
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    const GRACE: Duration = Duration::from_secs(10);

    #[test]
    fn every_task_known_ends_with_the_last_one() {
        let t0 = Instant::now();
        // slurmstepd had forked all 4: done once none lives, at once.
        let tally = Tally::new(4, 4, GRACE, t0);
        assert!(!tally.done(1, t0));
        assert!(tally.done(0, t0));
        assert_eq!(tally.wait(2, t0), None, "no timeout while tasks live");
        // Unknown children: all 3 joined.
        let mut tally = Tally::new(3, 0, GRACE, t0);
        for _ in 0..3 {
            tally.joined();
        }
        assert!(tally.done(0, t0));
        // One served, one refused (in another pid namespace): done once
        // the served one has exited, with no grace.
        let mut tally = Tally::new(2, 0, GRACE, t0);
        tally.joined();
        tally.apart();
        assert!(!tally.done(1, t0));
        tally.exited(t0);
        assert!(tally.done(0, t0));
    }

    #[test]
    fn tasks_not_all_known_get_the_grace_for_more_to_join() {
        let t0 = Instant::now();
        let mut tally = Tally::new(4, 0, GRACE, t0);
        // Nobody joined yet: the grace runs from the keeper's start.
        assert!(!tally.done(0, t0));
        assert_eq!(tally.wait(0, t0), Some(GRACE));
        assert!(tally.done(0, t0 + GRACE));
        // One joined and exited: the grace runs again from its exit.
        tally.joined();
        assert!(!tally.done(1, t0 + GRACE));
        let later = t0 + GRACE * 2;
        tally.exited(later);
        assert!(!tally.done(0, later));
        assert_eq!(tally.wait(0, later + GRACE / 2), Some(GRACE / 2));
        assert!(tally.done(0, later + GRACE));
    }
}
