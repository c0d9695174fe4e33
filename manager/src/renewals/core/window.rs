//! How long a batch of renewals stays open before it is proposed: the pure core of the
//! batcher's group commit.
//!
//! A batch always holds every renewal that arrived while the previous entry was committing.
//! When commits are quick that is one or two renewals, and each Raft entry costs the same
//! whatever it carries (a log flush and an AppendEntries per follower, an apply on every
//! replica), so an idle fleet of 10 000 executors renewing 500 times a second made 350 entries a
//! second (docs/BENCHMARKS.md, B10). For a fleet the batch is held open a little longer, until
//! [`TARGET_BATCH`] renewals are in or [`MAX_WINDOW_US`] has passed, and only when renewals from
//! several executors arrive fast enough that more are due within the window. A lone executor
//! renewing in a closed loop (B2) never waits: nothing else would come.
//!
//! Waiting is safe: a lease is anchored at the instant the executor sent the renewal (P3.3), so
//! a renewal answered a few milliseconds later shortens nothing.

use std::collections::VecDeque;

/// Renewals a held-open batch waits for.
pub const TARGET_BATCH: usize = 8;
/// The longest a batch is held open beyond what had arrived: small beside every lease, and
/// below the 25 ms renewal p99 B1 reads rates at.
pub const MAX_WINDOW_US: u64 = 5_000;
/// How far back arrivals count for the rate and for "several executors".
const HORIZON_US: u64 = 1_000_000;
/// Arrivals remembered, which bounds the memory whatever the rate: the rate of a fleet faster
/// than this many a second is measured over a shorter span.
const REMEMBERED: usize = 4_096;

/// Recent arrivals, for the rate and for telling a fleet from one executor.
#[derive(Debug, Default)]
pub struct ArrivalWindow {
    /// Arrival times in microseconds of the batcher's clock, oldest first.
    arrivals_us: VecDeque<u64>,
    /// The executor of the latest arrival.
    last_executor: Option<String>,
    /// When an arrival last came from another executor than the one before it.
    several_seen_us: Option<u64>,
}

impl ArrivalWindow {
    /// Records a renewal from `executor_id` arriving at `now_us`.
    pub fn arrived(&mut self, now_us: u64, executor_id: &str) {
        if self.arrivals_us.len() == REMEMBERED {
            self.arrivals_us.pop_front();
        }
        self.arrivals_us.push_back(now_us);
        match &mut self.last_executor {
            Some(last) if last == executor_id => {}
            Some(last) => {
                self.several_seen_us = Some(now_us);
                executor_id.clone_into(last);
            }
            None => self.last_executor = Some(executor_id.to_owned()),
        }
    }

    /// How long, from `now_us`, a batch already holding `batched` renewals stays open: `None`
    /// to propose it at once.
    pub fn hold_us(&mut self, now_us: u64, batched: usize) -> Option<u64> {
        let horizon = now_us.saturating_sub(HORIZON_US);
        while self.arrivals_us.front().is_some_and(|&at| at < horizon) {
            self.arrivals_us.pop_front();
        }
        let several = self.several_seen_us.is_some_and(|at| at >= horizon);
        if !several || batched >= TARGET_BATCH {
            return None;
        }
        let oldest = *self.arrivals_us.front()?;
        let span_us = now_us.saturating_sub(oldest).max(1);
        // The gaps between the arrivals remembered, one fewer than the arrivals.
        let gaps = u64::try_from(self.arrivals_us.len().saturating_sub(1).max(1)).unwrap_or(1);
        // Microseconds until the missing renewals are due at the recent rate.
        let missing = u64::try_from(TARGET_BATCH - batched).unwrap_or(u64::MAX);
        let due_in_us = missing.saturating_mul(span_us) / gaps;
        // Worth waiting only if at least one more is due within the window.
        let next_due_us = span_us / gaps;
        (next_due_us < MAX_WINDOW_US).then(|| due_in_us.min(MAX_WINDOW_US))
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    /// Feeds `per_second` arrivals a second for two seconds, from `executors` executors in turn,
    /// and returns the window and the time of the last arrival.
    fn steady(per_second: u64, executors: usize) -> (ArrivalWindow, u64) {
        let mut window = ArrivalWindow::default();
        let gap_us = 1_000_000 / per_second;
        let mut now_us = 0;
        for n in 0..(2 * per_second) {
            now_us = n * gap_us;
            let executor = format!("ex-{}", usize::try_from(n).unwrap() % executors);
            window.arrived(now_us, &executor);
        }
        (window, now_us)
    }

    #[test]
    fn a_lone_executor_in_a_closed_loop_never_waits() {
        for per_second in [10, 600, 5_000] {
            let (mut window, now_us) = steady(per_second, 1);
            assert_eq!(window.hold_us(now_us, 1), None, "{per_second}/s");
        }
    }

    #[test]
    fn an_idle_fleet_waits_at_most_the_window_for_a_fuller_batch() {
        // B10: 10 000 executors, one renewal every 20 s each.
        let (mut window, now_us) = steady(500, 10_000);
        assert_eq!(window.hold_us(now_us, 1), Some(MAX_WINDOW_US));
        // Faster fleets gather the batch sooner: 7 more at 10 000/s are due in 0.7 ms.
        let (mut window, now_us) = steady(10_000, 1_000);
        assert_eq!(window.hold_us(now_us, 1), Some(700));
        // A full batch goes at once.
        assert_eq!(window.hold_us(now_us, TARGET_BATCH), None);
    }

    #[test]
    fn rare_renewals_are_not_held_for_company_that_is_not_coming() {
        // 100 executors renewing every 20 s: 5 a second, one every 200 ms.
        let (mut window, now_us) = steady(5, 100);
        assert_eq!(window.hold_us(now_us, 1), None);
    }

    #[test]
    fn a_fleet_gone_quiet_for_longer_than_the_horizon_is_a_lone_executor_again() {
        let (mut window, now_us) = steady(500, 10_000);
        let later_us = now_us + 2 * HORIZON_US;
        // The executor that renewed last, alone from now on.
        for n in 0..600 {
            window.arrived(later_us + n * 1_000, "ex-999");
        }
        assert_eq!(window.hold_us(later_us + 600 * 1_000, 1), None);
    }

    #[test]
    fn memory_stays_bounded_at_any_rate() {
        let (window, _) = steady(100_000, 10_000);
        assert!(window.arrivals_us.len() <= REMEMBERED);
    }
}
