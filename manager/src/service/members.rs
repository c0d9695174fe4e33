//! The cluster's members as this node knows them (`/v1/cluster`), and what changing them needs:
//! the Raft handle, the peers' identities and releases, the one HTTP client and the settings the
//! node was started with. Membership changes, formation and `--rejoin` read and act through it.

use std::sync::Arc;

use leasehold_api::wire::{ClusterInfo, Member, SchemaRange, SnapshotInfo};
use openraft::BasicNode;

use crate::handles::leadership::{Leader, Leadership};
use crate::handles::member_versions::MemberVersions;
use crate::lease::schema::{NEWEST_SCHEMA, OLDEST_SCHEMA};
use crate::node::{ClusterSettings, ManagerNode};
use crate::raft::identity::Identity;
use crate::raft::{LeaseStateHandle, NodeId};

/// The handles membership reads and changes use.
#[derive(Clone)]
pub struct Members {
    pub leadership: Leadership,
    pub state: LeaseStateHandle,
    /// The process's one HTTP client (probes of peers).
    pub http: reqwest::Client,
    pub identity: Arc<Identity>,
    /// Each member's release and newest schema, as the last probe round heard them (P14.3).
    pub member_versions: Arc<MemberVersions>,
    pub settings: Arc<ClusterSettings>,
}

impl Members {
    pub fn of(node: &ManagerNode) -> Self {
        Self {
            leadership: node.leadership.clone(),
            state: node.state.clone(),
            http: node.http.clone(),
            identity: node.identity.clone(),
            member_versions: node.member_versions.clone(),
            settings: node.settings.clone(),
        }
    }

    pub async fn cluster_info(&self) -> ClusterInfo {
        let metrics = self.leadership.metrics_snapshot();
        let membership = metrics.membership_config.membership();
        let member = |(id, node): (&NodeId, &BasicNode)| {
            let version = self.member_versions.get(*id);
            Member {
                node_id: *id,
                address: node.addr.clone(),
                release: version.as_ref().map(|v| v.release.clone()),
                newest_schema: version.map(|v| v.newest_schema),
            }
        };
        let voter_ids: Vec<NodeId> = membership.voter_ids().collect();
        let (voters, learners): (Vec<Member>, Vec<Member>) = membership
            .nodes()
            .map(member)
            .partition(|m| voter_ids.contains(&m.node_id));
        // From `leader()`, not the metrics' `current_leader`: a node whose Raft core stopped
        // keeps its last metrics, naming itself, but leads nothing (P8.3).
        let leader_id = match self.leadership.leader() {
            Leader::Local => Some(self.leadership.id),
            Leader::Remote { id, .. } => Some(id),
            Leader::Unknown => None,
        };
        ClusterInfo {
            node_id: self.leadership.id,
            leader_id,
            leader_address: self.leadership.leader_address(),
            term: metrics.current_term,
            voters,
            learners,
            last_log_index: metrics.last_log_index,
            committed_index: self.leadership.committed_index().await,
            applied_index: metrics.last_applied.map(|log_id| log_id.index),
            snapshot: metrics.snapshot.map(|log_id| SnapshotInfo {
                last_log_index: Some(log_id.index),
                snapshot_id: log_id.to_string(),
            }),
            release: Some(leasehold_api::RELEASE.to_owned()),
            cluster_version: Some(self.state.read(|applied| applied.state.cluster_version())),
            schemas: Some(SchemaRange {
                oldest: OLDEST_SCHEMA,
                newest: NEWEST_SCHEMA,
            }),
        }
    }
}

impl std::fmt::Debug for Members {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Members").finish_non_exhaustive()
    }
}
