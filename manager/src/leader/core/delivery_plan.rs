//! What the leader delivers and when, as a pure core (PROTOCOL §4, §5): which full-set pushes
//! and revokes a round sends, the backoff of failed pushes, and which revoke replies are
//! acknowledgements to commit. Time is the leader clock's `now_ms` (P2.3), passed in; the I/O
//! shell ([`super::deliver`]) and the simulator (`sim/`) drive the same planner.
//!
//! - Pushes (`PUT /v1/assignment`) go to executors whose set changed, carrying the revision the
//!   set was read at and no lease (P3.3). A failed push is repaired forwards (P5.3): the executor
//!   stays queued for a full push of the set it is recorded as holding, retried with exponential
//!   backoff, and its next renewal reply carries the same set anyway.
//! - Revokes (`POST /v1/revoke`) are derived from the state, not queued: every shard releasing
//!   from a live owner is revoked, again every [`REVOKE_RESEND_INTERVAL_MS`], until its handoff
//!   completes.
//! - A revoke reply acknowledges only shards the executor says it stopped and that were asked
//!   for; an ignored (stale) answer is never an acknowledgement (P5.2).

use std::collections::BTreeMap;

use leasehold_api::wire::{AssignmentPush, RevokePush, RevokeReply, ShardEpoch};

use crate::lease::{Command, ExecutorId, LeaseState, ShardId};

/// A round runs at least this often, to resend revokes and retry failed pushes.
pub const ROUND_INTERVAL_MS: u64 = 500;
/// An unacknowledged revoke is sent again after this long.
pub const REVOKE_RESEND_INTERVAL_MS: u64 = 1_000;
/// The first retry of a failed push waits this long; each further failure doubles it.
pub const PUSH_RETRY_FIRST_MS: u64 = 250;
pub const PUSH_RETRY_MAX_MS: u64 = 5_000;

/// One message to one executor.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Delivery {
    Push {
        executor_id: ExecutorId,
        address: String,
        body: AssignmentPush,
    },
    Revoke {
        executor_id: ExecutorId,
        address: String,
        body: RevokePush,
    },
}

/// A round's plan.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct Round {
    pub deliveries: Vec<Delivery>,
    /// Queued pushes still backing off: queued again for a later round.
    pub deferred_pushes: Vec<ExecutorId>,
}

/// What a push's outcome changed.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum PushRecord {
    /// Delivered.
    Delivered,
    /// Delivered after earlier failures: the set is repaired (P5.3).
    Repaired,
    /// Failed: queue the executor again; the next attempt waits `retry_in_ms`.
    Failed { retry_in_ms: u64 },
}

#[derive(Debug, Clone, Copy, PartialEq, Eq)]
struct Backoff {
    next_attempt_ms: u64,
    delay_ms: u64,
}

/// The delivery decisions of one leader for one term.
#[derive(Debug, Clone, Default)]
pub struct DeliveryPlanner {
    push_backoff: BTreeMap<ExecutorId, Backoff>,
    /// When each (owner, revoke revision) was last sent.
    revoke_sent_ms: BTreeMap<(ExecutorId, u64), u64>,
}

impl DeliveryPlanner {
    /// This round's deliveries: a push for every queued executor not backing off, and a revoke
    /// for every handoff from a live owner not sent within [`REVOKE_RESEND_INTERVAL_MS`].
    pub fn plan_round(
        &mut self,
        state: &LeaseState,
        queued: impl IntoIterator<Item = ExecutorId>,
        now_ms: u64,
    ) -> Round {
        let mut round = Round::default();
        self.plan_pushes(state, queued, now_ms, &mut round);
        self.plan_revokes(state, now_ms, &mut round);
        round
    }

    /// A push of its whole set to every queued executor not backing off (P5.3).
    fn plan_pushes(
        &mut self,
        state: &LeaseState,
        queued: impl IntoIterator<Item = ExecutorId>,
        now_ms: u64,
        round: &mut Round,
    ) {
        for executor_id in queued {
            let Some(executor) = state.executor(&executor_id) else {
                self.push_backoff.remove(&executor_id);
                continue;
            };
            // The executor's shard space is its namespace's (P18.1): it refuses a set of any
            // other size.
            let (shard_count, generation) = state
                .namespace(&executor.namespace)
                .map_or((0, 0), |namespace| {
                    (namespace.config.shard_count, namespace.generation)
                });
            if self
                .push_backoff
                .get(&executor_id)
                .is_some_and(|b| b.next_attempt_ms > now_ms)
            {
                round.deferred_pushes.push(executor_id);
                continue;
            }
            let shards = state
                .delivered_set(&executor_id)
                .into_iter()
                .map(|(shard, epoch)| ShardEpoch { shard, epoch })
                .collect();
            let secondaries = state
                .secondaries_of(&executor_id)
                .into_iter()
                .map(|(shard, epoch)| ShardEpoch { shard, epoch })
                .collect();
            round.deliveries.push(Delivery::Push {
                address: executor.address.clone(),
                executor_id: executor_id.clone(),
                body: AssignmentPush {
                    executor_id,
                    revision: state.revision(),
                    shard_count,
                    generation,
                    shards,
                    secondaries,
                },
            });
        }
    }

    /// A revoke for every handoff from a live owner, each (owner, revoke revision) resent no
    /// sooner than [`REVOKE_RESEND_INTERVAL_MS`] after it was last sent (P5.2, P5.3).
    fn plan_revokes(&mut self, state: &LeaseState, now_ms: u64, round: &mut Round) {
        let mut revokes: BTreeMap<(ExecutorId, u64), Vec<ShardId>> = BTreeMap::new();
        // Every namespace's handoffs (P18.1): each owner's revoke names its own namespace's shards.
        for (_, shard, handoff) in state.releasing_everywhere() {
            if let Some(owner) = &shard.owner {
                revokes
                    .entry((owner.clone(), handoff.revoke_revision))
                    .or_default()
                    .push(shard.id);
            }
        }
        self.revoke_sent_ms
            .retain(|key, _| revokes.contains_key(key));
        for ((executor_id, revision), shards) in revokes {
            let key = (executor_id.clone(), revision);
            if self
                .revoke_sent_ms
                .get(&key)
                .is_some_and(|sent| now_ms.saturating_sub(*sent) < REVOKE_RESEND_INTERVAL_MS)
            {
                continue;
            }
            let Some(executor) = state.executor(&executor_id) else {
                continue;
            };
            self.revoke_sent_ms.insert(key, now_ms);
            // Numbered in the namespace's layout now (P20.3): a reshard waits for every handoff
            // of its namespace, so a revoke under way was made in the current one.
            let generation = state
                .namespace(&executor.namespace)
                .map_or(0, |namespace| namespace.generation);
            round.deliveries.push(Delivery::Revoke {
                address: executor.address.clone(),
                body: RevokePush {
                    executor_id: executor_id.clone(),
                    revision,
                    shards,
                    generation,
                },
                executor_id,
            });
        }
    }

    /// Records a push's outcome at `now_ms`.
    pub fn push_outcome(&mut self, executor_id: &ExecutorId, ok: bool, now_ms: u64) -> PushRecord {
        if ok {
            return match self.push_backoff.remove(executor_id) {
                Some(_) => PushRecord::Repaired,
                None => PushRecord::Delivered,
            };
        }
        let delay_ms = self
            .push_backoff
            .get(executor_id)
            .map_or(PUSH_RETRY_FIRST_MS, |b| {
                b.delay_ms.saturating_mul(2).min(PUSH_RETRY_MAX_MS)
            });
        self.push_backoff.insert(
            executor_id.clone(),
            Backoff {
                next_attempt_ms: now_ms.saturating_add(delay_ms),
                delay_ms,
            },
        );
        PushRecord::Failed {
            retry_in_ms: delay_ms,
        }
    }
}

/// The acknowledgement a revoke reply carries, as the `Release` command to commit at `now_ms`:
/// the shards the executor says it released, of those it was asked for. `None` when the reply
/// acknowledges nothing (ignored as stale, or nothing released).
pub fn acknowledgement(
    executor_id: &ExecutorId,
    requested: &[ShardId],
    revoke_revision: u64,
    reply: &RevokeReply,
    now_ms: u64,
) -> Option<Command> {
    let released: Vec<ShardId> = reply
        .released
        .iter()
        .copied()
        .filter(|s| requested.contains(s))
        .collect();
    if reply.ignored || released.is_empty() {
        return None;
    }
    Some(Command::Release {
        now_ms,
        executor_id: executor_id.clone(),
        shards: released,
        revoke_revision,
    })
}

/// How many of `requested` are still releasing from `executor_id` under the revoke of
/// `revoke_revision`: an answer that acknowledged none of them while this is not zero means the
/// executor and the leader disagree about its set.
pub fn still_releasing(
    state: &LeaseState,
    executor_id: &ExecutorId,
    requested: &[ShardId],
    revoke_revision: u64,
) -> usize {
    // The shard numbers are of the executor's namespace (P18.1).
    let Some(space) = state
        .executor(executor_id)
        .and_then(|executor| state.space(&executor.namespace))
    else {
        return 0;
    };
    requested
        .iter()
        .filter(|&&shard| {
            space.shard(shard).is_some_and(|record| {
                record.owner.as_ref() == Some(executor_id)
                    && record
                        .handoff
                        .as_ref()
                        .is_some_and(|h| h.revoke_revision == revoke_revision)
            })
        })
        .count()
}
