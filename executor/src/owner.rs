//! The `421` that names a shard's owner (RFC 9457 problem with extension members), for routes
//! that admit work only for held shards: the binary's demo workload and the sidecar's
//! `GET /v1/local/admit` (PROTOCOL P16.1).
//!
//! - `421` (problem+json, code `conflict`, plus `shard`, `owner_executor_id`, `owner_address`,
//!   `epoch`, and once the namespace resharded `generation` and `shard_count`): another executor
//!   owns the shard, per the managers' routing table; or the request was routed under an older
//!   generation (PROTOCOL P20.3), and the body names the key's shard and owner now, whoever it
//!   is.
//! - `503 sharding_not_ready`: the shard is between owners (or on its way here); retry.
//! - `503 unavailable`: the owner could not be looked up.

use axum::http::header::CONTENT_TYPE;
use axum::http::{HeaderValue, StatusCode};
use axum::response::{IntoResponse, Response};
use leasehold_api::problem::{ErrorCode, Problem, PROBLEM_CONTENT_TYPE};
use leasehold_api::wire::Route;
use serde::Serialize;
use tracing::debug;

use crate::handle::ExecutorHandle;
use crate::server::HttpError;

/// Whose owner to look up.
#[derive(Debug, Clone, Copy)]
pub enum OwnerOf<'a> {
    /// A routing key's shard (`GET /v1/routing?key=K`).
    Key(&'a str),
    /// A shard by number (the routing table).
    Shard(u32),
}

/// The 421 body: a problem document with the owner as extension members (RFC 9457 §3.2).
#[derive(Debug, Serialize)]
struct Misdirected {
    #[serde(flatten)]
    problem: Problem,
    shard: u32,
    owner_executor_id: String,
    owner_address: String,
    epoch: u64,
    /// The layout the shard is of (§20); both absent until the namespace reshards.
    #[serde(skip_serializing_if = "leasehold_api::wire::is_first_generation")]
    generation: u64,
    #[serde(skip_serializing_if = "Option::is_none")]
    shard_count: Option<u32>,
}

impl IntoResponse for Misdirected {
    fn into_response(self) -> Response {
        let body = serde_json::to_vec(&self).unwrap_or_default();
        let mut response = (StatusCode::MISDIRECTED_REQUEST, body).into_response();
        response
            .headers_mut()
            .insert(CONTENT_TYPE, HeaderValue::from_static(PROBLEM_CONTENT_TYPE));
        response
    }
}

/// The route the managers give for `of`, with the layout it is of: its generation and shard
/// count.
async fn route_of(
    handle: &ExecutorHandle,
    of: OwnerOf<'_>,
) -> Result<Option<(Route, u64, u32)>, String> {
    match of {
        OwnerOf::Key(key) => handle
            .route_for_key(key)
            .await
            .map(|route| {
                let shard_count = route.shard_count.unwrap_or(0);
                Some((route.route, route.generation, shard_count))
            })
            .map_err(|error| error.to_string()),
        OwnerOf::Shard(shard) => handle
            .manager_client()
            .routing(false)
            .await
            .map(|table| {
                let (generation, shard_count) = (table.generation, table.shard_count);
                table
                    .routes
                    .into_iter()
                    .find(|route| route.shard == shard)
                    .map(|route| (route, generation, shard_count))
            })
            .map_err(|error| error.to_string()),
    }
}

/// Whether work routed under `routed_generation` was routed under an older layout than this
/// executor's (PROTOCOL P20.3): its shard number may name other keys now.
pub fn routed_under_an_older_generation(
    handle: &ExecutorHandle,
    routed_generation: Option<u64>,
) -> bool {
    routed_generation.is_some_and(|routed| routed < handle.assignment().borrow().generation)
}

/// Looks up the owner of `of` and answers 421 naming it, or 503 when there is none to name.
pub async fn misdirected(handle: &ExecutorHandle, of: OwnerOf<'_>) -> Response {
    answer_with_owner(handle, of, false).await
}

/// Answers work routed under an older generation (PROTOCOL P20.3): 421 naming the key's shard
/// and its owner now, this executor included, so the caller routes under the new layout; 503
/// when there is none to name.
pub async fn routed_under_an_older_layout(handle: &ExecutorHandle, of: OwnerOf<'_>) -> Response {
    answer_with_owner(handle, of, true).await
}

/// 421 naming the owner of `of` (when it is another executor, or whoever it is with
/// `even_this_one`), or 503 when there is none to name.
async fn answer_with_owner(
    handle: &ExecutorHandle,
    of: OwnerOf<'_>,
    even_this_one: bool,
) -> Response {
    let (route, generation, shard_count) = match route_of(handle, of).await {
        Ok(Some(route)) => route,
        Ok(None) => {
            return HttpError::new(
                ErrorCode::ShardingNotReady,
                "the shard has no route right now; retry shortly",
            )
            .into_response()
        }
        Err(error) => {
            debug!(%error, "routing lookup failed");
            return HttpError::new(
                ErrorCode::Unavailable,
                "this executor does not hold the shard and cannot look up its owner now",
            )
            .into_response();
        }
    };
    let own_id = handle.health().map(|health| health.executor_id);
    match (route.executor_id, route.address) {
        (Some(owner), Some(address)) if even_this_one || Some(&owner) != own_id.as_ref() => {
            let layout = if generation > 0 {
                format!(" (generation {generation}, {shard_count} shards)")
            } else {
                String::new()
            };
            let mut problem = Problem::new(
                ErrorCode::Conflict,
                format!(
                    "shard {}{layout} is owned by executor {owner} at {address}",
                    route.shard
                ),
            );
            problem.status = StatusCode::MISDIRECTED_REQUEST.as_u16();
            Misdirected {
                problem,
                shard: route.shard,
                owner_executor_id: owner,
                owner_address: address,
                epoch: route.epoch,
                generation,
                shard_count: (generation > 0).then_some(shard_count),
            }
            .into_response()
        }
        // Unowned, between owners, or on its way here (a push still in flight): retry shortly.
        _ => HttpError::new(
            ErrorCode::ShardingNotReady,
            format!(
                "shard {} has no admitting owner right now; retry shortly",
                route.shard
            ),
        )
        .into_response(),
    }
}
