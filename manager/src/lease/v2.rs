//! State schema 2: the replicated types exactly as release 0.1.0 encoded them, frozen.
//!
//! Log entries, snapshots and backups of schema 2 are decoded into these types and converted to
//! this build's (`From`); a command or state that schema 2 can express is converted back and
//! written in it (`TryFrom`), so a 0.1.0 replica reads it. Never change a type here: a new shape
//! is a new schema with its own module (docs/PROTOCOL.md, "Versions").

use std::collections::{BTreeMap, BTreeSet};

use serde::{Deserialize, Serialize};

use super::schema::{NotExpressible, SCHEMA_0_1_0};
use super::{Epoch, ExecutorId, ShardId, DEFAULT_CAPACITY};

#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct Renewal {
    pub executor_id: ExecutorId,
    pub claims: Vec<(ShardId, Epoch)>,
    pub revision: u64,
}

#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct Move {
    pub shard: ShardId,
    pub to: ExecutorId,
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
}

#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
pub struct ClusterConfig {
    pub shard_count: u32,
    pub lease_duration_ms: u64,
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
}

#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct Handoff {
    pub to: Option<ExecutorId>,
    pub revoke_revision: u64,
    pub from_grant_expiry_ms: u64,
}

#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct Shard {
    pub id: ShardId,
    pub owner: Option<ExecutorId>,
    pub epoch: Epoch,
    pub handoff: Option<Handoff>,
}

#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
pub enum TombstoneReason {
    Deregistered,
    Reaped,
}

#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct Tombstone {
    pub executor_id: ExecutorId,
    pub incarnation: String,
    pub reason: TombstoneReason,
    pub removed_revision: u64,
    pub removed_at_ms: u64,
}

#[derive(Debug, Clone, Default, PartialEq, Serialize, Deserialize)]
pub struct LeaseState {
    pub config: Option<ClusterConfig>,
    pub revision: u64,
    pub assignment_revision: u64,
    pub executors: BTreeMap<ExecutorId, Executor>,
    pub shards: Vec<Shard>,
    pub tombstones: BTreeMap<ExecutorId, Tombstone>,
    pub longest_lease_told_ms: u64,
}

// ---- Schema 2 → this build ----

impl From<Renewal> for super::Renewal {
    fn from(r: Renewal) -> Self {
        Self {
            executor_id: r.executor_id,
            claims: r.claims,
            revision: r.revision,
        }
    }
}

impl From<Move> for super::Move {
    fn from(m: Move) -> Self {
        Self {
            shard: m.shard,
            to: m.to,
        }
    }
}

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
            } => Now::Register {
                now_ms,
                incarnation,
                address,
                name,
                // Schema 2 had no credentials: its executors registered without (P13.5).
                credential_sha256: None,
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
        }
    }
}

impl From<ClusterConfig> for super::ClusterConfig {
    fn from(c: ClusterConfig) -> Self {
        Self {
            shard_count: c.shard_count,
            lease_duration_ms: c.lease_duration_ms,
        }
    }
}

impl From<Shard> for super::Shard {
    fn from(s: Shard) -> Self {
        Self {
            id: s.id,
            owner: s.owner,
            epoch: s.epoch,
            handoff: s.handoff.map(|h| super::Handoff {
                to: h.to,
                revoke_revision: h.revoke_revision,
                from_grant_expiry_ms: h.from_grant_expiry_ms,
            }),
        }
    }
}

impl From<Tombstone> for super::Tombstone {
    fn from(t: Tombstone) -> Self {
        Self {
            executor_id: t.executor_id,
            incarnation: t.incarnation,
            reason: match t.reason {
                TombstoneReason::Deregistered => super::TombstoneReason::Deregistered,
                TombstoneReason::Reaped => super::TombstoneReason::Reaped,
            },
            removed_revision: t.removed_revision,
            removed_at_ms: t.removed_at_ms,
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
                        credential_sha256: None,
                        // Schema 2 had no capacities: every executor counted the same (P5.4).
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
            // Schema 2 had no cluster version: a cluster of 0.1.0 replicas was at schema 2.
            cluster_version: SCHEMA_0_1_0,
            releasing: Default::default(),
            by_incarnation: Default::default(),
        };
        migrated.rebuild_indexes();
        migrated
    }
}

// ---- This build → schema 2, when schema 2 can express it ----

impl From<&super::Renewal> for Renewal {
    fn from(r: &super::Renewal) -> Self {
        Self {
            executor_id: r.executor_id.clone(),
            claims: r.claims.clone(),
            revision: r.revision,
        }
    }
}

impl From<&super::Move> for Move {
    fn from(m: &super::Move) -> Self {
        Self {
            shard: m.shard,
            to: m.to.clone(),
        }
    }
}

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
            Now::Register {
                credential_sha256: Some(_),
                ..
            } => {
                return Err(NotExpressible(
                    "a registration with a credential first appears in schema 3",
                ))
            }
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
                credential_sha256: None,
                capacity: _,
            } => Command::Register {
                now_ms,
                incarnation,
                address,
                name,
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
            Now::SetClusterVersion { .. } => {
                return Err(NotExpressible(
                    "SetClusterVersion first appears in schema 3",
                ))
            }
        })
    }
}

impl TryFrom<&super::LeaseState> for LeaseState {
    type Error = NotExpressible;

    fn try_from(state: &super::LeaseState) -> Result<Self, NotExpressible> {
        if state.cluster_version > SCHEMA_0_1_0 {
            return Err(NotExpressible(
                "a cluster version above 2 is not expressible in schema 2",
            ));
        }
        if state
            .executors
            .values()
            .any(|e| e.credential_sha256.is_some())
        {
            return Err(NotExpressible(
                "an executor with a credential is not expressible in schema 2",
            ));
        }
        if state
            .executors
            .values()
            .any(|e| e.capacity != DEFAULT_CAPACITY)
        {
            return Err(NotExpressible(
                "an executor with a capacity other than 1 is not expressible in schema 2",
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
        })
    }
}

impl From<&super::ClusterConfig> for ClusterConfig {
    fn from(c: &super::ClusterConfig) -> Self {
        Self {
            shard_count: c.shard_count,
            lease_duration_ms: c.lease_duration_ms,
        }
    }
}

impl From<&super::Shard> for Shard {
    fn from(s: &super::Shard) -> Self {
        Self {
            id: s.id,
            owner: s.owner.clone(),
            epoch: s.epoch,
            handoff: s.handoff.as_ref().map(|h| Handoff {
                to: h.to.clone(),
                revoke_revision: h.revoke_revision,
                from_grant_expiry_ms: h.from_grant_expiry_ms,
            }),
        }
    }
}

impl From<&super::Tombstone> for Tombstone {
    fn from(t: &super::Tombstone) -> Self {
        Self {
            executor_id: t.executor_id.clone(),
            incarnation: t.incarnation.clone(),
            reason: match t.reason {
                super::TombstoneReason::Deregistered => TombstoneReason::Deregistered,
                super::TombstoneReason::Reaped => TombstoneReason::Reaped,
            },
            removed_revision: t.removed_revision,
            removed_at_ms: t.removed_at_ms,
        }
    }
}
