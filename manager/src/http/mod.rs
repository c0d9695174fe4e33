//! The manager's HTTP server: public API under `/v1`, Raft RPC under `/raft`, health and metrics,
//! and the read-only web console under `/ui/`.
//!
//! Routing of requests (PROTOCOL §9): writes are served by the leader; a write that reaches a
//! follower is forwarded to the leader in one hop and answered as the leader answered; reads are
//! local unless `?consistent=true`. Every reply names the leader in `X-Leasehold-Leader`.

mod admission;
mod authorize;
mod backup;
mod cluster;
mod credentials;
mod drain;
mod error;
mod executors;
mod health;
mod heavy_reads;
mod inspect;
mod namespaces;
pub mod openapi;
mod operator;
mod params;
mod plan;
mod raft_rpc;
mod refusals;
pub mod registration_limit;
mod removal;
mod safe_to_stop;
mod ui;
pub mod vouch;
mod watch;

use std::sync::Arc;
use std::time::Duration;

use axum::body::Body;
use axum::extract::{DefaultBodyLimit, Request, State};
use axum::http::{HeaderName, HeaderValue};
use axum::middleware::{self, Next};
use axum::response::{IntoResponse, Response};
use axum::routing::{get, post};
use axum::Router;
use leasehold_api::http::{limit_body, request_timeout, BodyLimit};
use leasehold_api::origin::HostPolicy;
use leasehold_api::problem::{ErrorCode, CLUSTER_VERSION_HEADER, LEADER_HEADER, REQUEST_ID_HEADER};
use leasehold_api::wire::MAX_RENEW_BODY_BYTES;
use watch::WatchHub;

use self::admission::ExecutorWrite;
use tower_http::catch_panic::CatchPanicLayer;

pub use error::HttpError;
pub use leasehold_api::http::{ApiJson, ApiQuery};

use crate::leadership::{Leader, ReadBarrierError};
use crate::node::ManagerNode;

/// Marks a request forwarded by a follower, so it is never forwarded twice.
pub const FORWARDED_HEADER: &str = "x-leasehold-forwarded-by";
/// On a request forwarded under TLS: the role (its certificate URI) of the caller the follower
/// authorized. The leader believes it only from the manager `FORWARDED_HEADER` names, proved by
/// that manager's certificate (P13.3, `authorize::effective_role`).
pub const FORWARDED_ROLE_HEADER: &str = "x-leasehold-forwarded-role";
/// Beside `FORWARDED_ROLE_HEADER`: the subject of the caller's certificate, for the audit log
/// (P17.4), believed under the same rule.
pub const FORWARDED_SUBJECT_HEADER: &str = "x-leasehold-forwarded-subject";
/// Beside `FORWARDED_ROLE_HEADER`: the namespaces the caller's certificate is limited to,
/// comma-separated (P18.2), absent for an unlimited one; believed under the same rule.
pub const FORWARDED_SCOPE_HEADER: &str = "x-leasehold-forwarded-scope";
/// Largest public API request body, but for the routes that list shards.
pub const MAX_API_BODY_BYTES: usize = 1 << 20;
/// Largest Raft RPC body: an append batch or one snapshot chunk, with room to spare.
pub const MAX_RAFT_BODY_BYTES: usize = 64 << 20;
/// Bound on one forwarded request, including the leader's commit.
const FORWARD_TIMEOUT: Duration = Duration::from_secs(10);
/// Bound on one executor-facing or inspection request, above the forward bound so a follower
/// answers a slow forward itself (`504 timeout`, outcome unknown) rather than being cut off.
pub const REQUEST_TIMEOUT: Duration = Duration::from_secs(15);
/// Bound on an administrative request: adding a member waits for it to catch up, a snapshot for
/// it to be built (each itself bounded below this).
pub const ADMIN_REQUEST_TIMEOUT: Duration = Duration::from_secs(150);

pub type AppState = Arc<ManagerNode>;

/// The manager's router. `host_policy` says which `Host` its listener answers (P13.6,
/// `leasehold_api::origin`); `registration` bounds registrations (P13.6, P15.1,
/// `registration_limit`).
pub fn router(
    node: AppState,
    host_policy: HostPolicy,
    registration: registration_limit::RegistrationSettings,
) -> Router {
    let public = register_route(&node, registration)
        .merge(leader_routes(&node))
        .merge(read_routes(&node))
        .merge(local_routes())
        .merge(ui::router())
        .route_layer(middleware::from_fn_with_state(
            BodyLimit {
                max_bytes: MAX_API_BODY_BYTES,
            },
            limit_body,
        ))
        .merge(executor_write_routes(&node));
    public
        .merge(raft_routes())
        .fallback(leasehold_api::http::not_found)
        .method_not_allowed_fallback(leasehold_api::http::method_not_allowed)
        // Outside every route's own layers: who may call what is decided before a body is read
        // or a request forwarded (P13.3).
        .layer(middleware::from_fn_with_state(
            node.clone(),
            authorize::authorize,
        ))
        .layer(middleware::from_fn_with_state(
            node.clone(),
            name_the_leader,
        ))
        // Before the role: a page in the operator's browser is refused whatever it holds.
        .layer(middleware::from_fn_with_state(
            host_policy,
            leasehold_api::origin::check_host_and_origin,
        ))
        .layer(CatchPanicLayer::custom(leasehold_api::http::panic_response))
        .layer(middleware::from_fn(leasehold_api::http::request_id))
        .with_state(node)
}

/// The router of `--health-listen`: `/livez` and `/readyz` and nothing else, in plaintext, for
/// probes that present no client certificate (Kubernetes' kubelet) when the API listener requires
/// one (P13.2). They tell whether this replica lives and can serve, nothing more (no detail, not
/// even with `?verbose`: that stays behind TLS); every other path is `404`.
pub fn health_router(node: AppState) -> Router {
    let health = Router::new()
        .route("/livez", get(health::bare_livez))
        .route("/readyz", get(health::bare_readyz));
    bounded(health, REQUEST_TIMEOUT)
        .fallback(leasehold_api::http::not_found)
        .method_not_allowed_fallback(leasehold_api::http::method_not_allowed)
        .layer(CatchPanicLayer::custom(leasehold_api::http::panic_response))
        .layer(middleware::from_fn(leasehold_api::http::request_id))
        .with_state(node)
}

/// `routes`, each request bounded by `limit`.
fn bounded(routes: Router<AppState>, limit: Duration) -> Router<AppState> {
    routes.route_layer(middleware::from_fn_with_state(limit, request_timeout))
}

/// `routes`, answered by the leader: a follower forwards them.
fn on_the_leader(node: &AppState, routes: Router<AppState>) -> Router<AppState> {
    routes.route_layer(middleware::from_fn_with_state(
        node.clone(),
        route_to_leader,
    ))
}

/// An executor's own writes are admitted (credential, known id) before their body is read or
/// forwarded; renewal claims and loads and releases list shards, and one executor may hold
/// every shard, so their bound comes from the cluster's shard count, not the other bodies'.
/// A drain is an executor's own write too (P17.2), or an operator's.
fn executor_write_routes(node: &AppState) -> Router<AppState> {
    let executor_write = |path, handler, write| {
        bounded(
            on_the_leader(node, Router::new().route(path, handler)),
            REQUEST_TIMEOUT,
        )
        .route_layer(DefaultBodyLimit::disable())
        .route_layer(middleware::from_fn_with_state(
            (node.clone(), write),
            admission::admit_executor_write,
        ))
    };
    executor_write(
        "/v1/executors/{executor_id}/renew",
        post(executors::renew),
        ExecutorWrite::Renew,
    )
    .merge(executor_write(
        "/v1/executors/{executor_id}/release",
        post(executors::release),
        ExecutorWrite::Release,
    ))
    .merge(executor_write(
        "/v1/executors/{executor_id}",
        axum::routing::delete(executors::deregister),
        ExecutorWrite::Deregister,
    ))
    .merge(executor_write(
        "/v1/executors/{executor_id}/drain",
        post(drain::drain),
        ExecutorWrite::Drain,
    ))
}

/// A registration is limited per caller where it arrives, before its body is read or it is
/// forwarded; its capacity is checked by the handler, on the leader (P13.6, P15.1).
fn register_route(
    node: &AppState,
    registration: registration_limit::RegistrationSettings,
) -> Router<AppState> {
    bounded(
        on_the_leader(
            node,
            Router::new().route("/v1/executors", post(executors::register)),
        ),
        REQUEST_TIMEOUT,
    )
    .route_layer(axum::Extension(registration))
    .route_layer(middleware::from_fn_with_state(
        registration_limit::RegistrationGate::new(registration.limits),
        registration_limit::limit_registrations,
    ))
}

/// Writes and administration only the leader performs.
fn leader_routes(node: &AppState) -> Router<AppState> {
    let writes = Router::new()
        .route(
            "/v1/executors/{executor_id}/drain",
            axum::routing::delete(drain::undrain),
        )
        // P17.4: the operator controls.
        .route(
            "/v1/cluster/maintenance",
            axum::routing::put(operator::set_maintenance),
        )
        .route("/v1/shards/{shard}/move", post(operator::move_shard))
        .route(
            "/v1/shards/{shard}/pin",
            axum::routing::put(operator::pin).delete(operator::unpin),
        )
        // P18.1: namespaces are created, changed and deleted by operator actions.
        .route("/v1/namespaces", post(namespaces::create))
        .route(
            "/v1/namespaces/{name}",
            axum::routing::patch(namespaces::set).delete(namespaces::delete),
        );
    let admin = Router::new()
        .route("/v1/cluster/nodes", post(cluster::add_node))
        .route(
            "/v1/cluster/nodes/{node_id}",
            axum::routing::delete(cluster::remove_node),
        );
    // P17.4: the leader knows every lease on a clock in office, how far each voter is, and
    // what its planner goes by.
    let operator_reads = Router::new()
        .route("/v1/plan", get(plan::preview))
        .route(
            "/v1/executors/{executor_id}/safe-to-stop",
            get(safe_to_stop::executor),
        )
        .route(
            "/v1/cluster/nodes/{node_id}/safe-to-stop",
            get(safe_to_stop::member),
        );
    bounded(on_the_leader(node, writes), REQUEST_TIMEOUT)
        .merge(bounded(on_the_leader(node, admin), ADMIN_REQUEST_TIMEOUT))
        .merge(bounded(
            on_the_leader(node, operator_reads),
            REQUEST_TIMEOUT,
        ))
}

/// Reads of the state: answered here, or by the leader for `?consistent=true`.
fn read_routes(node: &AppState) -> Router<AppState> {
    let reads = Router::new()
        .route("/v1/cluster", get(cluster::info))
        .route("/v1/state", get(inspect::state))
        .route("/v1/executors", get(inspect::executors))
        .route("/v1/executors/{executor_id}", get(inspect::executor))
        .route("/v1/shards", get(inspect::shards))
        .route("/v1/routing", get(inspect::routing))
        .route("/v1/cluster/maintenance", get(operator::maintenance))
        .route("/v1/namespaces", get(namespaces::list))
        .route("/v1/namespaces/{name}", get(namespaces::show))
        .route("/v1/audit", get(operator::audit))
        .route("/v1/backup", get(backup::backup))
        .route_layer(middleware::from_fn_with_state(
            node.clone(),
            consistent_reads,
        ))
        // Outside the read barrier: a heavy read waits for its permit first (P13.6).
        .route_layer(middleware::from_fn_with_state(
            heavy_reads::HeavyReads::default(),
            heavy_reads::bound_heavy_reads,
        ));
    bounded(reads, REQUEST_TIMEOUT)
}

/// What this node answers of itself: health, metrics, the API document, the blocking watch and
/// its own administration.
fn local_routes() -> Router<AppState> {
    let local = Router::new()
        .route("/livez", get(health::livez))
        .route("/readyz", get(health::readyz))
        .route("/metrics", get(health::metrics))
        .route("/v1/openapi.json", get(openapi::serve));
    // A blocking query holds its request for up to its own bounded wait.
    // The watch's bound and shared answer belong to the route, not the node.
    let watch = Router::new()
        .route("/v1/watch", get(watch::watch))
        .route_layer(axum::Extension(Arc::new(WatchHub::default())));
    let admin = Router::new()
        .route("/v1/cluster/init", post(cluster::init))
        .route("/v1/cluster/snapshot", post(cluster::snapshot));
    bounded(local, REQUEST_TIMEOUT)
        .merge(bounded(
            watch,
            leasehold_api::wire::MAX_WATCH_WAIT + REQUEST_TIMEOUT,
        ))
        .merge(bounded(admin, ADMIN_REQUEST_TIMEOUT))
}

/// Raft's RPCs between managers.
fn raft_routes() -> Router<AppState> {
    let raft = Router::new()
        .route("/raft/append", post(raft_rpc::append))
        .route("/raft/vote", post(raft_rpc::vote))
        .route("/raft/snapshot", post(raft_rpc::snapshot))
        .route("/raft/identity", get(raft_rpc::identity))
        .route("/raft/forwarded/{token}", get(vouch::voucher));
    // The body is read inside this bound (P13.6): no sender waits longer for one message.
    bounded(raft, crate::raft::SNAPSHOT_CHUNK_TIMEOUT)
        .layer(DefaultBodyLimit::max(MAX_RAFT_BODY_BYTES))
}

/// Adds `X-Leasehold-Leader` and `X-Leasehold-Cluster-Version` (P14.3) to every reply that does
/// not carry them already (a forwarded reply carries the leader's own).
async fn name_the_leader(State(node): State<AppState>, request: Request, next: Next) -> Response {
    let mut response = next.run(request).await;
    if !response.headers().contains_key(LEADER_HEADER) {
        if let Some(value) = node
            .leadership
            .leader_address()
            .and_then(|a| HeaderValue::from_str(&a).ok())
        {
            response.headers_mut().insert(LEADER_HEADER, value);
        }
    }
    if !response.headers().contains_key(CLUSTER_VERSION_HEADER) {
        let cluster_version = node.state.read(|applied| applied.state.cluster_version());
        response
            .headers_mut()
            .insert(CLUSTER_VERSION_HEADER, HeaderValue::from(cluster_version));
    }
    response
}

/// Serves writes on the leader, forwards them from a follower (one hop), refuses without one.
async fn route_to_leader(State(node): State<AppState>, request: Request, next: Next) -> Response {
    match node.leadership.leader() {
        Leader::Local => next.run(request).await,
        elsewhere => forward_or_refuse(&node, elsewhere, request).await,
    }
}

/// `?consistent=true` reads go through the leader's read index (linearizable); others are local.
async fn consistent_reads(State(node): State<AppState>, request: Request, next: Next) -> Response {
    if !params::consistent_read_requested(request.uri()) {
        return next.run(request).await;
    }
    match node.leadership.leader() {
        Leader::Local => match node.leadership.linearizable_read().await {
            Ok(()) => next.run(request).await,
            Err(error @ ReadBarrierError::NotLeader(_)) => {
                tracing::info!(%error, "linearizable read refused");
                HttpError::not_leader(node.leadership.leader_address()).into_response()
            }
            Err(error @ ReadBarrierError::RestartedLogNotApplied { .. }) => {
                tracing::info!(%error, "linearizable read refused");
                HttpError::new(ErrorCode::Unavailable, error.to_string()).into_response()
            }
        },
        elsewhere => forward_or_refuse(&node, elsewhere, request).await,
    }
}

/// For a request the leader must serve, on a node that is not the leader: forward it once, or
/// refuse it as retryable (a request that was already forwarded is never forwarded again).
async fn forward_or_refuse(node: &ManagerNode, leader: Leader, request: Request) -> Response {
    match leader {
        Leader::Remote { address, .. } if !request.headers().contains_key(FORWARDED_HEADER) => {
            forward(node, &address, request).await
        }
        Leader::Remote { address, .. } => HttpError::not_leader(Some(address)).into_response(),
        Leader::Local | Leader::Unknown => HttpError::no_leader().into_response(),
    }
}

/// Relays `request` to the leader and its reply back unchanged.
async fn forward(node: &ManagerNode, leader_address: &str, request: Request) -> Response {
    let (parts, body) = request.into_parts();
    // The route's own limit has bounded the body already; this is the largest of them.
    let body = match axum::body::to_bytes(body, MAX_RENEW_BODY_BYTES).await {
        Ok(bytes) => bytes,
        Err(_) => {
            return HttpError::new(ErrorCode::PayloadTooLarge, "request body is too large")
                .into_response()
        }
    };
    let path = parts
        .uri
        .path_and_query()
        .map(|p| p.as_str())
        .unwrap_or("/");
    let url = format!("{}{path}", leader_address.trim_end_matches('/'));
    let mut outgoing = node
        .http
        .request(parts.method.clone(), url)
        .timeout(FORWARD_TIMEOUT)
        .header(FORWARDED_HEADER, node.leadership.id.to_string())
        .body(body);
    // The leader decides with the caller's role, not this node's certificate (P13.3), and
    // believes it only once this node vouches for the request (`vouch`): the voucher is held
    // until the leader's reply is in.
    let mut _voucher = None;
    if let Some(voucher) = voucher_of(&parts, path) {
        outgoing = outgoing
            .header(FORWARDED_ROLE_HEADER, voucher.role.as_str())
            .header(FORWARDED_SUBJECT_HEADER, voucher.subject.as_str());
        if let Some(scope) = &voucher.scope {
            outgoing = outgoing.header(FORWARDED_SCOPE_HEADER, scope.as_str());
        }
        match node.vouchers.issue(voucher) {
            Ok(issued) => {
                outgoing = outgoing.header(vouch::FORWARDED_VOUCHER_HEADER, issued.token.as_str());
                _voucher = Some(issued);
            }
            Err(full) => {
                return HttpError::new(ErrorCode::Unavailable, full.to_string()).into_response()
            }
        }
    }
    // The executor's credential travels with its request: the leader checks it (P13.4).
    for name in [
        axum::http::header::CONTENT_TYPE,
        axum::http::header::ACCEPT,
        axum::http::header::AUTHORIZATION,
        HeaderName::from_static(REQUEST_ID_HEADER),
    ] {
        if let Some(value) = parts.headers.get(&name) {
            outgoing = outgoing.header(name, value);
        }
    }
    match outgoing.send().await {
        Ok(reply) => relay(reply).await,
        // Nothing reached the leader: safe to retry.
        Err(error) if error.is_connect() => {
            tracing::info!(%error, leader = leader_address, "leader unreachable for forwarding");
            HttpError::no_leader().into_response()
        }
        // The leader may have applied it: the outcome is unknown.
        Err(error) => HttpError::new(
            ErrorCode::Timeout,
            format!("forwarding to the leader failed: {error}"),
        )
        .into_response(),
    }
}

/// What this node vouches for in a forward: the caller's role, subject and scope as `authorize`
/// found them, for this method and path; `None` when no role was established (plaintext).
fn voucher_of(parts: &axum::http::request::Parts, path: &str) -> Option<vouch::Voucher> {
    let authorize::CallerRole(role) = parts.extensions.get::<authorize::CallerRole>()?;
    Some(vouch::Voucher {
        method: parts.method.to_string(),
        path_and_query: path.to_owned(),
        role: role.san_uri(),
        subject: parts
            .extensions
            .get::<authorize::CallerSubject>()
            .map(|subject| subject.0.clone())
            .unwrap_or_default(),
        scope: parts
            .extensions
            .get::<authorize::CallerScope>()
            .and_then(|scope| scope.0.header_value()),
    })
}

/// The leader's reply, relayed: its status, its end-to-end headers and its body.
async fn relay(reply: reqwest::Response) -> Response {
    let status = reply.status();
    let headers = reply.headers().clone();
    match reply.bytes().await {
        Ok(bytes) => {
            let mut response = Response::new(Body::from(bytes));
            *response.status_mut() = status;
            for (name, value) in headers.iter() {
                if is_end_to_end(name) {
                    response.headers_mut().insert(name.clone(), value.clone());
                }
            }
            response
        }
        Err(error) => HttpError::new(
            ErrorCode::Timeout,
            format!("the leader's reply was lost: {error}"),
        )
        .into_response(),
    }
}

/// Headers that describe the reply itself and may be relayed (RFC 9110 §7.6.1: not hop-by-hop).
fn is_end_to_end(name: &HeaderName) -> bool {
    !matches!(
        name.as_str(),
        "connection"
            | "keep-alive"
            | "transfer-encoding"
            | "te"
            | "trailer"
            | "upgrade"
            | "content-length"
    )
}
