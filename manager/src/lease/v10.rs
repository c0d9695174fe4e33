//! State schema 10: the replicated types exactly as builds of schema 10 encoded them (namespaces,
//! each a shard space with its own configuration, shard table, pins and assignment revision,
//! before namespaces had placement settings of their own), frozen, and the conversions between
//! schema 9 and this one: up (`From`, always) and down (`TryFrom`, when schema 9 can express the
//! value). The pieces schema 10 did not change are schema 9's (themselves schema 8's and older),
//! frozen there.
//!
//! Schema 9 knows one shard space: up, it becomes the `default` namespace and every executor
//! and command is of it; down, a value is expressible only if it is all of `default` (P18.1).
//!
//! Never change a type here: a new shape is a new schema with its own module (docs/PROTOCOL.md,
//! "Versions"). A frozen module knows no newer schema: the conversions between this one and the
//! next are the next one's (`crate::lease::chain` chains them).

use std::collections::{BTreeMap, BTreeSet};

use leasehold_api::wire::DEFAULT_NAMESPACE;
use serde::{Deserialize, Serialize};

pub use super::v9::{
    ClusterConfig, Handoff, LapsedLease, MembershipChange, Move, Renewal, Shard, Tombstone,
    TombstoneReason,
};

use super::schema::{NotExpressible, LEASE_RESERVATION_SCHEMA};
use super::v9;
use super::{Epoch, ExecutorId, ShardId};

#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct Registration {
    pub incarnation: String,
    pub address: String,
    pub name: Option<String>,
    pub credential_sha256: Option<[u8; 32]>,
    pub capacity: u32,
    pub app_version: Option<String>,
    pub labels: BTreeMap<String, String>,
    pub namespace: String,
}

#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub enum Command {
    Init {
        now_ms: u64,
        shard_count: u32,
        lease_duration_ms: u64,
    },
    SetLeaseDuration {
        now_ms: u64,
        lease_duration_ms: u64,
    },
    Register {
        now_ms: u64,
        incarnation: String,
        address: String,
        name: Option<String>,
        credential_sha256: Option<[u8; 32]>,
        capacity: u32,
        app_version: Option<String>,
        labels: BTreeMap<String, String>,
        namespace: String,
    },
    Renew {
        now_ms: u64,
        renewals: Vec<Renewal>,
    },
    Deregister {
        now_ms: u64,
        executor_id: ExecutorId,
    },
    Reap {
        now_ms: u64,
        executor_ids: Vec<ExecutorId>,
    },
    Rebalance {
        now_ms: u64,
        planned_at: u64,
        namespace: String,
        moves: Vec<Move>,
    },
    Release {
        now_ms: u64,
        executor_id: ExecutorId,
        shards: Vec<ShardId>,
        revoke_revision: u64,
    },
    CompleteHandoffs {
        now_ms: u64,
    },
    SetDraining {
        now_ms: u64,
        executor_id: ExecutorId,
        draining: bool,
    },
    SetClusterVersion {
        now_ms: u64,
        cluster_version: u32,
    },
    Operator {
        now_ms: u64,
        actor: String,
        action: OperatorAction,
    },
    RegisterMany {
        now_ms: u64,
        registrations: Vec<Registration>,
    },
    ReserveLeases {
        now_ms: u64,
        executor_ids: Vec<ExecutorId>,
    },
    ReapLapsed {
        now_ms: u64,
        leases: Vec<LapsedLease>,
    },
}

#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub enum OperatorAction {
    SetDraining {
        executor_id: ExecutorId,
        draining: bool,
    },
    Remove {
        executor_id: ExecutorId,
    },
    SetMaintenance {
        on: bool,
    },
    MoveShard {
        namespace: String,
        shard: ShardId,
        to: ExecutorId,
    },
    Pin {
        namespace: String,
        shard: ShardId,
        executor_id: Option<ExecutorId>,
    },
    CreateNamespace {
        name: String,
        shard_count: u32,
        lease_duration_ms: u64,
        max_executors: Option<u32>,
    },
    SetNamespace {
        name: String,
        lease_duration_ms: u64,
        max_executors: Option<u32>,
    },
    DeleteNamespace {
        name: String,
    },
    Membership {
        change: MembershipChange,
    },
}

#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct AuditRecord {
    pub revision: u64,
    pub at_ms: u64,
    pub actor: String,
    pub action: OperatorAction,
}

#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct Executor {
    pub id: ExecutorId,
    pub incarnation: String,
    pub name: Option<String>,
    pub address: String,
    pub lease_expiry_ms: u64,
    pub lease_ttl_told_ms: u64,
    pub lease_reserved_until_ms: u64,
    pub registered_revision: u64,
    pub owned_shards: BTreeSet<ShardId>,
    pub draining: bool,
    pub credential_sha256: Option<[u8; 32]>,
    pub capacity: u32,
    pub app_version: Option<String>,
    pub labels: BTreeMap<String, String>,
    pub namespace: String,
}

/// A namespace as schema 10 encoded it: its derived indexes (the releasing shards, the
/// executors registered in it) were never stored.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct Namespace {
    pub config: ClusterConfig,
    pub max_executors: Option<u32>,
    pub created_revision: u64,
    pub assignment_revision: u64,
    pub shards: Vec<Shard>,
    pub pins: BTreeMap<ShardId, ExecutorId>,
}

/// The state as schema 10 encoded it: every field but the derived index of executors by
/// incarnation, which was never stored.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct LeaseState {
    pub namespaces: BTreeMap<String, Namespace>,
    pub retired_epochs: BTreeMap<String, Epoch>,
    pub revision: u64,
    pub assignment_revision: u64,
    pub executors: BTreeMap<ExecutorId, Executor>,
    pub tombstones: BTreeMap<ExecutorId, Tombstone>,
    pub longest_lease_told_ms: u64,
    pub cluster_version: u32,
    pub maintenance: bool,
    pub audit: Vec<AuditRecord>,
    pub next_executor_number: u64,
}

/// Refuses a namespace other than `default` (schema 9 has no other).
fn of_default(namespace: &str, what: &'static str) -> Result<(), NotExpressible> {
    if namespace == DEFAULT_NAMESPACE {
        Ok(())
    } else {
        Err(NotExpressible(what))
    }
}

// ---- Schema 9 → schema 10 ----

impl From<v9::Command> for Command {
    fn from(command: v9::Command) -> Self {
        use v9::Command as Old;
        match command {
            Old::Init {
                now_ms,
                shard_count,
                lease_duration_ms,
            } => Command::Init {
                now_ms,
                shard_count,
                lease_duration_ms,
            },
            Old::SetLeaseDuration {
                now_ms,
                lease_duration_ms,
            } => Command::SetLeaseDuration {
                now_ms,
                lease_duration_ms,
            },
            Old::Register {
                now_ms,
                incarnation,
                address,
                name,
                credential_sha256,
                capacity,
                app_version,
                labels,
            } => Command::Register {
                now_ms,
                incarnation,
                address,
                name,
                credential_sha256,
                capacity,
                app_version,
                labels,
                namespace: DEFAULT_NAMESPACE.to_owned(),
            },
            Old::Renew { now_ms, renewals } => Command::Renew { now_ms, renewals },
            Old::Deregister {
                now_ms,
                executor_id,
            } => Command::Deregister {
                now_ms,
                executor_id,
            },
            Old::Reap {
                now_ms,
                executor_ids,
            } => Command::Reap {
                now_ms,
                executor_ids,
            },
            Old::Rebalance {
                now_ms,
                planned_at,
                moves,
            } => Command::Rebalance {
                now_ms,
                planned_at,
                namespace: DEFAULT_NAMESPACE.to_owned(),
                moves,
            },
            Old::Release {
                now_ms,
                executor_id,
                shards,
                revoke_revision,
            } => Command::Release {
                now_ms,
                executor_id,
                shards,
                revoke_revision,
            },
            Old::CompleteHandoffs { now_ms } => Command::CompleteHandoffs { now_ms },
            Old::SetDraining {
                now_ms,
                executor_id,
                draining,
            } => Command::SetDraining {
                now_ms,
                executor_id,
                draining,
            },
            Old::SetClusterVersion {
                now_ms,
                cluster_version,
            } => Command::SetClusterVersion {
                now_ms,
                cluster_version,
            },
            Old::Operator {
                now_ms,
                actor,
                action,
            } => Command::Operator {
                now_ms,
                actor,
                action: action.into(),
            },
            Old::RegisterMany {
                now_ms,
                registrations,
            } => Command::RegisterMany {
                now_ms,
                registrations: registrations.into_iter().map(Into::into).collect(),
            },
            Old::ReserveLeases {
                now_ms,
                executor_ids,
            } => Command::ReserveLeases {
                now_ms,
                executor_ids,
            },
            Old::ReapLapsed { now_ms, leases } => Command::ReapLapsed { now_ms, leases },
        }
    }
}

impl From<v9::Registration> for Registration {
    fn from(r: v9::Registration) -> Self {
        Self {
            incarnation: r.incarnation,
            address: r.address,
            name: r.name,
            credential_sha256: r.credential_sha256,
            capacity: r.capacity,
            app_version: r.app_version,
            labels: r.labels,
            namespace: DEFAULT_NAMESPACE.to_owned(),
        }
    }
}

impl From<v9::OperatorAction> for OperatorAction {
    fn from(action: v9::OperatorAction) -> Self {
        use v9::OperatorAction as Old;
        match action {
            Old::SetDraining {
                executor_id,
                draining,
            } => OperatorAction::SetDraining {
                executor_id,
                draining,
            },
            Old::Remove { executor_id } => OperatorAction::Remove { executor_id },
            Old::SetMaintenance { on } => OperatorAction::SetMaintenance { on },
            Old::MoveShard { shard, to } => OperatorAction::MoveShard {
                namespace: DEFAULT_NAMESPACE.to_owned(),
                shard,
                to,
            },
            Old::Pin { shard, executor_id } => OperatorAction::Pin {
                namespace: DEFAULT_NAMESPACE.to_owned(),
                shard,
                executor_id,
            },
            Old::Membership { change } => OperatorAction::Membership { change },
        }
    }
}

impl From<v9::AuditRecord> for AuditRecord {
    fn from(record: v9::AuditRecord) -> Self {
        Self {
            revision: record.revision,
            at_ms: record.at_ms,
            actor: record.actor,
            action: record.action.into(),
        }
    }
}

impl From<v9::LeaseState> for LeaseState {
    fn from(state: v9::LeaseState) -> Self {
        // Schema 9's one shard space is `default`, its plans made against the state's one
        // assignment revision.
        let namespaces = state
            .config
            .map(|config| {
                let default = Namespace {
                    config,
                    max_executors: None,
                    created_revision: 0,
                    assignment_revision: state.assignment_revision,
                    shards: state.shards,
                    pins: state.pins,
                };
                (DEFAULT_NAMESPACE.to_owned(), default)
            })
            .into_iter()
            .collect();
        LeaseState {
            namespaces,
            retired_epochs: BTreeMap::new(),
            revision: state.revision,
            assignment_revision: state.assignment_revision,
            executors: state
                .executors
                .into_iter()
                .map(|(id, e)| {
                    let executor = Executor {
                        id: e.id,
                        incarnation: e.incarnation,
                        name: e.name,
                        address: e.address,
                        lease_expiry_ms: e.lease_expiry_ms,
                        lease_ttl_told_ms: e.lease_ttl_told_ms,
                        lease_reserved_until_ms: e.lease_reserved_until_ms,
                        registered_revision: e.registered_revision,
                        owned_shards: e.owned_shards,
                        draining: e.draining,
                        credential_sha256: e.credential_sha256,
                        capacity: e.capacity,
                        app_version: e.app_version,
                        labels: e.labels,
                        namespace: DEFAULT_NAMESPACE.to_owned(),
                    };
                    (id, executor)
                })
                .collect(),
            tombstones: state.tombstones,
            longest_lease_told_ms: state.longest_lease_told_ms,
            cluster_version: state.cluster_version,
            maintenance: state.maintenance,
            audit: state.audit.into_iter().map(Into::into).collect(),
            next_executor_number: state.next_executor_number,
        }
    }
}

// ---- Schema 10 → schema 9, when schema 9 can express it ----

impl TryFrom<Command> for v9::Command {
    type Error = NotExpressible;

    fn try_from(command: Command) -> Result<Self, NotExpressible> {
        use v9::Command as Old;
        Ok(match command {
            Command::Init {
                now_ms,
                shard_count,
                lease_duration_ms,
            } => Old::Init {
                now_ms,
                shard_count,
                lease_duration_ms,
            },
            Command::SetLeaseDuration {
                now_ms,
                lease_duration_ms,
            } => Old::SetLeaseDuration {
                now_ms,
                lease_duration_ms,
            },
            Command::Register {
                now_ms,
                incarnation,
                address,
                name,
                credential_sha256,
                capacity,
                app_version,
                labels,
                namespace,
            } => {
                of_default(
                    &namespace,
                    "a registration into a namespace first appears in schema 10",
                )?;
                Old::Register {
                    now_ms,
                    incarnation,
                    address,
                    name,
                    credential_sha256,
                    capacity,
                    app_version,
                    labels,
                }
            }
            Command::RegisterMany {
                now_ms,
                registrations,
            } => Old::RegisterMany {
                now_ms,
                registrations: registrations
                    .into_iter()
                    .map(TryInto::try_into)
                    .collect::<Result<_, _>>()?,
            },
            Command::ReserveLeases {
                now_ms,
                executor_ids,
            } => Old::ReserveLeases {
                now_ms,
                executor_ids,
            },
            Command::ReapLapsed { now_ms, leases } => Old::ReapLapsed { now_ms, leases },
            Command::Renew { now_ms, renewals } => Old::Renew { now_ms, renewals },
            Command::Deregister {
                now_ms,
                executor_id,
            } => Old::Deregister {
                now_ms,
                executor_id,
            },
            Command::Reap {
                now_ms,
                executor_ids,
            } => Old::Reap {
                now_ms,
                executor_ids,
            },
            Command::Rebalance {
                now_ms,
                planned_at,
                namespace,
                moves,
            } => {
                of_default(
                    &namespace,
                    "a plan for a namespace first appears in schema 10",
                )?;
                Old::Rebalance {
                    now_ms,
                    planned_at,
                    moves,
                }
            }
            Command::Release {
                now_ms,
                executor_id,
                shards,
                revoke_revision,
            } => Old::Release {
                now_ms,
                executor_id,
                shards,
                revoke_revision,
            },
            Command::CompleteHandoffs { now_ms } => Old::CompleteHandoffs { now_ms },
            Command::SetDraining {
                now_ms,
                executor_id,
                draining,
            } => Old::SetDraining {
                now_ms,
                executor_id,
                draining,
            },
            Command::Operator {
                now_ms,
                actor,
                action,
            } => Old::Operator {
                now_ms,
                actor,
                action: action.try_into()?,
            },
            // A raise past schema 9 is for replicas of that schema only (see `required_schema`).
            Command::SetClusterVersion {
                cluster_version, ..
            } if cluster_version > LEASE_RESERVATION_SCHEMA => {
                return Err(NotExpressible(
                    "a raise of the cluster version above 9 is not expressible in schema 9",
                ))
            }
            Command::SetClusterVersion {
                now_ms,
                cluster_version,
            } => Old::SetClusterVersion {
                now_ms,
                cluster_version,
            },
        })
    }
}

impl TryFrom<Registration> for v9::Registration {
    type Error = NotExpressible;

    fn try_from(r: Registration) -> Result<Self, NotExpressible> {
        of_default(
            &r.namespace,
            "a registration into a namespace first appears in schema 10",
        )?;
        Ok(Self {
            incarnation: r.incarnation,
            address: r.address,
            name: r.name,
            credential_sha256: r.credential_sha256,
            capacity: r.capacity,
            app_version: r.app_version,
            labels: r.labels,
        })
    }
}

impl TryFrom<OperatorAction> for v9::OperatorAction {
    type Error = NotExpressible;

    fn try_from(action: OperatorAction) -> Result<Self, NotExpressible> {
        use v9::OperatorAction as Old;
        Ok(match action {
            OperatorAction::SetDraining {
                executor_id,
                draining,
            } => Old::SetDraining {
                executor_id,
                draining,
            },
            OperatorAction::Remove { executor_id } => Old::Remove { executor_id },
            OperatorAction::SetMaintenance { on } => Old::SetMaintenance { on },
            OperatorAction::MoveShard {
                namespace,
                shard,
                to,
            } => {
                of_default(
                    &namespace,
                    "a move in a namespace first appears in schema 10",
                )?;
                Old::MoveShard { shard, to }
            }
            OperatorAction::Pin {
                namespace,
                shard,
                executor_id,
            } => {
                of_default(
                    &namespace,
                    "a pin in a namespace first appears in schema 10",
                )?;
                Old::Pin { shard, executor_id }
            }
            OperatorAction::CreateNamespace { .. }
            | OperatorAction::SetNamespace { .. }
            | OperatorAction::DeleteNamespace { .. } => {
                return Err(NotExpressible("namespaces first appear in schema 10"))
            }
            OperatorAction::Membership { change } => Old::Membership { change },
        })
    }
}

impl TryFrom<AuditRecord> for v9::AuditRecord {
    type Error = NotExpressible;

    fn try_from(record: AuditRecord) -> Result<Self, NotExpressible> {
        Ok(Self {
            revision: record.revision,
            at_ms: record.at_ms,
            actor: record.actor,
            action: record.action.try_into()?,
        })
    }
}

impl TryFrom<LeaseState> for v9::LeaseState {
    type Error = NotExpressible;

    fn try_from(mut state: LeaseState) -> Result<Self, NotExpressible> {
        if state.cluster_version > LEASE_RESERVATION_SCHEMA {
            return Err(NotExpressible(
                "a cluster version above 9 is not expressible in schema 9",
            ));
        }
        if state
            .namespaces
            .keys()
            .any(|name| name != DEFAULT_NAMESPACE)
            || !state.retired_epochs.is_empty()
        {
            return Err(NotExpressible("namespaces first appear in schema 10"));
        }
        let default = state.namespaces.remove(DEFAULT_NAMESPACE);
        if default
            .as_ref()
            .is_some_and(|default| default.max_executors.is_some())
        {
            return Err(NotExpressible(
                "a namespace's executor bound first appears in schema 10",
            ));
        }
        if state
            .executors
            .values()
            .any(|e| e.namespace != DEFAULT_NAMESPACE)
        {
            return Err(NotExpressible(
                "an executor of a namespace first appears in schema 10",
            ));
        }
        let (config, shards, pins) = match default {
            Some(default) => (Some(default.config), default.shards, default.pins),
            None => (None, Vec::new(), BTreeMap::new()),
        };
        Ok(v9::LeaseState {
            config,
            revision: state.revision,
            assignment_revision: state.assignment_revision,
            executors: state
                .executors
                .into_iter()
                .map(|(id, e)| {
                    let executor = v9::Executor {
                        id: e.id,
                        incarnation: e.incarnation,
                        name: e.name,
                        address: e.address,
                        lease_expiry_ms: e.lease_expiry_ms,
                        lease_ttl_told_ms: e.lease_ttl_told_ms,
                        lease_reserved_until_ms: e.lease_reserved_until_ms,
                        registered_revision: e.registered_revision,
                        owned_shards: e.owned_shards,
                        draining: e.draining,
                        credential_sha256: e.credential_sha256,
                        capacity: e.capacity,
                        app_version: e.app_version,
                        labels: e.labels,
                    };
                    (id, executor)
                })
                .collect(),
            shards,
            tombstones: state.tombstones,
            longest_lease_told_ms: state.longest_lease_told_ms,
            cluster_version: state.cluster_version,
            maintenance: state.maintenance,
            pins,
            audit: state
                .audit
                .into_iter()
                .map(TryInto::try_into)
                .collect::<Result<_, NotExpressible>>()?,
            next_executor_number: state.next_executor_number,
        })
    }
}
