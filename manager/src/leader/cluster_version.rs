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
use std::sync::Arc;
use std::time::Duration;

use tokio::sync::watch;

use crate::handles::leadership::{Leader, Leadership};
use crate::handles::member_versions::{cluster_version_to_propose, MemberVersion, MemberVersions};
use crate::lease::Command;
use crate::node::ManagerNode;
use crate::raft::identity_probe::{identify, PEER_PROBE_TIMEOUT};
use crate::raft::LeaseStateHandle;
use crate::raft::NodeId;

/// How often every node asks the members for their versions; a raise follows the last upgraded
/// voter within about this long.
pub const VERSION_PROBE_INTERVAL: Duration = Duration::from_secs(2);

/// What the version probe reads and writes: who leads (and the members), the one HTTP client,
/// where the answers are kept, and the state whose cluster version it raises.
#[derive(Debug, Clone)]
pub struct VersionProbe {
    pub leadership: Leadership,
    pub http: reqwest::Client,
    pub member_versions: Arc<MemberVersions>,
    pub state: LeaseStateHandle,
}

impl VersionProbe {
    pub fn of(node: &ManagerNode) -> Self {
        Self {
            leadership: node.leadership.clone(),
            http: node.http.clone(),
            member_versions: node.member_versions.clone(),
            state: node.state.clone(),
        }
    }
}

/// Probes the members and, on the leader, raises the cluster version; until `shutdown`.
pub async fn run(probe: VersionProbe, mut shutdown: watch::Receiver<bool>) {
    loop {
        probe_and_raise(&probe).await;
        tokio::select! {
            _ = tokio::time::sleep(VERSION_PROBE_INTERVAL) => {}
            _ = shutdown.changed() => return,
        }
    }
}

/// One probe round and, on the leader, the raise it calls for.
pub(crate) async fn probe_and_raise(node: &VersionProbe) {
    let members: Vec<(NodeId, String)> = node
        .leadership
        .metrics_snapshot()
        .membership_config
        .membership()
        .nodes()
        .map(|(id, member)| (*id, member.addr.clone()))
        .collect();
    let mut round = BTreeMap::new();
    for (member, address) in &members {
        if *member == node.leadership.id {
            round.insert(*member, MemberVersion::own());
            continue;
        }
        // Silent, or another node at its address: not heard from this round.
        if let Ok(identified) = identify(&node.http, *member, address, PEER_PROBE_TIMEOUT).await {
            round.insert(*member, MemberVersion::of(&identified.report));
        }
    }
    let newest: Vec<Option<u32>> = members
        .iter()
        .map(|(member, _)| round.get(member).map(|v| v.newest_schema))
        .collect();
    node.member_versions.replace(round);

    let committed = node.state.read(|applied| applied.state.cluster_version());
    metrics::gauge!("leasehold_cluster_version").set(f64::from(committed));
    if node.leadership.leader() != Leader::Local {
        return;
    }
    let Some(cluster_version) = cluster_version_to_propose(committed, newest) else {
        return;
    };
    let command = Command::SetClusterVersion {
        now_ms: node.leadership.clock.now_ms(),
        cluster_version,
    };
    match node.leadership.proposer.propose(command).await {
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
