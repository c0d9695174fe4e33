//! The dead-leader task: `raft::failover`'s checks over this manager's Raft, its contact with
//! the leader and its peers' `/raft/identity` answers (docs/OPERATIONS.md "Raft timing").

use std::sync::Arc;
use std::time::Duration;

use tokio::sync::watch;
use tokio::time::Instant;

use crate::handles::leadership::Leadership;
use crate::node::ManagerNode;
use crate::raft::failover::{
    run, unreachable, LeaderContact, LogTip, PeerReport, Settings, Surroundings, View,
};
use crate::raft::identity_probe::identify;
use crate::raft::NodeId;

/// The manager's own [`Surroundings`]: its Raft, its contact with the leader, its peers.
pub(crate) struct NodeSurroundings {
    leadership: Leadership,
    leader_contact: Arc<LeaderContact>,
    http: reqwest::Client,
    probe_timeout: Duration,
    connect_timeout: Duration,
}

impl Surroundings for NodeSurroundings {
    fn view(&self) -> View {
        let last_log = self.leadership.raft.data_metrics().borrow().last_log;
        let metrics = self.leadership.raft.metrics();
        let metrics = metrics.borrow();
        let membership = metrics.membership_config.membership();
        View {
            me: self.leadership.id,
            state: metrics.state,
            term: metrics.current_term,
            leader: metrics.current_leader,
            voters: membership
                .voter_ids()
                .filter_map(|id| membership.get_node(&id).map(|n| (id, n.addr.clone())))
                .collect(),
            last_log: last_log.map(LogTip::from),
        }
    }

    fn silence(&self) -> Duration {
        self.leader_contact.since(Instant::now())
    }

    async fn leader_unreachable(&self, address: &str) -> bool {
        unreachable(address, self.connect_timeout).await
    }

    async fn peer_report(&self, peer: NodeId, address: &str) -> Option<PeerReport> {
        let report = identify(&self.http, peer, address, self.probe_timeout)
            .await
            .ok()?
            .report;
        Some(PeerReport {
            log: report.last_log,
            lease_silence: report.lease_silence_ms.map(Duration::from_millis),
        })
    }

    async fn elect(&self) {
        if let Err(error) = self.leadership.raft.trigger().elect().await {
            tracing::warn!(%error, "standing for election");
        }
    }
}

impl NodeSurroundings {
    /// The surroundings of `node`, and the checks' settings from its Raft timings.
    pub(crate) fn of(node: &ManagerNode) -> (Self, Settings) {
        let settings = Settings::new(node.settings.timings);
        let around = Self {
            leadership: node.leadership.clone(),
            leader_contact: node.leader_contact.clone(),
            http: node.http.clone(),
            probe_timeout: settings.probe_timeout,
            connect_timeout: settings.connect_timeout,
        };
        (around, settings)
    }
}

/// Runs the checks until `shutdown`.
pub(crate) async fn watch_leader(
    (around, settings): (NodeSurroundings, Settings),
    shutdown: watch::Receiver<bool>,
) {
    run(around, settings, shutdown).await;
}
