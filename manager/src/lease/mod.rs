//! The pure lease state machine and rebalance planner (PROTOCOL §2–§5, invariants I1–I2).
//!
//! Everything in this module is deterministic (P2.2): no clock, no random source, no network.
//! Time enters only as the `now_ms` the leader stamps into each [`Command`] when it proposes it
//! (P2.3), on the leader's monotonic-anchored clock, and every expiry is stored as an absolute
//! millisecond on that clock so a new leader can read it.
//!
//! The pieces:
//! - [`LeaseState`] (in `state.rs`): the replicated state (P2.1) and its read-only views for the
//!   HTTP handlers and the leader loop.
//! - [`LeaseState::apply`] (in `apply.rs`): applies one committed [`Command`] and returns an
//!   [`Outcome`] that carries everything the caller needs to answer and to fan out pushes
//!   ([`Effects`]), so no caller re-derives anything from the state.
//! - [`plan_rebalance`] (in `planner.rs`): the leader's even-spread, fewest-moves plan (P5.4),
//!   proposed as a conditional [`Command::Rebalance`] (P2.4, P5.1).
//!
//! Every command is idempotent or conditional (P2.4), so a retried or duplicated entry is
//! harmless; a refused command changes nothing at all, not even the revision (P5.1).
//!
//! Collections are ordered (`imbl`'s `OrdMap`, `OrdSet` and `Vector`, persistent so a read takes a
//! cheap copy of the state; `BTreeMap`, `BTreeSet` and `Vec` elsewhere), never hashed, so
//! iteration order, and therefore every outcome and every encoded snapshot, is the same on every
//! replica.

pub mod answer;
mod apply;
mod command;
mod outcome;
mod planner;
pub mod schema;
mod state;

// The builders of commands and states are shared with the other modules' tests.
#[cfg(test)]
pub(crate) mod tests;

pub use answer::{answer, Answer, CommandAnswer, ExecutorAnswer, Mismatch};
pub use apply::claims_are_exactly;
pub use command::{
    Command, LapsedLease, MembershipChange, Move, OperatorAction, Registration, Renewal,
    SecondaryChange,
};
pub use outcome::{Effects, Outcome, RefusalReason, RegisterResult, RenewResult, Revoke};
pub use planner::load_summary;
pub use planner::{
    capacity_of, plan_placement, plan_placement_and_warm_ups, plan_rebalance,
    plan_rebalance_at_most, plan_secondaries, plan_secondaries_warming, rollout_target,
    takes_shards, Loads, MoveReason, PlacementInputs, Plan, DEFAULT_BALANCE_TOLERANCE,
    MAX_MOVES_PER_PLAN,
};
pub use state::{
    lapsed, AuditRecord, ClusterConfig, Executor, Grant, Handoff, LeaseState, LostReplica,
    Namespace, PlacementOverrides, Secondary, Shard, Space, ToldFromMemory, Tombstone,
    TombstoneReason,
};

/// Manager-minted executor identity, `ex-{n}`: `n` is the log index of the entry that registered
/// it, or, for the second and later executors a [`Command::RegisterMany`] registers, the numbers
/// after the first's (the state remembers the numbers minted past an entry's own index). Unique
/// because log indexes are and the state never mints a number twice, deterministic because both
/// are replicated (P2.2).
pub type ExecutorId = String;

/// A shard number, `0..shard_count` (§1).
pub type ShardId = u32;

/// A shard's ownership generation: advanced when and only when the shard gets a new owner (I2).
pub type Epoch = u64;

/// How far ahead of now `ReserveLeases` reserves, in leases (P6.6): a leader answers a renewal
/// from memory only while a full lease remains reserved, and refreshes a reservation with less
/// than two left, so a renewing executor's reservation is rewritten about once a lease and a
/// handoff from a live owner that never acknowledges completes on expiry within three leases.
pub const LEASE_RESERVATION_LEASES: u64 = 3;

/// Most tombstones kept (P2.1, P7.2). The oldest (by the log index that created them) are pruned
/// first, so the state cannot grow without bound under executor churn. A deregister retried after
/// its tombstone was pruned is answered "not found": that needs thousands of executors to leave in
/// between, far beyond any client's retry patience (P7.1: 8 s).
pub const MAX_TOMBSTONES: usize = 4096;

/// Largest shard count `Init` accepts. The shard table is allocated in full at initialisation, so
/// an absurd count in a bad request must be refused rather than exhaust memory (I6); the default
/// is 1024 (§11). 2^20 admits the one-million-shard cluster measured in docs/BENCHMARKS.md (B5);
/// its empty table is under 100 MB per replica, well within a manager's memory. The wire's body
/// limits are sized from the same constant.
pub const MAX_SHARD_COUNT: u32 = leasehold_api::wire::MAX_SHARD_COUNT;

/// Longest incarnation, address or name accepted by `Register`, in bytes. These strings live in
/// the replicated state and in every snapshot, so the state machine bounds them too (I6); the
/// bound is the wire's largest text limit, so the HTTP layer's own checks refuse first and
/// nothing is committed only to be refused.
pub const MAX_TEXT_FIELD_BYTES: usize = leasehold_api::wire::MAX_TEXT_FIELD_BYTES;

/// The capacity of an executor that registered without one (P15.1): what every executor of
/// release 0.1.0 has.
pub const DEFAULT_CAPACITY: u32 = leasehold_api::wire::DEFAULT_CAPACITY;
