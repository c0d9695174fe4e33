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

use leasehold_api::wire::{possible_takers, ExecutorView};
use tokio::time::Instant;

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

#[cfg(test)]
mod tests {
    use super::*;

    fn executor(id: &str, draining: bool, lease_remaining_ms: u64) -> ExecutorView {
        ExecutorView {
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
