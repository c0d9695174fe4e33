//! Raft RPC endpoints. Bodies are raft-store envelopes (bincode); a reply carries the whole
//! `Result` so openraft's own errors travel back typed. The sender's storage identity is checked
//! before the message reaches Raft.

use axum::body::Bytes;
use axum::extract::State;
use axum::http::header::CONTENT_TYPE;
use axum::http::{HeaderMap, HeaderValue, StatusCode};
use axum::response::{IntoResponse, Response};
use axum::Json;
use leasehold_raft_store::codec;
use serde::de::DeserializeOwned;
use serde::Serialize;

use super::{AppState, HttpError};
use crate::lease::schema::{NEWEST_SCHEMA, OLDEST_SCHEMA};
use crate::raft::failover::LogTip;
use crate::raft::identity::{
    IdentityReport, NODE_ID_HEADER, STORAGE_ID_HEADER, TARGET_NODE_ID_HEADER,
};
use crate::raft::network::RAFT_CONTENT_TYPE;
use crate::raft::versions::decode_append;
use crate::raft::TypeConfig;
use leasehold_api::wire::SchemaRange;
use openraft::raft::{AppendEntriesResponse, InstallSnapshotRequest};
use openraft::ServerState;

fn with_identity(node: &AppState, mut response: Response) -> Response {
    if let Ok(value) = HeaderValue::from_str(node.identity.storage_id()) {
        response.headers_mut().insert(STORAGE_ID_HEADER, value);
    }
    response
        .headers_mut()
        .insert(NODE_ID_HEADER, HeaderValue::from(node.leadership.id));
    response
}

/// Decodes the request after checking who sent it.
fn accept<T: DeserializeOwned>(
    node: &AppState,
    headers: &HeaderMap,
    body: &[u8],
) -> Result<T, HttpError> {
    check_sender(node, headers)?;
    codec::decode("raft request", body).map_err(|e| HttpError::invalid(e.to_string()))
}

/// Refuses a message not meant for this node or from a peer whose storage id is not the pinned one.
fn check_sender(node: &AppState, headers: &HeaderMap) -> Result<(), HttpError> {
    let header = |name: &str| headers.get(name).and_then(|v| v.to_str().ok());
    let sender: u64 = header(NODE_ID_HEADER)
        .and_then(|v| v.parse().ok())
        .ok_or_else(|| HttpError::invalid(format!("missing or malformed {NODE_ID_HEADER}")))?;
    let storage_id = header(STORAGE_ID_HEADER)
        .ok_or_else(|| HttpError::invalid(format!("missing {STORAGE_ID_HEADER}")))?;
    let target = header(TARGET_NODE_ID_HEADER).and_then(|v| v.parse::<u64>().ok());
    if sender == node.leadership.id || target.is_some_and(|target| target != node.leadership.id) {
        // Misrouted: sent by this node to itself, or meant for another node.
        tracing::error!(
            sender,
            ?target,
            "refusing raft message meant for another node"
        );
        return Err(HttpError::conflict(format!(
            "this is node {}; the message from node {sender} was meant for node {target:?}",
            node.leadership.id
        )));
    }
    node.identity
        .verify_peer(sender, storage_id)
        .map_err(|error| {
            error.log_ids();
            HttpError::conflict(error.to_string())
        })
}

fn reply<T: Serialize>(node: &AppState, result: &T) -> Response {
    let response = match codec::encode("raft reply", result) {
        Ok(bytes) => (StatusCode::OK, [(CONTENT_TYPE, RAFT_CONTENT_TYPE)], bytes).into_response(),
        Err(error) => HttpError::internal("encoding raft reply", error).into_response(),
    };
    with_identity(node, response)
}

pub async fn append(State(node): State<AppState>, headers: HeaderMap, body: Bytes) -> Response {
    let request = check_sender(&node, &headers).and_then(|()| {
        // Entries of any schema this build reads; a newer one is refused with both named.
        decode_append(&body).map_err(|e| HttpError::invalid(e.to_string()))
    });
    match request {
        Ok(request) => {
            let result = node.leadership.raft.append_entries(request).await;
            if matches!(&result, Ok(response) if !matches!(response, AppendEntriesResponse::HigherVote(_)))
            {
                // Raft accepted the sender as its leader (and renewed its lease).
                node.leader_contact.heard();
            }
            reply(&node, &result)
        }
        Err(error) => with_identity(&node, error.into_response()),
    }
}

pub async fn vote(State(node): State<AppState>, headers: HeaderMap, body: Bytes) -> Response {
    match accept(&node, &headers, &body) {
        Ok(request) => reply(&node, &node.leadership.raft.vote(request).await),
        Err(error) => with_identity(&node, error.into_response()),
    }
}

pub async fn snapshot(State(node): State<AppState>, headers: HeaderMap, body: Bytes) -> Response {
    match accept::<InstallSnapshotRequest<TypeConfig>>(&node, &headers, &body) {
        Ok(request) => {
            let sender = request.vote;
            let result = node.leadership.raft.install_snapshot(request).await;
            if matches!(&result, Ok(response) if response.vote == sender) {
                // A snapshot stream stands in for heartbeats; Raft renewed the sender's lease.
                node.leader_contact.heard();
            }
            reply(&node, &result)
        }
        Err(error) => with_identity(&node, error.into_response()),
    }
}

/// Who this node is and which peers it has pinned; asked by a node starting on a fresh data
/// directory before it takes part in Raft.
pub async fn identity(State(node): State<AppState>) -> Json<IdentityReport> {
    let initialized = crate::bootstrap::is_initialized(&node);
    let following = {
        let metrics = node.leadership.raft.metrics();
        let metrics = metrics.borrow();
        metrics.state == ServerState::Follower
            && metrics
                .current_leader
                .is_some_and(|leader| leader != node.leadership.id)
    };
    Json(IdentityReport {
        node_id: node.leadership.id,
        storage_id: node.identity.storage_id().to_string(),
        initialized,
        pins: node.identity.pins(),
        release: Some(leasehold_api::RELEASE.to_owned()),
        schemas: Some(SchemaRange {
            oldest: OLDEST_SCHEMA,
            newest: NEWEST_SCHEMA,
        }),
        last_log: node
            .leadership
            .raft
            .data_metrics()
            .borrow()
            .last_log
            .map(LogTip::from),
        lease_silence_ms: following.then(|| {
            let silence = node.leader_contact.since(tokio::time::Instant::now());
            u64::try_from(silence.as_millis()).unwrap_or(u64::MAX)
        }),
    })
}
