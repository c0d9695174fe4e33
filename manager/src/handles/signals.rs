//! What committed writes tell the leader loop: replan now, push these executors their sets, and
//! when a renewal was last applied (for the mass-expiry guard, P6.3). Every committed outcome
//! passes through [`LeaderSignals::after_commit`], so no handler has to remember to do it.

use std::collections::BTreeSet;
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::Mutex;

use tokio::sync::Notify;

use crate::handles::metrics::CommitMetrics;
use crate::lease::{ExecutorId, Outcome, RegisterResult, RenewResult};

#[derive(Debug, Default)]
pub struct LeaderSignals {
    /// Wakes the leader loop for an immediate step (membership changed).
    pub replan: Notify,
    /// Wakes the delivery task.
    pub deliveries: Notify,
    /// Executors owed a full-set push; a set, so bounded by the number of executors.
    pending_pushes: Mutex<BTreeSet<ExecutorId>>,
    /// Leader-clock ms of the last applied renewal, plus one (0: none this term).
    last_renewal_applied_plus_one: AtomicU64,
    /// Protocol counters counted from committed outcomes.
    pub metrics: CommitMetrics,
}

impl LeaderSignals {
    pub fn mark_for_push(&self, executors: impl IntoIterator<Item = ExecutorId>) {
        let mut pending = self
            .pending_pushes
            .lock()
            .unwrap_or_else(|p| p.into_inner());
        pending.extend(executors);
    }

    pub fn take_pushes(&self) -> BTreeSet<ExecutorId> {
        std::mem::take(
            &mut *self
                .pending_pushes
                .lock()
                .unwrap_or_else(|p| p.into_inner()),
        )
    }

    pub fn last_renewal_applied_ms(&self) -> Option<u64> {
        self.last_renewal_applied_plus_one
            .load(Ordering::Acquire)
            .checked_sub(1)
    }

    /// A new term tracks renewals afresh: what an earlier term applied says nothing about now.
    pub fn reset_for_new_term(&self) {
        self.last_renewal_applied_plus_one
            .store(0, Ordering::Release);
        self.take_pushes();
        self.metrics.reset_for_new_term();
    }

    /// Called with every outcome this node committed as leader, stamped `now_ms`.
    pub fn after_commit(&self, now_ms: u64, outcome: &Outcome) {
        self.metrics.observe(now_ms, outcome);
        let signal = CommitSignal::of(outcome);
        if signal.replan {
            self.replan.notify_one();
        }
        if signal.renewal_applied {
            self.last_renewal_applied_plus_one
                .fetch_max(now_ms.saturating_add(1), Ordering::AcqRel);
        }
        if signal.deliver {
            self.mark_for_push(signal.pushes);
            self.deliveries.notify_one();
        }
    }
}

/// What one committed outcome asks of the leader: a step at once (the membership changed), a
/// renewal seen (P6.3), a delivery round at once (revokes or pushes are owed) and the executors
/// owed a push of their new sets. Pure, so the simulator
/// signals its leader exactly as production does.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct CommitSignal {
    pub replan: bool,
    pub renewal_applied: bool,
    pub deliver: bool,
    pub pushes: BTreeSet<ExecutorId>,
}

impl CommitSignal {
    pub fn of(outcome: &Outcome) -> Self {
        let mut signal = CommitSignal::default();
        match outcome {
            Outcome::Registered { .. }
            | Outcome::Deregistered { .. }
            | Outcome::Reaped { .. }
            | Outcome::DrainingSet { changed: true, .. }
            | Outcome::MaintenanceSet { changed: true, .. }
            | Outcome::PinSet { changed: true, .. }
            // A split waits on nothing but the handoffs in flight, a merge starts with the moves
            // that bring its pairs together: both begin at the next step (P20.2).
            | Outcome::ReshardRequested { changed: true, .. } => signal.replan = true,
            // A batch whose registrations were all retries or refusals changed no membership.
            Outcome::RegisteredMany { results } => {
                signal.replan = results.iter().any(RegisterResult::is_new);
            }
            Outcome::Renewed { results, .. } => {
                signal.renewal_applied = results
                    .iter()
                    .any(|r| matches!(r, RenewResult::Renewed { .. }));
            }
            _ => {}
        }
        if let Some(effects) = outcome.effects() {
            signal.deliver = !effects.is_empty();
            signal.pushes.extend(effects.assignments.iter().cloned());
        }
        signal
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::lease::{Grant, RefusalReason};

    fn grant() -> Grant {
        Grant {
            generation: 0,
            executor_id: "ex-9".into(),
            lease_ttl_ms: 1_000,
            revision: 9,
            shard_count: 4,
            shards: Vec::new(),
            secondaries: Vec::new(),
        }
    }

    fn registered(already_registered: bool) -> RegisterResult {
        RegisterResult::Registered {
            grant: grant(),
            already_registered,
        }
    }

    /// P5.4: a joiner is planned for at once, whether its registration came alone or in a batch;
    /// a batch of retries and refusals changed no membership and asks for no step.
    #[test]
    fn p5_4_a_batch_with_a_new_executor_asks_for_a_step_at_once() {
        let refused = RegisterResult::Refused {
            reason: RefusalReason::NotInitialised,
        };
        let with_new = Outcome::RegisteredMany {
            results: vec![refused.clone(), registered(true), registered(false)],
        };
        assert!(CommitSignal::of(&with_new).replan);
        let nothing_new = Outcome::RegisteredMany {
            results: vec![refused, registered(true)],
        };
        assert_eq!(CommitSignal::of(&nothing_new), CommitSignal::default());
        let alone = Outcome::Registered {
            grant: grant(),
            already_registered: false,
        };
        assert!(CommitSignal::of(&alone).replan);
    }

    /// P20.2: a reshard asked for is begun at the next step, not at the next tick; a repeat
    /// that changed nothing asks for none.
    #[test]
    fn p20_2_a_reshard_asked_for_asks_for_a_step_at_once() {
        let asked = |changed| Outcome::ReshardRequested {
            name: "default".into(),
            changed,
        };
        assert!(CommitSignal::of(&asked(true)).replan);
        assert_eq!(CommitSignal::of(&asked(false)), CommitSignal::default());
    }
}
