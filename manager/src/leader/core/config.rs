//! Which configuration write the leader owes (`Init`, `SetLeaseDuration`): a pure decision its
//! shell (`leader::config_writes`) proposes.

use crate::lease::{ClusterConfig, Command};

/// The write that makes the applied configuration `current` match this leader's flags
/// (`shard_count`, `lease_duration_ms`), stamped `now_ms`; none when it matches. The shard count
/// is set at initialisation (§11): a leader started with another one does not change it; only a
/// reshard does (§20).
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
