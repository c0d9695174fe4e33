//! The cluster version (PROTOCOL P14.3).
//!
//! Every node asks each member, every [`VERSION_PROBE_INTERVAL`], which release it runs and the
//! newest state schema it can apply (`GET /raft/identity`; a member of 0.1.0 reports neither and
//! is at schema 2). `GET /v1/cluster` shows the answers. The leader proposes `SetClusterVersion`
//! when every voter and learner answered the last round with a newer schema than the committed
//! cluster version: a learner counts too, since it is promoted without another check of its
//! schema. The raise is an entry in the log, so every replica applies commands of the new schema
//! only after it, and a replica that cannot decode them refuses them instead of misreading.

use std::collections::BTreeMap;
use std::sync::{Arc, Mutex};
use std::time::Duration;

use leasehold_api::wire::{FIRST_RELEASE, FIRST_RELEASE_SCHEMA};
use tokio::sync::watch;

use crate::lease::schema::NEWEST_SCHEMA;
use crate::lease::Command;
use crate::node::{Leader, ManagerNode};
use crate::raft::identity::IdentityReport;
use crate::raft::NodeId;

/// How often every node asks the members for their versions; a raise follows the last upgraded
/// voter within about this long.
pub const VERSION_PROBE_INTERVAL: Duration = Duration::from_secs(2);

/// What a member said about itself in the last probe round.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct MemberVersion {
    pub release: String,
    pub newest_schema: u32,
}

impl MemberVersion {
    /// This process.
    pub fn own() -> Self {
        Self {
            release: leasehold_api::RELEASE.to_owned(),
            newest_schema: NEWEST_SCHEMA,
        }
    }

    /// From a member's identity report: a report without them is from 0.1.0.
    pub fn of(report: &IdentityReport) -> Self {
        Self {
            release: report
                .release
                .clone()
                .unwrap_or_else(|| FIRST_RELEASE.to_owned()),
            newest_schema: report
                .schemas
                .map_or(FIRST_RELEASE_SCHEMA, |schemas| schemas.newest),
        }
    }
}

/// The answers of the last probe round; a member that did not answer in it is absent, so a
/// member replaced by an older binary is never counted at its old version.
#[derive(Debug, Default)]
pub struct MemberVersions {
    last_round: Mutex<BTreeMap<NodeId, MemberVersion>>,
}

impl MemberVersions {
    pub fn get(&self, node_id: NodeId) -> Option<MemberVersion> {
        self.lock().get(&node_id).cloned()
    }

    fn replace(&self, round: BTreeMap<NodeId, MemberVersion>) {
        *self.lock() = round;
    }

    fn lock(&self) -> std::sync::MutexGuard<'_, BTreeMap<NodeId, MemberVersion>> {
        self.last_round
            .lock()
            .unwrap_or_else(|poisoned| poisoned.into_inner())
    }
}

/// The cluster version to propose, given the committed one and the newest schema each member
/// (every voter and learner) can apply, `None` for a member that did not answer: the lowest of
/// them, if every member answered and it is above the committed version. Never lowers it.
pub fn cluster_version_to_propose(
    committed: u32,
    members: impl IntoIterator<Item = Option<u32>>,
) -> Option<u32> {
    let mut lowest: Option<u32> = None;
    for member in members {
        let newest = member?;
        lowest = Some(lowest.map_or(newest, |lowest| lowest.min(newest)));
    }
    lowest.filter(|&lowest| lowest > committed)
}

/// Probes the members and, on the leader, raises the cluster version; until `shutdown`.
pub async fn run(node: Arc<ManagerNode>, mut shutdown: watch::Receiver<bool>) {
    loop {
        probe_and_raise(&node).await;
        tokio::select! {
            _ = tokio::time::sleep(VERSION_PROBE_INTERVAL) => {}
            _ = shutdown.changed() => return,
        }
    }
}

/// One probe round and, on the leader, the raise it calls for.
pub(crate) async fn probe_and_raise(node: &ManagerNode) {
    let members: Vec<(NodeId, String)> = node
        .metrics_snapshot()
        .membership_config
        .membership()
        .nodes()
        .map(|(id, member)| (*id, member.addr.clone()))
        .collect();
    let mut round = BTreeMap::new();
    for (member, address) in &members {
        if *member == node.id {
            round.insert(*member, MemberVersion::own());
            continue;
        }
        match crate::bootstrap::probe_peer(node, address).await {
            Some(report) if report.node_id == *member => {
                round.insert(*member, MemberVersion::of(&report));
            }
            // Silent, or another node at its address: not heard from this round.
            _ => {}
        }
    }
    let newest: Vec<Option<u32>> = members
        .iter()
        .map(|(member, _)| round.get(member).map(|v| v.newest_schema))
        .collect();
    node.member_versions.replace(round);

    let committed = node.state.read(|applied| applied.state.cluster_version());
    metrics::gauge!("leasehold_cluster_version").set(f64::from(committed));
    if node.leader() != Leader::Local {
        return;
    }
    let Some(cluster_version) = cluster_version_to_propose(committed, newest) else {
        return;
    };
    let command = Command::SetClusterVersion {
        now_ms: node.clock.now_ms(),
        cluster_version,
    };
    match node.proposer.propose(command).await {
        Ok((index, _)) => tracing::info!(
            previous = committed,
            cluster_version,
            index,
            "cluster version raised: every member can apply schema {cluster_version}"
        ),
        Err(error) => {
            tracing::warn!(%error, cluster_version, "raising the cluster version failed; retrying")
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn raised_to_the_lowest_member_only_when_every_member_answered() {
        // P14.3: one member of 0.1.0 (schema 2) holds the cluster at 2.
        assert_eq!(
            cluster_version_to_propose(2, [Some(3), Some(2), Some(3)]),
            None
        );
        // The last one upgraded: raised.
        assert_eq!(
            cluster_version_to_propose(2, [Some(3), Some(3), Some(3)]),
            Some(3)
        );
        // A member not heard from (down, partitioned, mid-restart) might be older: wait.
        assert_eq!(
            cluster_version_to_propose(2, [Some(3), None, Some(3)]),
            None
        );
        // Members of different newer releases: the lowest, never past what one can apply.
        assert_eq!(
            cluster_version_to_propose(2, [Some(4), Some(3), Some(5)]),
            Some(3)
        );
        // Never lowered, never repeated.
        assert_eq!(cluster_version_to_propose(3, [Some(3), Some(3)]), None);
        assert_eq!(cluster_version_to_propose(4, [Some(3), Some(3)]), None);
        // No members known yet: nothing to raise to.
        assert_eq!(cluster_version_to_propose(2, []), None);
    }

    #[test]
    fn a_member_that_reports_no_version_is_0_1_0() {
        let report = IdentityReport {
            node_id: 2,
            storage_id: "s".into(),
            initialized: true,
            pins: BTreeMap::new(),
            release: None,
            schemas: None,
        };
        assert_eq!(
            MemberVersion::of(&report),
            MemberVersion {
                release: "0.1.0".into(),
                newest_schema: 2
            }
        );
    }
}
