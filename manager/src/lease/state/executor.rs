//! Executors as the state records them (P2.1), their lease rules (P3), and what they leave
//! behind (tombstones) and are told (grants).

use super::*;

/// One registered executor (P2.1).
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct Executor {
    /// Minted by the state machine at registration.
    pub id: ExecutorId,
    /// The idempotency key of its registration (P4.4).
    pub incarnation: String,
    /// Operator label, no protocol meaning.
    pub name: Option<String>,
    /// Advertised base URL pushes go to (P8.1).
    pub address: String,
    /// Absolute expiry on the leader clock (P2.3). Only ever moves forwards (P3.4).
    pub lease_expiry_ms: u64,
    /// The lease remaining it was told in its last grant (P2.1).
    pub lease_ttl_told_ms: u64,
    /// Lease time reserved ahead of its grants (`ReserveLeases`, P6.6), on the leader clock; 0
    /// when none was (and for every executor of release 0.1.0). A leader may answer its
    /// renewals from memory with copies that end by then, so every rule that waits for its
    /// copies to end waits for the later of this and `lease_expiry_ms` ([`Executor::lease_bound_ms`]).
    pub lease_reserved_until_ms: u64,
    /// Log index of the entry that registered it.
    pub registered_revision: u64,
    /// Every shard whose `owner` is this executor, including shards releasing from it. The shard
    /// table is the authority; this index is kept equal to it so an executor's set is read
    /// without scanning every shard ([`LeaseState::consistency_violations`] checks the two agree).
    pub owned_shards: OrdSet<ShardId>,
    /// Set by an operator (`SetDraining`): the planner gives it nothing and moves its shards to
    /// others through the normal handoff; it keeps its lease and renews as usual.
    pub draining: bool,
    /// SHA-256 of the credential it registered with (P13.4); its renew, release and deregister
    /// must present the credential. `None`: it registered without one (schema 2, P13.5).
    pub credential_sha256: Option<[u8; 32]>,
    /// Its capacity (P15.1), a positive weight: the planner gives it a share of the shards, or
    /// of the load, in proportion. Set at registration, never changed (a retried registration
    /// keeps the first); [`crate::lease::DEFAULT_CAPACITY`] for one registered without (and every executor of 0.1.0).
    pub capacity: u32,
    /// The application version it registered with (P17.3), checked by
    /// `leasehold_api::wire::check_app_version`; `None` when it stated none (and for every
    /// executor of 0.1.0). Set at registration, never changed: an executor that restarts
    /// as a newer version registers anew (a new incarnation), so it is a newcomer.
    pub app_version: Option<String>,
    /// Its labels (P18.3), checked by `leasehold_api::wire::check_labels`; empty when it stated
    /// none (and for every executor of 0.1.0). `zone` is the failure domain the planner
    /// spreads shards over. Set at registration, never changed.
    pub labels: leasehold_api::wire::Labels,
    /// The namespace it registered into (P18.1): its shards, epochs, lease duration and plans
    /// are that namespace's, and every shard number in its requests is one of that namespace's.
    /// `default` for every executor of 0.1.0. Set at registration, never changed.
    pub namespace: String,
    /// It follows a change of layout (P20.3): it maps keys by the shard count of the newest set
    /// it applied. A namespace reshards only while all its executors do. Set at registration,
    /// never changed; false, and left out of every record, for one that did not say so.
    #[serde(default, skip_serializing_if = "std::ops::Not::not")]
    pub follows_generations: bool,
}

impl Executor {
    /// Lease time left at `now_ms`, zero once lapsed; what a grant carries (P3.1).
    pub fn lease_remaining_ms(&self, now_ms: u64) -> u64 {
        self.lease_expiry_ms.saturating_sub(now_ms)
    }

    /// Whether every copy of the lease has lapsed on the manager clock
    /// ([`Executor::lease_bound_ms`]): only once the bound's millisecond has passed. The leader stamps a grant with its clock truncated to the millisecond, which
    /// can be up to a millisecond before the instant the executor sent the request and anchored
    /// its copy at (P3.2), so the executor's copy may end up to a millisecond after the expiry
    /// recorded here; lapsing a whole millisecond later keeps the manager's copy the later one.
    pub fn lease_lapsed(&self, now_ms: u64) -> bool {
        lapsed(self.lease_bound_ms(), now_ms)
    }

    /// Its lease as a leader judges it (P6.7): the later of the expiry the log recorded and the
    /// end of the copies that leader's term told it from memory, `told_from_memory_until_ms`.
    pub fn judged_expiry_ms(&self, told_from_memory_until_ms: Option<u64>) -> u64 {
        told_from_memory_until_ms
            .map_or(self.lease_expiry_ms, |told| told.max(self.lease_expiry_ms))
    }

    /// When its lease ends as a replica can tell: on the leader, which passes what its term told
    /// from memory, its judgment (P6.7); on a follower (`None`), which does not see those
    /// renewals, the latest the lease may run (P6.6). What the views and gauges show.
    pub fn lease_ends_ms(&self, told_from_memory: Option<&ToldFromMemory>) -> u64 {
        match told_from_memory {
            Some(told) => self.judged_expiry_ms(told.get(&self.id).copied()),
            None => self.lease_bound_ms(),
        }
    }

    /// The latest instant any copy of its lease may end (P6.6): the expiry of its grants the log
    /// recorded, or its reservation, for copies a leader told from memory, whichever is later.
    pub fn lease_bound_ms(&self) -> u64 {
        self.lease_expiry_ms.max(self.lease_reserved_until_ms)
    }
}

/// Whether a lease copy ending at `expiry_ms` on the manager clock has surely ended on the
/// holder's at `now_ms`: only once the expiry's millisecond has passed (see
/// [`Executor::lease_lapsed`]). Every expiry the manager acts on (reaps, handoffs completed on
/// expiry) goes through this one rule.
pub fn lapsed(expiry_ms: u64, now_ms: u64) -> bool {
    first_lapsed_ms(expiry_ms).is_some_and(|at_ms| at_ms <= now_ms)
}

/// The first manager-clock millisecond at which a copy ending at `expiry_ms` counts as lapsed
/// ([`lapsed`]): the one after it; `None` for a copy ending at the end of time, which never does.
pub fn first_lapsed_ms(expiry_ms: u64) -> Option<u64> {
    expiry_ms.checked_add(1)
}

/// What a leader's term told each executor from memory (P6.8): the latest end, on the leader
/// clock, of the copies of its lease it told without a log entry. The leader judges leases by it
/// (P6.7); it is the leader's soft state, never replicated.
pub type ToldFromMemory = std::collections::BTreeMap<ExecutorId, u64>;

/// Why an executor left.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
pub enum TombstoneReason {
    /// It deregistered (P3.7).
    Deregistered,
    /// Its lease lapsed and the leader reaped it (P3.8).
    Reaped,
}

/// Record of a recently removed executor, so a retried request can be told "already done"
/// (P2.1, P2.4, P7.2).
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct Tombstone {
    /// The removed executor.
    pub executor_id: ExecutorId,
    /// Its incarnation, for operators tracing a process.
    pub incarnation: String,
    /// Why it left.
    pub reason: TombstoneReason,
    /// Log index of the entry that removed it; tombstones are pruned oldest first by it.
    pub removed_revision: u64,
    /// Leader clock when it was removed.
    pub removed_at_ms: u64,
}

/// What a register or renew reply carries (§9): the only message that moves an executor's lease
/// clock (P3.3).
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct Grant {
    /// The executor the grant is for.
    pub executor_id: ExecutorId,
    /// Lease remaining, never an absolute time (P3.1); anchored by the executor at its send
    /// instant (P3.2).
    pub lease_ttl_ms: u64,
    /// The revision the set was read from (P4.1).
    pub revision: u64,
    /// Needed to map keys to shards.
    pub shard_count: u32,
    /// Its namespace's generation (P20.1), which `shard_count` belongs to.
    #[serde(default)]
    pub generation: u64,
    /// The executor's delivered set: shards it owns that are not releasing from it, ascending.
    pub shards: Vec<(ShardId, Epoch)>,
    /// Its secondaries (P19.1), each at the shard's epoch, ascending.
    #[serde(default)]
    pub secondaries: Vec<(ShardId, Epoch)>,
}

impl From<Grant> for leasehold_api::wire::Grant {
    fn from(grant: Grant) -> Self {
        Self {
            executor_id: grant.executor_id,
            lease_ttl_ms: grant.lease_ttl_ms,
            revision: grant.revision,
            shard_count: grant.shard_count,
            generation: grant.generation,
            shards: grant
                .shards
                .into_iter()
                .map(|(shard, epoch)| leasehold_api::wire::ShardEpoch { shard, epoch })
                .collect(),
            shard_runs: None,
            unchanged: false,
            secondaries: grant
                .secondaries
                .into_iter()
                .map(|(shard, epoch)| leasehold_api::wire::ShardEpoch { shard, epoch })
                .collect(),
        }
    }
}
