//! Background duties that follow the Raft metrics: Prometheus gauges, peer storage identities,
//! and (on a leader) the leader's configuration writes ([`crate::leader::config_writes`]).

use std::collections::BTreeSet;
use std::sync::Arc;
use std::time::Duration;

use openraft::ServerState;
use tokio::sync::watch;

use crate::handles::leadership::Leadership;
use crate::leader::config_writes::{ensure_lease_config, ConfigWrites};
use crate::node::ManagerNode;
use crate::raft::identity::Identity;
use crate::raft::identity_probe::{identify, NotIdentified, PEER_PROBE_TIMEOUT};

/// What the Raft follower and the identity prober read and write: this node's leadership (its
/// Raft metrics and id), the peers' pinned storage identities, the one HTTP client, and the
/// configuration writes a leader makes.
#[derive(Debug, Clone)]
pub struct Observer {
    pub leadership: Leadership,
    pub identity: Arc<Identity>,
    pub http: reqwest::Client,
    pub config_writes: ConfigWrites,
}

impl Observer {
    pub fn of(node: &ManagerNode) -> Self {
        Self {
            leadership: node.leadership.clone(),
            identity: node.identity.clone(),
            http: node.http.clone(),
            config_writes: ConfigWrites::of(node),
        }
    }
}

/// How often unpinned peers are asked for their storage identity.
const IDENTITY_PROBE_INTERVAL: Duration = Duration::from_secs(2);
/// Least time between two passes of [`follow_raft`]. Raft publishes new metrics on every append,
/// commit and apply; cloning them and setting every gauge each time cost ~8 % of a busy leader's
/// CPU (docs/BENCHMARKS.md). Nothing here needs to be quicker than this: a scrape is seconds
/// apart, the lease configuration is written once per term, pins change with membership.
const FOLLOW_INTERVAL: Duration = Duration::from_millis(100);

/// Follows Raft metrics until shutdown: gauges, pins of departed members, and
/// making sure the replicated lease configuration matches this leader's flags.
pub async fn follow_raft(node: Observer, mut shutdown: watch::Receiver<bool>) {
    let mut metrics = node.leadership.raft.metrics();
    let mut members_seen = BTreeSet::new();
    loop {
        let snapshot = metrics.borrow_and_update().clone();
        export_gauges(&snapshot);
        if snapshot.state == ServerState::Leader {
            ensure_lease_config(&node.config_writes).await;
        }
        let members: BTreeSet<u64> = snapshot
            .membership_config
            .membership()
            .nodes()
            .map(|(id, _)| *id)
            .collect();
        if members != members_seen && !members.is_empty() {
            if let Err(error) = node.identity.retain_members(&members) {
                tracing::error!(%error, "updating peer pins");
            }
            members_seen = members;
        }
        tokio::select! {
            changed = metrics.changed() => if changed.is_err() { return },
            _ = shutdown.changed() => return,
        }
        // A new role or term is acted on at once: a new leader writes the lease configuration
        // before it can serve a registration, so waiting here would answer the cluster's first
        // writes with `sharding_not_ready`. Other changes in the meantime are coalesced: the next
        // pass reads the latest.
        if role_of(&metrics.borrow()) == role_of(&snapshot) {
            tokio::select! {
                _ = tokio::time::sleep(FOLLOW_INTERVAL) => {}
                _ = shutdown.changed() => return,
            }
        }
    }
}

fn role_of(metrics: &openraft::RaftMetrics<u64, openraft::BasicNode>) -> (ServerState, u64) {
    (metrics.state, metrics.current_term)
}

fn export_gauges(metrics: &openraft::RaftMetrics<u64, openraft::BasicNode>) {
    metrics::gauge!("leasehold_raft_term").set(metrics.current_term as f64);
    metrics::gauge!("leasehold_raft_is_leader")
        .set(f64::from(u8::from(metrics.state == ServerState::Leader)));
    metrics::gauge!("leasehold_raft_leader_id")
        .set(metrics.current_leader.map_or(-1.0, |id| id as f64));
    metrics::gauge!("leasehold_raft_last_log_index")
        .set(metrics.last_log_index.map_or(0.0, |i| i as f64));
    metrics::gauge!("leasehold_raft_applied_index")
        .set(metrics.last_applied.map_or(0.0, |l| l.index as f64));
    metrics::gauge!("leasehold_raft_snapshot_index")
        .set(metrics.snapshot.map_or(0.0, |l| l.index as f64));
    metrics::gauge!("leasehold_raft_purged_index")
        .set(metrics.purged.map_or(0.0, |l| l.index as f64));
    if let Some(replication) = &metrics.replication {
        let last = metrics.last_log_index.unwrap_or(0);
        for (follower, matched) in replication {
            let matched = matched.map_or(0, |l| l.index);
            metrics::gauge!("leasehold_raft_replication_lag_entries", "follower" => follower.to_string())
                .set(last.saturating_sub(matched) as f64);
        }
    }
}

/// Pins the storage identity of every member not pinned yet, so that a member wiped later is
/// recognised by every peer, not only by those it happened to exchange Raft messages with.
pub async fn probe_peer_identities(node: Observer, mut shutdown: watch::Receiver<bool>) {
    loop {
        let pinned = node.identity.pins();
        let unpinned: Vec<(u64, String)> = node
            .leadership
            .metrics_snapshot()
            .membership_config
            .membership()
            .nodes()
            .filter(|(id, _)| **id != node.leadership.id && !pinned.contains_key(id))
            .map(|(id, member)| (*id, member.addr.clone()))
            .collect();
        for (peer, address) in unpinned {
            match identify(&node.http, peer, &address, PEER_PROBE_TIMEOUT).await {
                Ok(identified) => {
                    if let Err(error) = node
                        .identity
                        .verify_peer(peer, &identified.report.storage_id)
                    {
                        tracing::error!(%error, "peer identity check failed");
                    }
                }
                Err(NotIdentified::AnsweredAs(answered_as)) => {
                    tracing::error!(peer, answered_as, %address, "member address answers as another node");
                }
                Err(NotIdentified::Silent) => {}
            }
        }
        tokio::select! {
            _ = tokio::time::sleep(IDENTITY_PROBE_INTERVAL) => {}
            _ = shutdown.changed() => return,
        }
    }
}
