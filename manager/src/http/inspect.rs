//! Read-only views of the lease state (PROTOCOL §9). Served by any replica from its applied
//! state; `?consistent=true` reads through the leader. Lease times are remaining times on the
//! answering node's clock (P3.1).

use axum::extract::State;
use axum::Json;
use leasehold_api::wire::{ExecutorView, RoutingAnswer, ShardView, StateView};
use serde::Deserialize;

use super::params::{namespace_named, ExecutorIdPath, NamespaceReadQuery, ReadQuery};
use super::{ApiQuery, HttpError};
use crate::service::refusals::unknown_executor;
use crate::service::views::Views;

/// Everything, read at one revision.
#[utoipa::path(
    get, path = "/v1/state", tag = "inspection", params(NamespaceReadQuery),
    responses(
        (status = 200, description = "Revision, configuration, executors and shards (of one namespace).", body = StateView),
        (status = 404, description = "`not_found`: no such namespace (P18.1)."),
    ),
)]
pub async fn state(
    State(views): State<Views>,
    ApiQuery(query): ApiQuery<NamespaceReadQuery>,
) -> Result<Json<StateView>, HttpError> {
    views.state_of(query.namespace()?).map(Json)
}

/// Every registered executor.
#[utoipa::path(
    get, path = "/v1/executors", tag = "inspection", params(NamespaceReadQuery),
    responses(
        (status = 200, description = "Registered executors (of one namespace), ascending by id.", body = Vec<ExecutorView>),
        (status = 404, description = "`not_found`: no such namespace (P18.1)."),
    ),
)]
pub async fn executors(
    State(views): State<Views>,
    ApiQuery(query): ApiQuery<NamespaceReadQuery>,
) -> Result<Json<Vec<ExecutorView>>, HttpError> {
    views.executors_in(query.namespace()?).map(Json)
}

/// One registered executor.
#[utoipa::path(
    get, path = "/v1/executors/{executor_id}", tag = "inspection",
    params(ExecutorIdPath, ReadQuery),
    responses(
        (status = 200, description = "The executor.", body = ExecutorView),
        (status = 404, description = "`unknown_executor`: not registered."),
    ),
)]
pub async fn executor(
    State(views): State<Views>,
    ExecutorIdPath { executor_id }: ExecutorIdPath,
    ApiQuery(_): ApiQuery<ReadQuery>,
) -> Result<Json<ExecutorView>, HttpError> {
    views
        .executor(&executor_id)
        .map(Json)
        .ok_or_else(|| unknown_executor(&executor_id))
}

/// Every shard with its owner, epoch and handoff.
#[utoipa::path(
    get, path = "/v1/shards", tag = "inspection", params(NamespaceReadQuery),
    responses(
        (status = 200, description = "Shards (of one namespace), ascending.", body = Vec<ShardView>),
        (status = 404, description = "`not_found`: no such namespace (P18.1)."),
    ),
)]
pub async fn shards(
    State(views): State<Views>,
    ApiQuery(query): ApiQuery<NamespaceReadQuery>,
) -> Result<Json<Vec<ShardView>>, HttpError> {
    views.shards_in(query.namespace()?).map(Json)
}

#[derive(Debug, Deserialize, utoipa::IntoParams)]
#[into_params(parameter_in = Query)]
#[serde(deny_unknown_fields)]
pub struct RoutingQuery {
    /// Answer the route of this key only (its UTF-8 bytes hashed, `shard_for_key`).
    #[param(max_length = 1024)]
    key: Option<String>,
    /// As for every read: through the leader's read index.
    #[serde(default)]
    #[allow(dead_code)] // acted on by the layer: `params::consistent_read_requested`
    consistent: bool,
    /// `routes` (the default): a route per shard. `runs`: the table as runs
    /// ([`RoutingRuns`]), far smaller for large tables; not with `key`.
    #[serde(default)]
    #[param(inline)]
    form: RoutingForm,
    /// The namespace routed (PROTOCOL P18.1): its shards, and its keys hashed over its shard
    /// count; absent: `default`.
    #[param(
        min_length = 1,
        max_length = 63,
        pattern = r"^[a-z0-9]([a-z0-9-]*[a-z0-9])?$"
    )]
    namespace: Option<String>,
}

#[derive(Debug, Default, Clone, Copy, PartialEq, Eq, Deserialize, utoipa::ToSchema)]
#[serde(rename_all = "lowercase")]
pub enum RoutingForm {
    #[default]
    Routes,
    Runs,
}

/// The routing table, or the route for one key (shard = `leasehold_api::shard_for_key`).
#[utoipa::path(
    get, path = "/v1/routing", tag = "inspection", params(RoutingQuery),
    responses(
        (status = 200, description = "The whole table, or with `key` that key's route.", body = RoutingAnswer),
        (status = 503, description = "`sharding_not_ready`: a key was asked before the shard configuration was written; `no_leader`."),
        (status = 404, description = "`not_found`: no such namespace (P18.1)."),
    ),
)]
pub async fn routing(
    State(views): State<Views>,
    ApiQuery(query): ApiQuery<RoutingQuery>,
) -> Result<Json<RoutingAnswer>, HttpError> {
    if let Some(key) = &query.key {
        leasehold_api::check_key_length(key).map_err(HttpError::invalid)?;
    }
    if query.key.is_some() && query.form == RoutingForm::Runs {
        return Err(HttpError::invalid(
            "form=runs is a form of the whole table; a key's route is one route",
        ));
    }
    let name = namespace_named(query.namespace.as_deref())?;
    Ok(Json(match (&query.key, query.form) {
        (Some(key), _) => RoutingAnswer::Key(views.key_route(name, key)?),
        (None, RoutingForm::Runs) => RoutingAnswer::Runs(views.routing_runs(name)?),
        (None, RoutingForm::Routes) => RoutingAnswer::Table(views.routing_table(name)?),
    }))
}
