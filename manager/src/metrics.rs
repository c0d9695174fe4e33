//! The manager's protocol metrics (docs/OPERATIONS.md, "Metrics reference"). Names start with
//! `leasehold_` and carry their unit (`_seconds`, `_total`).
//!
//! Three sources, so each number is counted exactly once:
//! - [`CommitMetrics`]: counted from the outcomes this node commits as leader (every committed
//!   write passes [`crate::signals::LeaderSignals::after_commit`]), so a rebalance or a
//!   handoff is counted once in the cluster, by the leader that committed it.
//! - [`record_state_gauges`]: gauges read from this replica's applied state when `/metrics` is
//!   scraped (executors, shards by state), so they are exact at scrape time on every replica.
//! - Counters at the place the event happens: renewals and their latency in the renew handler,
//!   deliveries in `leader/deliver.rs`, the mass-expiry guard in `leader/mod.rs`, Raft gauges in
//!   `observe.rs`, the dead-leader check in `raft/failover.rs`.

use std::collections::BTreeMap;
use std::sync::Mutex;

use metrics_exporter_prometheus::{BuildError, Matcher, PrometheusBuilder};

use crate::lease::{Command, MoveReason, Outcome, Plan, RenewResult, ShardId};
use crate::raft::LeaseStateHandle;

/// Buckets of `leasehold_renewal_duration_seconds`: a group commit on a healthy cluster takes a
/// few ms; anything near the lease is trouble.
const RENEWAL_SECONDS_BUCKETS: [f64; 14] = [
    0.001, 0.002, 0.005, 0.01, 0.02, 0.05, 0.1, 0.2, 0.5, 1.0, 2.0, 5.0, 10.0, 30.0,
];
/// Buckets of `leasehold_handoff_duration_seconds`: an acknowledged handoff takes a round trip
/// and a commit; one completed on expiry takes up to a lease.
const HANDOFF_SECONDS_BUCKETS: [f64; 12] = [
    0.01, 0.05, 0.1, 0.25, 0.5, 1.0, 2.5, 5.0, 10.0, 30.0, 60.0, 300.0,
];
/// Buckets of `leasehold_renewal_batch_size` (renewals per Raft entry, at most 2048).
const BATCH_SIZE_BUCKETS: [f64; 12] = [
    1.0, 2.0, 4.0, 8.0, 16.0, 32.0, 64.0, 128.0, 256.0, 512.0, 1024.0, 2048.0,
];

/// The Prometheus exporter with real histograms (not summaries) for the protocol's distributions.
pub fn prometheus_builder() -> Result<PrometheusBuilder, BuildError> {
    let mut builder = PrometheusBuilder::new();
    for (name, buckets) in [
        (
            "leasehold_renewal_duration_seconds",
            &RENEWAL_SECONDS_BUCKETS[..],
        ),
        (
            "leasehold_handoff_duration_seconds",
            &HANDOFF_SECONDS_BUCKETS[..],
        ),
        ("leasehold_renewal_batch_size", &BATCH_SIZE_BUCKETS[..]),
    ] {
        builder = builder.set_buckets_for_metric(Matcher::Full(name.to_string()), buckets)?;
    }
    Ok(builder)
}

/// Sets the gauges that describe this replica's applied state, leases judged at `now_ms`.
pub fn record_state_gauges(state: &LeaseStateHandle, now_ms: u64) {
    state.read(|applied| {
        let state = &applied.state;
        let (mut executors, mut lapsed) = (0u64, 0u64);
        for executor in state.executors() {
            executors += 1;
            if executor.lease_remaining_ms(now_ms) == 0 {
                lapsed += 1;
            }
        }
        // From the indexes, not a scan of the shard table: a scrape costs the same at a
        // million shards as at ten. A releasing shard keeps its owner until the handoff ends.
        let with_owner = state.owned_count();
        let releasing = state.releasing_count();
        let owned = with_owner.saturating_sub(releasing);
        let unowned = state.shards().len().saturating_sub(with_owner);
        metrics::gauge!("leasehold_executors").set(executors as f64);
        metrics::gauge!("leasehold_executors_lapsed").set(lapsed as f64);
        metrics::gauge!("leasehold_shards", "state" => "owned").set(owned as f64);
        metrics::gauge!("leasehold_shards", "state" => "releasing").set(releasing as f64);
        metrics::gauge!("leasehold_shards", "state" => "unowned").set(unowned as f64);
        metrics::gauge!("leasehold_state_revision").set(state.revision() as f64);
    });
}

/// Counters and the handoff-duration histogram, from the outcomes this node commits as leader.
#[derive(Debug, Default)]
pub struct CommitMetrics {
    /// Shards a deregistration left unowned, until a plan places them: their moves are counted
    /// as made for the deregistration. Bounded by the shard count.
    freed_by_deregistration: Mutex<std::collections::BTreeSet<ShardId>>,
    /// Leader-clock ms at which each shard's current handoff was committed by this leader. Keyed
    /// by shard, so bounded by the shard count; a handoff begun under an earlier leader has no
    /// entry and its duration is not recorded (that leader's clock is not this one's, P2.3).
    handoff_started_ms: Mutex<BTreeMap<ShardId, u64>>,
}

impl CommitMetrics {
    /// A new term starts with no handoff start times.
    pub fn reset_for_new_term(&self) {
        self.started().clear();
        self.freed().clear();
    }

    fn freed(&self) -> std::sync::MutexGuard<'_, std::collections::BTreeSet<ShardId>> {
        self.freed_by_deregistration
            .lock()
            .unwrap_or_else(|poisoned| poisoned.into_inner())
    }

    /// Counts the moves of a plan this node committed and applied as leader, by reason
    /// (`leasehold_shard_moves_by_reason_total`, §15). A cancelled handoff moves nothing.
    pub fn count_plan(&self, plan: &Plan) {
        let Command::Rebalance { moves, .. } = &plan.command else {
            return;
        };
        let mut freed = self.freed();
        for (step, reason) in moves.iter().zip(&plan.reasons) {
            let label = match reason {
                MoveReason::Balance => "balance",
                MoveReason::Expiry => "expiry",
                MoveReason::Drain => "drain",
                MoveReason::Join => "join",
                MoveReason::Departure if freed.remove(&step.shard) => "deregister",
                MoveReason::Departure => "expiry",
                MoveReason::Cancel => continue,
            };
            metrics::counter!("leasehold_shard_moves_by_reason_total", "reason" => label)
                .increment(1);
        }
    }

    fn started(&self) -> std::sync::MutexGuard<'_, BTreeMap<ShardId, u64>> {
        self.handoff_started_ms
            .lock()
            .unwrap_or_else(|poisoned| poisoned.into_inner())
    }

    fn handoffs_completed(&self, now_ms: u64, shards: &[ShardId], via: &'static str) {
        if shards.is_empty() {
            return;
        }
        metrics::counter!("leasehold_handoffs_completed_total", "via" => via)
            .increment(shards.len() as u64);
        let mut started = self.started();
        for shard in shards {
            if let Some(started_ms) = started.remove(shard) {
                metrics::histogram!("leasehold_handoff_duration_seconds", "via" => via)
                    .record(now_ms.saturating_sub(started_ms) as f64 / 1000.0);
            }
        }
    }

    /// Counts what `outcome`, committed by this node as leader at leader-clock `now_ms`, did.
    pub fn observe(&self, now_ms: u64, outcome: &Outcome) {
        match outcome {
            Outcome::Registered {
                already_registered: false,
                ..
            } => metrics::counter!("leasehold_registrations_total").increment(1),
            Outcome::Deregistered {
                already_gone: false,
                freed,
                ..
            } => {
                metrics::counter!("leasehold_deregistrations_total").increment(1);
                self.freed().extend(freed.iter().copied());
            }
            Outcome::Reaped { reaped, .. } if !reaped.is_empty() => {
                metrics::counter!("leasehold_reaped_total").increment(reaped.len() as u64)
            }
            Outcome::Rebalanced {
                granted,
                releasing,
                cancelled,
                ..
            } => {
                metrics::counter!("leasehold_rebalances_total").increment(1);
                metrics::counter!("leasehold_shard_moves_total", "kind" => "grant")
                    .increment(granted.len() as u64);
                metrics::counter!("leasehold_shard_moves_total", "kind" => "handoff")
                    .increment(releasing.len() as u64);
                metrics::counter!("leasehold_handoffs_cancelled_total")
                    .increment(cancelled.len() as u64);
                let mut started = self.started();
                for shard in releasing {
                    started.insert(*shard, now_ms);
                }
                for shard in cancelled {
                    started.remove(shard);
                }
            }
            Outcome::Released { completed, .. } => {
                self.handoffs_completed(now_ms, completed, "acknowledged")
            }
            Outcome::Renewed { results, .. } => {
                let acknowledged: Vec<ShardId> = results
                    .iter()
                    .filter_map(|result| match result {
                        RenewResult::Renewed { acknowledged, .. } => Some(acknowledged),
                        RenewResult::UnknownExecutor { .. } => None,
                    })
                    .flatten()
                    .copied()
                    .collect();
                self.handoffs_completed(now_ms, &acknowledged, "acknowledged");
            }
            Outcome::HandoffsCompleted { completed, .. } => {
                self.handoffs_completed(now_ms, completed, "expiry")
            }
            _ => {}
        }
    }
}
