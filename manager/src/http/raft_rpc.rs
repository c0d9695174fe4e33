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

use super::HttpError;
use crate::handles::leadership::Leadership;
use crate::lease::schema::{NEWEST_SCHEMA, OLDEST_SCHEMA};
use crate::raft::failover::LeaderContact;
use crate::raft::failover::LogTip;
use crate::raft::identity::Identity;
use crate::raft::identity::{
    IdentityReport, NODE_ID_HEADER, STORAGE_ID_HEADER, TARGET_NODE_ID_HEADER,
};
use crate::raft::network::RAFT_CONTENT_TYPE;
use crate::raft::versions::decode_append;
use crate::raft::TypeConfig;
use leasehold_api::wire::SchemaRange;
use openraft::raft::{AppendEntriesResponse, InstallSnapshotRequest};
use openraft::ServerState;
use std::sync::Arc;

/// What the Raft RPC routes use: the Raft handle, this node's storage identity and the record of
/// when a leader was last heard.
#[derive(Clone)]
pub struct RaftEndpoint {
    pub leadership: Leadership,
    pub identity: Arc<Identity>,
    pub leader_contact: Arc<LeaderContact>,
}

fn with_identity(endpoint: &RaftEndpoint, mut response: Response) -> Response {
    if let Ok(value) = HeaderValue::from_str(endpoint.identity.storage_id()) {
        response.headers_mut().insert(STORAGE_ID_HEADER, value);
    }
    response
        .headers_mut()
        .insert(NODE_ID_HEADER, HeaderValue::from(endpoint.leadership.id));
    response
}

/// Decodes the request after checking who sent it.
fn accept<T: DeserializeOwned>(
    endpoint: &RaftEndpoint,
    headers: &HeaderMap,
    body: &[u8],
) -> Result<T, HttpError> {
    check_sender(endpoint, headers)?;
    codec::decode("raft request", body).map_err(|e| HttpError::invalid(e.to_string()))
}

/// Refuses a message not meant for this node or from a peer whose storage id is not the pinned one.
fn check_sender(endpoint: &RaftEndpoint, headers: &HeaderMap) -> Result<(), HttpError> {
    let header = |name: &str| headers.get(name).and_then(|v| v.to_str().ok());
    let sender: u64 = header(NODE_ID_HEADER)
        .and_then(|v| v.parse().ok())
        .ok_or_else(|| HttpError::invalid(format!("missing or malformed {NODE_ID_HEADER}")))?;
    let storage_id = header(STORAGE_ID_HEADER)
        .ok_or_else(|| HttpError::invalid(format!("missing {STORAGE_ID_HEADER}")))?;
    let target = header(TARGET_NODE_ID_HEADER).and_then(|v| v.parse::<u64>().ok());
    if sender == endpoint.leadership.id
        || target.is_some_and(|target| target != endpoint.leadership.id)
    {
        // Misrouted: sent by this node to itself, or meant for another node.
        tracing::error!(
            sender,
            ?target,
            "refusing raft message meant for another node"
        );
        return Err(HttpError::conflict(format!(
            "this is node {}; the message from node {sender} was meant for node {target:?}",
            endpoint.leadership.id
        )));
    }
    endpoint
        .identity
        .verify_peer(sender, storage_id)
        .map_err(|error| {
            error.log_ids();
            HttpError::conflict(error.to_string())
        })
}

fn reply<T: Serialize>(endpoint: &RaftEndpoint, result: &T) -> Response {
    let response = match codec::encode("raft reply", result) {
        Ok(bytes) => (StatusCode::OK, [(CONTENT_TYPE, RAFT_CONTENT_TYPE)], bytes).into_response(),
        Err(error) => HttpError::internal("encoding raft reply", error).into_response(),
    };
    with_identity(endpoint, response)
}

pub async fn append(
    State(endpoint): State<RaftEndpoint>,
    headers: HeaderMap,
    body: Bytes,
) -> Response {
    let request = check_sender(&endpoint, &headers).and_then(|()| {
        // Entries of any schema this build reads; a newer one is refused with both named.
        decode_append(&body).map_err(|e| HttpError::invalid(e.to_string()))
    });
    match request {
        Ok(request) => {
            let result = endpoint.leadership.raft.append_entries(request).await;
            if matches!(&result, Ok(response) if !matches!(response, AppendEntriesResponse::HigherVote(_)))
            {
                // Raft accepted the sender as its leader (and renewed its lease).
                endpoint.leader_contact.heard();
            }
            reply(&endpoint, &result)
        }
        Err(error) => with_identity(&endpoint, error.into_response()),
    }
}

pub async fn vote(
    State(endpoint): State<RaftEndpoint>,
    headers: HeaderMap,
    body: Bytes,
) -> Response {
    match accept(&endpoint, &headers, &body) {
        Ok(request) => reply(&endpoint, &endpoint.leadership.raft.vote(request).await),
        Err(error) => with_identity(&endpoint, error.into_response()),
    }
}

pub async fn snapshot(
    State(endpoint): State<RaftEndpoint>,
    headers: HeaderMap,
    body: Bytes,
) -> Response {
    match accept::<InstallSnapshotRequest<TypeConfig>>(&endpoint, &headers, &body) {
        Ok(request) => {
            let sender = request.vote;
            let result = endpoint.leadership.raft.install_snapshot(request).await;
            if matches!(&result, Ok(response) if response.vote == sender) {
                // A snapshot stream stands in for heartbeats; Raft renewed the sender's lease.
                endpoint.leader_contact.heard();
            }
            reply(&endpoint, &result)
        }
        Err(error) => with_identity(&endpoint, error.into_response()),
    }
}

/// Who this node is and which peers it has pinned; asked by a node starting on a fresh data
/// directory before it takes part in Raft.
pub async fn identity(State(endpoint): State<RaftEndpoint>) -> Json<IdentityReport> {
    let initialized = crate::service::bootstrap::is_initialized(&endpoint.leadership);
    let following = {
        let metrics = endpoint.leadership.raft.metrics();
        let metrics = metrics.borrow();
        metrics.state == ServerState::Follower
            && metrics
                .current_leader
                .is_some_and(|leader| leader != endpoint.leadership.id)
    };
    Json(IdentityReport {
        node_id: endpoint.leadership.id,
        storage_id: endpoint.identity.storage_id().to_string(),
        initialized,
        pins: endpoint.identity.pins(),
        release: Some(leasehold_api::RELEASE.to_owned()),
        schemas: Some(SchemaRange {
            oldest: OLDEST_SCHEMA,
            newest: NEWEST_SCHEMA,
        }),
        last_log: endpoint
            .leadership
            .raft
            .data_metrics()
            .borrow()
            .last_log
            .map(LogTip::from),
        lease_silence_ms: following.then(|| {
            let silence = endpoint.leader_contact.since(tokio::time::Instant::now());
            u64::try_from(silence.as_millis()).unwrap_or(u64::MAX)
        }),
    })
}
