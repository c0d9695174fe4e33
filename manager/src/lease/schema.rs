//! State schemas: the shapes of the replicated commands and state, which release introduced
//! each (CHANGELOG.md), and which schema a command or a state needs (PROTOCOL P14.1, P14.3).
//!
//! A replica decodes every schema from [`OLDEST_SCHEMA`] to [`NEWEST_SCHEMA`] through that
//! schema's own frozen types ([`super::v2`], [`super::v3`]) and converts to this build's. It
//! writes each record at the oldest schema that can express it, and the leader proposes a command
//! only once the committed cluster version is at least the schema the command needs.

use super::{Command, LeaseState, DEFAULT_CAPACITY};

/// Release 0.1.0's schema: no cluster version; its records carry no schema number.
pub const SCHEMA_0_1_0: u32 = leasehold_api::wire::FIRST_RELEASE_SCHEMA;
/// Adds the committed cluster version (`Command::SetClusterVersion` and the state's
/// `cluster_version`) and executor credentials (P13.4: `Register::credential_sha256`,
/// `Executor::credential_sha256`). CHANGELOG.md names each release's schema.
pub const SCHEMA_CLUSTER_VERSION: u32 = leasehold_api::wire::CREDENTIALS_SCHEMA;
/// Adds executor capacities (P15.1: `Register::capacity`, `Executor::capacity`). Load reports
/// are soft state on the leader and not in the schema; their wire field is introduced with it.
pub const SCHEMA_CAPACITY: u32 = leasehold_api::wire::CAPACITY_SCHEMA;

/// The oldest schema this build reads (data directories, snapshots, backups, log entries).
pub const OLDEST_SCHEMA: u32 = SCHEMA_0_1_0;
/// The newest schema this build reads and writes: what it reports it can apply.
pub const NEWEST_SCHEMA: u32 = SCHEMA_CAPACITY;

/// Why a value cannot be written at an older schema.
#[derive(Debug, Clone, Copy, PartialEq, Eq, thiserror::Error)]
#[error("{0}")]
pub struct NotExpressible(pub &'static str);

impl Command {
    /// The oldest schema that can express this command: a replica of an older one cannot apply
    /// it, so it is proposed only once the cluster version reaches it (P14.3).
    pub fn required_schema(&self) -> u32 {
        match self {
            // A raise to N is written at N: a replica of an older schema must not take it for one
            // it can follow, and the data directory is marked N from that entry on.
            Command::SetClusterVersion {
                cluster_version, ..
            } => (*cluster_version).max(SCHEMA_CLUSTER_VERSION),
            Command::Register { capacity, .. } if *capacity != DEFAULT_CAPACITY => SCHEMA_CAPACITY,
            Command::Register {
                credential_sha256: Some(_),
                ..
            } => SCHEMA_CLUSTER_VERSION,
            Command::Init { .. }
            | Command::SetLeaseDuration { .. }
            | Command::Register {
                credential_sha256: None,
                ..
            }
            | Command::Renew { .. }
            | Command::Deregister { .. }
            | Command::Reap { .. }
            | Command::Rebalance { .. }
            | Command::Release { .. }
            | Command::CompleteHandoffs { .. }
            | Command::SetDraining { .. } => SCHEMA_0_1_0,
        }
    }
}

/// A command refused because the cluster version is below the schema it needs.
#[derive(Debug, Clone, Copy, PartialEq, Eq, thiserror::Error)]
#[error(
    "this needs state schema {needed}, and the cluster version is {cluster_version}: some manager \
     still runs a release that cannot apply it (PROTOCOL P14.3; finish the upgrade first)"
)]
pub struct NotYetEnabled {
    pub needed: u32,
    pub cluster_version: u32,
}

/// The gate in front of every proposal (P14.3): a command is proposed only once the committed
/// cluster version reaches the schema it needs, so no voter is sent an entry it cannot apply.
/// `SetClusterVersion` itself is proposed by the leader once every member can apply its target
/// (`crate::cluster_version`), so it is checked against this build's own schema instead.
pub fn check_proposable(command: &Command, cluster_version: u32) -> Result<(), NotYetEnabled> {
    let (needed, enabled) = match command {
        Command::SetClusterVersion {
            cluster_version: target,
            ..
        } => (*target, NEWEST_SCHEMA),
        other => (other.required_schema(), cluster_version),
    };
    if needed > enabled {
        return Err(NotYetEnabled {
            needed,
            cluster_version,
        });
    }
    Ok(())
}

impl LeaseState {
    /// The oldest schema that can express this state: the cluster version once it rose, since a
    /// state at cluster version N is one only replicas of schema N or newer may hold.
    pub fn required_schema(&self) -> u32 {
        self.cluster_version.max(SCHEMA_0_1_0)
    }
}
