//! State schema 9: the replicated types exactly as builds of schema 9 encoded them (lease
//! reservations and reaping by the leader's judgment, before namespaces), frozen, and the
//! conversions between schema 8 and this one: up (`From`, always) and down (`TryFrom`, when
//! schema 8 can express the value). The pieces schema 9 did not change are schema 8's (themselves
//! schema 7's and older), frozen there.
//!
//! Never change a type here: a new shape is a new schema with its own module (docs/PROTOCOL.md,
//! "Versions"). A frozen module knows no newer schema: the conversions between this one and the
//! next are the next one's (`crate::lease::chain` chains them).

use std::collections::{BTreeMap, BTreeSet};

use serde::{Deserialize, Serialize};

pub use super::v8::{
    AuditRecord, ClusterConfig, Handoff, MembershipChange, Move, OperatorAction, Registration,
    Renewal, Shard, Tombstone, TombstoneReason,
};

use super::schema::{NotExpressible, GROUP_REGISTRATION_SCHEMA};
use super::v8;
use super::{ExecutorId, ShardId};

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
pub struct LapsedLease {
    pub executor_id: ExecutorId,
    pub judged_expiry_ms: u64,
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
}

#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct LeaseState {
    pub config: Option<ClusterConfig>,
    pub revision: u64,
    pub assignment_revision: u64,
    pub executors: BTreeMap<ExecutorId, Executor>,
    pub shards: Vec<Shard>,
    pub tombstones: BTreeMap<ExecutorId, Tombstone>,
    pub longest_lease_told_ms: u64,
    pub cluster_version: u32,
    pub maintenance: bool,
    pub pins: BTreeMap<ShardId, ExecutorId>,
    pub audit: Vec<AuditRecord>,
    pub next_executor_number: u64,
}

// ---- Schema 8 → schema 9 ----

impl From<v8::Command> for Command {
    fn from(command: v8::Command) -> Self {
        use v8::Command as Old;
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
                action,
            },
            Old::RegisterMany {
                now_ms,
                registrations,
            } => Command::RegisterMany {
                now_ms,
                registrations,
            },
        }
    }
}

impl From<v8::LeaseState> for LeaseState {
    fn from(state: v8::LeaseState) -> Self {
        LeaseState {
            config: state.config,
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
                        // Schema 8 reserved no lease time ahead of its grants (P6.6).
                        lease_reserved_until_ms: 0,
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
            shards: state.shards,
            tombstones: state.tombstones,
            longest_lease_told_ms: state.longest_lease_told_ms,
            cluster_version: state.cluster_version,
            maintenance: state.maintenance,
            pins: state.pins,
            audit: state.audit,
            next_executor_number: state.next_executor_number,
        }
    }
}

// ---- Schema 9 → schema 8, when schema 8 can express it ----

impl TryFrom<Command> for v8::Command {
    type Error = NotExpressible;

    fn try_from(command: Command) -> Result<Self, NotExpressible> {
        use v8::Command as Old;
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
            } => Old::Register {
                now_ms,
                incarnation,
                address,
                name,
                credential_sha256,
                capacity,
                app_version,
                labels,
            },
            Command::RegisterMany {
                now_ms,
                registrations,
            } => Old::RegisterMany {
                now_ms,
                registrations,
            },
            Command::ReserveLeases { .. } => {
                return Err(NotExpressible(
                    "lease reservations first appear in schema 9",
                ))
            }
            Command::ReapLapsed { .. } => {
                return Err(NotExpressible(
                    "reaping by the leader's judgment first appears in schema 9",
                ))
            }
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
                moves,
            } => Old::Rebalance {
                now_ms,
                planned_at,
                moves,
            },
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
                action,
            },
            // A raise past schema 8 is for replicas of that schema only (see `required_schema`).
            Command::SetClusterVersion {
                cluster_version, ..
            } if cluster_version > GROUP_REGISTRATION_SCHEMA => {
                return Err(NotExpressible(
                    "a raise of the cluster version above 8 is not expressible in schema 8",
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

impl TryFrom<LeaseState> for v8::LeaseState {
    type Error = NotExpressible;

    fn try_from(state: LeaseState) -> Result<Self, NotExpressible> {
        if state.cluster_version > GROUP_REGISTRATION_SCHEMA {
            return Err(NotExpressible(
                "a cluster version above 8 is not expressible in schema 8",
            ));
        }
        if state
            .executors
            .values()
            .any(|e| e.lease_reserved_until_ms != 0)
        {
            return Err(NotExpressible(
                "an executor's lease reservation is not expressible in schema 8",
            ));
        }
        Ok(v8::LeaseState {
            config: state.config,
            revision: state.revision,
            assignment_revision: state.assignment_revision,
            executors: state
                .executors
                .into_iter()
                .map(|(id, e)| {
                    let executor = v8::Executor {
                        id: e.id,
                        incarnation: e.incarnation,
                        name: e.name,
                        address: e.address,
                        lease_expiry_ms: e.lease_expiry_ms,
                        lease_ttl_told_ms: e.lease_ttl_told_ms,
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
            shards: state.shards,
            tombstones: state.tombstones,
            longest_lease_told_ms: state.longest_lease_told_ms,
            cluster_version: state.cluster_version,
            maintenance: state.maintenance,
            pins: state.pins,
            audit: state.audit,
            next_executor_number: state.next_executor_number,
        })
    }
}
