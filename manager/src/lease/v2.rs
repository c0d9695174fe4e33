//! State schema 2: the replicated types exactly as release 0.1.0 encoded them, frozen.
//!
//! Never change a type here: a new shape is a new schema with its own module (docs/PROTOCOL.md,
//! "Versions"). A frozen module knows no newer schema: records of schema 2 are read through
//! schema 3's conversions (`super::v3`, which converts from and to this one), and those through
//! each newer schema's in turn (`crate::lease::chain`).

use std::collections::{BTreeMap, BTreeSet};

use serde::{Deserialize, Serialize};

use super::{Epoch, ExecutorId, ShardId};

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
