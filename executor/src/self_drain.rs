//! The self-drain that begins a graceful stop (PROTOCOL P17.2), as pure decisions the lease
//! loop's shell acts on.
//!
//! On a stop the executor asks the managers to drain it, with its own credential, and goes on
//! renewing and admitting: the leader moves each shard away through the handoff of P5.2 (a
//! revoke the executor answers once it stopped admitting that shard), so every shard is served
//! until its new owner may start. Once it holds nothing, or when the drain cannot help, the
//! stop goes on as P3.7: admission stops and the executor deregisters, which hands whatever is
//! left over at once. The whole stop stays within the shutdown grace: the drain gets the grace
//! less a reserve for the deregistration.

use std::time::Duration;

use leasehold_api::wire::{possible_takers, ExecutorView, ShardEpoch};
use tokio::time::Instant;

/// The drain stops waiting when no shard has left for this long: nobody is taking them (every
/// other executor is stopping too, say), so the rest is handed over by the deregistration. A
/// handoff takes a plan and a revoke's round trip, tens of milliseconds, once the drain is
/// committed (the leader replans at once).
pub(crate) const DRAIN_STALL: Duration = Duration::from_millis(1_500);

/// Most of the grace kept back from the drain for the deregistration that follows it (never
/// more than half the grace).
pub(crate) const DEREGISTRATION_RESERVE: Duration = Duration::from_secs(1);

/// When the drain gives up waiting for the last handoffs, for a stop that began at
/// `stop_began` with `grace` to finish in: the deregistration keeps
/// [`DEREGISTRATION_RESERVE`], or half the grace when that is shorter.
pub(crate) fn drain_deadline(stop_began: Instant, grace: Duration) -> Instant {
    stop_began + grace.saturating_sub(DEREGISTRATION_RESERVE.min(grace / 2))
}

/// What the drain does after the managers committed it, from the executors they list: wait for
/// the handoffs only when another executor can take the shards (live and not draining itself).
/// Otherwise the shards stay here until the lease runs out (P5.4), so waiting would only delay
/// the stop.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) enum AfterDrain {
    /// `takers` executors can take the shards: wait until none is held.
    AwaitHandoffs { takers: usize },
    /// No executor can take them: stop at once (P3.7).
    NoTaker,
}

pub(crate) fn after_drain(own_executor_id: &str, executors: &[ExecutorView]) -> AfterDrain {
    match possible_takers(own_executor_id, executors).count() {
        0 => AfterDrain::NoTaker,
        takers => AfterDrain::AwaitHandoffs { takers },
    }
}

/// What a drain still waits for. A shard is handed over once the executor let it go (its
/// revoke was applied) and, as a sidecar, once its service acknowledged an answer without it or
/// its copy ran out (P16.2): until then the revoke is not answered released, and renewals claim
/// the shard.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) struct StillHeld {
    /// Shards the executor holds: no revoke came for them.
    pub(crate) by_executor: usize,
    /// Shards the executor let go that its service may still be admitting: it has not
    /// acknowledged the answer that dropped them.
    pub(crate) unacknowledged: usize,
}

impl StillHeld {
    /// From the shards the executor `held` and those its service was `told` (both ascending).
    pub(crate) fn of(held: &[ShardEpoch], told: &[ShardEpoch]) -> Self {
        let unacknowledged = told
            .iter()
            .filter(|told| {
                held.binary_search_by_key(&told.shard, |held| held.shard)
                    .is_err()
            })
            .count();
        Self {
            by_executor: held.len(),
            unacknowledged,
        }
    }

    /// Shards not handed over yet.
    pub(crate) fn total(self) -> usize {
        self.by_executor + self.unacknowledged
    }
}

impl std::fmt::Display for StillHeld {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        write!(f, "{} still held by the executor", self.by_executor)?;
        if self.unacknowledged > 0 {
            write!(
                f,
                ", {} revoked but not acknowledged by the service, which may still be admitting \
                 them (P16.2)",
                self.unacknowledged
            )?;
        }
        Ok(())
    }
}

/// Where the wait for the drain's handoffs stands.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) enum DrainWait {
    /// Nothing is held any more.
    Done,
    /// Still waiting: look again at this instant, or when the held set changes.
    WakeAt(Instant),
    /// The deadline came with shards still held.
    TimedOut,
    /// No shard left for [`DRAIN_STALL`].
    Stalled,
}

/// The wait for the drain's handoffs, from the held set as it shrinks.
#[derive(Debug, Clone, Copy)]
pub(crate) struct DrainProgress {
    held: usize,
    progress_at: Instant,
    deadline: Instant,
}

impl DrainProgress {
    /// A wait that began at `now` with `held` shards, to end by `deadline`.
    pub(crate) fn new(held: usize, now: Instant, deadline: Instant) -> Self {
        Self {
            held,
            progress_at: now,
            deadline,
        }
    }

    /// Where the wait stands at `now`, holding `held` shards.
    pub(crate) fn observe(&mut self, held: usize, now: Instant) -> DrainWait {
        if held == 0 {
            return DrainWait::Done;
        }
        if held < self.held {
            self.held = held;
            self.progress_at = now;
        }
        if now >= self.deadline {
            return DrainWait::TimedOut;
        }
        let stalled_at = self.progress_at + DRAIN_STALL;
        if now >= stalled_at {
            return DrainWait::Stalled;
        }
        DrainWait::WakeAt(stalled_at.min(self.deadline))
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn executor(id: &str, draining: bool, lease_remaining_ms: u64) -> ExecutorView {
        ExecutorView {
            namespace: leasehold_api::wire::DEFAULT_NAMESPACE.into(),
            executor_id: id.into(),
            incarnation: format!("inc-{id}"),
            name: None,
            address: "http://127.0.0.1:9".into(),
            lease_remaining_ms,
            registered_revision: 1,
            shards: Vec::new(),
            draining,
            capacity: 1,
            load: None,
            utilisation: None,
            app_version: None,
            labels: Default::default(),
        }
    }

    /// P17.2, P5.4: a drain waits for handoffs only when some other live executor that is not
    /// draining can take the shards; itself, draining peers and lapsed ones cannot.
    #[test]
    fn p17_2_the_drain_waits_only_when_another_executor_can_take_the_shards() {
        let me = executor("ex-1", true, 9_000);
        assert_eq!(
            after_drain("ex-1", std::slice::from_ref(&me)),
            AfterDrain::NoTaker
        );
        let draining_peer = executor("ex-2", true, 9_000);
        let lapsed_peer = executor("ex-3", false, 0);
        assert_eq!(
            after_drain("ex-1", &[me.clone(), draining_peer, lapsed_peer]),
            AfterDrain::NoTaker
        );
        let live_peer = executor("ex-4", false, 9_000);
        assert_eq!(
            after_drain("ex-1", &[me, live_peer]),
            AfterDrain::AwaitHandoffs { takers: 1 }
        );
    }

    /// P17.2: the wait ends when nothing is held, when no shard has left for the stall bound,
    /// or at the deadline, whichever comes first; each handoff restarts the stall bound.
    #[test]
    fn p17_2_the_wait_ends_when_done_stalled_or_out_of_time() {
        let t0 = Instant::now();
        let ms = Duration::from_millis;
        let mut wait = DrainProgress::new(3, t0, t0 + ms(4_000));
        assert_eq!(wait.observe(3, t0), DrainWait::WakeAt(t0 + DRAIN_STALL));
        assert_eq!(
            wait.observe(2, t0 + ms(1_000)),
            DrainWait::WakeAt(t0 + ms(1_000) + DRAIN_STALL),
            "a handoff restarts the stall bound"
        );
        assert_eq!(
            wait.observe(2, t0 + ms(2_000)),
            DrainWait::WakeAt(t0 + ms(2_500))
        );
        assert_eq!(wait.observe(2, t0 + ms(2_500)), DrainWait::Stalled);
        let mut slow = DrainProgress::new(3, t0, t0 + ms(2_000));
        assert_eq!(
            slow.observe(2, t0 + ms(1_000)),
            DrainWait::WakeAt(t0 + ms(2_000))
        );
        assert_eq!(slow.observe(1, t0 + ms(2_000)), DrainWait::TimedOut);
        assert_eq!(slow.observe(0, t0 + ms(2_100)), DrainWait::Done);
    }

    /// P17.2, P16.2: a sidecar's shard is handed over only once its service acknowledged the
    /// answer that dropped it, not when the revoke is applied.
    #[test]
    fn p17_2_a_shard_the_service_has_not_let_go_is_still_held() {
        let shards = |shards: &[u32]| -> Vec<ShardEpoch> {
            shards
                .iter()
                .map(|&shard| ShardEpoch { shard, epoch: 1 })
                .collect()
        };
        let still = StillHeld::of(&shards(&[2, 5]), &shards(&[1, 2, 5, 7]));
        assert_eq!(
            still,
            StillHeld {
                by_executor: 2,
                unacknowledged: 2
            }
        );
        assert_eq!(still.total(), 4);
        assert_eq!(
            still.to_string(),
            "2 still held by the executor, 2 revoked but not acknowledged by the service, which \
             may still be admitting them (P16.2)"
        );
        let handed_over = StillHeld::of(&[], &[]);
        assert_eq!(handed_over.total(), 0);
        assert_eq!(
            StillHeld::of(&shards(&[3]), &[]).to_string(),
            "1 still held by the executor"
        );
    }

    /// P17.2, P3.7: the drain leaves the deregistration a second of the grace, or half of a
    /// grace shorter than two seconds, so the stop still ends within the grace.
    #[test]
    fn p17_2_the_drain_leaves_the_deregistration_part_of_the_grace() {
        let t0 = Instant::now();
        for (grace_ms, drain_ms) in [(5_000, 4_000), (2_000, 1_000), (1_000, 500), (0, 0)] {
            assert_eq!(
                drain_deadline(t0, Duration::from_millis(grace_ms)) - t0,
                Duration::from_millis(drain_ms),
                "grace {grace_ms} ms"
            );
        }
    }
}
