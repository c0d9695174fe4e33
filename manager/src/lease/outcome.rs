//! Outcomes: what applying a command produced, in a form the HTTP layer can answer from and the
//! leader loop can fan out from without re-deriving anything from the state.
//!
//! Every list is in a deterministic order (ascending shard numbers and executor ids, or the
//! command's own order where a result answers an item of the command).

use serde::{Deserialize, Serialize};

use super::{ClusterConfig, ExecutorId, Grant, ShardId};

/// A revoke push to send (P5.2): the executor stops admitting `shards` and acknowledges with
/// `revision`.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct Revoke {
    /// The old owner.
    pub executor_id: ExecutorId,
    /// Shards now releasing from it, ascending.
    pub shards: Vec<ShardId>,
    /// The revision the revoke was committed at (P4.1); its handoffs' `revoke_revision`.
    pub revision: u64,
}

/// The pushes an applied command calls for. Sent only after the command is committed (P5.1).
#[derive(Debug, Clone, Default, PartialEq, Eq, Serialize, Deserialize)]
pub struct Effects {
    /// Revokes to old owners, ascending by executor id.
    pub revokes: Vec<Revoke>,
    /// Executors whose delivered set grew or came back: push each its full set, read from the
    /// state (`grant_for`) at the revision it is read at (P4.1, P4.3). Ascending, present
    /// executors only.
    pub assignments: Vec<ExecutorId>,
}

impl Effects {
    /// True when nothing needs to be pushed.
    pub fn is_empty(&self) -> bool {
        self.revokes.is_empty() && self.assignments.is_empty()
    }
}

/// The answer to one registration of a [`super::Command::RegisterMany`]: what a `Register`
/// of it alone would have answered.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub enum RegisterResult {
    /// Registered, or already registered under this incarnation (P4.4): the reply is `grant`.
    Registered {
        /// The register reply (§9).
        grant: Grant,
        /// True when the incarnation was already registered and nothing changed (P4.4).
        already_registered: bool,
    },
    /// Refused, and nothing of it applied (the others in the entry are applied or refused each on
    /// their own).
    Refused {
        /// Why.
        reason: RefusalReason,
    },
}

impl RegisterResult {
    /// A new executor was registered (not a retry, not a refusal): the membership changed.
    pub fn is_new(&self) -> bool {
        matches!(
            self,
            RegisterResult::Registered {
                already_registered: false,
                ..
            }
        )
    }
}

/// The answer to one renewal of a [`super::Command::Renew`].
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub enum RenewResult {
    /// The lease was extended (P3.4); `grant` is the reply (§9).
    Renewed {
        /// Lease remaining, revision and delivered set after this entry.
        grant: Grant,
        /// The claims differed from the set recorded before this entry (P4.2): the reply corrects
        /// the executor, and the manager logs it as the sign its pushes are not landing.
        claims_mismatch: bool,
        /// Releasing shards this renewal's claims acknowledged (P5.2), ascending.
        acknowledged: Vec<ShardId>,
    },
    /// No such executor (reaped, deregistered or never registered): `404 unknown_executor`.
    UnknownExecutor {
        /// The id the renewal named.
        executor_id: ExecutorId,
    },
}

/// Why a command was refused. A refused command changed nothing, not even the revision (P5.1).
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub enum RefusalReason {
    /// A command other than `Init` arrived before the cluster was initialised.
    NotInitialised,
    /// `Init` with values other than the ones the cluster was initialised with.
    ConfigConflict {
        /// The configuration in force.
        existing: ClusterConfig,
    },
    /// Malformed input: zero or oversized values, an empty incarnation, a plan naming a shard out
    /// of range, an unknown target or the same shard twice (I6).
    Invalid {
        /// Human-readable reason, for the problem+json `detail`.
        detail: String,
    },
    /// The rebalance was planned on a state whose assignment has changed since (P2.4, P5.1).
    StalePlan {
        /// The revision the plan was computed from.
        planned_at: u64,
        /// The log index of the last assignment change.
        assignment_revision: u64,
    },
    /// The entry's log index is not after the state's revision: it was already applied (a
    /// replayed entry). Refused so an executor id is never minted twice.
    LogIndexNotAfterRevision {
        /// The entry's index.
        log_index: u64,
        /// The state's revision.
        revision: u64,
    },
    /// A retried registration (same incarnation) with another credential, or none where the
    /// executor registered with one (P13.4): `409`, and the executor is left as it was.
    CredentialMismatch {
        /// The executor registered under that incarnation.
        executor_id: ExecutorId,
    },
    /// An operator's action that the state does not allow now (P17.4: a move onto an executor
    /// that takes no shards, or of a shard pinned elsewhere): `409`, nothing changed.
    Conflict {
        /// Human-readable reason, for the problem+json `detail`.
        detail: String,
    },
    /// A registration into, or a change of, a namespace that does not exist (P18.1): `404`,
    /// nothing changed.
    UnknownNamespace {
        /// The namespace named.
        namespace: String,
    },
}

/// What applying a command produced.
#[derive(Debug, Clone, PartialEq, Eq, Default, Serialize, Deserialize)]
pub enum Outcome {
    /// Nothing happened: the answer for Raft blank and membership entries.
    #[default]
    Nothing,
    /// The command was refused and changed nothing.
    Refused {
        /// Why.
        reason: RefusalReason,
    },
    /// `Init` succeeded; `already_initialised` when it repeated the configuration in force.
    Initialised {
        /// The configuration in force.
        config: ClusterConfig,
        /// True for a repeat that changed nothing.
        already_initialised: bool,
    },
    /// `SetLeaseDuration` succeeded (equal values change nothing).
    LeaseDurationSet {
        /// The duration before this command.
        previous_lease_duration_ms: u64,
        /// The duration now in force.
        lease_duration_ms: u64,
    },
    /// `Register` succeeded: the reply is `grant`.
    Registered {
        /// The register reply (§9).
        grant: Grant,
        /// True when the incarnation was already registered and nothing changed (P4.4).
        already_registered: bool,
    },
    /// `RegisterMany` applied; `results[i]` answers `registrations[i]`.
    RegisteredMany {
        /// One per registration, in command order.
        results: Vec<RegisterResult>,
    },
    /// `Renew` applied; `results[i]` answers `renewals[i]`.
    Renewed {
        /// One per renewal, in command order.
        results: Vec<RenewResult>,
        /// Assignments for targets of handoffs the claims acknowledged.
        effects: Effects,
    },
    /// `Deregister` succeeded (`204`).
    Deregistered {
        /// True when the executor had already gone (a retry, P7.2); nothing changed.
        already_gone: bool,
        /// Shards it owned that are now unowned, ascending: the next plan places them, and the
        /// leader counts those moves as made for the deregistration.
        freed: Vec<ShardId>,
        /// Assignments for targets of handoffs from it, completed at once.
        effects: Effects,
    },
    /// `Deregister` of an id that never existed (or whose tombstone was pruned): `404` (P7.2).
    NotFound,
    /// `Reap` applied.
    Reaped {
        /// Executors removed, ascending.
        reaped: Vec<ExecutorId>,
        /// Candidates not removed because their lease was live at apply time or they were already
        /// gone (P2.4), in command order.
        skipped: Vec<ExecutorId>,
        /// Assignments for targets of handoffs from reaped executors.
        effects: Effects,
    },
    /// `ReserveLeases` applied (P6.6).
    LeasesReserved {
        /// The reservation made, on the leader clock.
        reserved_until_ms: u64,
        /// Executors whose reservation now runs at least until then, in command order.
        reserved: Vec<ExecutorId>,
        /// Ids not registered any more, in command order.
        skipped: Vec<ExecutorId>,
    },
    /// `Rebalance` applied. The three lists are disjoint and ascending.
    Rebalanced {
        /// Shards granted at once (they were unowned), epoch advanced.
        granted: Vec<ShardId>,
        /// Shards newly marked releasing from a live owner or retargeted to another (P5.2).
        releasing: Vec<ShardId>,
        /// Releasing shards given back to their old owner: the handoff is cancelled and the owner
        /// keeps the shard at the same epoch (no new owner, so no new epoch, I2).
        cancelled: Vec<ShardId>,
        /// Revokes to old owners, assignments to new owners and to owners of cancelled handoffs.
        effects: Effects,
    },
    /// `PlaceSecondaries` applied (P19.2).
    SecondariesPlaced {
        /// The shards whose secondaries changed, ascending.
        changed: Vec<ShardId>,
        /// Assignments to the executors that gained or lost a secondary.
        effects: Effects,
    },
    /// `Release` applied.
    Released {
        /// Shards handed on (to the target, or unowned if it left), ascending.
        completed: Vec<ShardId>,
        /// Shards named but not handed on: not releasing from this executor under this revoke
        /// revision (a stale or duplicate acknowledgement, P5.2), or out of range. Ascending.
        ignored: Vec<ShardId>,
        /// Assignments for the targets.
        effects: Effects,
    },
    /// `SetDraining` applied (or found the flag already set as asked, `changed` false).
    DrainingSet {
        /// The executor.
        executor_id: ExecutorId,
        /// The flag now in force.
        draining: bool,
        /// False for a repeat that changed nothing.
        changed: bool,
    },
    /// Maintenance mode set (P17.4); `changed` false for a repeat.
    MaintenanceSet {
        /// The mode now in force.
        on: bool,
        /// False for a repeat that changed nothing.
        changed: bool,
    },
    /// A pin set or removed (P17.4); `changed` false for a repeat.
    PinSet {
        /// The shard.
        shard: ShardId,
        /// Its pin now, `None` when unpinned.
        executor_id: Option<ExecutorId>,
        /// False for a repeat that changed nothing.
        changed: bool,
    },
    /// A membership change recorded in the audit log (P17.4).
    Recorded,
    /// A namespace created (P18.1); `already_exists` for a repeat with the same settings.
    NamespaceCreated {
        /// The namespace.
        name: String,
        /// True for a repeat that changed nothing.
        already_exists: bool,
    },
    /// A namespace's settings set (P18.1); `changed` false for a repeat.
    NamespaceSet {
        /// The namespace.
        name: String,
        /// False for a repeat that changed nothing.
        changed: bool,
    },
    /// A namespace deleted (P18.1); `already_gone` for a repeat.
    NamespaceDeleted {
        /// The namespace.
        name: String,
        /// True for a repeat: the name was deleted already.
        already_gone: bool,
        /// The executors removed with it (holding nothing), ascending.
        removed: Vec<ExecutorId>,
    },
    /// `SetClusterVersion` applied; `previous == cluster_version` when it changed nothing.
    ClusterVersionSet {
        /// The cluster version before this command.
        previous: u32,
        /// The cluster version now in force.
        cluster_version: u32,
    },
    /// A reshard asked for (P20.1): `changed` false for a repeat of the one under way, or of
    /// one done (the count is already the one asked).
    ReshardRequested {
        /// The namespace.
        name: String,
        /// False for a repeat that changed nothing.
        changed: bool,
    },
    /// `Reshard` applied (P20.2): the namespace's layout changed.
    Resharded {
        /// The namespace.
        name: String,
        kind: leasehold_api::wire::ReshardKind,
        /// Its shard count now.
        shard_count: u32,
        /// Its generation now.
        generation: u64,
        /// Assignments to every executor of the namespace: each one's set is in the new layout.
        effects: Effects,
    },
    /// `CompleteHandoffs` applied.
    HandoffsCompleted {
        /// Shards handed on, ascending.
        completed: Vec<ShardId>,
        /// Assignments for the targets.
        effects: Effects,
    },
}

impl Outcome {
    /// The pushes this outcome calls for, if it is of a kind that can have any.
    pub fn effects(&self) -> Option<&Effects> {
        match self {
            Outcome::Renewed { effects, .. }
            | Outcome::Deregistered { effects, .. }
            | Outcome::Reaped { effects, .. }
            | Outcome::Rebalanced { effects, .. }
            | Outcome::SecondariesPlaced { effects, .. }
            | Outcome::Resharded { effects, .. }
            | Outcome::Released { effects, .. }
            | Outcome::HandoffsCompleted { effects, .. } => Some(effects),
            Outcome::Nothing
            | Outcome::Refused { .. }
            | Outcome::Initialised { .. }
            | Outcome::LeaseDurationSet { .. }
            | Outcome::Registered { .. }
            | Outcome::RegisteredMany { .. }
            | Outcome::LeasesReserved { .. }
            | Outcome::DrainingSet { .. }
            | Outcome::MaintenanceSet { .. }
            | Outcome::PinSet { .. }
            | Outcome::NamespaceCreated { .. }
            | Outcome::NamespaceSet { .. }
            | Outcome::NamespaceDeleted { .. }
            | Outcome::ReshardRequested { .. }
            | Outcome::Recorded
            | Outcome::ClusterVersionSet { .. }
            | Outcome::NotFound => None,
        }
    }

    /// The refusal reason, if the command was refused.
    pub fn refusal(&self) -> Option<&RefusalReason> {
        match self {
            Outcome::Refused { reason } => Some(reason),
            _ => None,
        }
    }
}
