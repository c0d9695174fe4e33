//! The executor's one [`Router`]: every route the library serves, the routes an embedder merges
//! in, and the plumbing around all of them (the same as the manager's, from
//! `leasehold_api::http`). The handlers are in [`crate::server`] and [`crate::openapi`].

use std::sync::Arc;

use axum::extract::DefaultBodyLimit;
use axum::middleware;
use axum::routing::{get, post, put};
use axum::Router;
use leasehold_api::http::{limit_body, BodyLimit};
use tower_http::catch_panic::CatchPanicLayer;

use crate::openapi::{self, RenderedDocument};
use crate::server::{self, MAX_BODY_BYTES, REQUEST_TIMEOUT};
use crate::shared::Shared;

/// The whole app: the executor's routes (those [`openapi::document`] lists, with `document`
/// served at `GET /v1/openapi.json`), `extra` routes, problem+json fallbacks, body limit,
/// request timeout, panic catcher and the request-id span.
pub(crate) fn app(
    shared: Arc<Shared>,
    document: &utoipa::openapi::OpenApi,
    extra: Router,
) -> Router {
    Router::new()
        .route("/v1/assignment", put(server::put_assignment))
        .route("/v1/revoke", post(server::post_revoke))
        .route("/v1/health", get(server::health))
        .route("/v1/status", get(server::status))
        .with_state(shared)
        .route(
            "/v1/openapi.json",
            get(openapi::get_openapi).with_state(RenderedDocument::new(document)),
        )
        .merge(extra)
        .route_layer(middleware::from_fn_with_state(
            REQUEST_TIMEOUT,
            leasehold_api::http::request_timeout,
        ))
        .fallback(leasehold_api::http::not_found)
        .method_not_allowed_fallback(leasehold_api::http::method_not_allowed)
        // `limit_body` enforces MAX_BODY_BYTES, above axum's own default limit.
        .layer(DefaultBodyLimit::disable())
        .layer(middleware::from_fn_with_state(
            BodyLimit {
                max_bytes: MAX_BODY_BYTES,
            },
            limit_body,
        ))
        .layer(CatchPanicLayer::custom(leasehold_api::http::panic_response))
        .layer(middleware::from_fn(leasehold_api::http::request_id))
}
