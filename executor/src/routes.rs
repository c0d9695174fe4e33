//! The executor's one [`Router`]: every route the library serves, the routes an embedder merges
//! in, and the plumbing around all of them (the same as the manager's, from
//! `leasehold_api::http`). The handlers are in [`crate::server`] and [`crate::openapi`].

use std::sync::Arc;

use axum::extract::{DefaultBodyLimit, Request, State};
use axum::middleware::{self, Next};
use axum::response::{IntoResponse, Response};
use axum::routing::{get, post, put};
use axum::Router;
use leasehold_api::http::{limit_body, BodyLimit, HttpError};
use leasehold_api::origin::HostPolicy;
use leasehold_api::problem::ErrorCode;
use leasehold_api::serve::PeerRole;
use leasehold_api::tls::Role;
use tower_http::catch_panic::CatchPanicLayer;

use crate::members::{Members, Verdict};
use crate::metrics::count_push_refused_membership;
use crate::openapi::{self, RenderedDocument};
use crate::server::{self, MAX_BODY_BYTES, REQUEST_TIMEOUT};
use crate::shared::Shared;

/// Who may push (P13.3), by listener.
#[derive(Debug, Clone)]
pub(crate) enum PushCheck {
    /// A plaintext listener checks nothing (P13.5).
    Plaintext,
    /// A TLS listener takes pushes only from a manager's certificate whose node id is a member
    /// of the cluster ([`Members`]).
    Tls(Arc<Members>),
}

/// The whole app: the executor's routes (those [`openapi::document`] lists, with `document`
/// served at `GET /v1/openapi.json`), `extra` routes, problem+json fallbacks, body limit,
/// request timeout, panic catcher and the request-id span.
pub(crate) fn app(
    shared: Arc<Shared>,
    document: &utoipa::openapi::OpenApi,
    extra: Router,
    push_check: PushCheck,
    host_policy: HostPolicy,
) -> Router {
    let timeout =
        || middleware::from_fn_with_state(REQUEST_TIMEOUT, leasehold_api::http::request_timeout);
    // `limit_body` enforces MAX_BODY_BYTES, above axum's own default limit.
    let body_limit = || {
        middleware::from_fn_with_state(
            BodyLimit {
                max_bytes: MAX_BODY_BYTES,
            },
            limit_body,
        )
    };
    // P13.3: only managers push. Under TLS the handshake proved a certificate of the cluster's
    // CA; this checks it is a manager's, of a node that is a member of the cluster, before the
    // body is read (the outer layer), so a stranger's body is never buffered.
    let pushes = Router::new()
        .route("/v1/assignment", put(server::put_assignment))
        .route("/v1/revoke", post(server::post_revoke))
        .route("/v1/prepare", post(server::post_prepare))
        .route_layer(timeout())
        .route_layer(body_limit())
        .route_layer(middleware::from_fn_with_state(push_check, managers_only))
        .with_state(shared.clone());
    Router::new()
        .route("/v1/health", get(server::health))
        .route("/v1/status", get(server::status))
        .with_state(shared)
        .route(
            "/v1/openapi.json",
            get(openapi::get_openapi).with_state(RenderedDocument::new(document)),
        )
        .merge(extra)
        .route_layer(timeout())
        .route_layer(body_limit())
        .merge(pushes)
        .fallback(leasehold_api::http::not_found)
        .method_not_allowed_fallback(leasehold_api::http::method_not_allowed)
        .layer(DefaultBodyLimit::disable())
        // A page in the operator's browser changes nothing here (P13.6).
        .layer(middleware::from_fn_with_state(
            host_policy,
            leasehold_api::origin::check_host_and_origin,
        ))
        .layer(CatchPanicLayer::custom(leasehold_api::http::panic_response))
        .layer(middleware::from_fn(leasehold_api::http::request_id))
}

/// Refuses a push whose TLS peer is not a manager (403), is a manager whose node id is not a
/// member of the cluster (403, P13.3), or came without a certificate on a TLS listener (401);
/// one whose membership cannot be checked yet is refused as unavailable (503, retryable).
/// Plaintext listeners check nothing (P13.5).
async fn managers_only(
    State(push_check): State<PushCheck>,
    request: Request,
    next: Next,
) -> Response {
    let PushCheck::Tls(members) = push_check else {
        return next.run(request).await;
    };
    let role = request.extensions().get::<PeerRole>().map(PeerRole::role);
    match role {
        Some(Ok(Role::Manager { node_id })) => match members.check(node_id).await {
            Verdict::Member => next.run(request).await,
            Verdict::NotMember => {
                count_push_refused_membership("not_member");
                tracing::warn!(
                    node_id,
                    "refused a push from a manager certificate of a node that is not a member \
                     of the cluster (P13.3)"
                );
                HttpError::new(
                    ErrorCode::Forbidden,
                    format!(
                        "the certificate is manager {node_id}'s, and node {node_id} is not a \
                         member of the cluster as its managers report it: only members push \
                         assignments and revokes (P13.3)"
                    ),
                )
                .into_response()
            }
            Verdict::Unverified => {
                count_push_refused_membership("unverified");
                HttpError::new(
                    ErrorCode::Unavailable,
                    format!(
                        "cannot learn the cluster's members to check that node {node_id} is one \
                         (P13.3); retry"
                    ),
                )
                .into_response()
            }
        },
        Some(Ok(role)) => HttpError::new(
            ErrorCode::Forbidden,
            format!("only managers push assignments and revokes; the certificate is {role}"),
        )
        .into_response(),
        Some(Err(error)) => HttpError::new(
            ErrorCode::Forbidden,
            format!("the client certificate carries no role: {error}"),
        )
        .into_response(),
        None => HttpError::new(
            ErrorCode::Unauthenticated,
            "a manager's client certificate is required (P13.3)",
        )
        .into_response(),
    }
}
