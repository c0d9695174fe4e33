//! State schema 3: the replicated types exactly as builds of schema 3 encoded them (the committed
//! cluster version and executor credentials, before capacities), frozen.
//!
//! Log entries, snapshots and backups of schema 3 are decoded into these types and converted to
//! this build's (`From`); a command or state that schema 3 can express is converted back and
//! written in it (`TryFrom`), so a replica of schema 3 reads it. Never change a type here: a new
//! shape is a new schema with its own module (docs/PROTOCOL.md, "Versions"). The pieces schema 3
//! did not change are schema 2's, frozen there.

use std::collections::{BTreeMap, BTreeSet};

use serde::{Deserialize, Serialize};

pub use super::v2::{ClusterConfig, Handoff, Move, Renewal, Shard, Tombstone, TombstoneReason};

use super::schema::{NotExpressible, SCHEMA_CLUSTER_VERSION};
use super::{ExecutorId, ShardId, DEFAULT_CAPACITY};

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
}

#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct Executor {
    pub id: ExecutorId,
    pub incarnation: String,
    pub name: Option<String>,
    pub address: String,
    pub lease_expiry_ms: u64,
    pub lease_ttl_told_ms: u64,
    pub registered_revision: u64,
    pub owned_shards: BTreeSet<ShardId>,
    pub draining: bool,
    pub credential_sha256: Option<[u8; 32]>,
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
}

// ---- Schema 3 → this build ----

impl From<Command> for super::Command {
    fn from(command: Command) -> Self {
        use super::Command as Now;
        match command {
            Command::Init {
                now_ms,
                shard_count,
                lease_duration_ms,
            } => Now::Init {
                now_ms,
                shard_count,
                lease_duration_ms,
            },
            Command::SetLeaseDuration {
                now_ms,
                lease_duration_ms,
            } => Now::SetLeaseDuration {
                now_ms,
                lease_duration_ms,
            },
            Command::Register {
                now_ms,
                incarnation,
                address,
                name,
                credential_sha256,
            } => Now::Register {
                now_ms,
                incarnation,
                address,
                name,
                credential_sha256,
                // Schema 3 had no capacities: every executor counted the same (P5.4).
                capacity: DEFAULT_CAPACITY,
            },
            Command::Renew { now_ms, renewals } => Now::Renew {
                now_ms,
                renewals: renewals.into_iter().map(Into::into).collect(),
            },
            Command::Deregister {
                now_ms,
                executor_id,
            } => Now::Deregister {
                now_ms,
                executor_id,
            },
            Command::Reap {
                now_ms,
                executor_ids,
            } => Now::Reap {
                now_ms,
                executor_ids,
            },
            Command::Rebalance {
                now_ms,
                planned_at,
                moves,
            } => Now::Rebalance {
                now_ms,
                planned_at,
                moves: moves.into_iter().map(Into::into).collect(),
            },
            Command::Release {
                now_ms,
                executor_id,
                shards,
                revoke_revision,
            } => Now::Release {
                now_ms,
                executor_id,
                shards,
                revoke_revision,
            },
            Command::CompleteHandoffs { now_ms } => Now::CompleteHandoffs { now_ms },
            Command::SetDraining {
                now_ms,
                executor_id,
                draining,
            } => Now::SetDraining {
                now_ms,
                executor_id,
                draining,
            },
            Command::SetClusterVersion {
                now_ms,
                cluster_version,
            } => Now::SetClusterVersion {
                now_ms,
                cluster_version,
            },
        }
    }
}

impl From<LeaseState> for super::LeaseState {
    fn from(state: LeaseState) -> Self {
        let mut migrated = super::LeaseState {
            config: state.config.map(Into::into),
            revision: state.revision,
            assignment_revision: state.assignment_revision,
            executors: state
                .executors
                .into_iter()
                .map(|(id, e)| {
                    let executor = super::Executor {
                        id: e.id,
                        incarnation: e.incarnation,
                        name: e.name,
                        address: e.address,
                        lease_expiry_ms: e.lease_expiry_ms,
                        lease_ttl_told_ms: e.lease_ttl_told_ms,
                        registered_revision: e.registered_revision,
                        owned_shards: e.owned_shards.into_iter().collect(),
                        draining: e.draining,
                        credential_sha256: e.credential_sha256,
                        capacity: DEFAULT_CAPACITY,
                    };
                    (id, executor)
                })
                .collect(),
            shards: state.shards.into_iter().map(Into::into).collect(),
            tombstones: state
                .tombstones
                .into_iter()
                .map(|(id, t)| (id, super::Tombstone::from(t)))
                .collect(),
            longest_lease_told_ms: state.longest_lease_told_ms,
            cluster_version: state.cluster_version,
            releasing: Default::default(),
            by_incarnation: Default::default(),
        };
        migrated.rebuild_indexes();
        migrated
    }
}

// ---- This build → schema 3, when schema 3 can express it ----

impl TryFrom<&super::Command> for Command {
    type Error = NotExpressible;

    fn try_from(command: &super::Command) -> Result<Self, NotExpressible> {
        use super::Command as Now;
        Ok(match command.clone() {
            Now::Init {
                now_ms,
                shard_count,
                lease_duration_ms,
            } => Command::Init {
                now_ms,
                shard_count,
                lease_duration_ms,
            },
            Now::SetLeaseDuration {
                now_ms,
                lease_duration_ms,
            } => Command::SetLeaseDuration {
                now_ms,
                lease_duration_ms,
            },
            Now::Register { capacity, .. } if capacity != DEFAULT_CAPACITY => {
                return Err(NotExpressible(
                    "a registration with a capacity other than 1 first appears in schema 4",
                ))
            }
            Now::Register {
                now_ms,
                incarnation,
                address,
                name,
                credential_sha256,
                capacity: _,
            } => Command::Register {
                now_ms,
                incarnation,
                address,
                name,
                credential_sha256,
            },
            Now::Renew { now_ms, renewals } => Command::Renew {
                now_ms,
                renewals: renewals.iter().map(Into::into).collect(),
            },
            Now::Deregister {
                now_ms,
                executor_id,
            } => Command::Deregister {
                now_ms,
                executor_id,
            },
            Now::Reap {
                now_ms,
                executor_ids,
            } => Command::Reap {
                now_ms,
                executor_ids,
            },
            Now::Rebalance {
                now_ms,
                planned_at,
                moves,
            } => Command::Rebalance {
                now_ms,
                planned_at,
                moves: moves.iter().map(Into::into).collect(),
            },
            Now::Release {
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
            Now::CompleteHandoffs { now_ms } => Command::CompleteHandoffs { now_ms },
            Now::SetDraining {
                now_ms,
                executor_id,
                draining,
            } => Command::SetDraining {
                now_ms,
                executor_id,
                draining,
            },
            // A raise past schema 3 is for replicas of that schema only (see `required_schema`).
            Now::SetClusterVersion {
                cluster_version, ..
            } if cluster_version > SCHEMA_CLUSTER_VERSION => {
                return Err(NotExpressible(
                    "a raise of the cluster version above 3 is not expressible in schema 3",
                ))
            }
            Now::SetClusterVersion {
                now_ms,
                cluster_version,
            } => Command::SetClusterVersion {
                now_ms,
                cluster_version,
            },
        })
    }
}

impl TryFrom<&super::LeaseState> for LeaseState {
    type Error = NotExpressible;

    fn try_from(state: &super::LeaseState) -> Result<Self, NotExpressible> {
        if state.cluster_version > SCHEMA_CLUSTER_VERSION {
            return Err(NotExpressible(
                "a cluster version above 3 is not expressible in schema 3",
            ));
        }
        if state
            .executors
            .values()
            .any(|e| e.capacity != DEFAULT_CAPACITY)
        {
            return Err(NotExpressible(
                "an executor with a capacity other than 1 is not expressible in schema 3",
            ));
        }
        Ok(LeaseState {
            config: state.config.as_ref().map(Into::into),
            revision: state.revision,
            assignment_revision: state.assignment_revision,
            executors: state
                .executors
                .iter()
                .map(|(id, e)| {
                    let executor = Executor {
                        id: e.id.clone(),
                        incarnation: e.incarnation.clone(),
                        name: e.name.clone(),
                        address: e.address.clone(),
                        lease_expiry_ms: e.lease_expiry_ms,
                        lease_ttl_told_ms: e.lease_ttl_told_ms,
                        registered_revision: e.registered_revision,
                        owned_shards: e.owned_shards.iter().copied().collect(),
                        draining: e.draining,
                        credential_sha256: e.credential_sha256,
                    };
                    (id.clone(), executor)
                })
                .collect(),
            shards: state.shards.iter().map(Into::into).collect(),
            tombstones: state
                .tombstones
                .iter()
                .map(|(id, t)| (id.clone(), t.into()))
                .collect(),
            longest_lease_told_ms: state.longest_lease_told_ms,
            cluster_version: state.cluster_version,
        })
    }
}
