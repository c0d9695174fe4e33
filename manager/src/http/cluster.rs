//! Cluster inspection and administration: `/v1/cluster`, init, membership, snapshots.

use std::collections::BTreeSet;
use std::time::Duration;

use axum::extract::{Path, Query, State};
use axum::Json;
use leasehold_api::wire::{AddNodeRequest, ClusterInfo};
use openraft::{BasicNode, ChangeMembers};
use serde::Deserialize;

use super::{ApiError, ApiJson, AppState};
use crate::bootstrap::{self, Formation};

/// Bound on waiting for a requested snapshot (and purge) to be done.
const SNAPSHOT_WAIT: Duration = Duration::from_secs(60);

pub async fn info(State(node): State<AppState>) -> Json<ClusterInfo> {
    Json(node.cluster_info().await)
}

pub async fn init(State(node): State<AppState>) -> Result<Json<serde_json::Value>, ApiError> {
    match bootstrap::try_form(&node).await {
        Ok(Formation::Formed) => Ok(Json(
            serde_json::json!({ "initialized": true, "formed_now": true }),
        )),
        Ok(Formation::AlreadyFormed) => Ok(Json(
            serde_json::json!({ "initialized": true, "formed_now": false }),
        )),
        Ok(Formation::Waiting(reason)) => Err(ApiError::conflict(format!(
            "cannot initialise yet: {reason}"
        ))),
        Err(error) => Err(ApiError::conflict(error.to_string())),
    }
}

pub(crate) fn validate_node_address(address: &str) -> Result<(), ApiError> {
    let parsed = reqwest::Url::parse(address)
        .map_err(|e| ApiError::invalid(format!("address {address:?} is not a URL: {e}")))?;
    if !matches!(parsed.scheme(), "http" | "https") || parsed.host_str().is_none() {
        return Err(ApiError::invalid(format!(
            "address {address:?} must be an http(s) URL with a host"
        )));
    }
    Ok(())
}

fn membership_error(error: impl std::fmt::Display) -> ApiError {
    ApiError::conflict(format!("membership change refused: {error}"))
}

/// Adds a learner, waits until it has caught up (by log or snapshot install), then promotes it.
pub async fn add_node(
    State(node): State<AppState>,
    ApiJson(request): ApiJson<AddNodeRequest>,
) -> Result<Json<ClusterInfo>, ApiError> {
    validate_node_address(&request.address)?;
    let metrics = node.metrics_snapshot();
    let membership = metrics.membership_config.membership();
    if membership.voter_ids().any(|id| id == request.node_id) {
        return Err(ApiError::conflict(format!(
            "node {} is already a voter; to replace its data directory remove it first",
            request.node_id
        )));
    }
    tracing::info!(node_id = request.node_id, address = %request.address, "adding learner");
    node.raft
        .add_learner(request.node_id, BasicNode::new(&request.address), true)
        .await
        .map_err(membership_error)?;
    tracing::info!(
        node_id = request.node_id,
        "learner caught up; promoting to voter"
    );
    node.raft
        .change_membership(
            ChangeMembers::AddVoterIds(BTreeSet::from([request.node_id])),
            false,
        )
        .await
        .map_err(membership_error)?;
    Ok(Json(node.cluster_info().await))
}

pub async fn remove_node(
    State(node): State<AppState>,
    Path(node_id): Path<String>,
) -> Result<Json<ClusterInfo>, ApiError> {
    let node_id: u64 = node_id.parse().map_err(|_| {
        ApiError::invalid(format!("node id {node_id:?} is not a non-negative integer"))
    })?;
    let metrics = node.metrics_snapshot();
    let membership = metrics.membership_config.membership();
    let change = if membership.voter_ids().any(|id| id == node_id) {
        ChangeMembers::RemoveVoters(BTreeSet::from([node_id]))
    } else if membership.get_node(&node_id).is_some() {
        ChangeMembers::RemoveNodes(BTreeSet::from([node_id]))
    } else {
        return Err(ApiError::not_found(format!(
            "node {node_id} is not a member"
        )));
    };
    tracing::info!(node_id, "removing node");
    node.raft
        .change_membership(change, false)
        .await
        .map_err(membership_error)?;
    Ok(Json(node.cluster_info().await))
}

#[derive(Debug, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct SnapshotQuery {
    /// Also purge the log up to the snapshot, so a new member must be sent the snapshot.
    #[serde(default)]
    purge: bool,
}

/// Builds a snapshot on this node now (and optionally purges the log behind it).
pub async fn snapshot(
    State(node): State<AppState>,
    Query(query): Query<SnapshotQuery>,
) -> Result<Json<serde_json::Value>, ApiError> {
    let applied = node.metrics_snapshot().last_applied;
    node.raft
        .trigger()
        .snapshot()
        .await
        .map_err(|e| ApiError::internal("triggering a snapshot", e))?;
    let metrics = node
        .raft
        .wait(Some(SNAPSHOT_WAIT))
        .metrics(|m| m.snapshot >= applied, "snapshot covers the applied log")
        .await
        .map_err(|e| ApiError::internal("waiting for the snapshot", e))?;
    let snapshot = metrics.snapshot;
    let mut purged = metrics.purged;
    if query.purge {
        if let Some(upto) = snapshot {
            node.raft
                .trigger()
                .purge_log(upto.index)
                .await
                .map_err(|e| ApiError::internal("purging the log", e))?;
            purged = node
                .raft
                .wait(Some(SNAPSHOT_WAIT))
                .metrics(|m| m.purged >= Some(upto), "log purged up to the snapshot")
                .await
                .map_err(|e| ApiError::internal("waiting for the purge", e))?
                .purged;
        }
    }
    Ok(Json(serde_json::json!({
        "snapshot_index": snapshot.map(|l| l.index),
        "purged_index": purged.map(|l| l.index),
    })))
}
