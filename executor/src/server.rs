//! The executor's HTTP handlers (PROTOCOL §9, executor side): the manager's push target and the
//! executor's status, over the shared state. The router that serves them, with the OpenAPI
//! document and any routes an embedder merges in, is assembled in one place (`routes.rs`).
//!
//! - `PUT /v1/assignment` ([`AssignmentPush`]): full replace of the held set, no lease (P3.3,
//!   P4.3). `204` once applied or found stale (P4.1); `503 sharding_not_ready` while no
//!   registration stands (the next grant carries the set, P5.3).
//! - `POST /v1/revoke` ([`RevokePush`] → [`RevokeReply`]): answered only after admission for the
//!   shards stopped. A revoke overtaken by a newer set is answered released for the shards that
//!   set took away, and `ignored: true` when every one of them came back, never as done (P5.2).
//! - `POST /v1/prepare` ([`PreparePush`] → [`PrepareReply`]): shards about to be handed here
//!   (P17.1); the embedder's prepare hooks run (as a sidecar, the service prepares too, §16),
//!   and the answer names those done in time. A revoke
//!   runs the release hooks (within 1.5 s) once admission stopped, before it is answered.
//! - `GET /v1/health` ([`ExecutorHealth`]): which executor and incarnation this address is.
//! - `GET /v1/status` ([`crate::ExecutorStatus`]): lease remaining, revision, shards with
//!   epochs, admitting or fenced.
//!
//! Every error is `application/problem+json` with a `code` (§9); bad input (unknown fields,
//! wrong types, `shard >= shard_count`, duplicates) is a 4xx and changes nothing (I6).

use std::sync::Arc;
use std::time::Duration;

use axum::extract::State;
use axum::http::StatusCode;
use axum::Json;
use leasehold_api::problem::ErrorCode;
use leasehold_api::wire::{
    AssignmentPush, ExecutorHealth, PreparePush, PrepareReply, RevokePush, RevokeReply, ShardEpoch,
};
use tracing::{debug, info, warn};

use crate::admission::PushError;
use crate::assignment::{Layout, SetOutcome};
use crate::hooks::HookCall;
use crate::metrics::count_delivery;
use crate::shared::Shared;
use crate::sidecar::link::{ServiceLink, REVOKE_HOLD};
use crate::status::ExecutorStatus;

pub use leasehold_api::http::{ApiJson, HttpError};

/// Largest request body: a push or revoke may list every shard of the largest cluster, since one
/// executor may hold them all. Routes an embedder merges in get the same bound.
pub const MAX_BODY_BYTES: usize = leasehold_api::wire::MAX_SHARD_LIST_BODY_BYTES;

/// Bound on one request. Pushes and revokes are applied in memory (and the admission log
/// line is flushed), so anything near this is a stuck handler; the manager's own delivery bound
/// is shorter and it retries.
pub const REQUEST_TIMEOUT: Duration = Duration::from_secs(10);

/// Full replace of the held set (P4.3); never carries a lease (P3.3).
#[utoipa::path(
    put, path = "/v1/assignment", tag = "deliveries", operation_id = "put_assignment", request_body = AssignmentPush,
    responses(
        (status = 204, description = "Applied, or stale (older than the last applied delivery, P4.1) and ignored."),
        (status = 403, description = "`forbidden` (TLS): only managers push, and only those of nodes that are members of the cluster (P13.3)."),
        (status = 409, description = "`conflict`: the push names another executor."),
        (status = 503, description = "`sharding_not_ready`: this executor is not registered yet; the next grant carries its set. `unavailable` (TLS): the cluster's members could not be learned to check the pushing manager (P13.3); retry."),
    ),
)]
pub(crate) async fn put_assignment(
    State(shared): State<Arc<Shared>>,
    ApiJson(push): ApiJson<AssignmentPush>,
) -> Result<StatusCode, HttpError> {
    let applied = shared.apply_push(&push);
    count_delivery(
        "assignment",
        &applied
            .as_ref()
            .map(|a| matches!(a.set, SetOutcome::Stale { .. })),
    );
    match applied {
        Ok(applied) => {
            match applied.set {
                SetOutcome::Applied {
                    dropped,
                    gained,
                    secondaries_dropped,
                    secondaries_gained,
                } => info!(
                    revision = push.revision,
                    dropped = dropped.len(),
                    gained = gained.len(),
                    secondaries_dropped = secondaries_dropped.len(),
                    secondaries_gained = secondaries_gained.len(),
                    "assignment push applied"
                ),
                SetOutcome::Stale {
                    revision,
                    applied_revision,
                } => debug!(
                    revision,
                    applied_revision, "stale assignment push ignored (P4.1)"
                ),
            }
            Ok(StatusCode::NO_CONTENT)
        }
        Err(PushError::NotRegistered) => Err(HttpError::new(
            ErrorCode::ShardingNotReady,
            "this executor is not registered yet; the next grant carries its set",
        )),
        Err(error) => Err(push_refusal(error, "assignment push")),
    }
}

/// Maps a refused delivery to its answer; the manager retries (or repairs forwards, P5.3).
fn push_refusal(error: PushError, what: &str) -> HttpError {
    match error {
        PushError::NotRegistered => HttpError::new(
            ErrorCode::ShardingNotReady,
            "this executor is not registered yet; the next grant carries its set",
        ),
        PushError::WrongExecutor { .. } => {
            warn!(%error, "refused a {what} meant for another executor");
            HttpError::new(ErrorCode::Conflict, error.to_string())
        }
        PushError::Invalid(error) => {
            warn!(%error, "refused a malformed {what}");
            HttpError::invalid(error.to_string())
        }
    }
}

/// Stops admission for the shards, then answers (P5.2).
#[utoipa::path(
    post, path = "/v1/revoke", tag = "deliveries", operation_id = "post_revoke", request_body = RevokePush,
    responses(
        (status = 200, description = "Admission for `released` has stopped; `ignored` when a newer set gave every shard back (P5.2).", body = RevokeReply),
        (status = 403, description = "`forbidden` (TLS): only managers revoke, and only those of nodes that are members of the cluster (P13.3)."),
        (status = 409, description = "`conflict`: the revoke names another executor."),
        (status = 503, description = "`sharding_not_ready`: this executor is not registered yet. `unavailable` (TLS): the cluster's members could not be learned to check the revoking manager (P13.3); retry."),
    ),
)]
pub(crate) async fn post_revoke(
    State(shared): State<Arc<Shared>>,
    ApiJson(revoke): ApiJson<RevokePush>,
) -> Result<Json<RevokeReply>, HttpError> {
    let applied = shared.apply_revoke(&revoke);
    count_delivery("revoke", &applied.as_ref().map(|a| a.reply.ignored));
    match applied {
        // The stops are recorded (log and state) before `apply_revoke` returned: only now may
        // the manager hand the shards on (P5.2).
        Ok(applied) => {
            let reply = match shared.service() {
                Some(service) if !applied.reply.ignored => {
                    through_service(service, applied.reply, applied.layout).await?
                }
                _ => applied.reply,
            };
            if let Some(hooks) = shared.hooks().filter(|_| !reply.released.is_empty()) {
                // P17.1: admission stopped; the embedder flushes before the handoff goes on.
                let releases: Vec<HookCall> = reply
                    .released
                    .iter()
                    .map(|&shard| HookCall::Release { shard })
                    .collect();
                let flushed = hooks.finished_within(&releases, REVOKE_HOLD).await;
                if flushed.len() < reply.released.len() {
                    warn!(
                        revision = reply.revision,
                        unflushed = reply.released.len() - flushed.len(),
                        "release hooks still running at the bound: answered released anyway (P17.1)"
                    );
                }
            }
            if reply.ignored {
                info!(
                    revision = revoke.revision,
                    "revoke overtaken by a set that holds its shards again: answered ignored (P4.1, P5.2)"
                );
            } else {
                info!(revision = revoke.revision, released = ?reply.released, "revoke applied");
            }
            Ok(Json(reply))
        }
        Err(error) => Err(push_refusal(error, "revoke")),
    }
}

/// Prepares for shards about to be handed here (P17.1): runs the embedder's prepare hook for each
/// and, as a sidecar whose service prepares, asks the service (§16); answers with those prepared
/// within the leader's wait (at most the request bound of 10 s); with neither, all of them at
/// once. Nothing is admitted because of it.
#[utoipa::path(
    post, path = "/v1/prepare", tag = "deliveries", operation_id = "post_prepare", request_body = PreparePush,
    responses(
        (status = 200, description = "The shards prepared within the wait (P17.1).", body = PrepareReply),
        (status = 403, description = "`forbidden` (TLS): only managers ask, and only those of nodes that are members of the cluster (P13.3)."),
        (status = 409, description = "`conflict`: the request names another executor."),
        (status = 503, description = "`sharding_not_ready`: this executor is not registered, and no registration of its was answered within the wait."),
    ),
)]
pub(crate) async fn post_prepare(
    State(shared): State<Arc<Shared>>,
    ApiJson(prepare): ApiJson<PreparePush>,
) -> Result<Json<PrepareReply>, HttpError> {
    let wait = Duration::from_millis(prepare.wait_ms).min(REQUEST_TIMEOUT);
    let deadline = tokio::time::Instant::now() + wait;
    let Some(health) = registered_by(&shared, deadline).await else {
        return Err(HttpError::new(
            ErrorCode::ShardingNotReady,
            "this executor is not registered yet",
        ));
    };
    if health.executor_id != prepare.executor_id {
        return Err(HttpError::new(
            ErrorCode::Conflict,
            format!(
                "this is executor {}, the prepare names {}",
                health.executor_id, prepare.executor_id
            ),
        ));
    }
    let shards: Vec<u32> = prepare.shards.iter().map(|s| s.shard).collect();
    let wait = deadline.saturating_duration_since(tokio::time::Instant::now());
    let (by_hooks, by_service) = prepare_beside(&shared, &prepare.shards, wait).await;
    let prepared = prepared_by_all(&shards, by_hooks.as_deref(), by_service.as_deref());
    info!(
        revision = prepare.revision,
        asked = shards.len(),
        prepared = prepared.len(),
        by_service = by_service.is_some(),
        "prepared for shards about to arrive (P17.1)"
    );
    Ok(Json(PrepareReply { prepared }))
}

/// The shards the embedder's hooks and, as a sidecar, the service finished preparing within
/// `wait` (`None` for either that is not there).
async fn prepare_beside(
    shared: &Shared,
    to_prepare: &[ShardEpoch],
    wait: Duration,
) -> (Option<Vec<u32>>, Option<Vec<u32>>) {
    // The embedder's hooks and, as a sidecar, the service beside it prepare at once; a shard is
    // prepared once both (those there are) finished with it.
    let by_hooks = async {
        match shared.hooks() {
            Some(hooks) => {
                let preparing: Vec<HookCall> = to_prepare
                    .iter()
                    .map(|s| HookCall::Prepare {
                        shard: s.shard,
                        epoch: s.epoch,
                    })
                    .collect();
                Some(hooks.finished_within(&preparing, wait).await)
            }
            None => None,
        }
    };
    let by_service = async {
        match shared.service() {
            Some(service) => service.prepared(to_prepare, wait).await,
            None => None,
        }
    };
    tokio::join!(by_hooks, by_service)
}

/// The `shards`, in order, that every preparer there is (hooks, service) finished with.
fn prepared_by_all(
    shards: &[u32],
    by_hooks: Option<&[u32]>,
    by_service: Option<&[u32]>,
) -> Vec<u32> {
    let finished = |done: Option<&[u32]>| {
        done.map(|done| {
            done.iter()
                .copied()
                .collect::<std::collections::HashSet<u32>>()
        })
    };
    let (by_hooks_set, by_service_set) = (finished(by_hooks), finished(by_service));
    shards
        .iter()
        .copied()
        .filter(|shard| {
            by_hooks_set
                .as_ref()
                .is_none_or(|done| done.contains(shard))
        })
        .filter(|shard| {
            by_service_set
                .as_ref()
                .is_none_or(|done| done.contains(shard))
        })
        .collect()
}

/// This executor's identity once registered, waiting until `deadline` while its registration is
/// in flight. The leader plans, and asks a receiver to prepare (P17.1), as soon as the registration
/// commits, so its prepare can arrive before the registration's answer; a prepare is asked once
/// per shard and epoch in a term, so refusing it would skip the warm-up for good.
async fn registered_by(shared: &Shared, deadline: tokio::time::Instant) -> Option<ExecutorHealth> {
    if let Some(health) = shared.health() {
        return Some(health);
    }
    if !shared.register_sent() {
        return None;
    }
    let mut assignment = shared.subscribe_assignment();
    // A timeout or a closed channel leaves the identity unknown: answered not ready below.
    let _ = tokio::time::timeout_at(
        deadline,
        assignment.wait_for(|view| view.executor_id.is_some()),
    )
    .await;
    shared.health()
}

/// As a sidecar (P16.2): the revoke's shards are released only once the service stopped
/// admitting them; held up to [`REVOKE_HOLD`], then answered with those released so far, or
/// `503 unavailable` when none is yet (the managers send the revoke again).
async fn through_service(
    service: &ServiceLink,
    reply: RevokeReply,
    layout: Layout,
) -> Result<RevokeReply, HttpError> {
    let released = service.released(&reply.released, layout, REVOKE_HOLD).await;
    if released.is_empty() && !reply.released.is_empty() {
        info!(
            revision = reply.revision,
            waiting = reply.released.len(),
            "revoke held: the service has not yet stopped admitting its shards (P16.2)"
        );
        return Err(HttpError::new(
            ErrorCode::Unavailable,
            "the service beside this sidecar has not yet acknowledged that it stopped admitting \
             the revoked shards, nor has its copy of the lease run out; send the revoke again \
             (P16.2)",
        ));
    }
    Ok(RevokeReply { released, ..reply })
}

/// Which executor and incarnation this address is.
#[utoipa::path(
    get, path = "/v1/health", tag = "status", operation_id = "health",
    responses(
        (status = 200, description = "Registered as this executor id and incarnation.", body = ExecutorHealth),
        (status = 503, description = "`sharding_not_ready`: not registered yet."),
    ),
)]
pub(crate) async fn health(
    State(shared): State<Arc<Shared>>,
) -> Result<Json<ExecutorHealth>, HttpError> {
    shared.health().map(Json).ok_or_else(|| {
        HttpError::new(
            ErrorCode::ShardingNotReady,
            "this executor is not registered yet",
        )
    })
}

/// The executor's own view: lease remaining, revision, shards, admitting or fenced.
#[utoipa::path(
    get, path = "/v1/status", tag = "status", operation_id = "status",
    responses((status = 200, description = "The executor's view now.", body = ExecutorStatus)),
)]
pub(crate) async fn status(State(shared): State<Arc<Shared>>) -> Json<ExecutorStatus> {
    Json(shared.status())
}
