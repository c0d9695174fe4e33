//! Namespaces (PROTOCOL P18.1): `POST /v1/namespaces`, `GET /v1/namespaces`,
//! `GET`/`PATCH`/`DELETE /v1/namespaces/{name}`. Creating, changing and deleting one are
//! operator actions (admin role, recorded in the audit log, P17.4) the leader proposes; the
//! reads are any role's, answered from this replica's applied state.

use axum::extract::{FromRequestParts, Path, State};
use axum::http::request::Parts;
use axum::http::StatusCode;
use axum::{Extension, Json};
use leasehold_api::wire::{
    check_namespace_name, check_namespace_settings, check_reshard, CreateNamespaceRequest,
    NamespaceDeleted, NamespaceView, ReshardReply, ReshardRequest, SetNamespaceRequest,
};

use super::authorize::CallerScope;
use super::{ApiJson, HttpError};
use crate::lease::answer::OperatorDone;
use crate::lease::{OperatorAction, PlacementOverrides};
use crate::service::operator::{Actor, Operator};
use crate::service::refusals::{done_or_refused, refusal};
use crate::service::views::Views;
use leasehold_api::problem::ErrorCode;

/// The `{name}` path parameter: a namespace name, checked where it is extracted.
#[derive(Debug, utoipa::IntoParams)]
#[into_params(parameter_in = Path)]
pub(crate) struct NamespacePath {
    /// The namespace's name.
    #[param(
        min_length = 1,
        max_length = 63,
        pattern = r"^[a-z0-9]([a-z0-9-]*[a-z0-9])?$"
    )]
    pub name: String,
}

impl<S: Send + Sync> FromRequestParts<S> for NamespacePath {
    type Rejection = HttpError;

    async fn from_request_parts(parts: &mut Parts, state: &S) -> Result<Self, HttpError> {
        let Path(name) = Path::<String>::from_request_parts(parts, state)
            .await
            .map_err(|rejection| HttpError::invalid(rejection.body_text()))?;
        check_namespace_name(&name).map_err(|error| HttpError::invalid(error.to_string()))?;
        Ok(Self { name })
    }
}

fn not_an_operator_outcome(what: &str) -> HttpError {
    HttpError::internal(
        "unexpected state machine outcome",
        format!("a namespace {what} answered not found"),
    )
}

/// Every namespace, ascending by name.
#[utoipa::path(
    get, path = "/v1/namespaces", tag = "namespaces", operation_id = "namespaces",
    responses((status = 200, description = "Every namespace, `default` included (P18.1).", body = Vec<NamespaceView>)),
)]
pub async fn list(State(views): State<Views>) -> Json<Vec<NamespaceView>> {
    Json(views.namespaces())
}

/// One namespace.
#[utoipa::path(
    get, path = "/v1/namespaces/{name}", tag = "namespaces", operation_id = "namespace",
    params(NamespacePath),
    responses(
        (status = 200, description = "The namespace.", body = NamespaceView),
        (status = 400, description = "`invalid_request`: not a namespace name."),
        (status = 404, description = "`not_found`: no such namespace."),
    ),
)]
pub async fn show(
    State(views): State<Views>,
    NamespacePath { name }: NamespacePath,
) -> Result<Json<NamespaceView>, HttpError> {
    views.namespace(&name).map(Json)
}

/// Creates a namespace: its shards unowned, its executors to come.
#[utoipa::path(
    post, path = "/v1/namespaces", tag = "namespaces", operation_id = "create_namespace",
    request_body = CreateNamespaceRequest,
    responses(
        (status = 201, description = "Created (recorded in the audit log).", body = NamespaceView),
        (status = 200, description = "It existed with these settings already: nothing changed.", body = NamespaceView),
        (status = 400, description = "`invalid_request`: a malformed name, no shards or more than 1048576, a lease outside 1 ms..=24 h, a bound of 0, a placement setting out of range or a preference that is not one `key=value` label (P18.4)."),
        (status = 403, description = "`forbidden` (TLS): admin only (P13.3), and an admin of the whole cluster: a certificate limited to namespaces creates none, since creating one sets its quotas (P18.2)."),
        (status = 409, description = "`conflict`: the name is in use with other settings, the cluster holds its most namespaces or shards, or the cluster version is below 12 (P14.3)."),
    ),
)]
pub async fn create(
    State(operator): State<Operator>,
    State(views): State<Views>,
    Extension(actor): Extension<Actor>,
    Extension(scope): Extension<CallerScope>,
    ApiJson(request): ApiJson<CreateNamespaceRequest>,
) -> Result<(StatusCode, Json<NamespaceView>), HttpError> {
    check_namespace_name(&request.name).map_err(|error| HttpError::invalid(error.to_string()))?;
    scope.check(&request.name)?;
    // Creating a namespace sets its quotas (its shards, its executors): the cluster's to give.
    if scope.0.is_limited() {
        return Err(HttpError::new(
            ErrorCode::Forbidden,
            format!(
                "creating a namespace sets its quotas (shards, executors), which an admin of \
                 the whole cluster sets: a certificate limited to {} may change a namespace's \
                 lease and placement, and lower its executor bound (PROTOCOL P18.2)",
                scope.0
            ),
        ));
    }
    let lease_duration_ms = match request.lease_duration_ms {
        Some(lease_duration_ms) => lease_duration_ms,
        None => views
            .state()
            .current()
            .config()
            .map(|config| config.lease_duration_ms)
            .ok_or_else(|| refusal(crate::lease::RefusalReason::NotInitialised))?,
    };
    check_namespace_settings(lease_duration_ms, request.max_executors)
        .map_err(|error| HttpError::invalid(error.to_string()))?;
    let placement = PlacementOverrides::from_wire(&request.placement)
        .map_err(|error| HttpError::invalid(error.to_string()))?;
    let replication = request
        .replica_fields()
        .settings()
        .map_err(|error| HttpError::invalid(error.to_string()))?;
    let action = OperatorAction::CreateNamespace {
        name: request.name.clone(),
        shard_count: request.shard_count,
        lease_duration_ms,
        max_executors: request.max_executors,
        placement,
        replication,
    };
    let answer = operator
        .propose_expecting(&actor, action, |done| match done {
            OperatorDone::NamespaceCreated { already_exists } => Ok(already_exists),
            other => Err(other),
        })
        .await?;
    let already_exists = done_or_refused(answer, || not_an_operator_outcome("creation"))?;
    tracing::info!(
        namespace = request.name,
        shard_count = request.shard_count,
        already_exists,
        actor = actor.0,
        "namespace created"
    );
    let status = if already_exists {
        StatusCode::OK
    } else {
        StatusCode::CREATED
    };
    Ok((status, Json(views.namespace(&request.name)?)))
}

/// Changes a namespace's lease, executor bound or placement settings in place.
#[utoipa::path(
    patch, path = "/v1/namespaces/{name}", tag = "namespaces", operation_id = "set_namespace",
    params(NamespacePath),
    request_body = SetNamespaceRequest,
    responses(
        (status = 200, description = "The namespace as it is now (recorded in the audit log if this changed it).", body = NamespaceView),
        (status = 400, description = "`invalid_request`: a malformed name, a lease outside 1 ms..=24 h, a bound of 0, a placement setting out of range, a preference that is not one `key=value` label (P18.4), or replica settings out of range (P19.1, P19.4)."),
        (status = 403, description = "`forbidden` (TLS): admin only (P13.3), limited to the namespace if its certificate is, and then it may lower the executor bound but not raise or remove it (P18.2)."),
        (status = 404, description = "`not_found`: no such namespace."),
        (status = 409, description = "`conflict`: `default`'s lease (the managers' `--lease-duration`), or the cluster version is below 12 (13 for replicas, P14.3)."),
    ),
)]
pub async fn set(
    State(operator): State<Operator>,
    State(views): State<Views>,
    Extension(actor): Extension<Actor>,
    Extension(scope): Extension<CallerScope>,
    NamespacePath { name }: NamespacePath,
    ApiJson(request): ApiJson<SetNamespaceRequest>,
) -> Result<Json<NamespaceView>, HttpError> {
    scope.check(&name)?;
    let current = views.namespace(&name)?;
    let lease_duration_ms = request
        .lease_duration_ms
        .unwrap_or(current.lease_duration_ms);
    let max_executors = request.max_executors.unwrap_or(current.max_executors);
    check_namespace_settings(lease_duration_ms, max_executors)
        .map_err(|error| HttpError::invalid(error.to_string()))?;
    if scope.0.is_limited() && raises_executor_bound(current.max_executors, max_executors) {
        return Err(HttpError::new(
            ErrorCode::Forbidden,
            format!(
                "the executor bound of {name:?} is a quota an admin of the whole cluster sets: \
                 a certificate limited to {} may lower it ({:?} now), not raise or remove it \
                 (PROTOCOL P18.2)",
                scope.0, current.max_executors
            ),
        ));
    }
    let placement =
        PlacementOverrides::from_wire(&request.placement.applied_to(&current.placement))
            .map_err(|error| HttpError::invalid(error.to_string()))?;
    let replication = request
        .replica_change()
        .applied_to(&current.replica_settings())
        .map_err(|error| HttpError::invalid(error.to_string()))?;
    let action = OperatorAction::SetNamespace {
        name: name.clone(),
        lease_duration_ms,
        max_executors,
        placement,
        replication,
    };
    let answer = operator
        .propose_expecting(&actor, action, |done| match done {
            OperatorDone::NamespaceSet { changed } => Ok(changed),
            other => Err(other),
        })
        .await?;
    let changed = done_or_refused(answer, || not_an_operator_outcome("change"))?;
    tracing::info!(
        namespace = name,
        lease_duration_ms,
        ?max_executors,
        changed,
        actor = actor.0,
        "namespace set"
    );
    views.namespace(&name).map(Json)
}

/// Asks for a namespace's shard count to double (a split) or halve (a merge) online (P20.1);
/// the leader carries it out once the namespace is ready (P20.2).
#[utoipa::path(
    post, path = "/v1/namespaces/{name}/reshard", tag = "namespaces",
    operation_id = "reshard_namespace", params(NamespacePath),
    request_body = ReshardRequest,
    responses(
        (status = 202, description = "Under way (recorded in the audit log): `reshard` says what it waits on; `GET /v1/namespaces/{name}` follows it.", body = ReshardReply),
        (status = 200, description = "A repeat of the reshard under way, or the count is already the one asked: nothing changed.", body = ReshardReply),
        (status = 400, description = "`invalid_request`: not a namespace name, or a count other than twice or half the current one (an odd count does not merge)."),
        (status = 403, description = "`forbidden` (TLS): admin only (P13.3), limited to the namespace if its certificate is (P18.2)."),
        (status = 404, description = "`not_found`: no such namespace."),
        (status = 409, description = "`conflict`: another reshard of it is under way, an executor in it does not follow a change of layout (P20.3), the split would pass the cluster's shard quota, a merge would join shards pinned to different executors, or the cluster version is below 14 (P14.3)."),
    ),
)]
pub async fn reshard(
    State(operator): State<Operator>,
    State(views): State<Views>,
    Extension(actor): Extension<Actor>,
    Extension(scope): Extension<CallerScope>,
    NamespacePath { name }: NamespacePath,
    ApiJson(request): ApiJson<ReshardRequest>,
) -> Result<(StatusCode, Json<ReshardReply>), HttpError> {
    scope.check(&name)?;
    let current = views.namespace(&name)?;
    let repeat = current.reshard.map(|pending| pending.shard_count) == Some(request.shard_count)
        || (current.reshard.is_none() && current.shard_count == request.shard_count);
    if !repeat {
        check_reshard(current.shard_count, request.shard_count)
            .map_err(|error| HttpError::invalid(error.to_string()))?;
    }
    let action = OperatorAction::Reshard {
        name: name.clone(),
        shard_count: request.shard_count,
    };
    let answer = operator
        .propose_expecting(&actor, action, |done| match done {
            OperatorDone::ReshardRequested { changed } => Ok(changed),
            other => Err(other),
        })
        .await?;
    let changed = done_or_refused(answer, || not_an_operator_outcome("reshard"))?;
    tracing::info!(
        namespace = name,
        shard_count = request.shard_count,
        changed,
        actor = actor.0,
        "namespace reshard asked for (P20.1)"
    );
    let now = views.namespace(&name)?;
    let status = if changed {
        StatusCode::ACCEPTED
    } else {
        StatusCode::OK
    };
    Ok((
        status,
        Json(ReshardReply {
            name,
            shard_count: now.shard_count,
            generation: now.generation,
            reshard: now.reshard,
        }),
    ))
}

/// Whether `new` allows more executors than `current` (`None`: no bound).
fn raises_executor_bound(current: Option<u32>, new: Option<u32>) -> bool {
    match (current, new) {
        (_, None) => current.is_some(),
        (None, Some(_)) => false,
        (Some(current), Some(new)) => new > current,
    }
}

/// Deletes a drained namespace; the executors still in it, holding nothing, go with it.
#[utoipa::path(
    delete, path = "/v1/namespaces/{name}", tag = "namespaces",
    operation_id = "delete_namespace", params(NamespacePath),
    responses(
        (status = 200, description = "Deleted, now or before (recorded in the audit log if now).", body = NamespaceDeleted),
        (status = 400, description = "`invalid_request`: not a namespace name."),
        (status = 403, description = "`forbidden` (TLS): admin only (P13.3), limited to the namespace if its certificate is (P18.2)."),
        (status = 404, description = "`not_found`: no such namespace, ever."),
        (status = 409, description = "`conflict`: `default`, a namespace with an owned shard (drain its executors first), or the cluster version is below 12."),
    ),
)]
pub async fn delete(
    State(operator): State<Operator>,
    Extension(actor): Extension<Actor>,
    Extension(scope): Extension<CallerScope>,
    NamespacePath { name }: NamespacePath,
) -> Result<Json<NamespaceDeleted>, HttpError> {
    scope.check(&name)?;
    let action = OperatorAction::DeleteNamespace { name: name.clone() };
    let answer = operator
        .propose_expecting(&actor, action, |done| match done {
            OperatorDone::NamespaceDeleted {
                already_gone,
                removed,
            } => Ok((already_gone, removed)),
            other => Err(other),
        })
        .await?;
    let (already_gone, removed_executors) =
        done_or_refused(answer, || not_an_operator_outcome("deletion"))?;
    tracing::info!(
        namespace = name,
        already_gone,
        removed = removed_executors.len(),
        actor = actor.0,
        "namespace deleted"
    );
    Ok(Json(NamespaceDeleted {
        name,
        already_gone,
        removed_executors,
    }))
}

#[cfg(test)]
mod tests {
    use super::raises_executor_bound;

    /// P18.2: a limited admin may lower its namespace's executor bound, never raise or remove it.
    #[test]
    fn p18_2_what_raises_an_executor_bound() {
        assert!(raises_executor_bound(Some(8), Some(9)));
        assert!(raises_executor_bound(Some(8), None));
        assert!(!raises_executor_bound(Some(8), Some(8)));
        assert!(!raises_executor_bound(Some(8), Some(2)));
        assert!(!raises_executor_bound(None, Some(8)));
        assert!(!raises_executor_bound(None, None));
    }
}
