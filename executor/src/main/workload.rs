//! The `leasehold-executor` binary's demo workload: `GET /v1/work?key=K` shows how an embedder
//! gates work on admission. The binary's own (declared in `main.rs`, not in the library): it
//! uses only the library's public API, as an embedder's routes would, and documents itself with
//! [`document`] for the binary's OpenAPI document.
//!
//! - `200 {shard, epoch}`: the key's shard is held and admitted; the epoch is the fencing token
//!   the work would hand to downstream storage. Each is one unit of the shard's load, which the
//!   binary's renewals report as a rate (P15.1).
//! - `421` (problem+json, code `conflict`, plus `shard`, `owner_executor_id`, `owner_address`,
//!   `epoch`): another executor owns the shard, per the manager's `GET /v1/routing?key=K`; or the
//!   caller routed the key under an older `generation=` (PROTOCOL P20.3), and the body names
//!   the key's shard and owner now, with the `generation` and `shard_count` they are of.
//! - `503 sharding_not_ready`: self-fenced (P3.6), or the shard is between owners; retry.
//! - `503 unavailable`: the owner could not be looked up.

use axum::extract::rejection::QueryRejection;
use axum::extract::{Query, State};
use axum::response::{IntoResponse, Response};
use axum::routing::get;
use axum::{Json, Router};
use leasehold_api::openapi::{document_problems, ProblemCodes};
use leasehold_api::problem::ErrorCode;
use leasehold_api::wire::ShardEpoch;
use leasehold_executor::owner::{
    misdirected, routed_under_an_older_generation, routed_under_an_older_layout, OwnerOf,
};
use leasehold_executor::server::HttpError;
use leasehold_executor::{AdmitError, ExecutorHandle};
use serde::Deserialize;
use tracing::warn;
use utoipa::OpenApi;

/// `?key=K[&generation=G]`.
#[derive(Debug, Deserialize, utoipa::IntoParams)]
#[into_params(parameter_in = Query)]
#[serde(deny_unknown_fields)]
pub(crate) struct WorkQuery {
    /// The work's routing key (its UTF-8 bytes are hashed, `shard_for_key`).
    #[param(max_length = 1024)]
    key: String,
    /// The namespace generation the caller routed the key under (PROTOCOL P20.3): work routed
    /// under an older one is answered `421` naming the key's shard and owner now.
    #[serde(default)]
    generation: Option<u64>,
}

/// The demo route, to merge into the executor's listener
/// ([`leasehold_executor::Executor::start_with_documented_routes`], with [`document`]).
pub(crate) fn router(handle: ExecutorHandle) -> Router {
    Router::new()
        .route("/v1/work", get(work))
        .with_state(handle)
}

#[derive(OpenApi)]
#[openapi(
    paths(work),
    tags((name = "workload", description = "The binary's demo workload.")),
)]
struct WorkloadApi;

/// The OpenAPI paths of [`router`]. A malformed or missing `?key=` is answered `400
/// invalid_request`; the listener's own problem responses are added when the executor's
/// document takes these paths in (`leasehold_executor::openapi::document_with`).
pub(crate) fn document() -> utoipa::openapi::OpenApi {
    let mut doc = WorkloadApi::openapi();
    document_problems(
        &mut doc,
        ProblemCodes {
            everywhere: &[ErrorCode::InvalidRequest],
            with_body: &[],
            by_path: &[],
        },
    );
    doc
}

/// Admits the key's work here if this executor holds its shard (the binary's demo workload).
#[utoipa::path(
    get, path = "/v1/work", tag = "workload", operation_id = "work", params(WorkQuery),
    responses(
        (status = 200, description = "Admitted: the shard and the epoch that fences the work.", body = ShardEpoch),
        (status = 421, description = "`conflict`: another executor owns the key's shard, or the key was routed under an older `generation` (P20.3); the body names the shard and its owner now (`shard`, `owner_executor_id`, `owner_address`, `epoch`, and after a reshard `generation`, `shard_count`)."),
        (status = 503, description = "`sharding_not_ready`: fenced or between owners, retry; `unavailable`: the owner could not be looked up."),
    ),
)]
pub(crate) async fn work(
    State(handle): State<ExecutorHandle>,
    query: Result<Query<WorkQuery>, QueryRejection>,
) -> Result<Json<ShardEpoch>, Response> {
    let Query(WorkQuery { key, generation }) =
        query.map_err(|rejection| HttpError::invalid(rejection.body_text()).into_response())?;
    leasehold_api::check_key_length(&key)
        .map_err(|detail| HttpError::invalid(detail).into_response())?;
    if routed_under_an_older_generation(&handle, generation) {
        return Err(routed_under_an_older_layout(&handle, OwnerOf::Key(&key)).await);
    }
    match handle.admit_key(key.as_bytes()) {
        Ok(permit) => {
            // One unit per admitted request: the binary reports its request rate (P15.1). The
            // shard was just admitted, so it is in range; a refusal would be a bug worth a line.
            if let Err(error) = handle.load_meter().record(permit.shard, 1.0) {
                warn!(%error, shard = permit.shard, "the admitted request was not metered");
            }
            Ok(Json(ShardEpoch {
                shard: permit.shard,
                epoch: permit.epoch,
            }))
        }
        Err(AdmitError::NotReady) => Err(HttpError::new(
            ErrorCode::ShardingNotReady,
            "this executor is not admitting work right now (lease lapsed, not registered, or stopping)",
        )
        .into_response()),
        Err(AdmitError::NotOwner) => Err(misdirected(&handle, OwnerOf::Key(&key)).await),
    }
}
