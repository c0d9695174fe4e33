//! `GET /v1/executors/{id}/safe-to-stop` and `GET /v1/cluster/nodes/{id}/safe-to-stop`
//! (PROTOCOL P17.4): answered by the leader, which knows every lease on a clock in office and how
//! far each voter's log is replicated; the verdicts are `crate::service::safe_to_stop`'s. Reads: any role.

use std::collections::{BTreeMap, BTreeSet};

use axum::extract::{Path, State};
use axum::Json;
use futures_util::future::join_all;
use leasehold_api::problem::ErrorCode;
use leasehold_api::wire::SafeToStop;

use super::params::ExecutorIdPath;
use super::HttpError;
use crate::raft::identity_probe::{identify, PEER_PROBE_TIMEOUT};
use crate::raft::NodeId;
use crate::service::members::Members;
use crate::service::refusals::unknown_executor;
use crate::service::safe_to_stop::{caught_up, executor_verdict, member_verdict};

/// Whether stopping this executor now leaves its shards a place to go.
#[utoipa::path(
    get, path = "/v1/executors/{executor_id}/safe-to-stop", tag = "inspection",
    operation_id = "executor_safe_to_stop",
    params(ExecutorIdPath),
    responses(
        (status = 200, description = "The verdict and its reason: safe when the executor holds no shards or another live executor that is not draining can take them (P17.4).", body = SafeToStop),
        (status = 404, description = "`unknown_executor`: not registered."),
    ),
)]
pub async fn executor(
    State(members): State<Members>,
    ExecutorIdPath { executor_id }: ExecutorIdPath,
) -> Result<Json<SafeToStop>, HttpError> {
    let now_ms = members.leadership.clock.now_ms();
    executor_verdict(&members.state.current(), &executor_id, now_ms)
        .map(Json)
        .ok_or_else(|| unknown_executor(&executor_id))
}

/// Whether stopping this manager now leaves the voters a caught-up majority.
#[utoipa::path(
    get, path = "/v1/cluster/nodes/{node_id}/safe-to-stop", tag = "cluster",
    operation_id = "member_safe_to_stop",
    params(("node_id" = u64, Path, description = "Raft node id of the member.")),
    responses(
        (status = 200, description = "The verdict and its reason: safe when the other voters that answer and whose logs are within 100 entries of what the leader applied are a majority of the voters; a learner always is (P17.4).", body = SafeToStop),
        (status = 400, description = "`invalid_request`: the node id is not a non-negative integer."),
        (status = 404, description = "`not_found`: no such member."),
    ),
)]
pub async fn member(
    State(members): State<Members>,
    Path(node_id): Path<String>,
) -> Result<Json<SafeToStop>, HttpError> {
    let node_id: NodeId = node_id.parse().map_err(|_| {
        HttpError::invalid(format!("node id {node_id:?} is not a non-negative integer"))
    })?;
    let metrics = members.leadership.metrics_snapshot();
    let membership = metrics.membership_config.membership();
    let voters: BTreeSet<NodeId> = membership.voter_ids().collect();
    let learners: BTreeSet<NodeId> = membership.learner_ids().collect();
    let leader_applied = metrics.last_applied.map(|log_id| log_id.index);
    let matched: BTreeMap<NodeId, Option<u64>> = metrics
        .replication
        .as_ref()
        .map(|replication| {
            replication
                .iter()
                .map(|(&id, log_id)| (id, log_id.map(|log_id| log_id.index)))
                .collect()
        })
        .unwrap_or_default();
    let me = members.leadership.id;
    // Every other voter is asked who it is at once: one that does not answer is down, however
    // far its log was replicated before it stopped.
    let probes = membership
        .nodes()
        .filter(|(id, _)| **id != me && voters.contains(id))
        .map(|(&id, member)| {
            let address = member.addr.clone();
            let http = members.http.clone();
            async move {
                let answered = identify(&http, id, &address, PEER_PROBE_TIMEOUT)
                    .await
                    .is_ok();
                (id, answered)
            }
        });
    let mut healthy: BTreeSet<NodeId> = join_all(probes)
        .await
        .into_iter()
        .filter(|&(id, answered)| {
            answered && caught_up(matched.get(&id).copied().flatten(), leader_applied)
        })
        .map(|(id, _)| id)
        .collect();
    healthy.insert(me);
    member_verdict(&voters, &learners, node_id, &healthy)
        .map(Json)
        .ok_or_else(|| {
            HttpError::new(
                ErrorCode::NotFound,
                format!("node {node_id} is not a member"),
            )
        })
}
