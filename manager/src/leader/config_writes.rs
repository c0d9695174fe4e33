//! The leader's configuration writes: the cluster's shard count and lease duration once (`Init`,
//! by the first leader of a new cluster), and the lease duration again when this leader was
//! started with another one (`SetLeaseDuration`: a lease shortened across a restart applies to
//! new grants only; P3.4 keeps deadlines already granted). Until `Init` is applied, executor
//! writes answer `sharding_not_ready`.
//!
//! Which write is due is a pure decision, [`config_write`]; [`ensure_lease_config`] is its shell,
//! run by the Raft-metrics follower whenever this node is leader.

use crate::cluster_version::{probe_and_raise, VersionProbe};
use crate::lease::{ClusterConfig, Command};
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

/// The write that makes the applied configuration `current` match this leader's flags
/// (`shard_count`, `lease_duration_ms`), stamped `now_ms`; none when it matches. The shard count
/// is fixed at initialisation (§11): a leader started with another one does not change it.
pub fn config_write(
    current: Option<ClusterConfig>,
    shard_count: u32,
    lease_duration_ms: u64,
    now_ms: u64,
) -> Option<Command> {
    match current {
        None => Some(Command::Init {
            now_ms,
            shard_count,
            lease_duration_ms,
        }),
        Some(config) if config.lease_duration_ms != lease_duration_ms => {
            Some(Command::SetLeaseDuration {
                now_ms,
                lease_duration_ms,
            })
        }
        Some(_) => None,
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

#[cfg(test)]
mod tests {
    use super::*;

    fn config(shard_count: u32, lease_duration_ms: u64) -> Option<ClusterConfig> {
        Some(ClusterConfig {
            shard_count,
            lease_duration_ms,
        })
    }

    #[test]
    fn a_new_cluster_is_initialised_with_this_leaders_flags() {
        assert_eq!(
            config_write(None, 1024, 60_000, 7),
            Some(Command::Init {
                now_ms: 7,
                shard_count: 1024,
                lease_duration_ms: 60_000
            })
        );
    }

    #[test]
    fn p3_4_another_lease_duration_is_written_and_the_shard_count_never_changes() {
        assert_eq!(
            config_write(config(1024, 60_000), 1024, 15_000, 9),
            Some(Command::SetLeaseDuration {
                now_ms: 9,
                lease_duration_ms: 15_000
            })
        );
        assert_eq!(config_write(config(1024, 60_000), 64, 60_000, 9), None);
        assert_eq!(config_write(config(1024, 60_000), 1024, 60_000, 9), None);
    }
}
