//! State schemas: which shapes of the replicated commands and state a build reads and writes,
//! and which schema a command or a state needs (PROTOCOL P14.1, P14.3).
//!
//! A build reads two schemas: the previous release's and its own (N−1).
//! - Schema 2 ([`FIRST_RELEASE_SCHEMA`]) is release 0.1.0's: positional bincode of the frozen
//!   types in [`release_0_1`], converted to and from this build's there. Every record whose
//!   value 0.1.0 can express is still written so while the cluster version is 2, so a 0.1.0
//!   replica reads what this build appends and a data directory can go back to 0.1.0.
//! - Schema 12 ([`SECOND_RELEASE_SCHEMA`]) is release 0.2.0's: this build's own types, encoded
//!   with field names (MessagePack, `raft::versions`). A record written by a build with a field
//!   this one lacks reads with the field ignored, and one written without a field this one has
//!   reads with the field's stated default (`#[serde(default)]`), so a new field costs a field,
//!   a default and a gate, never a copy of the types.
//! - Schemas 3 to 11 were development builds' before 0.2.0 and are refused by name.
//!
//! What a change of the replicated types must touch is listed once, in docs/PROTOCOL.md
//! ("Changing the replicated state").

pub mod release_0_1;

use super::{Command, LeaseState, OperatorAction, DEFAULT_CAPACITY};

pub use leasehold_api::wire::{
    APP_VERSION_SCHEMA, CAPACITY_SCHEMA, CREDENTIALS_SCHEMA, DEVELOPMENT_SCHEMAS,
    FIRST_RELEASE_SCHEMA, GROUP_REGISTRATION_SCHEMA, LABELS_SCHEMA, LEASE_RESERVATION_SCHEMA,
    NAMESPACES_SCHEMA, NAMESPACE_PLACEMENT_SCHEMA, NEWEST_SCHEMA, OPERATOR_CONTROLS_SCHEMA,
    REPLICAS_SCHEMA, RESHARD_SCHEMA, SECOND_RELEASE_SCHEMA,
};

/// The oldest schema this build reads (data directories, snapshots, backups, log entries).
pub const OLDEST_SCHEMA: u32 = FIRST_RELEASE_SCHEMA;

/// Why a value cannot be written at an older schema.
#[derive(Debug, Clone, Copy, PartialEq, Eq, thiserror::Error)]
#[error("{0}")]
pub struct NotExpressible(pub &'static str);

impl Command {
    /// The oldest schema that can express this command: a replica of an older one cannot apply
    /// it, so it is proposed only once the cluster version reaches it (P14.3), and it is written
    /// at it. The one rule for both: [`release_0_1`]'s conversion succeeds exactly for the
    /// commands of schema 2 (`lease::tests::schemas` checks the two agree on every kind).
    pub fn required_schema(&self) -> u32 {
        match self {
            // A raise to N is written at N: a replica of an older schema must not take it for one
            // it can follow, and the data directory is marked N from that entry on.
            Command::SetClusterVersion {
                cluster_version, ..
            } => (*cluster_version).max(SECOND_RELEASE_SCHEMA),
            command if command.needs_resharding() => RESHARD_SCHEMA,
            command if command.needs_replicas() => REPLICAS_SCHEMA,
            command if command.needs_the_second_release() => SECOND_RELEASE_SCHEMA,
            _ => FIRST_RELEASE_SCHEMA,
        }
    }

    /// Whether it uses resharding (P20.1): asks for or carries out a reshard, or registers an
    /// executor that follows a change of layout. A replica of schema 13 would read such a
    /// registration with the promise ignored, and could then let a namespace reshard under an
    /// executor that maps keys by the old count.
    fn needs_resharding(&self) -> bool {
        match self {
            Command::Reshard { .. }
            | Command::Operator {
                action: OperatorAction::Reshard { .. },
                ..
            } => true,
            Command::Register {
                follows_generations,
                ..
            } => *follows_generations,
            Command::RegisterMany { registrations, .. } => registrations
                .iter()
                .any(|registration| registration.follows_generations),
            _ => false,
        }
    }

    /// Whether it uses replicas (P19.1): sets a namespace's replica settings other than their
    /// defaults, places secondaries, or states secondaries ready. A replica of schema 12 would
    /// read such a record with the field ignored and so lose the secondaries, hence the gate.
    fn needs_replicas(&self) -> bool {
        match self {
            Command::PlaceSecondaries { .. } => true,
            Command::Renew { renewals, .. } => {
                renewals.iter().any(|renewal| !renewal.ready.is_empty())
            }
            Command::Operator {
                action:
                    OperatorAction::CreateNamespace { replication, .. }
                    | OperatorAction::SetNamespace { replication, .. },
                ..
            } => !replication.is_default(),
            _ => false,
        }
    }

    /// Whether it uses anything release 0.1.0 lacks: credentials (P13.4), capacities (P15.1),
    /// application versions (P17.3), labels (P18.3), operator controls (P17.4), registrations
    /// in one entry, lease reservations (P6.6, P6.7), namespaces (P18.1) and their placement
    /// (P18.4).
    fn needs_the_second_release(&self) -> bool {
        match self {
            Command::Register {
                credential_sha256,
                capacity,
                app_version,
                labels,
                namespace,
                ..
            } => {
                credential_sha256.is_some()
                    || *capacity != DEFAULT_CAPACITY
                    || app_version.is_some()
                    || !labels.is_empty()
                    || !is_default(namespace)
            }
            Command::Rebalance { namespace, .. } => !is_default(namespace),
            Command::Operator { .. }
            | Command::RegisterMany { .. }
            | Command::ReserveLeases { .. }
            | Command::ReapLapsed { .. }
            | Command::PlaceSecondaries { .. }
            | Command::Reshard { .. }
            | Command::SetClusterVersion { .. } => true,
            Command::Init { .. }
            | Command::SetLeaseDuration { .. }
            | Command::Renew { .. }
            | Command::Deregister { .. }
            | Command::Reap { .. }
            | Command::Release { .. }
            | Command::CompleteHandoffs { .. }
            | Command::SetDraining { .. } => false,
        }
    }
}

fn is_default(namespace: &str) -> bool {
    leasehold_api::wire::is_default_namespace(namespace)
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
/// (`crate::leader::cluster_version`), so it is checked against this build's own schema instead.
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
        self.cluster_version.max(FIRST_RELEASE_SCHEMA)
    }
}
