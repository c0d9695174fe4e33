//! Operator controls (PROTOCOL P17.4): maintenance mode, moving and pinning a shard, and the audit
//! log. The writes are the admin's (P13.3) and the leader's: each is one `Command::Operator`
//! naming who asked (`authorize::Actor`), recorded in the audit log in the same entry once it
//! changed something. They need cluster version 12 (below it the proposal gate answers `409`).
//! The handlers check the request and the caller's scope; `service::operator` proposes.

use axum::extract::{FromRequestParts, Path, State};
use axum::http::request::Parts;
use axum::{Extension, Json};
use leasehold_api::wire::{
    AuditRecordView, MaintenanceRequest, MaintenanceView, MoveShardRequest, PinShardRequest,
    ShardView, DEFAULT_NAMESPACE,
};

use super::authorize::CallerScope;
use super::{ApiJson, HttpError};
use crate::lease::answer::OperatorDone;
use crate::lease::{ExecutorAnswer, OperatorAction, ShardId};
use crate::service::operator::{Actor, Operator};
use crate::service::refusals::{done_or_refused, refusal, unknown_executor};
use crate::service::views::Views;

/// The `{shard}` path parameter of the shard controls.
#[derive(Debug, utoipa::IntoParams)]
#[into_params(parameter_in = Path)]
pub(crate) struct ShardPath {
    /// The shard number, below the cluster's shard count.
    #[param(minimum = 0, maximum = 1048575)]
    pub shard: u32,
}

impl<S: Send + Sync> FromRequestParts<S> for ShardPath {
    type Rejection = HttpError;

    async fn from_request_parts(parts: &mut Parts, state: &S) -> Result<Self, HttpError> {
        let Path(text) = Path::<String>::from_request_parts(parts, state)
            .await
            .map_err(|rejection| HttpError::invalid(rejection.body_text()))?;
        let shard = text
            .parse::<u32>()
            .map_err(|_| HttpError::invalid(format!("shard {text:?} is not a shard number")))?;
        Ok(Self { shard })
    }
}

/// Whether maintenance mode is on.
#[utoipa::path(
    get, path = "/v1/cluster/maintenance", tag = "operator",
    responses((status = 200, description = "Whether maintenance mode is on (P17.4).", body = MaintenanceView)),
)]
pub async fn maintenance(State(views): State<Views>) -> Json<MaintenanceView> {
    Json(MaintenanceView {
        on: views.maintenance(),
        changed: false,
    })
}

/// Turns maintenance mode on or off: placement frozen for balance, joiners and drains; shards
/// nobody holds are still placed and expired leases still reaped.
#[utoipa::path(
    put, path = "/v1/cluster/maintenance", tag = "operator",
    request_body = MaintenanceRequest,
    responses(
        (status = 200, description = "The mode now, and whether this changed it (recorded in the audit log if so).", body = MaintenanceView),
        (status = 403, description = "`forbidden` (TLS): admin only, and not one limited to namespaces (P13.3, P18.2)."),
        (status = 409, description = "`conflict`: the cluster version is below 12 (P14.3)."),
    ),
)]
pub async fn set_maintenance(
    State(operator): State<Operator>,
    Extension(actor): Extension<Actor>,
    ApiJson(request): ApiJson<MaintenanceRequest>,
) -> Result<Json<MaintenanceView>, HttpError> {
    let action = OperatorAction::SetMaintenance { on: request.on };
    let answer = operator
        .propose_expecting(&actor, action, |done| match done {
            OperatorDone::Maintenance { on, changed } => Ok(MaintenanceView { on, changed }),
            other => Err(other),
        })
        .await?;
    match answer {
        ExecutorAnswer::Done(view) => {
            tracing::info!(
                on = view.on,
                changed = view.changed,
                actor = actor.0,
                "maintenance mode set"
            );
            Ok(Json(view))
        }
        ExecutorAnswer::UnknownExecutor => Err(HttpError::internal(
            "unexpected state machine outcome",
            "maintenance answered not found".to_owned(),
        )),
        ExecutorAnswer::Refused(reason) => Err(refusal(reason)),
    }
}

/// Hands a shard to an executor now, through the P5.2 handoff.
#[utoipa::path(
    post, path = "/v1/shards/{shard}/move", tag = "operator",
    params(ShardPath),
    request_body = MoveShardRequest,
    responses(
        (status = 200, description = "The move committed: the shard as it is now (releasing to the target, or granted to it if nobody held it).", body = ShardView),
        (status = 400, description = "`invalid_request`: not a shard number, or a malformed executor id."),
        (status = 403, description = "`forbidden` (TLS): admin only (P13.3), one whose certificate is limited to namespaces only if `default` is one (P18.2)."),
        (status = 404, description = "`not_found` / `unknown_executor`: no such shard or executor."),
        (status = 409, description = "`conflict`: the target is not live or is draining, holds the shard already, or the shard is pinned elsewhere; or the cluster version is below 12."),
    ),
)]
pub async fn move_shard(
    State(operator): State<Operator>,
    State(views): State<Views>,
    Extension(actor): Extension<Actor>,
    Extension(scope): Extension<CallerScope>,
    ShardPath { shard }: ShardPath,
    ApiJson(request): ApiJson<MoveShardRequest>,
) -> Result<Json<ShardView>, HttpError> {
    scope.check(DEFAULT_NAMESPACE)?;
    views.shard(shard)?;
    let to = request.to;
    let action = OperatorAction::MoveShard {
        namespace: DEFAULT_NAMESPACE.to_owned(),
        shard,
        to: to.clone(),
    };
    let answer = operator
        .propose_expecting(&actor, action, |done| match done {
            OperatorDone::Moved(_) => Ok(()),
            other => Err(other),
        })
        .await?;
    done_or_refused(answer, || unknown_executor(&to))?;
    tracing::info!(shard, %to, actor = actor.0, "shard moved by an operator");
    views.shard(shard).map(Json)
}

/// Pins a shard to an executor: the planner keeps it there, or moves it there, while that
/// executor is live and not draining.
#[utoipa::path(
    put, path = "/v1/shards/{shard}/pin", tag = "operator",
    params(ShardPath),
    request_body = PinShardRequest,
    responses(
        (status = 200, description = "Pinned (now or already): the shard as it is now.", body = ShardView),
        (status = 403, description = "`forbidden` (TLS): admin only (P13.3), one whose certificate is limited to namespaces only if `default` is one (P18.2)."),
        (status = 404, description = "`not_found` / `unknown_executor`: no such shard or executor."),
        (status = 409, description = "`conflict`: the cluster version is below 12."),
    ),
)]
pub async fn pin(
    State(operator): State<Operator>,
    State(views): State<Views>,
    Extension(actor): Extension<Actor>,
    Extension(scope): Extension<CallerScope>,
    ShardPath { shard }: ShardPath,
    ApiJson(request): ApiJson<PinShardRequest>,
) -> Result<Json<ShardView>, HttpError> {
    scope.check(DEFAULT_NAMESPACE)?;
    set_pin(&operator, &views, &actor, shard, Some(request.executor_id)).await
}

/// Unpins a shard.
#[utoipa::path(
    delete, path = "/v1/shards/{shard}/pin", tag = "operator",
    params(ShardPath),
    responses(
        (status = 200, description = "Not pinned (now or already): the shard as it is now.", body = ShardView),
        (status = 403, description = "`forbidden` (TLS): admin only (P13.3), one whose certificate is limited to namespaces only if `default` is one (P18.2)."),
        (status = 404, description = "`not_found`: no such shard."),
        (status = 409, description = "`conflict`: the cluster version is below 12."),
    ),
)]
pub async fn unpin(
    State(operator): State<Operator>,
    State(views): State<Views>,
    Extension(actor): Extension<Actor>,
    Extension(scope): Extension<CallerScope>,
    ShardPath { shard }: ShardPath,
) -> Result<Json<ShardView>, HttpError> {
    scope.check(DEFAULT_NAMESPACE)?;
    set_pin(&operator, &views, &actor, shard, None).await
}

async fn set_pin(
    operator: &Operator,
    views: &Views,
    actor: &Actor,
    shard: ShardId,
    executor_id: Option<String>,
) -> Result<Json<ShardView>, HttpError> {
    views.shard(shard)?;
    let action = OperatorAction::Pin {
        namespace: DEFAULT_NAMESPACE.to_owned(),
        shard,
        executor_id: executor_id.clone(),
    };
    let answer = operator
        .propose_expecting(actor, action, |done| match done {
            OperatorDone::Pinned { changed, .. } => Ok(changed),
            other => Err(other),
        })
        .await?;
    match answer {
        ExecutorAnswer::Done(changed) => {
            tracing::info!(shard, ?executor_id, changed, actor = actor.0, "pin set");
            views.shard(shard).map(Json)
        }
        ExecutorAnswer::UnknownExecutor => {
            Err(unknown_executor(executor_id.as_deref().unwrap_or_default()))
        }
        ExecutorAnswer::Refused(reason) => Err(refusal(reason)),
    }
}

/// The audit log: every operator action that changed something, oldest first.
#[utoipa::path(
    get, path = "/v1/audit", tag = "operator",
    responses(
        (status = 200, description = "The audit log, oldest first, at most 1 024 records (P17.4).", body = [AuditRecordView]),
        (status = 403, description = "`forbidden` (TLS): admin only, and not one limited to namespaces (P13.3, P18.2)."),
    ),
)]
pub async fn audit(State(views): State<Views>) -> Json<Vec<AuditRecordView>> {
    Json(views.audit())
}
