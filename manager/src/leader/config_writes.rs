//! The leader's configuration writes: the cluster's shard count and lease duration once (`Init`,
//! by the first leader of a new cluster), and the lease duration again when this leader was
//! started with another one (`SetLeaseDuration`: a lease shortened across a restart applies to
//! new grants only; P3.4 keeps deadlines already granted). Until `Init` is applied, executor
//! writes answer `sharding_not_ready`.
//!
//! Which write is due is a pure decision (`core::config::config_write`); [`ensure_lease_config`]
//! is its shell, run by the Raft-metrics follower whenever this node is leader.

use crate::leader::cluster_version::{probe_and_raise, VersionProbe};
use crate::leader::core::config::config_write;
use crate::node::ManagerNode;

/// What the configuration writes need: who leads, the applied state, this leader's flags and the
/// version probe a new cluster raises its version with first.
#[derive(Debug, Clone)]
pub struct ConfigWrites {
    pub versions: VersionProbe,
    pub shard_count: u32,
    pub lease_duration_ms: u64,
}

impl ConfigWrites {
    pub fn of(node: &ManagerNode) -> Self {
        Self {
            versions: VersionProbe::of(node),
            shard_count: node.settings.shard_count,
            lease_duration_ms: node.settings.lease_duration_ms,
        }
    }
}

/// Proposes the configuration write that is due, if any, while this node leads.
pub async fn ensure_lease_config(writes: &ConfigWrites) {
    let leadership = &writes.versions.leadership;
    // Only a leader that took office (P6.4): a stamp read before its clock is anchored would be
    // refused. The next pass, on the next metrics change, writes it.
    if !leadership.in_office() {
        return;
    }
    let current = writes
        .versions
        .state
        .read(|applied| applied.state.config().copied());
    let Some(command) = config_write(
        current,
        writes.shard_count,
        writes.lease_duration_ms,
        leadership.clock.now_ms(),
    ) else {
        return;
    };
    if current.is_none() {
        // A new cluster: raise its cluster version first (P14.3), so that from the first
        // executor on, its state is at the newest schema its founding members all apply,
        // rather than rising under them a moment later.
        probe_and_raise(&writes.versions).await;
    }
    match leadership.proposer.propose(command).await {
        Ok((index, outcome)) => {
            tracing::info!(index, ?outcome, "wrote the cluster lease configuration")
        }
        Err(error) => tracing::warn!(%error, "writing the cluster lease configuration"),
    }
}
