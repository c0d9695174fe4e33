//! Cluster inspection and administration: `/v1/cluster`, init, membership, snapshots.

use std::collections::{BTreeMap, BTreeSet};
use std::time::Duration;

use axum::extract::{Path, State};
use axum::{Extension, Json};
use leasehold_api::problem::ErrorCode;
use leasehold_api::tls::Role;
use leasehold_api::wire::{AddNodeRequest, ClusterInfo, InitReply, SnapshotReply};
use openraft::{BasicNode, ChangeMembers};
use serde::Deserialize;

use super::authorize::{self, Actor, CallerRole, ManagerJoin};
use super::params::{validate_node_address, ReadQuery};
use super::{ApiJson, ApiQuery, HttpError};
use crate::handles::member_versions::MemberVersion;
use crate::lease::MembershipChange;
use crate::raft::identity::IdentityReport;
use crate::raft::identity_probe::{identify, PEER_PROBE_TIMEOUT};
use crate::raft::NodeId;
use crate::service::bootstrap::{self, self_removal_check, Formation, VoterAnswer};
use crate::service::members::Members;
use crate::service::operator::Operator;

/// How long adding a member waits for it to answer its identity probe, and how often it asks.
const ADD_NODE_PROBE_PATIENCE: Duration = Duration::from_secs(15);
const ADD_NODE_PROBE_INTERVAL: Duration = Duration::from_millis(250);

/// Bound on waiting for a requested snapshot (and purge) to be done.
const SNAPSHOT_WAIT: Duration = Duration::from_secs(60);

/// Bound on waiting for a learner that asked to join again to catch up, inside the bound of an
/// administrative request.
const LEARNER_CATCH_UP_WAIT: Duration = Duration::from_secs(120);

/// Bound on one voter's answer when a manager asks to remove itself: the voters are asked at
/// once, inside the bound of a forwarded request.
const VOTER_PROBE_TIMEOUT: Duration = Duration::from_secs(2);

/// This replica's view of the Raft group.
#[utoipa::path(
    get, path = "/v1/cluster", tag = "cluster", params(ReadQuery),
    responses((status = 200, description = "This node, the leader, term, members, log and snapshot positions.", body = ClusterInfo)),
)]
pub async fn info(
    State(members): State<Members>,
    ApiQuery(_): ApiQuery<ReadQuery>,
) -> Json<ClusterInfo> {
    Json(members.cluster_info().await)
}

/// Forms the cluster from `--initial-cluster` now (normally automatic; safe to repeat).
#[utoipa::path(
    post, path = "/v1/cluster/init", tag = "cluster",
    responses(
        (status = 200, description = "Formed now or already formed.", body = InitReply),
        (status = 403, description = "`forbidden` (TLS): admin only, and not one limited to namespaces (P13.3, P18.2)."),
        (status = 409, description = "`conflict`: not every founding member answers yet, or this node does not found the cluster."),
    ),
)]
pub async fn init(State(members): State<Members>) -> Result<Json<InitReply>, HttpError> {
    match bootstrap::try_form(&members).await {
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
        (status = 403, description = "`forbidden` (TLS): admin, or a manager adding itself as a learner at an address that answers as it (P13.3)."),
        (status = 409, description = "`conflict`: already a voter, or the membership change was refused."),
    ),
)]
pub async fn add_node(
    State(members): State<Members>,
    State(operator): State<Operator>,
    caller: Option<Extension<CallerRole>>,
    Extension(actor): Extension<Actor>,
    ApiJson(request): ApiJson<AddNodeRequest>,
) -> Result<Json<ClusterInfo>, HttpError> {
    validate_node_address(&request.address)?;
    let was_member = members
        .leadership
        .metrics_snapshot()
        .membership_config
        .membership()
        .get_node(&request.node_id)
        .is_some();
    let added = match caller {
        Some(Extension(CallerRole(Role::Manager { node_id }))) => {
            add_own_node(&members, node_id, &request).await
        }
        _ => add_node_as_admin(&members, &request).await,
    }?;
    if !was_member {
        let change = MembershipChange::Added {
            node_id: request.node_id,
            address: request.address.clone(),
        };
        operator.record_membership(&actor, change).await;
    }
    Ok(added)
}

async fn add_node_as_admin(
    members: &Members,
    request: &AddNodeRequest,
) -> Result<Json<ClusterInfo>, HttpError> {
    let metrics = members.leadership.metrics_snapshot();
    let membership = metrics.membership_config.membership();
    if membership.voter_ids().any(|id| id == request.node_id) {
        return Err(HttpError::conflict(format!(
            "node {} is already a voter; to replace its data directory remove it first",
            request.node_id
        )));
    }
    check_can_apply_cluster_version(members, request, None).await?;
    tracing::info!(node_id = request.node_id, address = %request.address, "adding learner");
    members
        .leadership
        .raft
        .add_learner(request.node_id, BasicNode::new(&request.address), true)
        .await
        .map_err(membership_error)?;
    promote(members, request.node_id).await
}

/// Promotes a learner that has caught up, as every joiner is promoted.
async fn promote(members: &Members, node_id: NodeId) -> Result<Json<ClusterInfo>, HttpError> {
    tracing::info!(node_id, "learner caught up; promoting to voter");
    members
        .leadership
        .raft
        .change_membership(ChangeMembers::AddVoterIds(BTreeSet::from([node_id])), false)
        .await
        .map_err(membership_error)?;
    Ok(Json(members.cluster_info().await))
}

/// A manager's own join (`--join` under TLS, P13.3): only as the node its certificate names,
/// at the address it gives, which must answer as that node with that certificate; added as a
/// learner and promoted once caught up like every joiner. Asking again is answered without a
/// change; a member whose data directory was lost is told to rejoin.
async fn add_own_node(
    members: &Members,
    caller: NodeId,
    request: &AddNodeRequest,
) -> Result<Json<ClusterInfo>, HttpError> {
    let metrics = members.leadership.metrics_snapshot();
    let membership = metrics.membership_config.membership();
    let member = membership.get_node(&request.node_id).map(|known| {
        let voter = membership.voter_ids().any(|id| id == request.node_id);
        (known.addr.clone(), voter)
    });
    let step = authorize::manager_join(
        caller,
        request.node_id,
        &request.address,
        member
            .as_ref()
            .map(|(address, voter)| (address.as_str(), *voter)),
    )
    .map_err(|detail| {
        tracing::warn!(caller, node_id = request.node_id, "join refused: {detail}");
        HttpError::new(ErrorCode::Forbidden, detail)
    })?;
    let report = check_can_apply_cluster_version(members, request, Some(caller)).await?;
    if step != ManagerJoin::AddLearner {
        // The member is known with the storage pinned for it; another answers: it was wiped.
        if let Some(pinned) = members.identity.pins().get(&request.node_id) {
            if *pinned != report.storage_id {
                return Err(HttpError::conflict(format!(
                    "node {} is a member, but the manager at {} has another data directory than \
                     the one the cluster knows: its data was lost. Start it with --join URL \
                     --rejoin (docs/OPERATIONS.md \"Replacing a manager\")",
                    request.node_id, request.address
                )));
            }
        }
    }
    match step {
        ManagerJoin::AlreadyVoter => {
            tracing::info!(
                node_id = request.node_id,
                "asked to join: already a voter at this address"
            );
            Ok(Json(members.cluster_info().await))
        }
        ManagerJoin::AlreadyLearner => {
            tracing::info!(
                node_id = request.node_id,
                "asked to join: already a learner at this address; waiting for it to catch up"
            );
            wait_caught_up(members, request.node_id).await?;
            promote(members, request.node_id).await
        }
        ManagerJoin::AddLearner => {
            tracing::info!(node_id = request.node_id, address = %request.address, "adding learner (asked by the manager itself)");
            members
                .leadership
                .raft
                .add_learner(request.node_id, BasicNode::new(&request.address), true)
                .await
                .map_err(membership_error)?;
            promote(members, request.node_id).await
        }
    }
}

/// Waits until the leader has replicated its log, as it was when asked, to learner `node_id`.
async fn wait_caught_up(members: &Members, node_id: NodeId) -> Result<(), HttpError> {
    let target = members.leadership.metrics_snapshot().last_log_index;
    members
        .leadership
        .raft
        .wait(Some(LEARNER_CATCH_UP_WAIT))
        .metrics(
            |metrics| {
                let matched = metrics
                    .replication
                    .as_ref()
                    .and_then(|replication| replication.get(&node_id).copied().flatten());
                matched.map(|log_id| log_id.index) >= target
            },
            "learner caught up",
        )
        .await
        .map_err(|error| {
            HttpError::conflict(format!(
                "learner {node_id} has not caught up: {error}; ask again"
            ))
        })?;
    Ok(())
}

/// A member must apply every entry from the committed cluster version on (P14.3), so a manager
/// of an older release is refused before it becomes a learner; one that cannot be asked is too.
/// For a manager's own join (`certified_as`), the address must answer with that manager's
/// certificate (P13.3): it joins only at an address that is its own.
async fn check_can_apply_cluster_version(
    members: &Members,
    request: &AddNodeRequest,
    certified_as: Option<NodeId>,
) -> Result<IdentityReport, HttpError> {
    let cluster_version = members
        .state
        .read(|applied| applied.state.cluster_version());
    // The new manager may have been started a moment ago (etcd's flow: start it, then add it).
    let deadline = tokio::time::Instant::now() + ADD_NODE_PROBE_PATIENCE;
    let (report, role) = loop {
        match identify(
            &members.http,
            request.node_id,
            &request.address,
            PEER_PROBE_TIMEOUT,
        )
        .await
        {
            Ok(identified) => break (identified.report, identified.role),
            _ if tokio::time::Instant::now() >= deadline => {
                return Err(HttpError::conflict(format!(
                    "node {} does not answer at {} (GET /raft/identity): start it before adding it",
                    request.node_id, request.address
                )))
            }
            _ => tokio::time::sleep(ADD_NODE_PROBE_INTERVAL).await,
        }
    };
    if let Some(expected) = certified_as {
        let own = matches!(role, Some(Role::Manager { node_id }) if node_id == expected);
        if members.settings.tls.is_some() && !own {
            return Err(HttpError::new(
                ErrorCode::Forbidden,
                format!(
                    "{} answers with a certificate that is not manager {expected}'s ({role:?}): \
                     a manager may join only at its own address",
                    request.address
                ),
            ));
        }
    }
    let version = MemberVersion::of(&report);
    if version.newest_schema < cluster_version {
        return Err(HttpError::conflict(format!(
            "node {} runs Leasehold {}, which applies state schemas up to {}; the cluster version \
             is {cluster_version} (PROTOCOL P14.3): run a release that applies schema \
             {cluster_version} on it",
            request.node_id, version.release, version.newest_schema
        )));
    }
    Ok(report)
}

/// Removes a voter or learner from the group.
#[utoipa::path(
    delete, path = "/v1/cluster/nodes/{node_id}", tag = "cluster",
    params(("node_id" = u64, Path, description = "Raft node id of the member to remove.")),
    responses(
        (status = 200, description = "Removed; the group as it is now.", body = ClusterInfo),
        (status = 403, description = "`forbidden` (TLS): admin, or the manager of this node id removing itself to rejoin (P13.3)."),
        (status = 404, description = "`not_found`: no such member."),
        (status = 409, description = "`conflict`: the membership change was refused."),
    ),
)]
pub async fn remove_node(
    State(members): State<Members>,
    State(operator): State<Operator>,
    caller: Option<Extension<CallerRole>>,
    Extension(actor): Extension<Actor>,
    Path(node_id): Path<String>,
) -> Result<Json<ClusterInfo>, HttpError> {
    let node_id: u64 = node_id.parse().map_err(|_| {
        HttpError::invalid(format!("node id {node_id:?} is not a non-negative integer"))
    })?;
    let metrics = members.leadership.metrics_snapshot();
    let membership = metrics.membership_config.membership();
    if let Some(Extension(CallerRole(role @ Role::Manager { .. }))) = &caller {
        // The layer let through only its own id; checked again where it is acted on.
        authorize::own_membership_allowed(role, Some(node_id))
            .map_err(|detail| HttpError::new(ErrorCode::Forbidden, detail))?;
        let voters: BTreeSet<NodeId> = membership.voter_ids().collect();
        if voters.contains(&node_id) {
            let answers = ask_voters(&members, membership, node_id).await;
            self_removal_check(&voters, node_id, &answers).map_err(|detail| {
                tracing::warn!(node_id, "a manager's removal of itself refused: {detail}");
                HttpError::conflict(detail)
            })?;
        }
        tracing::warn!(
            node_id,
            address = membership.get_node(&node_id).map(|n| n.addr.as_str()),
            "manager {node_id} asks to remove its own membership to rejoin (its data directory was lost)"
        );
    }
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
    members
        .leadership
        .raft
        .change_membership(change, false)
        .await
        .map_err(membership_error)?;
    operator
        .record_membership(&actor, MembershipChange::Removed { node_id })
        .await;
    Ok(Json(members.cluster_info().await))
}

/// Asks every voter but this leader who it is, all at once, each within [`VOTER_PROBE_TIMEOUT`].
async fn ask_voters(
    members: &Members,
    membership: &openraft::Membership<NodeId, BasicNode>,
    removed: NodeId,
) -> BTreeMap<NodeId, VoterAnswer> {
    let pins = members.identity.pins();
    let mut answers = BTreeMap::from([(members.leadership.id, VoterAnswer::WithItsData)]);
    let mut probes = tokio::task::JoinSet::new();
    for voter in membership
        .voter_ids()
        .filter(|&id| id != members.leadership.id)
    {
        let Some(address) = membership.get_node(&voter).map(|n| n.addr.clone()) else {
            answers.insert(voter, VoterAnswer::Silent);
            continue;
        };
        let members = members.clone();
        probes.spawn(async move {
            let report = identify(&members.http, voter, &address, VOTER_PROBE_TIMEOUT).await;
            (voter, report.ok().map(|identified| identified.report))
        });
    }
    while let Some(joined) = probes.join_next().await {
        let Ok((voter, report)) = joined else {
            continue;
        };
        let answer = match report {
            Some(report) => match pins.get(&voter) {
                Some(pinned) if *pinned != report.storage_id => VoterAnswer::WithOtherData,
                _ => VoterAnswer::WithItsData,
            },
            _ => VoterAnswer::Silent,
        };
        answers.insert(voter, answer);
    }
    tracing::info!(
        removed,
        ?answers,
        "voters asked before a manager's removal of itself"
    );
    answers
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
        (status = 403, description = "`forbidden` (TLS): admin only, and not one limited to namespaces (P13.3, P18.2)."),
    ),
)]
pub async fn snapshot(
    State(members): State<Members>,
    ApiQuery(query): ApiQuery<SnapshotQuery>,
) -> Result<Json<SnapshotReply>, HttpError> {
    let applied = members.leadership.metrics_snapshot().last_applied;
    members
        .leadership
        .raft
        .trigger()
        .snapshot()
        .await
        .map_err(|e| HttpError::internal("triggering a snapshot", e))?;
    let metrics = members
        .leadership
        .raft
        .wait(Some(SNAPSHOT_WAIT))
        .metrics(|m| m.snapshot >= applied, "snapshot covers the applied log")
        .await
        .map_err(|e| HttpError::internal("waiting for the snapshot", e))?;
    let snapshot = metrics.snapshot;
    let mut purged = metrics.purged;
    if query.purge {
        if let Some(upto) = snapshot {
            members
                .leadership
                .raft
                .trigger()
                .purge_log(upto.index)
                .await
                .map_err(|e| HttpError::internal("purging the log", e))?;
            purged = members
                .leadership
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
