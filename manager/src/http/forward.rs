//! How a request reaches the node that must serve it (PROTOCOL §9): writes are served by the
//! leader and forwarded in one hop from a follower, with the caller's credential and, under TLS,
//! its role, vouched for by this node (P13.3, `vouch`); `?consistent=true` reads go through the
//! leader's read index; every reply names the leader and the cluster version.

use std::sync::Arc;

use axum::body::Body;
use axum::extract::{Request, State};
use axum::http::{HeaderName, HeaderValue};
use axum::middleware::Next;
use axum::response::{IntoResponse, Response};
use leasehold_api::problem::{ErrorCode, CLUSTER_VERSION_HEADER, LEADER_HEADER, REQUEST_ID_HEADER};
use leasehold_api::wire::MAX_RENEW_BODY_BYTES;

use super::{
    authorize, params, vouch, HttpError, FORWARDED_HEADER, FORWARDED_ROLE_HEADER,
    FORWARDED_SCOPE_HEADER, FORWARDED_SUBJECT_HEADER, FORWARD_TIMEOUT,
};
use crate::handles::leadership::{Leader, Leadership, ReadBarrierError};
use crate::raft::LeaseStateHandle;

/// What forwarding and naming the leader use.
#[derive(Clone)]
pub(super) struct Forwarding {
    pub leadership: Leadership,
    pub state: LeaseStateHandle,
    /// The process's one HTTP client.
    pub http: reqwest::Client,
    /// The forwards in flight, each vouched for until answered.
    pub vouchers: Arc<vouch::Vouchers>,
}

/// Adds `X-Leasehold-Leader` and `X-Leasehold-Cluster-Version` (P14.3) to every reply that does
/// not carry them already (a forwarded reply carries the leader's own).
pub(super) async fn name_the_leader(
    State(forwarding): State<Forwarding>,
    request: Request,
    next: Next,
) -> Response {
    let mut response = next.run(request).await;
    if !response.headers().contains_key(LEADER_HEADER) {
        if let Some(value) = forwarding
            .leadership
            .leader_address()
            .and_then(|a| HeaderValue::from_str(&a).ok())
        {
            response.headers_mut().insert(LEADER_HEADER, value);
        }
    }
    if !response.headers().contains_key(CLUSTER_VERSION_HEADER) {
        let cluster_version = forwarding
            .state
            .read(|applied| applied.state.cluster_version());
        response
            .headers_mut()
            .insert(CLUSTER_VERSION_HEADER, HeaderValue::from(cluster_version));
    }
    response
}

/// Serves writes on the leader, forwards them from a follower (one hop), refuses without one.
pub(super) async fn route_to_leader(
    State(forwarding): State<Forwarding>,
    request: Request,
    next: Next,
) -> Response {
    match forwarding.leadership.leader() {
        Leader::Local => next.run(request).await,
        elsewhere => forward_or_refuse(&forwarding, elsewhere, request).await,
    }
}

/// `?consistent=true` reads go through the leader's read index (linearizable); others are local.
pub(super) async fn consistent_reads(
    State(forwarding): State<Forwarding>,
    request: Request,
    next: Next,
) -> Response {
    if !params::consistent_read_requested(request.uri()) {
        return next.run(request).await;
    }
    match forwarding.leadership.leader() {
        Leader::Local => match forwarding.leadership.linearizable_read().await {
            Ok(()) => next.run(request).await,
            Err(error @ ReadBarrierError::NotLeader(_)) => {
                tracing::info!(%error, "linearizable read refused");
                HttpError::not_leader(forwarding.leadership.leader_address()).into_response()
            }
            Err(error @ ReadBarrierError::RestartedLogNotApplied { .. }) => {
                tracing::info!(%error, "linearizable read refused");
                HttpError::new(ErrorCode::Unavailable, error.to_string()).into_response()
            }
        },
        elsewhere => forward_or_refuse(&forwarding, elsewhere, request).await,
    }
}

/// For a request the leader must serve, on a node that is not the leader: forward it once, or
/// refuse it as retryable (a request that was already forwarded is never forwarded again).
async fn forward_or_refuse(forwarding: &Forwarding, leader: Leader, request: Request) -> Response {
    match leader {
        Leader::Remote { address, .. } if !request.headers().contains_key(FORWARDED_HEADER) => {
            forward(forwarding, &address, request).await
        }
        Leader::Remote { address, .. } => HttpError::not_leader(Some(address)).into_response(),
        Leader::Local | Leader::Unknown => HttpError::no_leader().into_response(),
    }
}

/// Relays `request` to the leader and its reply back unchanged.
async fn forward(forwarding: &Forwarding, leader_address: &str, request: Request) -> Response {
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
    let mut outgoing = forwarding
        .http
        .request(parts.method.clone(), url)
        .timeout(FORWARD_TIMEOUT)
        .header(FORWARDED_HEADER, forwarding.leadership.id.to_string())
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
        match forwarding.vouchers.issue(voucher) {
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
