//! Operator controls (PROTOCOL P17.4): maintenance mode, moving and pinning a shard, and the audit
//! log. The writes are the admin's (P13.3) and the leader's: each is one `Command::Operator`
//! naming who asked (`authorize::Actor`), recorded in the audit log in the same entry once it
//! changed something. They need cluster version 12 (below it the proposal gate answers `409`).
//! Drains, removals and membership changes are recorded through [`propose`] too.

use axum::extract::{FromRequestParts, Path, State};
use axum::http::request::Parts;
use axum::{Extension, Json};
use leasehold_api::wire::{
    AuditRecordView, MaintenanceRequest, MaintenanceView, MoveShardRequest, PinShardRequest,
    ShardView, DEFAULT_NAMESPACE, MAX_AUDIT_RECORDS, OPERATOR_CONTROLS_SCHEMA,
};

use super::authorize::{Actor, CallerScope};
use super::inspect::shard_view;
use super::refusals::{done_or_refused, refusal, unknown_executor};
use super::{ApiJson, AppState, HttpError};
use crate::lease::answer::OperatorDone;
use crate::lease::{
    AuditRecord, Command, ExecutorAnswer, MembershipChange, OperatorAction, ShardId,
};
use crate::proposer::ProposeError;

/// What the audit log's actor of a removal's first step ends with (`removal.rs` writes it): the
/// drain it records is the removal's (P5.5), and the audit view names it `remove_drain` (P17.4).
pub(super) const REMOVAL_MARK: &str = " (removal: drained first, P5.5)";

/// Proposes `action` as `actor`'s and answers what it did.
pub(super) async fn propose(
    node: &AppState,
    actor: &Actor,
    action: OperatorAction,
) -> Result<ExecutorAnswer<OperatorDone>, ProposeError> {
    let command = Command::Operator {
        now_ms: node.leadership.clock.now_ms(),
        actor: actor.0.clone(),
        action,
    };
    let (index, answer) = node
        .leadership
        .proposer
        .propose_as::<OperatorDone>(command)
        .await?;
    say_when_a_record_was_dropped(node, index);
    Ok(answer)
}

/// The audit log keeps at most `MAX_AUDIT_RECORDS`: when the record of the entry at `index` is
/// there and the log is full, making room for it dropped one (P17.4), which is counted and said.
fn say_when_a_record_was_dropped(node: &AppState, index: u64) {
    let (full, recorded) = node.state.read(|applied| {
        let state = &applied.state;
        (
            state.audit().count() == MAX_AUDIT_RECORDS,
            state
                .audit()
                .last()
                .is_some_and(|last| last.revision == index),
        )
    });
    if full && recorded {
        metrics::counter!("leasehold_audit_records_dropped_total").increment(1);
        tracing::warn!(
            revision = index,
            max_records = MAX_AUDIT_RECORDS,
            "the audit log is full: recording this action dropped its oldest record not of an \
             operator of the whole cluster (or the oldest, when every record is theirs; P17.4)"
        );
    }
}

/// Proposes `action` as `actor`'s and answers with the part of it `pick` takes: what the
/// earlier command for the same action (`SetDraining`, `Deregister`) answers. An outcome `pick`
/// does not take is the state machine's mistake.
pub(super) async fn propose_expecting<T>(
    node: &AppState,
    actor: &Actor,
    action: OperatorAction,
    pick: impl FnOnce(OperatorDone) -> Result<T, OperatorDone>,
) -> Result<ExecutorAnswer<T>, HttpError> {
    Ok(match propose(node, actor, action).await? {
        ExecutorAnswer::Done(done) => {
            ExecutorAnswer::Done(pick(done).map_err(|other| mismatch(&other))?)
        }
        ExecutorAnswer::UnknownExecutor => ExecutorAnswer::UnknownExecutor,
        ExecutorAnswer::Refused(reason) => ExecutorAnswer::Refused(reason),
    })
}

/// Whether the operator commands can be proposed: the committed cluster version takes them.
/// Below it, drains and removals go as the commands of earlier schemas, unrecorded.
pub(super) fn recorded(node: &AppState) -> bool {
    node.state.current().cluster_version() >= OPERATOR_CONTROLS_SCHEMA
}

/// Records a membership change that committed. The change is Raft's own entry, so its record
/// follows it; a leader lost in between loses the record, not the change, and says so in its log.
pub(super) async fn record_membership(node: &AppState, actor: &Actor, change: MembershipChange) {
    if !recorded(node) {
        return;
    }
    if let Err(error) = propose(
        node,
        actor,
        OperatorAction::Membership {
            change: change.clone(),
        },
    )
    .await
    {
        tracing::warn!(?change, %error, "the membership change committed; its audit record did not");
    }
}

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

fn unknown_shard(shard: ShardId) -> HttpError {
    HttpError::new(
        leasehold_api::problem::ErrorCode::NotFound,
        format!("shard {shard} is out of range"),
    )
}

/// The shard as this replica applied it (the leader, after the commit).
fn current_shard(node: &AppState, shard: ShardId) -> Result<Json<ShardView>, HttpError> {
    let state = node.state.current();
    let space = state
        .space(DEFAULT_NAMESPACE)
        .ok_or_else(|| unknown_shard(shard))?;
    let entry = space.shard(shard).ok_or_else(|| unknown_shard(shard))?;
    Ok(Json(shard_view(
        space,
        entry,
        node.leadership.clock.now_ms(),
        None,
    )))
}

fn mismatch(done: &OperatorDone) -> HttpError {
    HttpError::internal("unexpected state machine outcome", format!("{done:?}"))
}

/// Whether maintenance mode is on.
#[utoipa::path(
    get, path = "/v1/cluster/maintenance", tag = "operator",
    responses((status = 200, description = "Whether maintenance mode is on (P17.4).", body = MaintenanceView)),
)]
pub async fn maintenance(State(node): State<AppState>) -> Json<MaintenanceView> {
    Json(MaintenanceView {
        on: node.state.current().maintenance(),
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
    State(node): State<AppState>,
    Extension(actor): Extension<Actor>,
    ApiJson(request): ApiJson<MaintenanceRequest>,
) -> Result<Json<MaintenanceView>, HttpError> {
    let action = OperatorAction::SetMaintenance { on: request.on };
    let answer = propose_expecting(&node, &actor, action, |done| match done {
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
    State(node): State<AppState>,
    Extension(actor): Extension<Actor>,
    Extension(scope): Extension<CallerScope>,
    ShardPath { shard }: ShardPath,
    ApiJson(request): ApiJson<MoveShardRequest>,
) -> Result<Json<ShardView>, HttpError> {
    scope.check(DEFAULT_NAMESPACE)?;
    if node.state.current().shard(shard).is_none() {
        return Err(unknown_shard(shard));
    }
    let to = request.to;
    let action = OperatorAction::MoveShard {
        namespace: DEFAULT_NAMESPACE.to_owned(),
        shard,
        to: to.clone(),
    };
    let answer = propose_expecting(&node, &actor, action, |done| match done {
        OperatorDone::Moved(_) => Ok(()),
        other => Err(other),
    })
    .await?;
    done_or_refused(answer, || unknown_executor(&to))?;
    tracing::info!(shard, %to, actor = actor.0, "shard moved by an operator");
    current_shard(&node, shard)
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
    State(node): State<AppState>,
    Extension(actor): Extension<Actor>,
    Extension(scope): Extension<CallerScope>,
    ShardPath { shard }: ShardPath,
    ApiJson(request): ApiJson<PinShardRequest>,
) -> Result<Json<ShardView>, HttpError> {
    scope.check(DEFAULT_NAMESPACE)?;
    set_pin(&node, &actor, shard, Some(request.executor_id)).await
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
    State(node): State<AppState>,
    Extension(actor): Extension<Actor>,
    Extension(scope): Extension<CallerScope>,
    ShardPath { shard }: ShardPath,
) -> Result<Json<ShardView>, HttpError> {
    scope.check(DEFAULT_NAMESPACE)?;
    set_pin(&node, &actor, shard, None).await
}

async fn set_pin(
    node: &AppState,
    actor: &Actor,
    shard: ShardId,
    executor_id: Option<String>,
) -> Result<Json<ShardView>, HttpError> {
    if node.state.current().shard(shard).is_none() {
        return Err(unknown_shard(shard));
    }
    let action = OperatorAction::Pin {
        namespace: DEFAULT_NAMESPACE.to_owned(),
        shard,
        executor_id: executor_id.clone(),
    };
    let answer = propose_expecting(node, actor, action, |done| match done {
        OperatorDone::Pinned { changed, .. } => Ok(changed),
        other => Err(other),
    })
    .await?;
    match answer {
        ExecutorAnswer::Done(changed) => {
            tracing::info!(shard, ?executor_id, changed, actor = actor.0, "pin set");
            current_shard(node, shard)
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
pub async fn audit(State(node): State<AppState>) -> Json<Vec<AuditRecordView>> {
    Json(node.state.current().audit().map(audit_view).collect())
}

/// A move's or pin's namespace as the audit view shows it: only when it is not `default`, so
/// the records of a cluster without namespaces read as they always did.
fn named_namespace(namespace: &str) -> Option<String> {
    (namespace != DEFAULT_NAMESPACE).then(|| namespace.to_owned())
}

/// A record as the API shows it.
pub(super) fn audit_view(record: &AuditRecord) -> AuditRecordView {
    let mut view = AuditRecordView {
        revision: record.revision,
        at_ms: record.at_ms,
        actor: record.actor.clone(),
        action: String::new(),
        namespace: None,
        executor_id: None,
        shard: None,
        node_id: None,
        address: None,
    };
    let action = match &record.action {
        OperatorAction::SetDraining {
            executor_id,
            draining,
        } => {
            view.executor_id = Some(executor_id.clone());
            if *draining && record.actor.ends_with(REMOVAL_MARK) {
                "remove_drain"
            } else if *draining {
                "drain"
            } else {
                "undrain"
            }
        }
        OperatorAction::Remove { executor_id } => {
            view.executor_id = Some(executor_id.clone());
            "remove"
        }
        OperatorAction::SetMaintenance { on } => {
            if *on {
                "maintenance_on"
            } else {
                "maintenance_off"
            }
        }
        OperatorAction::MoveShard {
            namespace,
            shard,
            to,
        } => {
            view.namespace = named_namespace(namespace);
            view.shard = Some(*shard);
            view.executor_id = Some(to.clone());
            "move"
        }
        OperatorAction::Pin {
            namespace,
            shard,
            executor_id,
        } => {
            view.namespace = named_namespace(namespace);
            view.shard = Some(*shard);
            view.executor_id.clone_from(executor_id);
            if executor_id.is_some() {
                "pin"
            } else {
                "unpin"
            }
        }
        OperatorAction::CreateNamespace { name, .. } => {
            view.namespace = Some(name.clone());
            "namespace_create"
        }
        OperatorAction::SetNamespace { name, .. } => {
            view.namespace = Some(name.clone());
            "namespace_set"
        }
        OperatorAction::DeleteNamespace { name } => {
            view.namespace = Some(name.clone());
            "namespace_delete"
        }
        OperatorAction::Membership { change } => match change {
            MembershipChange::Added { node_id, address } => {
                view.node_id = Some(*node_id);
                view.address = Some(address.clone());
                "member_add"
            }
            MembershipChange::Removed { node_id } => {
                view.node_id = Some(*node_id);
                "member_remove"
            }
        },
    };
    view.action = action.to_owned();
    view
}
