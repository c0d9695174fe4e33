//! The dead-leader task: `raft::failover`'s checks over this manager's Raft, its contact with
//! the leader and its peers' `/raft/identity` answers (docs/OPERATIONS.md "Raft timing").

use std::sync::Arc;
use std::time::Duration;

use tokio::sync::watch;
use tokio::time::Instant;

use crate::node::ManagerNode;
use crate::raft::failover::{
    refuses_connections, run, LogTip, PeerReport, Settings, Surroundings, View,
};
use crate::raft::identity_probe::identify;
use crate::raft::NodeId;

/// The manager's own [`Surroundings`]: its Raft, its contact with the leader, its peers.
pub(crate) struct NodeSurroundings {
    node: Arc<ManagerNode>,
    probe_timeout: Duration,
}

impl Surroundings for NodeSurroundings {
    fn view(&self) -> View {
        let last_log = self.node.raft.data_metrics().borrow().last_log;
        let metrics = self.node.raft.metrics();
        let metrics = metrics.borrow();
        let membership = metrics.membership_config.membership();
        View {
            me: self.node.id,
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
        self.node.leader_contact.since(Instant::now())
    }

    async fn refuses_connections(&self, address: &str) -> bool {
        refuses_connections(address, self.probe_timeout).await
    }

    async fn peer_report(&self, peer: NodeId, address: &str) -> Option<PeerReport> {
        let report = identify(&self.node.http, peer, address, self.probe_timeout)
            .await
            .ok()?
            .report;
        Some(PeerReport {
            log: report.last_log,
            lease_silence: report.lease_silence_ms.map(Duration::from_millis),
        })
    }

    async fn elect(&self) {
        if let Err(error) = self.node.raft.trigger().elect().await {
            tracing::warn!(%error, "standing for election");
        }
    }
}

/// Runs the checks for `node` until `shutdown`.
pub async fn watch_leader(node: Arc<ManagerNode>, shutdown: watch::Receiver<bool>) {
    let settings = Settings::new(node.settings.timings);
    let around = NodeSurroundings {
        node,
        probe_timeout: settings.probe_timeout,
    };
    run(around, settings, shutdown).await;
}
