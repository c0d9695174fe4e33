//! State schemas: the shapes of the replicated commands and state, which release introduced
//! each (CHANGELOG.md), and which schema a command or a state needs (PROTOCOL P14.1, P14.3).
//!
//! A replica decodes every schema from [`OLDEST_SCHEMA`] to [`NEWEST_SCHEMA`] through that
//! schema's own frozen types ([`super::v2`] to [`super::v10`]) and converts to this build's
//! along the chain (`super::chain`), one schema at a time. It writes each record at the oldest
//! schema that can express it (`raft::versions`, one table of schemas), and the leader proposes
//! a command only once the committed cluster version is at least the schema the command needs.

use super::{Command, LeaseState, OperatorAction, DEFAULT_CAPACITY};

// One name per schema number, defined once in the wire types (CHANGELOG.md names each release's):
// - `FIRST_RELEASE_SCHEMA` (2): release 0.1.0's; no cluster version, and its records carry no
//   schema number (`v2`).
// - `CREDENTIALS_SCHEMA` (3): adds the committed cluster version (`Command::SetClusterVersion`,
//   the state's `cluster_version`) and executor credentials (P13.4: `Register::credential_sha256`,
//   `Executor::credential_sha256`) (`v3`).
// - `CAPACITY_SCHEMA` (4): adds executor capacities (P15.1: `Register::capacity`,
//   `Executor::capacity`); load reports are soft state on the leader, not in the schema, and
//   their wire field comes with it (`v4`).
// - `APP_VERSION_SCHEMA` (5): adds executors' application versions (P17.3:
//   `Register::app_version`, `Executor::app_version`) (`v5`).
// - `OPERATOR_CONTROLS_SCHEMA` (6): adds operator controls (P17.4): `Command::Operator`, the
//   state's maintenance mode, pins and audit log (`v6`).
// - `LABELS_SCHEMA` (7): adds executor labels (P18.3: `Register::labels`, `Executor::labels`)
//   (`v7`).
// - `GROUP_REGISTRATION_SCHEMA` (8): adds registrations group-committed into one entry
//   (`Command::RegisterMany`, and the state's `next_executor_number`, the executor numbers such
//   an entry minted past its own index) (`v8`).
// - `LEASE_RESERVATION_SCHEMA` (9): adds lease reservations and reaping by the leader's judgment
//   (P6.6, P6.7: `Command::ReserveLeases`, `Command::ReapLapsed`,
//   `Executor::lease_reserved_until_ms`) (`v9`).
// - `NAMESPACES_SCHEMA` (10): adds namespaces (P18.1: the state's namespaces, each with its own
//   configuration, shard table, pins and assignment revision, and the retired names' epochs;
//   `Executor::namespace`, `Register::namespace`, `Rebalance::namespace`, the namespace of
//   `OperatorAction::MoveShard` and `Pin`, and `OperatorAction::CreateNamespace`,
//   `SetNamespace`, `DeleteNamespace`) (`v10`).
// - `NAMESPACE_PLACEMENT_SCHEMA` (11): adds each namespace's own placement settings (P18.4:
//   `Namespace::placement`, and the `placement` of `OperatorAction::CreateNamespace` and
//   `SetNamespace`). This build's types.
pub use leasehold_api::wire::{
    APP_VERSION_SCHEMA, CAPACITY_SCHEMA, CREDENTIALS_SCHEMA, FIRST_RELEASE_SCHEMA,
    GROUP_REGISTRATION_SCHEMA, LABELS_SCHEMA, LEASE_RESERVATION_SCHEMA, NAMESPACES_SCHEMA,
    NAMESPACE_PLACEMENT_SCHEMA, OPERATOR_CONTROLS_SCHEMA,
};

/// The oldest schema this build reads (data directories, snapshots, backups, log entries).
pub const OLDEST_SCHEMA: u32 = FIRST_RELEASE_SCHEMA;
/// The newest schema this build reads and writes: what it reports it can apply.
pub const NEWEST_SCHEMA: u32 = NAMESPACE_PLACEMENT_SCHEMA;

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
            } => (*cluster_version).max(CREDENTIALS_SCHEMA),
            command if command.sets_placement() => NAMESPACE_PLACEMENT_SCHEMA,
            command if command.names_a_namespace() => NAMESPACES_SCHEMA,
            Command::ReserveLeases { .. } | Command::ReapLapsed { .. } => LEASE_RESERVATION_SCHEMA,
            Command::RegisterMany { .. } => GROUP_REGISTRATION_SCHEMA,
            Command::Register { labels, .. } if !labels.is_empty() => LABELS_SCHEMA,
            Command::Operator { .. } => OPERATOR_CONTROLS_SCHEMA,
            Command::Register {
                app_version: Some(_),
                ..
            } => APP_VERSION_SCHEMA,
            Command::Register { capacity, .. } if *capacity != DEFAULT_CAPACITY => CAPACITY_SCHEMA,
            Command::Register {
                credential_sha256: Some(_),
                ..
            } => CREDENTIALS_SCHEMA,
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
            | Command::SetDraining { .. } => FIRST_RELEASE_SCHEMA,
        }
    }
}

impl Command {
    /// Whether it names a namespace other than `default`, or changes namespaces (P18.1): only
    /// schema 10 can express it.
    fn names_a_namespace(&self) -> bool {
        let other = |namespace: &str| !leasehold_api::wire::is_default_namespace(namespace);
        match self {
            Command::Register { namespace, .. } | Command::Rebalance { namespace, .. } => {
                other(namespace)
            }
            Command::RegisterMany { registrations, .. } => registrations
                .iter()
                .any(|registration| other(&registration.namespace)),
            Command::Operator { action, .. } => match action {
                OperatorAction::MoveShard { namespace, .. }
                | OperatorAction::Pin { namespace, .. } => other(namespace),
                OperatorAction::CreateNamespace { .. }
                | OperatorAction::SetNamespace { .. }
                | OperatorAction::DeleteNamespace { .. } => true,
                OperatorAction::SetDraining { .. }
                | OperatorAction::Remove { .. }
                | OperatorAction::SetMaintenance { .. }
                | OperatorAction::Membership { .. } => false,
            },
            _ => false,
        }
    }
}

impl Command {
    /// Whether it sets a namespace's placement settings (P18.4) to anything but the managers'
    /// flags: only schema 11 can express it. One that leaves them empty is schema 10's: only a
    /// cluster at version 11 or later holds a namespace with settings for it to clear.
    fn sets_placement(&self) -> bool {
        match self {
            Command::Operator {
                action:
                    OperatorAction::CreateNamespace { placement, .. }
                    | OperatorAction::SetNamespace { placement, .. },
                ..
            } => !placement.is_empty(),
            _ => false,
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
        self.cluster_version.max(FIRST_RELEASE_SCHEMA)
    }
}
