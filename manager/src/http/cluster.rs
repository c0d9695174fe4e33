//! Cluster inspection and administration: `/v1/cluster`, init, membership, snapshots.

use std::collections::BTreeSet;
use std::time::Duration;

use axum::extract::{Path, State};
use axum::Json;
use leasehold_api::wire::{AddNodeRequest, ClusterInfo, InitReply, SnapshotReply};
use openraft::{BasicNode, ChangeMembers};
use serde::Deserialize;

use super::params::{validate_node_address, ReadQuery};
use super::{ApiJson, ApiQuery, AppState, HttpError};
use crate::bootstrap::{self, Formation};
use crate::member_versions::MemberVersion;

/// How long adding a member waits for it to answer its identity probe, and how often it asks.
const ADD_NODE_PROBE_PATIENCE: Duration = Duration::from_secs(15);
const ADD_NODE_PROBE_INTERVAL: Duration = Duration::from_millis(250);

/// Bound on waiting for a requested snapshot (and purge) to be done.
const SNAPSHOT_WAIT: Duration = Duration::from_secs(60);

/// This replica's view of the Raft group.
#[utoipa::path(
    get, path = "/v1/cluster", tag = "cluster", params(ReadQuery),
    responses((status = 200, description = "This node, the leader, term, members, log and snapshot positions.", body = ClusterInfo)),
)]
pub async fn info(
    State(node): State<AppState>,
    ApiQuery(_): ApiQuery<ReadQuery>,
) -> Json<ClusterInfo> {
    Json(node.cluster_info().await)
}

/// Forms the cluster from `--initial-cluster` now (normally automatic; safe to repeat).
#[utoipa::path(
    post, path = "/v1/cluster/init", tag = "cluster",
    responses(
        (status = 200, description = "Formed now or already formed.", body = InitReply),
        (status = 403, description = "`forbidden` (TLS): admin only (P13.3)."),
        (status = 409, description = "`conflict`: not every founding member answers yet, or this node does not found the cluster."),
    ),
)]
pub async fn init(State(node): State<AppState>) -> Result<Json<InitReply>, HttpError> {
    match bootstrap::try_form(&node).await {
        Ok(Formation::Formed) => Ok(Json(InitReply {
            initialized: true,
            formed_now: true,
        })),
        Ok(Formation::AlreadyFormed) => Ok(Json(InitReply {
            initialized: true,
            formed_now: false,
        })),
        Ok(Formation::Waiting(reason)) => Err(HttpError::conflict(format!(
            "cannot initialise yet: {reason}"
        ))),
        Err(error) => Err(HttpError::conflict(error.to_string())),
    }
}

fn membership_error(error: impl std::fmt::Display) -> HttpError {
    HttpError::conflict(format!("membership change refused: {error}"))
}

/// Adds a learner, waits until it has caught up (by log or snapshot install), then promotes it.
#[utoipa::path(
    post, path = "/v1/cluster/nodes", tag = "cluster", request_body = AddNodeRequest,
    responses(
        (status = 200, description = "The member was added and promoted; the group as it is now.", body = ClusterInfo),
        (status = 403, description = "`forbidden` (TLS): admin only (P13.3)."),
        (status = 409, description = "`conflict`: already a voter, or the membership change was refused."),
    ),
)]
pub async fn add_node(
    State(node): State<AppState>,
    ApiJson(request): ApiJson<AddNodeRequest>,
) -> Result<Json<ClusterInfo>, HttpError> {
    validate_node_address(&request.address)?;
    let metrics = node.metrics_snapshot();
    let membership = metrics.membership_config.membership();
    if membership.voter_ids().any(|id| id == request.node_id) {
        return Err(HttpError::conflict(format!(
            "node {} is already a voter; to replace its data directory remove it first",
            request.node_id
        )));
    }
    check_can_apply_cluster_version(&node, &request).await?;
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

/// A member must apply every entry from the committed cluster version on (P14.3), so a manager
/// of an older release is refused before it becomes a learner; one that cannot be asked is too.
async fn check_can_apply_cluster_version(
    node: &AppState,
    request: &AddNodeRequest,
) -> Result<(), HttpError> {
    let cluster_version = node.state.read(|applied| applied.state.cluster_version());
    // The new manager may have been started a moment ago (etcd's flow: start it, then add it).
    let deadline = tokio::time::Instant::now() + ADD_NODE_PROBE_PATIENCE;
    let report = loop {
        match bootstrap::probe_peer(node, &request.address).await {
            Some(report) if report.node_id == request.node_id => break report,
            _ if tokio::time::Instant::now() >= deadline => {
                return Err(HttpError::conflict(format!(
                    "node {} does not answer at {} (GET /raft/identity): start it before adding it",
                    request.node_id, request.address
                )))
            }
            _ => tokio::time::sleep(ADD_NODE_PROBE_INTERVAL).await,
        }
    };
    let version = MemberVersion::of(&report);
    if version.newest_schema < cluster_version {
        return Err(HttpError::conflict(format!(
            "node {} runs Leasehold {}, which applies state schemas up to {}; the cluster version \
             is {cluster_version} (PROTOCOL P14.3): run a release that applies schema \
             {cluster_version} on it",
            request.node_id, version.release, version.newest_schema
        )));
    }
    Ok(())
}

/// Removes a voter or learner from the group.
#[utoipa::path(
    delete, path = "/v1/cluster/nodes/{node_id}", tag = "cluster",
    params(("node_id" = u64, Path, description = "Raft node id of the member to remove.")),
    responses(
        (status = 200, description = "Removed; the group as it is now.", body = ClusterInfo),
        (status = 403, description = "`forbidden` (TLS): admin only (P13.3)."),
        (status = 404, description = "`not_found`: no such member."),
        (status = 409, description = "`conflict`: the membership change was refused."),
    ),
)]
pub async fn remove_node(
    State(node): State<AppState>,
    Path(node_id): Path<String>,
) -> Result<Json<ClusterInfo>, HttpError> {
    let node_id: u64 = node_id.parse().map_err(|_| {
        HttpError::invalid(format!("node id {node_id:?} is not a non-negative integer"))
    })?;
    let metrics = node.metrics_snapshot();
    let membership = metrics.membership_config.membership();
    let change = if membership.voter_ids().any(|id| id == node_id) {
        ChangeMembers::RemoveVoters(BTreeSet::from([node_id]))
    } else if membership.get_node(&node_id).is_some() {
        ChangeMembers::RemoveNodes(BTreeSet::from([node_id]))
    } else {
        return Err(HttpError::not_found(format!(
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

#[derive(Debug, Deserialize, utoipa::IntoParams)]
#[into_params(parameter_in = Query)]
#[serde(deny_unknown_fields)]
pub struct SnapshotQuery {
    /// Also purge the log up to the snapshot, so a new member must be sent the snapshot.
    #[serde(default)]
    purge: bool,
}

/// Builds a snapshot on this node now (and optionally purges the log behind it).
#[utoipa::path(
    post, path = "/v1/cluster/snapshot", tag = "cluster", params(SnapshotQuery),
    responses(
        (status = 200, description = "The snapshot (and purge) positions now.", body = SnapshotReply),
        (status = 403, description = "`forbidden` (TLS): admin only (P13.3)."),
    ),
)]
pub async fn snapshot(
    State(node): State<AppState>,
    ApiQuery(query): ApiQuery<SnapshotQuery>,
) -> Result<Json<SnapshotReply>, HttpError> {
    let applied = node.metrics_snapshot().last_applied;
    node.raft
        .trigger()
        .snapshot()
        .await
        .map_err(|e| HttpError::internal("triggering a snapshot", e))?;
    let metrics = node
        .raft
        .wait(Some(SNAPSHOT_WAIT))
        .metrics(|m| m.snapshot >= applied, "snapshot covers the applied log")
        .await
        .map_err(|e| HttpError::internal("waiting for the snapshot", e))?;
    let snapshot = metrics.snapshot;
    let mut purged = metrics.purged;
    if query.purge {
        if let Some(upto) = snapshot {
            node.raft
                .trigger()
                .purge_log(upto.index)
                .await
                .map_err(|e| HttpError::internal("purging the log", e))?;
            purged = node
                .raft
                .wait(Some(SNAPSHOT_WAIT))
                .metrics(|m| m.purged >= Some(upto), "log purged up to the snapshot")
                .await
                .map_err(|e| HttpError::internal("waiting for the purge", e))?
                .purged;
        }
    }
    Ok(Json(SnapshotReply {
        snapshot_index: snapshot.map(|l| l.index),
        purged_index: purged.map(|l| l.index),
    }))
}
