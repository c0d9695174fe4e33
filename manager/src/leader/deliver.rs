//! Fans deliveries out to executors while this node leads (PROTOCOL §4, §5): the I/O shell
//! around the pure [`DeliveryPlanner`] (what a round sends, how failed pushes back off) and
//! [`DeliveryRound`] (how many are in flight, what each answer does), which the simulator steps
//! too. This module sends, logs, counts, and commits the acknowledgements (P5.2).

use std::collections::HashMap;
use std::sync::Arc;
use std::time::Duration;

use leasehold_api::wire::RevokeReply;
use tokio::sync::watch;
use tokio::task::JoinSet;

use super::core::delivery_plan::{
    still_releasing, Delivery, DeliveryPlanner, PushRecord, ROUND_INTERVAL_MS,
};
use super::core::delivery_round::{AfterDelivery, Delivered, DeliveryRound};
use crate::handles::clock::LeaderClock;
use crate::handles::cpu_bound;
use crate::handles::proposer::Proposer;
use crate::handles::signals::LeaderSignals;
use crate::lease::answer::Released;
use crate::lease::{ExecutorAnswer, ExecutorId, ShardId};
use crate::raft::LeaseStateHandle;

/// Bound on one delivery, connection included.
const DELIVERY_TIMEOUT: Duration = Duration::from_secs(2);
/// Deliveries in flight at once. A bound on what is in flight, not on what a round delivers:
/// a round sends everything it planned, this many at a time.
const MAX_DELIVERIES_IN_FLIGHT: usize = 64;

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
    let mut planner = DeliveryPlanner::default();
    loop {
        let queued = handle.signals.take_pushes();
        let now_ms = handle.clock.now_ms();
        let round = cpu_bound::run(|| planner.plan_round(&handle.state.current(), queued, now_ms));
        handle.signals.mark_for_push(round.deferred_pushes);
        deliver_all(&handle, term, round.deliveries, &mut planner).await;
        tokio::select! {
            _ = handle.signals.deliveries.notified() => {}
            _ = tokio::time::sleep(Duration::from_millis(ROUND_INTERVAL_MS)) => {}
            _ = stopped.changed() => return,
        }
        if *stopped.borrow() {
            return;
        }
    }
}

/// Sends every delivery of the round as [`DeliveryRound`] lets it, at most
/// [`MAX_DELIVERIES_IN_FLIGHT`] at once, and acts on each answer as it completes. Nothing planned
/// is left out: a rebalance that changes hundreds of sets pushes every one of them in this
/// round, so a new owner does not wait for its next renewal to learn a grant.
async fn deliver_all(
    handle: &DeliveryHandle,
    term: u64,
    deliveries: Vec<Delivery>,
    planner: &mut DeliveryPlanner,
) {
    let mut round = DeliveryRound::new(deliveries, MAX_DELIVERIES_IN_FLIGHT);
    let mut in_flight = JoinSet::new();
    // What each send task's failure answers, should the task end without an answer of its own
    // (a panic): a failed push is queued again, an undelivered revoke is resent by later rounds.
    let mut undelivered: HashMap<tokio::task::Id, Delivered> = HashMap::new();
    loop {
        while let Some(delivery) = round.next_to_send() {
            let failure = undelivered_answer(&delivery);
            let task = in_flight.spawn(send(handle.http.clone(), delivery));
            undelivered.insert(task.id(), failure);
        }
        let Some(joined) = in_flight.join_next_with_id().await else {
            return;
        };
        let delivered = match joined {
            Ok((id, delivered)) => {
                undelivered.remove(&id);
                delivered
            }
            Err(error) => match undelivered.remove(&error.id()) {
                Some(failure) => failure,
                None => continue,
            },
        };
        let after = round.answered(planner, delivered, handle.clock.now_ms());
        act_on(handle, term, after).await;
    }
}

/// The answer that stands for `delivery` when its send ends without one.
fn undelivered_answer(delivery: &Delivery) -> Delivered {
    match delivery {
        Delivery::Push { executor_id, .. } => Delivered::Pushed {
            executor_id: executor_id.clone(),
            ok: false,
        },
        Delivery::Revoke {
            executor_id, body, ..
        } => Delivered::Revoked {
            executor_id: executor_id.clone(),
            requested: body.shards.clone(),
            revision: body.revision,
            reply: None,
        },
    }
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

async fn act_on(handle: &DeliveryHandle, term: u64, after: AfterDelivery) {
    match after {
        AfterDelivery::Pushed {
            executor_id,
            record,
        } => match record {
            PushRecord::Delivered => {}
            PushRecord::Repaired => {
                metrics::counter!("leasehold_delivery_repairs_total").increment(1);
                tracing::info!(%executor_id, "assignment push repaired");
            }
            PushRecord::Failed { retry_in_ms } => {
                metrics::counter!("leasehold_delivery_failures_total", "kind" => "assignment")
                    .increment(1);
                tracing::debug!(%executor_id, retry_in_ms, "assignment push queued again");
                handle.signals.mark_for_push([executor_id]);
            }
        },
        AfterDelivery::RevokeNotDelivered {
            executor_id,
            revision,
        } => {
            metrics::counter!("leasehold_delivery_failures_total", "kind" => "revoke").increment(1);
            tracing::info!(%executor_id, revision, "revoke not delivered; resent until the handoff completes");
        }
        AfterDelivery::NothingAcknowledged {
            executor_id,
            requested,
            revision,
        } => warn_if_still_current(handle, &executor_id, &requested, revision),
        AfterDelivery::Acknowledge {
            executor_id,
            command,
        } => {
            match handle.proposer.propose_as::<Released>(command).await {
                Ok((
                    _,
                    ExecutorAnswer::Done(Released {
                        completed, ignored, ..
                    }),
                )) => {
                    // A fleet's first placement acknowledges thousands of shards per revoke:
                    // the lists are for debugging, the counts for the record.
                    tracing::info!(
                        %executor_id,
                        term,
                        completed = completed.len(),
                        ignored = ignored.len(),
                        "revoke acknowledged"
                    );
                    tracing::debug!(%executor_id, term, ?completed, ?ignored, "shards of an acknowledged revoke");
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
    let current = handle
        .state
        .read(|applied| still_releasing(&applied.state, executor_id, requested, revoke_revision));
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

/// Extra time a prepare request may take beyond the wait it names: the answer's own transit.
const PREPARE_ANSWER_SLACK: Duration = Duration::from_millis(500);

/// Sends `requests` at once and waits for every answer, each at most `wait` (and the answer's
/// transit). Returns how many shards were asked and how many reported prepared.
pub async fn ask_to_prepare(
    http: &reqwest::Client,
    requests: &[crate::leader::core::prepare::PrepareRequest],
    wait: Duration,
) -> (usize, usize) {
    let asking = requests.iter().map(|request| {
        let url = format!("{}/v1/prepare", request.address.trim_end_matches('/'));
        let sent = http
            .post(url)
            .timeout(wait + PREPARE_ANSWER_SLACK)
            .json(&request.push)
            .send();
        async move {
            let reply = sent.await.ok()?.error_for_status().ok()?;
            reply.json::<leasehold_api::wire::PrepareReply>().await.ok()
        }
    });
    let answers = futures_util::future::join_all(asking).await;
    let asked = requests.iter().map(|r| r.push.shards.len()).sum();
    let prepared = answers
        .iter()
        .flatten()
        .map(|answer| answer.prepared.len())
        .sum();
    (asked, prepared)
}
