//! Commands: what the leader proposes into the Raft log.
//!
//! Every command carries the `now_ms` the leader stamped when proposing it (P2.2, P2.3), and is
//! idempotent or conditional (P2.4). These types are this build's schema
//! ([`super::schema::NEWEST_SCHEMA`]), encoded with their field names; release 0.1.0's are read
//! and written through [`super::schema::release_0_1`]. A field added here takes a
//! `#[serde(default)]` that means what a record without it meant, and a gate (docs/PROTOCOL.md,
//! "Changing the replicated state").

use leasehold_api::wire::ReplicaSettings;
use serde::{Deserialize, Serialize};

use super::{Epoch, ExecutorId, PlacementOverrides, ShardId};

/// One executor's renewal inside a group-committed [`Command::Renew`].
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct Renewal {
    /// The renewing executor.
    pub executor_id: ExecutorId,
    /// What it believes it holds (P4.2); a releasing shard missing from the claims acknowledges
    /// the revoke, provided `revision` shows the executor saw the revoke (P5.2).
    pub claims: Vec<(ShardId, Epoch)>,
    /// The revision of the last delivery the executor applied (P4.1).
    pub revision: u64,
    /// The secondaries the executor says are ready (P19.3), with the epoch its set showed each
    /// at: its whole list, so one it leaves out is no longer ready. Empty for an executor that
    /// holds no secondary (and left out of every record then).
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub ready: Vec<(ShardId, Epoch)>,
}

impl Renewal {
    /// The renewal an executor's `POST /v1/executors/{id}/renew` asks for: its claims (from
    /// either wire form, `RenewRequest::checked_claims`) and the revision it applied last.
    pub fn from_claims(
        executor_id: ExecutorId,
        claims: &[leasehold_api::wire::ShardEpoch],
        revision: u64,
    ) -> Self {
        Self {
            executor_id,
            claims: claims
                .iter()
                .map(|claim| (claim.shard, claim.epoch))
                .collect(),
            revision,
            ready: Vec::new(),
        }
    }

    /// This renewal stating `ready` as the secondaries its executor says are ready (P19.3).
    pub fn with_ready(self, ready: &[leasehold_api::wire::ShardEpoch]) -> Self {
        Self {
            ready: ready
                .iter()
                .map(|entry| (entry.shard, entry.epoch))
                .collect(),
            ..self
        }
    }
}

/// One executor's registration inside a group-committed [`Command::RegisterMany`]: what a
/// [`Command::Register`] carries, less the stamp the entry carries once for all.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct Registration {
    /// The idempotency key; non-empty.
    pub incarnation: String,
    /// Advertised push address; non-empty.
    pub address: String,
    /// Operator label.
    pub name: Option<String>,
    /// SHA-256 of the executor's credential (P13.4), never the credential itself.
    pub credential_sha256: Option<[u8; 32]>,
    /// The executor's capacity (P15.1), `1..=MAX_CAPACITY`.
    pub capacity: u32,
    /// The application version it runs (P17.3), if it stated one.
    pub app_version: Option<String>,
    /// Its labels (P18.3).
    pub labels: leasehold_api::wire::Labels,
    /// The namespace it registers into (P18.1).
    pub namespace: String,
    /// It follows a change of layout (P20.3). Schema 14 when true.
    #[serde(default, skip_serializing_if = "std::ops::Not::not")]
    pub follows_generations: bool,
}

impl Registration {
    /// The single-registration command asking for the same (below cluster version 12, and for
    /// the state machine's one code path).
    pub fn into_command(self, now_ms: u64) -> Command {
        Command::Register {
            now_ms,
            incarnation: self.incarnation,
            address: self.address,
            name: self.name,
            credential_sha256: self.credential_sha256,
            capacity: self.capacity,
            app_version: self.app_version,
            labels: self.labels,
            namespace: self.namespace,
            follows_generations: self.follows_generations,
        }
    }
}

/// One step of a rebalance plan: give `shard` to `to`.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct Move {
    /// The shard to move.
    pub shard: ShardId,
    /// Its new (prospective) owner.
    pub to: ExecutorId,
}

/// A command of the lease state machine.
/// One change of a shard's secondaries in a [`Command::PlaceSecondaries`] (P19.2): a secondary
/// placed on `add`, dropped from `drop`, or both (moved).
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct SecondaryChange {
    pub shard: ShardId,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub add: Option<ExecutorId>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub drop: Option<ExecutorId>,
}

#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub enum Command {
    /// Sets the configuration once: shards `0..shard_count`, unowned at epoch 0. Repeating it
    /// with identical values succeeds and changes nothing ("exactly one initialisation, safe to
    /// repeat", §10); different values are refused as a conflict.
    Init {
        /// Leader clock.
        now_ms: u64,
        /// `1..=MAX_SHARD_COUNT`; never changes afterwards.
        shard_count: u32,
        /// Non-zero.
        lease_duration_ms: u64,
    },
    /// Changes the lease length for grants from now on (a duration changed across a restart).
    /// Existing expiries are untouched, and renewals never shorten them (P3.4).
    SetLeaseDuration {
        /// Leader clock.
        now_ms: u64,
        /// Non-zero.
        lease_duration_ms: u64,
    },
    /// Registers an executor, idempotent per incarnation (P4.4, P7.2). Gives no shards: the
    /// leader's next plan does (P5.4).
    Register {
        /// Leader clock; the new lease ends `lease_duration_ms` after it.
        now_ms: u64,
        /// The idempotency key; non-empty.
        incarnation: String,
        /// Advertised push address; non-empty.
        address: String,
        /// Operator label.
        name: Option<String>,
        /// SHA-256 of the executor's credential (P13.4), never the credential itself; `None`
        /// for an executor that sent none (0.1.0's, in plaintext, P13.5). Schema 12.
        credential_sha256: Option<[u8; 32]>,
        /// The executor's capacity (P15.1), `1..=MAX_CAPACITY` (`leasehold_api::wire`);
        /// [`super::DEFAULT_CAPACITY`] for one that stated none. Schema 12 unless it is that.
        capacity: u32,
        /// The application version it runs (P17.3), checked by
        /// `leasehold_api::wire::check_app_version`; `None` when it stated none. Schema 12 when
        /// present.
        app_version: Option<String>,
        /// Its labels (P18.3), checked by `leasehold_api::wire::check_labels`; empty when it
        /// stated none. Schema 12 when not empty.
        labels: leasehold_api::wire::Labels,
        /// The namespace it registers into (P18.1), which must exist; its shards are the only
        /// ones it can ever hold. Schema 12 unless it is `default`.
        namespace: String,
        /// It follows a change of layout (P20.3): a namespace reshards only while all its
        /// executors do. Schema 14 when true.
        #[serde(default, skip_serializing_if = "std::ops::Not::not")]
        follows_generations: bool,
    },
    /// Many renewals in one entry (group commit). Each extends its lease with a `max` (P3.4) and
    /// may acknowledge revokes through its claims (P5.2).
    Renew {
        /// Leader clock.
        now_ms: u64,
        /// Answered one result per renewal, in this order.
        renewals: Vec<Renewal>,
    },
    /// A graceful stop (P3.7): the executor already stopped admitting, so its shards move at once.
    Deregister {
        /// Leader clock.
        now_ms: u64,
        /// The leaving executor.
        executor_id: ExecutorId,
    },
    /// Removes executors whose lease lapsed (P3.8), re-checking each at apply time (P2.4).
    Reap {
        /// Leader clock; an executor is reaped only if its expiry is at or before it.
        now_ms: u64,
        /// Candidates, as listed by `overdue_executors` when the leader proposed this.
        executor_ids: Vec<ExecutorId>,
    },
    /// A plan from [`super::plan_rebalance`], conditional on the state it was planned on: refused
    /// whole if owners, handoffs or membership changed since (P2.4, P5.1).
    Rebalance {
        /// Leader clock.
        now_ms: u64,
        /// The state revision the plan was computed from.
        planned_at: u64,
        /// The namespace whose shards it moves (P18.1), to executors of that namespace only.
        /// Schema 12 unless it is `default`.
        namespace: String,
        /// Each shard at most once.
        moves: Vec<Move>,
    },
    /// An acknowledgement of a revoke, naming the handoff it answers (P5.2).
    Release {
        /// Leader clock.
        now_ms: u64,
        /// The old owner acknowledging.
        executor_id: ExecutorId,
        /// Shards it no longer admits.
        shards: Vec<ShardId>,
        /// The revision of the revoke it answers.
        revoke_revision: u64,
    },
    /// Hands on every releasing shard whose old owner's last grant including it has expired
    /// (P5.2), re-checked at apply time.
    CompleteHandoffs {
        /// Leader clock.
        now_ms: u64,
    },
    /// Marks an executor draining (or no longer draining): a draining executor is given no new
    /// shards, and the planner moves the ones it holds to others through the normal handoff
    /// (P5.2, P5.4). Idempotent (P2.4): setting the flag it already has changes nothing.
    SetDraining {
        /// Leader clock.
        now_ms: u64,
        /// The executor.
        executor_id: ExecutorId,
        /// The flag wanted.
        draining: bool,
    },
    /// Raises the cluster version (P14.3): from the entry after it on, commands of schema
    /// `cluster_version` may be proposed. Proposed by the leader only once every voter reports
    /// it can apply that schema; never lowers it, so a repeat or a stale raise changes nothing.
    /// Accepted before `Init`: it concerns the replicas, not the lease configuration.
    SetClusterVersion {
        /// Leader clock.
        now_ms: u64,
        /// The schema every voter can apply.
        cluster_version: u32,
    },
    /// An operator's action (P17.4), recorded in the audit log with who did it and when once it
    /// changed something (a repeat, a refusal or an unknown id records nothing). Schema 12.
    Operator {
        /// Leader clock; the record's time.
        now_ms: u64,
        /// Who asked: the caller's certificate role and subject, an executor's own id for a
        /// self-drain, or `anonymous (plaintext)`; at most `MAX_ACTOR_BYTES`.
        actor: String,
        /// What.
        action: OperatorAction,
    },
    /// Many registrations in one entry (group commit), each as a [`Command::Register`] would
    /// apply it, in order: idempotent per incarnation (P4.4, P7.2), refused or registered each on
    /// its own. The new executors' ids are numbered from the entry's index on, one after another,
    /// never reusing a number. Schema 12.
    RegisterMany {
        /// Leader clock; each new lease ends `lease_duration_ms` after it.
        now_ms: u64,
        /// Answered one result per registration, in this order.
        registrations: Vec<Registration>,
    },
    /// Reserves lease time ahead of what the listed executors were told (P6.6), so that the
    /// leader may answer their renewals from its memory: each one's `lease_reserved_until_ms`
    /// becomes `max(itself, now_ms + LEASE_RESERVATION_LEASES × lease_duration_ms)`. Tells
    /// nothing to anyone. Unknown ids are skipped (P2.4). Schema 12.
    ReserveLeases {
        /// Leader clock.
        now_ms: u64,
        /// Ascending, each at most once.
        executor_ids: Vec<ExecutorId>,
    },
    /// Reaps executors whose lease the leader judged lapsed by the copies it told, from its
    /// memory included (P6.7): each is removed as by `Reap` if its judged expiry has lapsed at
    /// `now_ms` and covers the expiry of every grant the log recorded for it (a renewal the log
    /// carried since the judgment keeps it). Schema 12.
    ReapLapsed {
        /// Leader clock.
        now_ms: u64,
        /// Candidates, each at most once, as the leader judged them.
        leases: Vec<LapsedLease>,
    },
    /// The leader's plan for one namespace's secondaries (P19.2, P19.4), conditional like a
    /// `Rebalance`: refused whole if the namespace's assignment changed since `planned_at`, or
    /// if any change is malformed. Secondaries admit no primary work, so they move at once, with
    /// no handoff. Schema 13.
    PlaceSecondaries {
        /// Leader clock.
        now_ms: u64,
        /// The revision the plan was made on.
        planned_at: u64,
        namespace: String,
        /// At most one per shard, ascending by shard.
        changes: Vec<SecondaryChange>,
    },
    /// The leader's entry that carries out a namespace's reshard under way (P20.2), once the
    /// namespace is ready for it, re-checked at apply time (P2.4): a split once no handoff is in
    /// flight in it, a merge once each pair of shards is on one executor (or on none) with no
    /// handoff. Refused, changing nothing, otherwise. Schema 14.
    Reshard {
        /// Leader clock.
        now_ms: u64,
        namespace: String,
    },
}

/// One executor's lease as the leader judged it when proposing [`Command::ReapLapsed`] (P6.7).
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct LapsedLease {
    /// The executor.
    pub executor_id: ExecutorId,
    /// The latest end, on the leader clock, of every lease copy this leader told it (from its
    /// memory or through the log), or of its grace since taking office (P6.1), whichever is later.
    pub judged_expiry_ms: u64,
}

impl Command {
    /// Whether applying it grows the state: a new executor, or a plan (new grants and handoffs).
    /// Refused while the free-space alarm is raised (P8.3). Everything else shrinks the state,
    /// only extends what is there (renewals), or is written once and small (the configuration,
    /// without which nothing works), so it goes on and leases stay alive meanwhile.
    pub fn grows_state(&self) -> bool {
        matches!(
            self,
            Command::Register { .. }
                | Command::RegisterMany { .. }
                | Command::Rebalance { .. }
                | Command::Reshard { .. }
                | Command::Operator {
                    action: OperatorAction::Reshard { .. },
                    ..
                }
        )
    }

    /// The leader clock stamped into the command (P2.3).
    pub fn now_ms(&self) -> u64 {
        match self {
            Command::Init { now_ms, .. }
            | Command::SetLeaseDuration { now_ms, .. }
            | Command::Register { now_ms, .. }
            | Command::RegisterMany { now_ms, .. }
            | Command::ReserveLeases { now_ms, .. }
            | Command::ReapLapsed { now_ms, .. }
            | Command::PlaceSecondaries { now_ms, .. }
            | Command::Reshard { now_ms, .. }
            | Command::Renew { now_ms, .. }
            | Command::Deregister { now_ms, .. }
            | Command::Reap { now_ms, .. }
            | Command::Rebalance { now_ms, .. }
            | Command::Release { now_ms, .. }
            | Command::CompleteHandoffs { now_ms }
            | Command::SetDraining { now_ms, .. }
            | Command::Operator { now_ms, .. }
            | Command::SetClusterVersion { now_ms, .. } => *now_ms,
        }
    }
}

/// What an operator does (P17.4).
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub enum OperatorAction {
    /// Drain an executor, or undrain it (as `SetDraining`).
    SetDraining {
        executor_id: ExecutorId,
        draining: bool,
    },
    /// Remove an executor (P5.5: proposed once it holds nothing; as `Deregister`).
    Remove { executor_id: ExecutorId },
    /// Maintenance mode: placement frozen for balance, joiners and drains; shards nobody holds
    /// are still placed, and expired leases still reaped.
    SetMaintenance { on: bool },
    /// Hand `shard` of `namespace` to `to` now: a one-move plan (P5.2), refused unless `to` is
    /// an executor of that namespace, live and not draining, does not own it already, and the
    /// shard is not pinned elsewhere. Schema 12 unless the namespace is `default`.
    MoveShard {
        namespace: String,
        shard: ShardId,
        to: ExecutorId,
    },
    /// Pin `shard` of `namespace` to an executor of that namespace (the planner keeps it there,
    /// or moves it there, while that executor is live and not draining), or unpin it (`None`).
    /// A pin goes with its executor. Schema 12 unless the namespace is `default`.
    Pin {
        namespace: String,
        shard: ShardId,
        executor_id: Option<ExecutorId>,
    },
    /// Create a namespace (P18.1): shards `0..shard_count`, unowned, at the epoch the name's
    /// shards last reached (0 for a name never used), so no epoch repeats for a name. Refused
    /// for a name in use, past `MAX_NAMESPACES`, or past `MAX_TOTAL_SHARDS` over every
    /// namespace. Schema 12.
    CreateNamespace {
        name: String,
        shard_count: u32,
        lease_duration_ms: u64,
        /// Most executors it may hold registered at once; `None` for no bound but the cluster's.
        max_executors: Option<u32>,
        /// Its own placement settings (P18.4).
        placement: PlacementOverrides,
        /// Its replicas per shard (P19.1); one, and left out of the record, unless set.
        #[serde(default, skip_serializing_if = "ReplicaSettings::is_default")]
        replication: ReplicaSettings,
    },
    /// Change a namespace's lease duration (for grants from now on, P3.4) and executor bound;
    /// its shard count never changes. `default`'s lease is the managers' `--lease-duration`
    /// (`Command::SetLeaseDuration`), so only its bound changes here.
    SetNamespace {
        name: String,
        lease_duration_ms: u64,
        max_executors: Option<u32>,
        /// Its placement settings from now on (P18.4), whole.
        placement: PlacementOverrides,
        /// Its replica settings from now on (P19.1), whole; one replica, and left out of the
        /// record, unless set.
        #[serde(default, skip_serializing_if = "ReplicaSettings::is_default")]
        replication: ReplicaSettings,
    },
    /// Change a namespace's shard count (P20.1) to `shard_count`, twice (a split) or half (a
    /// merge) the current one: records the reshard as under way, which the leader carries out
    /// with [`Command::Reshard`]. Refused for any other count, while another reshard of it is
    /// under way, while an executor in it does not follow a change of layout, above the
    /// cluster's shard quota, and for a merge of two shards pinned to different executors. A
    /// repeat of the one under way, or of one done, changes nothing. Schema 14.
    Reshard { name: String, shard_count: u32 },
    /// Delete a namespace (P18.1), refused while any of its shards has an owner (drain its
    /// executors first) and for `default`. Executors still registered in it, holding nothing,
    /// are removed with it.
    DeleteNamespace { name: String },
    /// A change of the managers' membership, recorded once Raft committed it.
    Membership { change: MembershipChange },
}

/// A membership change the audit log records (P17.4).
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub enum MembershipChange {
    /// A node added (as a learner; the cluster promotes it once caught up).
    Added { node_id: u64, address: String },
    /// A node removed.
    Removed { node_id: u64 },
}
