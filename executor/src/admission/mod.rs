//! The admission core: lease, held set and whether work is admitted, as one pure state machine
//! (PROTOCOL §3, §4, §5.2 executor side). Inputs are grants, pushes, revokes and the passage of
//! time, each with the instant it is applied at; outputs are [`AdmissionEvent`]s (admission of
//! a shard starts or stops) that the shell writes to the admission log (§9) and announces.
//!
//! Admission for a held shard is on exactly while the executor is registered, its own copy of
//! the lease is live (P3.6) and it is not stopping (P3.7). [`AdmissionCore::admit`] decides that
//! from the instant it is given, so a lapse takes effect at the expiry instant itself even if
//! nothing notices until later; [`AdmissionCore::record_lapse`] then records the stop stamped with
//! that expiry.
//!
//! Every operation first records a lapse, then changes state in the order of P4.3: stop
//! admitting dropped shards, start gained ones; the caller reports afterwards. Events are
//! stamped with the instant the operation was applied at, which the shell reads while holding
//! the lock that [`AdmissionCore::admit`] also takes: a `start` is stamped no later than the
//! first permit it allows, a `stop` no earlier than the last permit before it.
//!
//! Roles (PROTOCOL §19): a set also lists the executor's secondaries. A secondary's admission
//! starts and stops as a primary's does, on the same lease (P3.6 for every role, P19.1), and its
//! events say `role: secondary`; [`AdmissionCore::admit`] admits primaries only, and
//! [`AdmissionCore::admit_as`] says which role the work wants (P19.1: a secondary never admits
//! primary work). Readiness (P19.3) is what renewals say of the secondaries.

use std::collections::BTreeSet;
use std::fmt;
use std::num::NonZeroU32;

use leasehold_api::shard_for_key;
use leasehold_api::wire::{
    AssignmentPush, Grant, RenewRequest, RevokePush, RevokeReply, Role, ShardEpoch,
};
use serde::{Deserialize, Serialize};
use tokio::time::Instant;

use crate::assignment::{
    AssignmentState, DeliveryError, Layout, NotSecondary, RevokeOutcome, Secondary, SetOutcome,
};
use crate::lease::LeaseClock;

/// Whether admission of a shard starts or stops.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, Serialize)]
#[serde(rename_all = "snake_case")]
pub enum AdmissionChange {
    /// From this instant on, work for the shard is admitted.
    Start,
    /// From this instant on, no new work for the shard is admitted (running work is not
    /// interrupted, P3.6).
    Stop,
}

/// Why admission of a shard started or stopped; the admission log's `reason`.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, Serialize)]
#[serde(rename_all = "snake_case")]
pub enum AdmissionReason {
    /// A delivered set (grant or push) gave the shard (P4.3).
    Assigned,
    /// A grant revived a lapsed lease: admission resumes for a shard held before that grant at
    /// the same epoch, without re-acquiring it (P3.6).
    Resumed,
    /// A delivered set no longer has the shard, or has it at another epoch (P4.3).
    Unassigned,
    /// A revoke push took the shard (P5.2).
    Revoked,
    /// The executor's own copy of the lease lapsed (P3.6); stamped with the expiry instant.
    LeaseLapsed,
    /// The manager no longer knows this executor (`404 unknown_executor` on renew).
    UnknownExecutor,
    /// Graceful stop (P3.7).
    Shutdown,
}

impl AdmissionReason {
    /// The snake_case name written to the admission log.
    pub fn as_str(self) -> &'static str {
        match self {
            AdmissionReason::Assigned => "assigned",
            AdmissionReason::Resumed => "resumed",
            AdmissionReason::Unassigned => "unassigned",
            AdmissionReason::Revoked => "revoked",
            AdmissionReason::LeaseLapsed => "lease_lapsed",
            AdmissionReason::UnknownExecutor => "unknown_executor",
            AdmissionReason::Shutdown => "shutdown",
        }
    }
}

impl fmt::Display for AdmissionReason {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(self.as_str())
    }
}

/// Admission of one shard started or stopped: one admission log line (§9).
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct AdmissionEvent {
    /// The executor that admitted (or stopped admitting) the work.
    pub executor_id: String,
    /// The shard.
    pub shard: u32,
    /// The epoch the shard is (or was) held at: the fencing token of that interval (a
    /// secondary's: the shard's epoch its set showed, which fences nothing of its own).
    pub epoch: u64,
    /// The role the shard is (or was) held in (P19.5): primary admission is exclusive (I1, I2),
    /// a secondary's is not.
    pub role: Role,
    /// Start or stop.
    pub change: AdmissionChange,
    /// When admission really started or ended: the instant the operation was applied at, or
    /// for a lapse the lease expiry itself (§9).
    pub at: Instant,
    /// Why.
    pub reason: AdmissionReason,
    /// The layout the shard is (or was) held in (PROTOCOL §20): its number is one of that
    /// layout's shards, and the keys it covers are those whose hash modulo its `shard_count` is
    /// `shard`.
    pub layout: Layout,
}

/// Permission to run one piece of work for a shard (P3.6). It is a value, not a guard: once
/// given it is never withdrawn, so work already running is not interrupted by a later revoke
/// or lapse. The epoch is the fencing token to hand to downstream storage (P5.2, I2).
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, Serialize)]
pub struct Permit {
    /// The shard the work belongs to.
    pub shard: u32,
    /// The shard's ownership generation at the time of admission. For a secondary's permit it
    /// is the primary's epoch, as this executor's set shows it: secondary work must not write
    /// under it (I2 is the primary's, P19.1).
    pub epoch: u64,
    /// The role the work is admitted in (P19.5): only [`AdmissionCore::admit_as`] (and the
    /// handle's `admit_as`, `admit_key_as`) give anything but the primary.
    #[serde(skip_serializing_if = "Role::is_primary")]
    pub role: Role,
}

impl Permit {
    /// A permit for the shard's primary work at `epoch`.
    pub fn primary(shard: u32, epoch: u64) -> Self {
        Self {
            shard,
            epoch,
            role: Role::Primary,
        }
    }
}

/// Which role work asks to be admitted in (PROTOCOL P19.5), as [`AdmissionCore::admit_as`]
/// takes it: the primary only (what [`AdmissionCore::admit`] does), a secondary only, or
/// whichever this executor holds the shard in.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq, Hash, Serialize, Deserialize)]
#[serde(rename_all = "lowercase")]
pub enum RoleWanted {
    /// Primary work: exclusive, fenced by the epoch (I1, I2). The default.
    #[default]
    Primary,
    /// Secondary work (reads the service allows from a warm copy): only where the shard is held
    /// as a secondary.
    Secondary,
    /// Either: the primary where the shard is held as one, else a secondary.
    Any,
}

impl RoleWanted {
    /// Its name in queries (`role=`).
    pub fn as_str(self) -> &'static str {
        match self {
            RoleWanted::Primary => "primary",
            RoleWanted::Secondary => "secondary",
            RoleWanted::Any => "any",
        }
    }
}

impl From<Role> for RoleWanted {
    fn from(role: Role) -> Self {
        match role {
            Role::Primary => RoleWanted::Primary,
            Role::Secondary => RoleWanted::Secondary,
        }
    }
}

/// A `role=` that names no [`RoleWanted`].
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
#[error("role={0:?} is not one of primary, secondary and any")]
pub struct UnknownRole(pub String);

impl std::str::FromStr for RoleWanted {
    type Err = UnknownRole;

    fn from_str(text: &str) -> Result<Self, UnknownRole> {
        match text {
            "primary" => Ok(RoleWanted::Primary),
            "secondary" => Ok(RoleWanted::Secondary),
            "any" => Ok(RoleWanted::Any),
            other => Err(UnknownRole(other.to_owned())),
        }
    }
}

/// Why work was not admitted.
#[derive(Debug, Clone, Copy, PartialEq, Eq, thiserror::Error)]
pub enum AdmitError {
    /// Self-fenced (P3.6): not registered yet, lease lapsed, or stopping. Answer
    /// `503 sharding_not_ready`; the caller refreshes its routing and retries.
    #[error("not admitting work: the lease has lapsed, or the executor is not registered or is stopping")]
    NotReady,
    /// The lease is live but this executor does not hold the shard in the role the work asked
    /// for (a secondary is not the owner of primary work, P19.1).
    #[error("this executor does not hold the shard in the role asked for")]
    NotOwner,
}

/// Whether the executor admits work right now.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, Serialize, utoipa::ToSchema)]
#[serde(rename_all = "snake_case")]
pub enum AdmissionState {
    /// Registered, lease live, not stopping: held shards admit work.
    Admitting,
    /// Self-fenced (P3.6): nothing is admitted (not registered yet, lease lapsed, stopping).
    Fenced,
}

/// The executor's view at one instant, as published on [`crate::ExecutorHandle::assignment`].
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Assignment {
    /// The id the manager minted; `None` until registered (and again after
    /// `unknown_executor`, until registered anew).
    pub executor_id: Option<String>,
    /// The cluster's shard count, once a delivery told it.
    pub shard_count: Option<u32>,
    /// The namespace's generation the shard count belongs to (PROTOCOL §20); 0 until it
    /// reshards.
    pub generation: u64,
    /// Revision of the last delivery applied (P4.1).
    pub revision: u64,
    /// Held shards with epochs, ascending: the primaries.
    pub shards: Vec<ShardEpoch>,
    /// The secondaries (PROTOCOL P19.1) with their readiness (P19.3), ascending; empty in a
    /// namespace of one replica.
    pub secondaries: Vec<Secondary>,
    /// Whether held shards admit work at the instant this view was taken.
    pub admission: AdmissionState,
    /// When the executor's own copy of the lease ends (P3.2).
    pub lease_expiry: Option<Instant>,
    /// A graceful stop has begun (P3.7); nothing will be admitted again.
    pub stopping: bool,
}

impl Assignment {
    /// The layout this view's shards are numbered in (§20); a count of 0 until a delivery told
    /// it.
    pub fn layout(&self) -> Layout {
        Layout {
            shard_count: self.shard_count.unwrap_or(0),
            generation: self.generation,
        }
    }

    /// The lease time left at `now`.
    pub fn lease_remaining(&self, now: Instant) -> std::time::Duration {
        self.lease_expiry
            .map_or(std::time::Duration::ZERO, |expiry| {
                expiry.saturating_duration_since(now)
            })
    }
}

/// A grant was not for this executor: it is not applied at all.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
#[error("grant for executor {got} while registered as {expected}")]
pub struct ForeignGrant {
    /// The id this executor is registered under.
    pub expected: String,
    /// The id the grant names.
    pub got: String,
}

/// Why a push was refused (it changes nothing).
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum PushError {
    /// No registration stands: a push now may be meant for a previous executor at this address
    /// (or the register reply is still in flight). The next grant carries the set anyway (P5.3).
    #[error("not registered; the next grant carries the set")]
    NotRegistered,
    /// Meant for another executor (this process reuses the address of one that is gone).
    #[error("this is executor {this_executor}; the delivery is for {addressed_to}")]
    WrongExecutor {
        addressed_to: String,
        this_executor: String,
    },
    /// Malformed (I6).
    #[error(transparent)]
    Invalid(#[from] DeliveryError),
}

/// What the executor had applied when it sent a register or renew request: taken with
/// [`AdmissionCore::applied_mark`] just before the request leaves, handed back with its grant to
/// [`AdmissionCore::apply_grant_after`] (P4.1, self-healing).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct AppliedMark {
    /// The revision applied when the request was sent.
    revision: u64,
    /// [`AdmissionCore`]'s count of deliveries that changed something, at that moment.
    deliveries: u64,
}

impl AppliedMark {
    /// The revision applied when the request was sent.
    pub fn revision(&self) -> u64 {
        self.revision
    }
}

/// A grant disowned the set applied before its request was sent: its revision is lower than
/// the one applied then, which no grant of this cluster can be (P4.1), so that set came from
/// elsewhere (a push from a node that is not, or no longer, a manager of this cluster). The
/// grant's set was adopted instead.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Disowned {
    /// The revision applied when the request was sent.
    pub sent_revision: u64,
    /// The grant's revision, now the applied one.
    pub grant_revision: u64,
}

/// What applying a grant did.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct GrantApplied {
    /// The lease expiry now held (`sent_at + lease_ttl_ms`, P3.2).
    pub lease_expiry: Instant,
    /// What became of the grant's set: applied, stale (the lease still moved, P3.3), or
    /// refused as malformed (the lease still moved: the reply answers this executor's own
    /// request, anchored before it left).
    pub set: Result<SetOutcome, DeliveryError>,
    /// Admission changes, in order.
    pub events: Vec<AdmissionEvent>,
    /// Set when the grant disowned the set applied before its request was sent and its own set
    /// was adopted ([`AdmissionCore::apply_grant_after`]).
    pub disowned: Option<Disowned>,
}

/// What applying a push did.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct PushApplied {
    /// Applied or stale.
    pub set: SetOutcome,
    /// Admission changes, in order.
    pub events: Vec<AdmissionEvent>,
}

/// What applying a revoke did.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct RevokeApplied {
    /// The answer to send: only after `events` are recorded, since they are the stops it
    /// reports (P5.2).
    pub reply: RevokeReply,
    /// Admission changes, in order.
    pub events: Vec<AdmissionEvent>,
    /// The layout the executor's set was in once the revoke was applied (§20): the one the
    /// reply's shards are numbered in, for a revoke that was not overtaken.
    pub layout: Layout,
}

/// The pure admission state machine.
#[derive(Debug, Clone, Default)]
pub struct AdmissionCore {
    /// Minted by the manager at registration; `None` before, and after `unknown_executor`.
    executor_id: Option<String>,
    /// The executor's own copy of its lease (P3.2).
    lease: LeaseClock,
    /// Held set and delivery order (P4.1).
    assignment: AssignmentState,
    /// Whether a `start` has been recorded for every held shard and no `stop` since: the
    /// admission state the log shows. It can lag a lapse (until [`AdmissionCore::record_lapse`]), but
    /// [`AdmissionCore::admit`] also checks the lease itself.
    admitting: bool,
    /// Set by a graceful stop (P3.7) and never cleared: a stopping executor admits nothing
    /// again, whatever grant arrives.
    stopping: bool,
    /// Pushes and revokes that changed the set or the revision, or answered a shard released:
    /// tells an [`AppliedMark`] whether anything was delivered while its request was in flight.
    deliveries: u64,
    /// Every secondary is reported ready as soon as it is held (P19.3): for services whose
    /// secondary needs no warm-up.
    secondaries_ready_when_held: bool,
}

impl AdmissionCore {
    /// A core that reports every secondary ready as soon as it holds it (P19.3) when
    /// `ready_when_held`, instead of waiting for [`AdmissionCore::set_secondary_ready`].
    pub fn with_secondaries_ready_when_held(mut self, ready_when_held: bool) -> Self {
        self.secondaries_ready_when_held = ready_when_held;
        self
    }

    /// The registered executor id.
    pub fn executor_id(&self) -> Option<&str> {
        self.executor_id.as_deref()
    }

    /// The lease (read-only).
    pub fn lease(&self) -> &LeaseClock {
        &self.lease
    }

    /// Held set and revision (read-only).
    pub fn assignment(&self) -> &AssignmentState {
        &self.assignment
    }

    /// Whether a graceful stop has begun.
    pub fn is_stopping(&self) -> bool {
        self.stopping
    }

    /// Whether admission is on at `now` (P3.6).
    fn admits_at(&self, now: Instant) -> bool {
        self.admitting && !self.stopping && self.executor_id.is_some() && self.lease.is_live(now)
    }

    /// The view published to embedders and `GET /v1/status`.
    pub fn view(&self, now: Instant) -> Assignment {
        Assignment {
            executor_id: self.executor_id.clone(),
            shard_count: self.assignment.shard_count().map(NonZeroU32::get),
            generation: self.assignment.layout().generation,
            revision: self.assignment.revision(),
            shards: self.assignment.held(),
            secondaries: self
                .assignment
                .secondaries_with_readiness(self.secondaries_ready_when_held),
            admission: if self.admits_at(now) {
                AdmissionState::Admitting
            } else {
                AdmissionState::Fenced
            },
            lease_expiry: self.lease.expiry(),
            stopping: self.stopping,
        }
    }

    /// The layout the held shards are numbered in (§20).
    pub fn layout(&self) -> Layout {
        self.assignment.layout()
    }

    /// The renewal to send: the held set as claims (P4.2), the last applied revision (P4.1,
    /// which lets the manager count an omitted claim as a revoke acknowledgement, P5.2) and the
    /// whole list of ready secondaries (P19.3; the shell leaves it out for a cluster below
    /// cluster version 13). `None` when not registered.
    pub fn renewal(&self) -> Option<(String, RenewRequest)> {
        let executor_id = self.executor_id.clone()?;
        Some((
            executor_id,
            RenewRequest {
                claims: self.assignment.held(),
                // The client picks the wire form (`Client::renew`).
                claim_runs: None,
                revision: self.assignment.revision(),
                // The shell adds the loads (P15.1): they are measured outside this core.
                loads: None,
                accept_unchanged: false,
                ready: self
                    .assignment
                    .ready_secondaries(self.secondaries_ready_when_held),
            },
        ))
    }

    /// What is applied now, to take just before a register or renew request is sent and hand
    /// back with its grant ([`AdmissionCore::apply_grant_after`]).
    pub fn applied_mark(&self) -> AppliedMark {
        AppliedMark {
            revision: self.assignment.revision(),
            deliveries: self.deliveries,
        }
    }

    /// Whether a grant at `grant_revision`, answering a request sent at `sent`, disowns the set
    /// applied before (P4.1, self-healing).
    ///
    /// Every grant of this cluster answering a request sent after revision R was applied carries
    /// a revision of at least R: R was committed before it was delivered, and a grant is
    /// answered by a leader after applying its own entry, which comes after everything
    /// committed. A lower revision therefore means the revision applied at the send did not come
    /// from this cluster (a forged push, up to `u64::MAX`, which would otherwise make every
    /// grant stale for good).
    ///
    /// Only if nothing was delivered while the request was in flight: a delivery applied then
    /// (or a revoke answered released) may be this cluster's, newer than the grant (the grant
    /// is then merely stale, P3.3), and adopting the grant's older set could re-admit a shard
    /// that delivery took away and the managers may since have handed on (I1). Such a grant is
    /// handled as stale, and the next renewal, sent with nothing in flight, adopts.
    pub fn disowns(&self, sent: AppliedMark, grant_revision: u64) -> bool {
        grant_revision < sent.revision && sent.deliveries == self.deliveries
    }

    /// Decides whether primary work for `shard` may start at `now` (P3.6): only a shard held as
    /// the primary is admitted, never a secondary (P19.1). Read-only: a lapse the core has not
    /// been recorded yet is still refused, from the expiry instant on.
    pub fn admit(&self, shard: u32, now: Instant) -> Result<Permit, AdmitError> {
        self.admit_as(shard, RoleWanted::Primary, now)
    }

    /// Decides whether work for `shard` wanting `role` may start at `now` (P19.1, P19.5): a
    /// primary permit only where the shard is held as the primary, a secondary permit only where
    /// it is held as a secondary, and either only while the lease is live (P3.6, for every role:
    /// P19.1). [`RoleWanted::Any`] admits the role the shard is held in.
    pub fn admit_as(
        &self,
        shard: u32,
        role: impl Into<RoleWanted>,
        now: Instant,
    ) -> Result<Permit, AdmitError> {
        if !self.admits_at(now) {
            return Err(AdmitError::NotReady);
        }
        let as_primary = || {
            self.assignment
                .epoch_of(shard)
                .map(|epoch| Permit::primary(shard, epoch))
        };
        let as_secondary = || {
            self.assignment
                .secondary_epoch_of(shard)
                .map(|epoch| Permit {
                    shard,
                    epoch,
                    role: Role::Secondary,
                })
        };
        match role.into() {
            RoleWanted::Primary => as_primary(),
            RoleWanted::Secondary => as_secondary(),
            RoleWanted::Any => as_primary().or_else(as_secondary),
        }
        .ok_or(AdmitError::NotOwner)
    }

    /// [`AdmissionCore::admit`] for the shard `key` maps to (`leasehold_api::shard_for_key`);
    /// `NotReady` until a delivery has told the shard count.
    pub fn admit_key(&self, key: &[u8], now: Instant) -> Result<Permit, AdmitError> {
        self.admit_key_as(key, RoleWanted::Primary, now)
    }

    /// [`AdmissionCore::admit_as`] for the shard `key` maps to; `NotReady` until a delivery has
    /// told the shard count.
    pub fn admit_key_as(
        &self,
        key: &[u8],
        role: impl Into<RoleWanted>,
        now: Instant,
    ) -> Result<Permit, AdmitError> {
        let shard_count = self.assignment.shard_count().ok_or(AdmitError::NotReady)?;
        self.admit_as(shard_for_key(key, shard_count), role, now)
    }

    /// The embedding service says its secondary of `shard` at `epoch` is (or is no longer)
    /// ready to be promoted (P19.3): the next renewals say so. Ready needs the shard held as a
    /// secondary at that epoch; not ready is always taken. Answers whether anything changed.
    pub fn set_secondary_ready(
        &mut self,
        shard: u32,
        epoch: u64,
        ready: bool,
    ) -> Result<bool, NotSecondary> {
        self.assignment.set_ready(shard, epoch, ready)
    }

    /// Records a lapse noticed at `now`: every held shard stops, stamped with the expiry
    /// instant (§9: the instant admission really ended, even if noticed later).
    pub fn record_lapse(&mut self, now: Instant) -> Vec<AdmissionEvent> {
        let mut events = Vec::new();
        self.record_lapse_into(now, &mut events);
        events
    }

    fn record_lapse_into(&mut self, now: Instant, events: &mut Vec<AdmissionEvent>) {
        if self.admitting && !self.lease.is_live(now) {
            // `admit` refused from the expiry on; never stamp later than `now`.
            let ended_at = self.lease.expiry().map_or(now, |expiry| expiry.min(now));
            self.stop_all(ended_at, AdmissionReason::LeaseLapsed, events);
        }
    }

    fn event(
        &self,
        shard: ShardEpoch,
        role: Role,
        change: AdmissionChange,
        at: Instant,
        reason: AdmissionReason,
    ) -> Option<AdmissionEvent> {
        Some(AdmissionEvent {
            executor_id: self.executor_id.clone()?,
            shard: shard.shard,
            epoch: shard.epoch,
            role,
            change,
            at,
            reason,
            layout: self.assignment.layout(),
        })
    }

    /// Every shard held, in each role: the primaries, then the secondaries.
    fn held_in_every_role(&self) -> impl Iterator<Item = (Role, ShardEpoch)> {
        let primaries = self.assignment.held().into_iter();
        let secondaries = self.assignment.secondaries().into_iter();
        primaries
            .map(|shard| (Role::Primary, shard))
            .chain(secondaries.map(|shard| (Role::Secondary, shard)))
    }

    fn stop_all(&mut self, at: Instant, reason: AdmissionReason, events: &mut Vec<AdmissionEvent>) {
        if !self.admitting {
            return;
        }
        for (role, shard) in self.held_in_every_role() {
            events.extend(self.event(shard, role, AdmissionChange::Stop, at, reason));
        }
        self.admitting = false;
    }

    /// Turns admission on if it may be: registered, lease live, not stopping. Shards held
    /// before the grant at the same epoch resume without re-acquiring (P3.6).
    fn resume_if_live(
        &mut self,
        now: Instant,
        held_before: &BTreeSet<(Role, ShardEpoch)>,
        events: &mut Vec<AdmissionEvent>,
    ) {
        if self.admitting || self.stopping || self.executor_id.is_none() || !self.lease.is_live(now)
        {
            return;
        }
        for (role, shard) in self.held_in_every_role() {
            let reason = if held_before.contains(&(role, shard)) {
                AdmissionReason::Resumed
            } else {
                AdmissionReason::Assigned
            };
            events.extend(self.event(shard, role, AdmissionChange::Start, now, reason));
        }
        self.admitting = true;
    }

    /// The one receipt path for a delivered set (P4.3): stop dropped shards, start gained ones.
    /// The stops come first in each role (primaries, then secondaries), then the starts
    /// (secondaries, then primaries): a shard promoted from a secondary stops as one before it
    /// starts as the primary.
    fn apply_set_into(
        &mut self,
        revision: u64,
        layout: Layout,
        (shards, secondaries): (&[ShardEpoch], &[ShardEpoch]),
        now: Instant,
        adopt: bool,
        events: &mut Vec<AdmissionEvent>,
    ) -> Result<SetOutcome, DeliveryError> {
        // What is dropped was held in the layout before this set; a new layout (§20) switches
        // every shard in this one receipt, stopped in the old and started in the new.
        let layout_before = self.assignment.layout();
        let outcome = if adopt {
            self.assignment
                .adopt(revision, layout, shards, secondaries)?
        } else {
            self.assignment
                .apply_set_in(revision, layout, shards, secondaries)?
        };
        if let SetOutcome::Applied {
            dropped,
            gained,
            secondaries_dropped,
            secondaries_gained,
        } = &outcome
        {
            if self.admitting {
                let stops = [
                    (Role::Primary, dropped),
                    (Role::Secondary, secondaries_dropped),
                ];
                for (role, shards) in stops {
                    for &shard in shards {
                        events.extend(
                            self.event(
                                shard,
                                role,
                                AdmissionChange::Stop,
                                now,
                                AdmissionReason::Unassigned,
                            )
                            .map(|event| AdmissionEvent {
                                layout: layout_before,
                                ..event
                            }),
                        );
                    }
                }
                let starts = [
                    (Role::Secondary, secondaries_gained),
                    (Role::Primary, gained),
                ];
                for (role, shards) in starts {
                    for &shard in shards {
                        events.extend(self.event(
                            shard,
                            role,
                            AdmissionChange::Start,
                            now,
                            AdmissionReason::Assigned,
                        ));
                    }
                }
            }
        }
        Ok(outcome)
    }

    /// Applies a grant (register or renew reply) that answers a request sent at `sent_at`,
    /// received and applied at `now`.
    ///
    /// P3.3: the lease always moves, even when the set is stale against a newer push (the
    /// revision orders sets, the request instant orders leases). Then the set goes through the
    /// receipt path if its revision allows (P4.1; a renew reply whose set differs is adopted
    /// like a push, P4.2), and admission resumes if the lease is live again (P3.6).
    ///
    /// Without the [`AppliedMark`] of the request it cannot tell a disowned set (P4.1,
    /// self-healing): the executor's own lease loop uses [`AdmissionCore::apply_grant_after`].
    pub fn apply_grant(
        &mut self,
        sent_at: Instant,
        grant: &Grant,
        now: Instant,
    ) -> Result<GrantApplied, ForeignGrant> {
        self.apply_grant_marked(sent_at, None, grant, now)
    }

    /// [`AdmissionCore::apply_grant`] for a grant answering a request sent at `sent_at` when
    /// `sent` was applied ([`AdmissionCore::applied_mark`], taken just before sending). If the
    /// grant disowns that state ([`AdmissionCore::disowns`]), its set and revision are adopted
    /// whatever the revision applied: the dropped shards stop and the gained ones start as for
    /// any delivered set (P4.3), and [`GrantApplied::disowned`] says so. Otherwise as
    /// [`AdmissionCore::apply_grant`], stale grants included.
    pub fn apply_grant_after(
        &mut self,
        sent_at: Instant,
        sent: AppliedMark,
        grant: &Grant,
        now: Instant,
    ) -> Result<GrantApplied, ForeignGrant> {
        self.apply_grant_marked(sent_at, Some(sent), grant, now)
    }

    fn apply_grant_marked(
        &mut self,
        sent_at: Instant,
        sent: Option<AppliedMark>,
        grant: &Grant,
        now: Instant,
    ) -> Result<GrantApplied, ForeignGrant> {
        if let Some(expected) = &self.executor_id {
            if *expected != grant.executor_id {
                return Err(ForeignGrant {
                    expected: expected.clone(),
                    got: grant.executor_id.clone(),
                });
            }
        }
        let disowned = sent
            .filter(|sent| self.disowns(*sent, grant.revision))
            .map(|sent| Disowned {
                sent_revision: sent.revision,
                grant_revision: grant.revision,
            });
        let mut events = Vec::new();
        self.record_lapse_into(now, &mut events);
        // A stale grant still moves the lease (P3.3), but only over what the manager recorded
        // for this executor at the grant's revision: shards already taken from it by then stop
        // now rather than ride on the new lease past their handoff deadline (I1). A disowning
        // grant replaces the whole set below.
        if disowned.is_none() && grant.revision < self.assignment.revision() {
            for shard in self.assignment.drop_taken_by(grant.revision, &grant.shards) {
                if self.admitting {
                    events.extend(self.event(
                        shard,
                        Role::Primary,
                        AdmissionChange::Stop,
                        now,
                        AdmissionReason::Unassigned,
                    ));
                }
            }
        }
        let held_before: BTreeSet<(Role, ShardEpoch)> = self.held_in_every_role().collect();
        self.executor_id = Some(grant.executor_id.clone());
        let lease_expiry = self.lease.apply_grant(sent_at, grant.lease_ttl_ms);
        // The new anchor can already be behind `now` (a reply slower than its lease, or an older
        // reply overtaken by a newer one): admission, still on under the previous expiry until
        // this instant, ends here.
        if self.admitting && !self.lease.is_live(now) {
            self.stop_all(now, AdmissionReason::LeaseLapsed, &mut events);
        }
        let set = self.apply_set_into(
            grant.revision,
            Layout {
                shard_count: grant.shard_count,
                generation: grant.generation,
            },
            (&grant.shards, &grant.secondaries),
            now,
            disowned.is_some(),
            &mut events,
        );
        self.resume_if_live(now, &held_before, &mut events);
        Ok(GrantApplied {
            lease_expiry,
            // A malformed set was refused whole: nothing was adopted.
            disowned: disowned.filter(|_| set.is_ok()),
            set,
            events,
        })
    }

    /// A delivery is for this executor only: before registering, or when it names another
    /// executor (a dead one whose address this process reuses), it is refused before anything
    /// changes. The dead executor's lease may still be running elsewhere (I1).
    fn check_addressee(&self, executor_id: &str) -> Result<(), PushError> {
        match self.executor_id.as_deref() {
            None => Err(PushError::NotRegistered),
            Some(mine) if mine != executor_id => Err(PushError::WrongExecutor {
                addressed_to: executor_id.to_string(),
                this_executor: mine.to_string(),
            }),
            Some(_) => Ok(()),
        }
    }

    /// Applies an assign push (full replace, P4.3). It carries no lease and moves nothing but
    /// the set (P3.3); a push to a fenced executor changes the set without admitting anything.
    pub fn apply_push(
        &mut self,
        push: &AssignmentPush,
        now: Instant,
    ) -> Result<PushApplied, PushError> {
        // Checked before anything changes, so a refused push leaves no trace.
        let layout = Layout {
            shard_count: push.shard_count,
            generation: push.generation,
        };
        self.assignment
            .validate_set(push.revision, layout, &push.shards, &push.secondaries)?;
        self.check_addressee(&push.executor_id)?;
        let mut events = Vec::new();
        self.record_lapse_into(now, &mut events);
        let set = self.apply_set_into(
            push.revision,
            layout,
            (&push.shards, &push.secondaries),
            now,
            false,
            &mut events,
        )?;
        if matches!(set, SetOutcome::Applied { .. }) {
            self.deliveries = self.deliveries.wrapping_add(1);
        }
        Ok(PushApplied { set, events })
    }

    /// Applies a revoke push (P4.1, P5.2). The reply lists as `released` only shards that no
    /// longer admit work: for a revoke applied, after admission for its shards stopped (the
    /// returned events); for one a newer delivery overtook, the shards that delivery already
    /// took away. A stale revoke whose shards all came back is answered `ignored`, never as done.
    pub fn apply_revoke(
        &mut self,
        revoke: &RevokePush,
        now: Instant,
    ) -> Result<RevokeApplied, PushError> {
        self.check_addressee(&revoke.executor_id)?;
        // Checked before the lapse is recorded: a refused revoke must not take the lapse's stop
        // lines with it while admission has already ended (the log would then show a second
        // start without a stop).
        self.assignment
            .validate_revoke_in(revoke.revision, revoke.generation, &revoke.shards)?;
        let mut events = Vec::new();
        self.record_lapse_into(now, &mut events);
        let admitting = self.admitting;
        let outcome = self
            .assignment
            .apply_revoke(revoke.revision, &revoke.shards)?;
        let reply = outcome.reply(revoke.revision);
        if matches!(outcome, RevokeOutcome::Applied { .. }) || !reply.released.is_empty() {
            self.deliveries = self.deliveries.wrapping_add(1);
        }
        if let RevokeOutcome::Applied { dropped, .. } = outcome {
            if admitting {
                for shard in dropped {
                    events.extend(self.event(
                        shard,
                        Role::Primary,
                        AdmissionChange::Stop,
                        now,
                        AdmissionReason::Revoked,
                    ));
                }
            }
        }
        Ok(RevokeApplied {
            reply,
            events,
            layout: self.assignment.layout(),
        })
    }

    /// The manager answered `unknown_executor`: stop admitting everything and forget the
    /// registration, its lease and its set; the shell registers anew.
    pub fn forget_executor(&mut self, now: Instant) -> Vec<AdmissionEvent> {
        let mut events = Vec::new();
        self.record_lapse_into(now, &mut events);
        self.stop_all(now, AdmissionReason::UnknownExecutor, &mut events);
        self.assignment.clear();
        self.lease.clear();
        self.executor_id = None;
        events
    }

    /// Graceful stop, first step (P3.7): stop admitting everything, for good. Deregistering is
    /// the shell's next step.
    pub fn stop_admission(&mut self, now: Instant) -> Vec<AdmissionEvent> {
        let mut events = Vec::new();
        self.record_lapse_into(now, &mut events);
        self.stopping = true;
        self.stop_all(now, AdmissionReason::Shutdown, &mut events);
        events
    }
}

#[cfg(test)]
mod tests;
