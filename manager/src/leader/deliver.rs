//! Fans deliveries out to executors while this node leads (PROTOCOL §4, §5).
//!
//! - Full-set pushes (`PUT /v1/assignment`) to executors whose set changed, carrying the revision
//!   the set was read at and no lease (P3.3). A failed push is repaired forwards: the executor stays
//!   queued for a full push of the set it is recorded as holding, retried with backoff, and its
//!   next renewal reply carries the same set anyway (P5.3).
//! - Revokes (`POST /v1/revoke`) are derived from the state, not queued: every shard releasing
//!   from a live owner is revoked (again every second) until the handoff completes. A reply that
//!   released shards is committed as a `Release` acknowledgement naming the handoff (P5.2).

use std::collections::BTreeMap;
use std::sync::Arc;
use std::time::Duration;

use leasehold_api::wire::{AssignmentPush, RevokePush, RevokeReply, ShardEpoch};
use tokio::sync::watch;
use tokio::task::JoinSet;
use tokio::time::Instant;

use crate::clock::LeaderClock;
use crate::lease::answer::Released;
use crate::lease::{Command, ExecutorAnswer, ExecutorId, ShardId};
use crate::proposer::Proposer;
use crate::raft::LeaseStateHandle;
use crate::signals::LeaderSignals;

/// Bound on one delivery, connection included.
const DELIVERY_TIMEOUT: Duration = Duration::from_secs(2);
/// A round runs at least this often, to resend revokes and retry failed pushes.
const ROUND_INTERVAL: Duration = Duration::from_millis(500);
/// An unacknowledged revoke is sent again after this long.
const REVOKE_RESEND_INTERVAL: Duration = Duration::from_secs(1);
const PUSH_RETRY_FIRST: Duration = Duration::from_millis(250);
const PUSH_RETRY_MAX: Duration = Duration::from_secs(5);
/// Deliveries in flight at once. A bound on what is in flight, not on what a round delivers:
/// a round sends everything it planned, this many at a time.
const MAX_DELIVERIES_IN_FLIGHT: usize = 64;

#[derive(Debug)]
enum Delivery {
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

#[derive(Debug)]
enum Delivered {
    Pushed {
        executor_id: ExecutorId,
        ok: bool,
    },
    Revoked {
        executor_id: ExecutorId,
        requested: Vec<ShardId>,
        revision: u64,
        reply: Option<RevokeReply>,
    },
}

/// Per-executor retry state for failed pushes.
#[derive(Debug, Clone, Copy)]
struct Backoff {
    next_attempt: Instant,
    delay: Duration,
}

/// What the delivery task reads and writes, and nothing else of the node: the applied state it
/// plans from, the signals that queue pushes and wake it, the one HTTP client, the leader's
/// clock and the proposer it commits acknowledgements with.
#[derive(Debug, Clone)]
pub struct DeliveryHandle {
    pub state: LeaseStateHandle,
    pub signals: Arc<LeaderSignals>,
    pub http: reqwest::Client,
    pub clock: Arc<LeaderClock>,
    pub proposer: Proposer,
}

pub async fn run(handle: DeliveryHandle, term: u64, mut stopped: watch::Receiver<bool>) {
    let mut push_backoff: BTreeMap<ExecutorId, Backoff> = BTreeMap::new();
    let mut revoke_sent: BTreeMap<(ExecutorId, u64), Instant> = BTreeMap::new();
    loop {
        let deliveries = plan_round(&handle, &mut push_backoff, &mut revoke_sent);
        deliver_all(&handle, term, deliveries, &mut push_backoff).await;
        tokio::select! {
            _ = handle.signals.deliveries.notified() => {}
            _ = tokio::time::sleep(ROUND_INTERVAL) => {}
            _ = stopped.changed() => return,
        }
        if *stopped.borrow() {
            return;
        }
    }
}

/// Sends every delivery, at most [`MAX_DELIVERIES_IN_FLIGHT`] at once, and records the outcome
/// of each as it completes. Nothing planned is left out: a rebalance that changes hundreds of
/// sets pushes every one of them in this round, so a new owner does not wait for its next
/// renewal to learn a grant.
async fn deliver_all(
    handle: &DeliveryHandle,
    term: u64,
    deliveries: Vec<Delivery>,
    push_backoff: &mut BTreeMap<ExecutorId, Backoff>,
) {
    let mut waiting = deliveries.into_iter();
    let mut in_flight = JoinSet::new();
    loop {
        while in_flight.len() < MAX_DELIVERIES_IN_FLIGHT {
            let Some(delivery) = waiting.next() else {
                break;
            };
            in_flight.spawn(send(handle.http.clone(), delivery));
        }
        let Some(joined) = in_flight.join_next().await else {
            return;
        };
        let Ok(delivered) = joined else { continue };
        record_delivered(handle, term, delivered, push_backoff).await;
    }
}

/// Chooses this round's deliveries from the queued pushes and the state's handoffs.
fn plan_round(
    handle: &DeliveryHandle,
    push_backoff: &mut BTreeMap<ExecutorId, Backoff>,
    revoke_sent: &mut BTreeMap<(ExecutorId, u64), Instant>,
) -> Vec<Delivery> {
    let now = Instant::now();
    let queued = handle.signals.take_pushes();
    handle.state.read(|applied| {
        let state = &applied.state;
        let shard_count = state.config().map_or(0, |c| c.shard_count);
        let mut deliveries = Vec::new();
        for executor_id in queued {
            let Some(executor) = state.executor(&executor_id) else {
                push_backoff.remove(&executor_id);
                continue;
            };
            if push_backoff
                .get(&executor_id)
                .is_some_and(|b| b.next_attempt > now)
            {
                handle.signals.mark_for_push([executor_id]);
                continue;
            }
            let shards = state
                .delivered_set(&executor_id)
                .into_iter()
                .map(|(shard, epoch)| ShardEpoch { shard, epoch })
                .collect();
            deliveries.push(Delivery::Push {
                address: executor.address.clone(),
                executor_id: executor_id.clone(),
                body: AssignmentPush {
                    executor_id,
                    revision: state.revision(),
                    shard_count,
                    shards,
                },
            });
        }
        let mut revokes: BTreeMap<(ExecutorId, u64), Vec<ShardId>> = BTreeMap::new();
        for shard in state.shards() {
            if let (Some(owner), Some(handoff)) = (&shard.owner, &shard.handoff) {
                revokes
                    .entry((owner.clone(), handoff.revoke_revision))
                    .or_default()
                    .push(shard.id);
            }
        }
        revoke_sent.retain(|key, _| revokes.contains_key(key));
        for ((executor_id, revision), shards) in revokes {
            let key = (executor_id.clone(), revision);
            if revoke_sent
                .get(&key)
                .is_some_and(|sent| now.duration_since(*sent) < REVOKE_RESEND_INTERVAL)
            {
                continue;
            }
            let Some(executor) = state.executor(&executor_id) else {
                continue;
            };
            revoke_sent.insert(key, now);
            deliveries.push(Delivery::Revoke {
                address: executor.address.clone(),
                body: RevokePush {
                    executor_id: executor_id.clone(),
                    revision,
                    shards,
                },
                executor_id,
            });
        }
        deliveries
    })
}

async fn send(http: reqwest::Client, delivery: Delivery) -> Delivered {
    match delivery {
        Delivery::Push {
            executor_id,
            address,
            body,
        } => {
            let url = format!("{}/v1/assignment", address.trim_end_matches('/'));
            let result = http
                .put(url)
                .timeout(DELIVERY_TIMEOUT)
                .json(&body)
                .send()
                .await;
            let ok = matches!(&result, Ok(reply) if reply.status().is_success());
            if !ok {
                tracing::info!(%executor_id, revision = body.revision, outcome = ?result.map(|r| r.status()), "assignment push failed");
            }
            Delivered::Pushed { executor_id, ok }
        }
        Delivery::Revoke {
            executor_id,
            address,
            body,
        } => {
            let url = format!("{}/v1/revoke", address.trim_end_matches('/'));
            let reply = async {
                let reply = http
                    .post(url)
                    .timeout(DELIVERY_TIMEOUT)
                    .json(&body)
                    .send()
                    .await
                    .ok()?;
                reply
                    .error_for_status()
                    .ok()?
                    .json::<RevokeReply>()
                    .await
                    .ok()
            }
            .await;
            Delivered::Revoked {
                executor_id,
                requested: body.shards,
                revision: body.revision,
                reply,
            }
        }
    }
}

async fn record_delivered(
    handle: &DeliveryHandle,
    term: u64,
    delivered: Delivered,
    push_backoff: &mut BTreeMap<ExecutorId, Backoff>,
) {
    match delivered {
        Delivered::Pushed {
            executor_id,
            ok: true,
        } => {
            if push_backoff.remove(&executor_id).is_some() {
                metrics::counter!("leasehold_delivery_repairs_total").increment(1);
                tracing::info!(%executor_id, "assignment push repaired");
            }
        }
        Delivered::Pushed {
            executor_id,
            ok: false,
        } => {
            metrics::counter!("leasehold_delivery_failures_total", "kind" => "assignment")
                .increment(1);
            let delay = push_backoff
                .get(&executor_id)
                .map_or(PUSH_RETRY_FIRST, |b| (b.delay * 2).min(PUSH_RETRY_MAX));
            push_backoff.insert(
                executor_id.clone(),
                Backoff {
                    next_attempt: Instant::now() + delay,
                    delay,
                },
            );
            handle.signals.mark_for_push([executor_id]);
        }
        Delivered::Revoked {
            executor_id,
            reply: None,
            revision,
            ..
        } => {
            metrics::counter!("leasehold_delivery_failures_total", "kind" => "revoke").increment(1);
            tracing::info!(%executor_id, revision, "revoke not delivered; resent until the handoff completes");
        }
        Delivered::Revoked {
            executor_id,
            requested,
            revision,
            reply: Some(reply),
        } => {
            // An ignored (stale) revoke is never an acknowledgement (P5.2); only shards the
            // executor says it stopped, and that we asked for, count.
            let released: Vec<ShardId> = reply
                .released
                .into_iter()
                .filter(|s| requested.contains(s))
                .collect();
            if reply.ignored || released.is_empty() {
                warn_if_still_current(handle, &executor_id, &requested, revision);
                return;
            }
            let command = Command::Release {
                now_ms: handle.clock.now_ms(),
                executor_id: executor_id.clone(),
                shards: released,
                revoke_revision: revision,
            };
            match handle.proposer.propose_as::<Released>(command).await {
                Ok((
                    _,
                    ExecutorAnswer::Done(Released {
                        completed, ignored, ..
                    }),
                )) => {
                    tracing::info!(%executor_id, term, ?completed, ?ignored, "revoke acknowledged");
                }
                Ok((_, ExecutorAnswer::UnknownExecutor)) => {
                    tracing::info!(%executor_id, "release: the executor is gone")
                }
                Ok((_, ExecutorAnswer::Refused(reason))) => {
                    tracing::info!(%executor_id, ?reason, "release refused")
                }
                Err(error) => tracing::info!(%executor_id, %error, "release not committed"),
            }
        }
    }
}

/// An executor answers a revoke ignored only when every shard it names came back to it in a
/// newer delivery (P5.2), and then the handoff is no longer current. An ignored answer for a
/// handoff that still is means the executor and this leader disagree about its set (or the
/// executor predates the overtaken-revoke rule): counted and logged, and the handoff waits for
/// the executor's claims or the lease expiry.
fn warn_if_still_current(
    handle: &DeliveryHandle,
    executor_id: &ExecutorId,
    requested: &[ShardId],
    revoke_revision: u64,
) {
    let current = handle.state.read(|applied| {
        requested
            .iter()
            .filter(|&&shard| {
                applied.state.shard(shard).is_some_and(|record| {
                    record.owner.as_ref() == Some(executor_id)
                        && record
                            .handoff
                            .as_ref()
                            .is_some_and(|h| h.revoke_revision == revoke_revision)
                })
            })
            .count()
    });
    if current > 0 {
        metrics::counter!("leasehold_revokes_ignored_total").increment(1);
        tracing::warn!(
            %executor_id,
            revoke_revision,
            shards = current,
            "revoke answered ignored for a handoff still in progress; it completes on the executor's claims or its lease expiry"
        );
    }
}
