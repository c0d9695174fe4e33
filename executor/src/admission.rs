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

use std::collections::BTreeSet;
use std::fmt;
use std::num::NonZeroU32;

use leasehold_api::shard_for_key;
use leasehold_api::wire::{
    AssignmentPush, Grant, RenewRequest, RevokePush, RevokeReply, ShardEpoch,
};
use serde::Serialize;
use tokio::time::Instant;

use crate::assignment::{AssignmentState, DeliveryError, RevokeOutcome, SetOutcome};
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
    /// The epoch the shard is (or was) held at: the fencing token of that interval.
    pub epoch: u64,
    /// Start or stop.
    pub change: AdmissionChange,
    /// When admission really started or ended: the instant the operation was applied at, or
    /// for a lapse the lease expiry itself (§9).
    pub at: Instant,
    /// Why.
    pub reason: AdmissionReason,
}

/// Permission to run one piece of work for a shard (P3.6). It is a value, not a guard: once
/// given it is never withdrawn, so work already running is not interrupted by a later revoke
/// or lapse. The epoch is the fencing token to hand to downstream storage (P5.2, I2).
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, Serialize)]
pub struct Permit {
    /// The shard the work belongs to.
    pub shard: u32,
    /// The shard's ownership generation at the time of admission.
    pub epoch: u64,
}

/// Why work was not admitted.
#[derive(Debug, Clone, Copy, PartialEq, Eq, thiserror::Error)]
pub enum AdmitError {
    /// Self-fenced (P3.6): not registered yet, lease lapsed, or stopping. Answer
    /// `503 sharding_not_ready`; the caller refreshes its routing and retries.
    #[error("not admitting work: the lease has lapsed, or the executor is not registered or is stopping")]
    NotReady,
    /// The lease is live but this executor does not hold the shard.
    #[error("this executor does not hold the shard")]
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
    /// Revision of the last delivery applied (P4.1).
    pub revision: u64,
    /// Held shards with epochs, ascending.
    pub shards: Vec<ShardEpoch>,
    /// Whether held shards admit work at the instant this view was taken.
    pub admission: AdmissionState,
    /// When the executor's own copy of the lease ends (P3.2).
    pub lease_expiry: Option<Instant>,
    /// A graceful stop has begun (P3.7); nothing will be admitted again.
    pub stopping: bool,
}

impl Assignment {
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
}

impl AdmissionCore {
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
            revision: self.assignment.revision(),
            shards: self.assignment.held(),
            admission: if self.admits_at(now) {
                AdmissionState::Admitting
            } else {
                AdmissionState::Fenced
            },
            lease_expiry: self.lease.expiry(),
            stopping: self.stopping,
        }
    }

    /// The renewal to send: the held set as claims (P4.2) and the last applied revision (P4.1,
    /// which lets the manager count an omitted claim as a revoke acknowledgement, P5.2).
    /// `None` when not registered.
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

    /// Decides whether work for `shard` may start at `now` (P3.6). Read-only: a lapse the core
    /// has not been recorded yet is still refused, from the expiry instant on.
    pub fn admit(&self, shard: u32, now: Instant) -> Result<Permit, AdmitError> {
        if !self.admits_at(now) {
            return Err(AdmitError::NotReady);
        }
        self.assignment
            .epoch_of(shard)
            .map(|epoch| Permit { shard, epoch })
            .ok_or(AdmitError::NotOwner)
    }

    /// [`AdmissionCore::admit`] for the shard `key` maps to (`leasehold_api::shard_for_key`);
    /// `NotReady` until a delivery has told the shard count.
    pub fn admit_key(&self, key: &[u8], now: Instant) -> Result<Permit, AdmitError> {
        let shard_count = self.assignment.shard_count().ok_or(AdmitError::NotReady)?;
        self.admit(shard_for_key(key, shard_count), now)
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
        change: AdmissionChange,
        at: Instant,
        reason: AdmissionReason,
    ) -> Option<AdmissionEvent> {
        Some(AdmissionEvent {
            executor_id: self.executor_id.clone()?,
            shard: shard.shard,
            epoch: shard.epoch,
            change,
            at,
            reason,
        })
    }

    fn stop_all(&mut self, at: Instant, reason: AdmissionReason, events: &mut Vec<AdmissionEvent>) {
        if !self.admitting {
            return;
        }
        for shard in self.assignment.held() {
            events.extend(self.event(shard, AdmissionChange::Stop, at, reason));
        }
        self.admitting = false;
    }

    /// Turns admission on if it may be: registered, lease live, not stopping. Shards held
    /// before the grant at the same epoch resume without re-acquiring (P3.6).
    fn resume_if_live(
        &mut self,
        now: Instant,
        held_before: &BTreeSet<ShardEpoch>,
        events: &mut Vec<AdmissionEvent>,
    ) {
        if self.admitting || self.stopping || self.executor_id.is_none() || !self.lease.is_live(now)
        {
            return;
        }
        for shard in self.assignment.held() {
            let reason = if held_before.contains(&shard) {
                AdmissionReason::Resumed
            } else {
                AdmissionReason::Assigned
            };
            events.extend(self.event(shard, AdmissionChange::Start, now, reason));
        }
        self.admitting = true;
    }

    /// The one receipt path for a delivered set (P4.3): stop dropped shards, start gained ones.
    fn apply_set_into(
        &mut self,
        revision: u64,
        shard_count: u32,
        shards: &[ShardEpoch],
        now: Instant,
        adopt: bool,
        events: &mut Vec<AdmissionEvent>,
    ) -> Result<SetOutcome, DeliveryError> {
        let outcome = if adopt {
            self.assignment.adopt(revision, shard_count, shards)?
        } else {
            self.assignment.apply_set(revision, shard_count, shards)?
        };
        if let SetOutcome::Applied { dropped, gained } = &outcome {
            if self.admitting {
                for &shard in dropped {
                    events.extend(self.event(
                        shard,
                        AdmissionChange::Stop,
                        now,
                        AdmissionReason::Unassigned,
                    ));
                }
                for &shard in gained {
                    events.extend(self.event(
                        shard,
                        AdmissionChange::Start,
                        now,
                        AdmissionReason::Assigned,
                    ));
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
                        AdmissionChange::Stop,
                        now,
                        AdmissionReason::Unassigned,
                    ));
                }
            }
        }
        let held_before: BTreeSet<ShardEpoch> = self.assignment.held().into_iter().collect();
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
            grant.shard_count,
            &grant.shards,
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
        self.assignment
            .validate_set(push.shard_count, &push.shards)?;
        self.check_addressee(&push.executor_id)?;
        let mut events = Vec::new();
        self.record_lapse_into(now, &mut events);
        let set = self.apply_set_into(
            push.revision,
            push.shard_count,
            &push.shards,
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
                        AdmissionChange::Stop,
                        now,
                        AdmissionReason::Revoked,
                    ));
                }
            }
        }
        Ok(RevokeApplied { reply, events })
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
mod tests {
    use std::time::Duration;

    use super::*;
    use AdmissionChange::{Start, Stop};
    use AdmissionReason::*;

    const EXECUTOR: &str = "ex-7";
    const SHARD_COUNT: u32 = 16;

    fn secs(n: u64) -> Duration {
        Duration::from_secs(n)
    }

    fn set(pairs: &[(u32, u64)]) -> Vec<ShardEpoch> {
        pairs
            .iter()
            .map(|&(shard, epoch)| ShardEpoch { shard, epoch })
            .collect()
    }

    fn grant(lease_ttl_ms: u64, revision: u64, shards: &[(u32, u64)]) -> Grant {
        Grant {
            shard_runs: None,
            executor_id: EXECUTOR.into(),
            lease_ttl_ms,
            revision,
            shard_count: SHARD_COUNT,
            shards: set(shards),
        }
    }

    fn push(revision: u64, shards: &[(u32, u64)]) -> AssignmentPush {
        AssignmentPush {
            executor_id: EXECUTOR.into(),
            revision,
            shard_count: SHARD_COUNT,
            shards: set(shards),
        }
    }

    fn revoke(revision: u64, shards: &[u32]) -> RevokePush {
        RevokePush {
            executor_id: EXECUTOR.into(),
            revision,
            shards: shards.to_vec(),
        }
    }

    /// (shard, epoch, change, at, reason) without the executor id, for exact comparisons.
    fn summary(
        events: &[AdmissionEvent],
    ) -> Vec<(u32, u64, AdmissionChange, Instant, AdmissionReason)> {
        events
            .iter()
            .map(|e| {
                assert_eq!(e.executor_id, EXECUTOR);
                (e.shard, e.epoch, e.change, e.at, e.reason)
            })
            .collect()
    }

    /// A registered core holding `shards` under a lease of `ttl_ms` granted at `t0`.
    fn registered(t0: Instant, ttl_ms: u64, revision: u64, shards: &[(u32, u64)]) -> AdmissionCore {
        let mut core = AdmissionCore::default();
        core.apply_grant(t0, &grant(ttl_ms, revision, shards), t0)
            .unwrap();
        core
    }

    /// Seed 000's example through the whole core: the manager's expiry is t=60, the renewal
    /// leaves at t=20 and is answered with 40 s left, the reply lands at t=25. Admission ends at
    /// t=60, and the log's stop is stamped t=60 even though the lapse is noticed at t=70.
    #[test]
    fn p3_2_delayed_grant_never_extends_past_send_plus_ttl() {
        let t0 = Instant::now();
        let mut core = registered(t0, 60_000, 1, &[(3, 1)]);
        let applied = core
            .apply_grant(t0 + secs(20), &grant(40_000, 2, &[(3, 1)]), t0 + secs(25))
            .unwrap();
        assert_eq!(applied.lease_expiry, t0 + secs(60));
        assert!(applied.events.is_empty(), "{:?}", applied.events);
        assert_eq!(
            core.admit(3, t0 + secs(60) - Duration::from_millis(1)),
            Ok(Permit { shard: 3, epoch: 1 })
        );
        assert_eq!(core.admit(3, t0 + secs(60)), Err(AdmitError::NotReady));
        assert_eq!(
            summary(&core.record_lapse(t0 + secs(70))),
            [(3, 1, Stop, t0 + secs(60), LeaseLapsed)]
        );
    }

    /// I1: a process that reuses a dead executor's address must not take that executor's
    /// shards from a push (or drop its own on a revoke) meant for the dead one.
    #[test]
    fn i1_deliveries_addressed_to_another_executor_are_refused_and_change_nothing() {
        let t0 = Instant::now();
        let mut core = registered(t0, 60_000, 5, &[(1, 1)]);
        let mut foreign_push = push(9, &[(1, 1), (2, 4)]);
        foreign_push.executor_id = "ex-3".into();
        assert!(matches!(
            core.apply_push(&foreign_push, t0 + secs(1)),
            Err(PushError::WrongExecutor { .. })
        ));
        let mut foreign_revoke = revoke(9, &[1]);
        foreign_revoke.executor_id = "ex-3".into();
        assert!(matches!(
            core.apply_revoke(&foreign_revoke, t0 + secs(1)),
            Err(PushError::WrongExecutor { .. })
        ));
        assert_eq!(
            core.admit(1, t0 + secs(2)),
            Ok(Permit { shard: 1, epoch: 1 })
        );
        assert_eq!(core.admit(2, t0 + secs(2)), Err(AdmitError::NotOwner));
        // The same push addressed to this executor applies.
        core.apply_push(&push(9, &[(1, 1), (2, 4)]), t0 + secs(3))
            .unwrap();
        assert_eq!(
            core.admit(2, t0 + secs(4)),
            Ok(Permit { shard: 2, epoch: 4 })
        );
    }

    #[test]
    fn p3_3_push_and_revoke_do_not_move_the_lease_clock() {
        let t0 = Instant::now();
        let mut core = registered(t0, 30_000, 5, &[(1, 1), (2, 1)]);
        let expiry = core.lease().expiry();
        core.apply_push(&push(6, &[(1, 1), (2, 1), (4, 2)]), t0 + secs(10))
            .unwrap();
        core.apply_revoke(&revoke(7, &[2]), t0 + secs(11)).unwrap();
        assert_eq!(core.lease().expiry(), expiry);
        assert_eq!(
            core.admit(4, t0 + secs(29)),
            Ok(Permit { shard: 4, epoch: 2 })
        );
        assert_eq!(core.admit(4, t0 + secs(30)), Err(AdmitError::NotReady));
    }

    #[test]
    fn p3_3_stale_grant_moves_the_clock_but_keeps_the_newer_pushed_set() {
        let t0 = Instant::now();
        let mut core = registered(t0, 30_000, 5, &[(1, 1)]);
        // The renewal leaves at t=10 and is read at revision 6; a push read at 8 overtakes it.
        core.apply_push(&push(8, &[(1, 1), (9, 3)]), t0 + secs(11))
            .unwrap();
        let applied = core
            .apply_grant(t0 + secs(10), &grant(30_000, 6, &[(1, 1)]), t0 + secs(12))
            .unwrap();
        assert_eq!(
            applied.set,
            Ok(SetOutcome::Stale {
                revision: 6,
                applied_revision: 8
            })
        );
        assert_eq!(applied.lease_expiry, t0 + secs(40), "the clock moved");
        assert_eq!(core.assignment().held(), set(&[(1, 1), (9, 3)]));
        assert_eq!(
            core.admit(9, t0 + secs(39)),
            Ok(Permit { shard: 9, epoch: 3 })
        );
    }

    /// A stale grant's lease covers only what the manager recorded at its revision (I1): a held
    /// shard missing from its set and gained no later than it stops at once, as unassigned; a
    /// shard gained by a newer delivery stays.
    #[test]
    fn i1_a_stale_grant_stops_the_shards_taken_by_its_revision() {
        let t0 = Instant::now();
        let mut core = registered(t0, 30_000, 1, &[(1, 1), (2, 1)]);
        core.apply_push(&push(5, &[(1, 1), (2, 1), (3, 1)]), t0 + secs(1))
            .unwrap();
        // Read at revision 3, after shard 2 was marked releasing and before shard 3 was given.
        let applied = core
            .apply_grant(t0 + secs(2), &grant(30_000, 3, &[(1, 1)]), t0 + secs(3))
            .unwrap();
        assert_eq!(
            summary(&applied.events),
            [(2, 1, Stop, t0 + secs(3), Unassigned)]
        );
        assert_eq!(core.assignment().held(), set(&[(1, 1), (3, 1)]));
        assert_eq!(core.admit(2, t0 + secs(3)), Err(AdmitError::NotOwner));
    }

    /// A grant at the revision already applied is not stale: its set is applied as a delivery,
    /// after the lease it carries. When that lease has already run out on arrival, everything
    /// held stops as lapsed (P3.6), the shard its set leaves out included.
    #[test]
    fn p3_6_a_current_grant_already_lapsed_stops_everything_as_lapsed() {
        let t0 = Instant::now();
        let mut core = registered(t0, 30_000, 4, &[(1, 1), (2, 1)]);
        let applied = core
            .apply_grant(t0 + secs(1), &grant(1_000, 4, &[(1, 1)]), t0 + secs(3))
            .unwrap();
        assert_eq!(
            summary(&applied.events),
            [
                (1, 1, Stop, t0 + secs(3), LeaseLapsed),
                (2, 1, Stop, t0 + secs(3), LeaseLapsed)
            ]
        );
        assert_eq!(core.assignment().held(), set(&[(1, 1)]));
    }

    /// P4.1, self-healing (the security review's finding 6): a push at u64::MAX (or a revoke
    /// at it) from outside the cluster made every later grant stale, and the executor served
    /// nothing for good. A grant answering a request sent after it carries a lower revision,
    /// which no grant of this cluster can: its set and revision are adopted, admission starts
    /// for its shards, and the deliveries after it apply again.
    #[test]
    fn p4_1_a_grant_below_the_revision_applied_at_its_send_disowns_a_forged_push() {
        let t0 = Instant::now();
        for forged in ["push", "revoke"] {
            let mut core = registered(t0, 30_000, 5, &[(1, 1), (2, 1)]);
            if forged == "push" {
                core.apply_push(&push(u64::MAX, &[]), t0 + secs(1)).unwrap();
            } else {
                core.apply_revoke(&revoke(u64::MAX, &[1, 2]), t0 + secs(1))
                    .unwrap();
            }
            assert_eq!(core.admit(1, t0 + secs(1)), Err(AdmitError::NotOwner));
            // The renewal leaves at 10, after the forgery was applied.
            let sent = core.applied_mark();
            assert_eq!(sent.revision(), u64::MAX, "{forged}");
            let applied = core
                .apply_grant_after(
                    t0 + secs(10),
                    sent,
                    &grant(30_000, 7, &[(1, 1), (2, 1), (3, 1)]),
                    t0 + secs(11),
                )
                .unwrap();
            assert_eq!(
                applied.disowned,
                Some(Disowned {
                    sent_revision: u64::MAX,
                    grant_revision: 7
                }),
                "{forged}"
            );
            assert_eq!(
                summary(&applied.events),
                [
                    (1, 1, Start, t0 + secs(11), Assigned),
                    (2, 1, Start, t0 + secs(11), Assigned),
                    (3, 1, Start, t0 + secs(11), Assigned),
                ],
                "{forged}"
            );
            assert_eq!(core.assignment().revision(), 7, "{forged}");
            assert_eq!(core.renewal().unwrap().1.revision, 7, "{forged}");
            assert_eq!(
                core.admit(3, t0 + secs(11)),
                Ok(Permit { shard: 3, epoch: 1 })
            );
            // The cluster's next push applies again.
            let pushed = core
                .apply_push(&push(8, &[(1, 1), (3, 1)]), t0 + secs(12))
                .unwrap();
            assert!(matches!(pushed.set, SetOutcome::Applied { .. }), "{forged}");
            assert_eq!(core.admit(2, t0 + secs(12)), Err(AdmitError::NotOwner));
        }
    }

    /// P4.1, P3.3: the comparison is with the revision applied when the request was sent, not
    /// when its grant arrives. A push of the cluster's that lands while the renewal is in flight
    /// leaves the renewal's lower grant merely stale: nothing is adopted wholesale, the shard the
    /// push gave stays, and the shard missing from the grant and gained no later than it goes
    /// (I1).
    #[test]
    fn p4_1_a_push_arriving_while_the_renewal_is_in_flight_leaves_its_lower_grant_stale() {
        let t0 = Instant::now();
        let mut core = registered(t0, 30_000, 5, &[(1, 1), (2, 1)]);
        let sent = core.applied_mark();
        core.apply_push(&push(8, &[(1, 1), (2, 1), (9, 3)]), t0 + secs(11))
            .unwrap();
        // Read at 6, after shard 2 was taken and before shard 9 was given.
        let applied = core
            .apply_grant_after(
                t0 + secs(10),
                sent,
                &grant(30_000, 6, &[(1, 1)]),
                t0 + secs(12),
            )
            .unwrap();
        assert_eq!(applied.disowned, None);
        assert_eq!(
            applied.set,
            Ok(SetOutcome::Stale {
                revision: 6,
                applied_revision: 8
            })
        );
        assert_eq!(
            summary(&applied.events),
            [(2, 1, Stop, t0 + secs(12), Unassigned)]
        );
        assert_eq!(core.assignment().held(), set(&[(1, 1), (9, 3)]));
        assert_eq!(core.assignment().revision(), 8);
    }

    /// I1 with a forged push: a revoke of the cluster's answered while the renewal is in flight
    /// released a shard the forged set did not hold, and the managers may hand it on. The
    /// renewal's grant, read before that revoke, still lists it: it is not adopted (the shard
    /// stays out), and the next renewal, sent with nothing in flight, adopts.
    #[test]
    fn i1_a_delivery_in_flight_defers_the_adoption_to_the_next_renewal() {
        let t0 = Instant::now();
        let mut core = registered(t0, 30_000, 5, &[(1, 1), (2, 1)]);
        core.apply_push(&push(u64::MAX, &[(1, 1)]), t0 + secs(1))
            .unwrap();
        let sent = core.applied_mark();
        let revoked = core.apply_revoke(&revoke(12, &[2]), t0 + secs(11)).unwrap();
        assert_eq!(revoked.reply.released, vec![2]);
        let applied = core
            .apply_grant_after(
                t0 + secs(10),
                sent,
                &grant(30_000, 11, &[(1, 1), (2, 1)]),
                t0 + secs(12),
            )
            .unwrap();
        assert_eq!(applied.disowned, None);
        assert_eq!(core.admit(2, t0 + secs(12)), Err(AdmitError::NotOwner));
        let sent = core.applied_mark();
        let applied = core
            .apply_grant_after(
                t0 + secs(20),
                sent,
                &grant(30_000, 13, &[(1, 1)]),
                t0 + secs(21),
            )
            .unwrap();
        assert_eq!(
            applied.disowned,
            Some(Disowned {
                sent_revision: u64::MAX,
                grant_revision: 13
            })
        );
        assert_eq!(core.assignment().revision(), 13);
        assert_eq!(core.assignment().held(), set(&[(1, 1)]));
    }

    /// Without the mark of its request (`apply_grant`), a grant never disowns: a lower one is
    /// stale, as before.
    #[test]
    fn p4_1_a_grant_without_its_requests_mark_is_only_ever_stale() {
        let t0 = Instant::now();
        let mut core = registered(t0, 30_000, 5, &[(1, 1)]);
        core.apply_push(&push(u64::MAX, &[]), t0 + secs(1)).unwrap();
        let applied = core
            .apply_grant(t0 + secs(10), &grant(30_000, 7, &[(1, 1)]), t0 + secs(11))
            .unwrap();
        assert_eq!(applied.disowned, None);
        assert!(matches!(applied.set, Ok(SetOutcome::Stale { .. })));
    }

    #[test]
    fn p4_1_stale_push_is_ignored() {
        let t0 = Instant::now();
        let mut core = registered(t0, 30_000, 10, &[(1, 1)]);
        let applied = core.apply_push(&push(9, &[(2, 1)]), t0 + secs(1)).unwrap();
        assert!(matches!(applied.set, SetOutcome::Stale { .. }));
        assert!(applied.events.is_empty());
        assert_eq!(
            core.admit(1, t0 + secs(2)),
            Ok(Permit { shard: 1, epoch: 1 })
        );
        assert_eq!(core.admit(2, t0 + secs(2)), Err(AdmitError::NotOwner));
    }

    #[test]
    fn p5_2_stale_revoke_is_ignored_and_answered_ignored() {
        let t0 = Instant::now();
        let mut core = registered(t0, 30_000, 10, &[(1, 1)]);
        // The shard was revoked at 8 and came back at 10; the revoke arrives late.
        let applied = core.apply_revoke(&revoke(8, &[1]), t0 + secs(1)).unwrap();
        assert_eq!(
            applied.reply,
            RevokeReply {
                revision: 8,
                released: vec![],
                ignored: true
            }
        );
        assert!(applied.events.is_empty());
        assert_eq!(
            core.admit(1, t0 + secs(2)),
            Ok(Permit { shard: 1, epoch: 1 })
        );
    }

    #[test]
    fn p5_2_revoke_stops_admission_before_it_is_answered_released() {
        let t0 = Instant::now();
        let mut core = registered(t0, 30_000, 10, &[(1, 1), (2, 4)]);
        let applied = core.apply_revoke(&revoke(12, &[2]), t0 + secs(3)).unwrap();
        assert_eq!(
            applied.reply,
            RevokeReply {
                revision: 12,
                released: vec![2],
                ignored: false
            }
        );
        assert_eq!(
            summary(&applied.events),
            [(2, 4, Stop, t0 + secs(3), Revoked)]
        );
        assert_eq!(core.admit(2, t0 + secs(3)), Err(AdmitError::NotOwner));
        assert_eq!(
            core.renewal().unwrap().1.revision,
            12,
            "renewals report the revoke"
        );
    }

    /// The lease state machine's safety relies on this: after answering a revoke released, an
    /// assign push read before the revoke must not bring the shard back.
    #[test]
    fn p4_1_revoke_raises_the_applied_revision_so_an_older_assign_push_is_ignored() {
        let t0 = Instant::now();
        let mut core = registered(t0, 30_000, 10, &[(1, 1)]);
        // Rebalance at 11 gives shard 2 (push delayed), revoke at 12 takes it again.
        let applied = core.apply_revoke(&revoke(12, &[2]), t0 + secs(1)).unwrap();
        assert_eq!(applied.reply.released, vec![2]);
        let late = core
            .apply_push(&push(11, &[(1, 1), (2, 5)]), t0 + secs(2))
            .unwrap();
        assert!(matches!(late.set, SetOutcome::Stale { .. }));
        assert!(late.events.is_empty());
        assert_eq!(core.admit(2, t0 + secs(3)), Err(AdmitError::NotOwner));
    }

    #[test]
    fn p4_2_renew_reply_with_a_different_set_is_adopted_like_a_push() {
        let t0 = Instant::now();
        let mut core = registered(t0, 30_000, 10, &[(1, 1), (2, 1)]);
        // The push that moved shard 2 away and gave shard 3 never landed.
        let applied = core
            .apply_grant(
                t0 + secs(10),
                &grant(30_000, 14, &[(1, 1), (3, 2)]),
                t0 + secs(10),
            )
            .unwrap();
        assert_eq!(
            summary(&applied.events),
            [
                (2, 1, Stop, t0 + secs(10), Unassigned),
                (3, 2, Start, t0 + secs(10), Assigned)
            ]
        );
        assert_eq!(core.assignment().revision(), 14);
    }

    /// P4.3: stop dropped shards first, then start gained ones, each in shard order.
    #[test]
    fn p4_3_delivery_stops_dropped_shards_before_starting_gained_ones() {
        let t0 = Instant::now();
        let mut core = registered(t0, 30_000, 1, &[(5, 1), (6, 1), (7, 1)]);
        let applied = core
            .apply_push(&push(2, &[(0, 2), (6, 1), (7, 2)]), t0 + secs(1))
            .unwrap();
        let at = t0 + secs(1);
        assert_eq!(
            summary(&applied.events),
            [
                (5, 1, Stop, at, Unassigned),
                (7, 1, Stop, at, Unassigned),
                (0, 2, Start, at, Assigned),
                (7, 2, Start, at, Assigned),
            ]
        );
    }

    #[test]
    fn p3_6_lapse_fences_and_a_later_grant_resumes_without_reacquire() {
        let t0 = Instant::now();
        let mut core = registered(t0, 10_000, 3, &[(1, 1), (2, 1)]);
        assert_eq!(core.admit(1, t0 + secs(11)), Err(AdmitError::NotReady));
        assert_eq!(core.view(t0 + secs(11)).admission, AdmissionState::Fenced);
        // A push while fenced changes the set but admits nothing (it carries no lease).
        let pushed = core
            .apply_push(&push(4, &[(1, 1), (2, 1), (3, 1)]), t0 + secs(12))
            .unwrap();
        assert_eq!(
            summary(&pushed.events),
            [
                (1, 1, Stop, t0 + secs(10), LeaseLapsed),
                (2, 1, Stop, t0 + secs(10), LeaseLapsed)
            ]
        );
        assert_eq!(core.admit(3, t0 + secs(12)), Err(AdmitError::NotReady));
        // A renewal sent at 13 succeeds for the same shards and epochs.
        let resumed = core
            .apply_grant(
                t0 + secs(13),
                &grant(10_000, 5, &[(1, 1), (2, 1), (3, 1), (4, 1)]),
                t0 + secs(14),
            )
            .unwrap();
        let at = t0 + secs(14);
        assert_eq!(
            summary(&resumed.events),
            [
                (1, 1, Start, at, Resumed),
                (2, 1, Start, at, Resumed),
                // Pushed while fenced: held before the grant, so it resumes with the rest.
                (3, 1, Start, at, Resumed),
                // New in the grant itself.
                (4, 1, Start, at, Assigned),
            ]
        );
        assert_eq!(core.admit(1, at), Ok(Permit { shard: 1, epoch: 1 }));
        assert_eq!(core.view(at).admission, AdmissionState::Admitting);
    }

    #[test]
    fn p3_6_grant_already_lapsed_on_arrival_admits_nothing() {
        let t0 = Instant::now();
        let mut core = registered(t0, 10_000, 1, &[(1, 1)]);
        // Sent at 5 with 2 s left, applied at 8: lapsed since 7. Admission, on under the
        // earlier expiry (10) until now, stops now.
        let applied = core
            .apply_grant(t0 + secs(5), &grant(2_000, 2, &[(1, 1)]), t0 + secs(8))
            .unwrap();
        assert_eq!(
            summary(&applied.events),
            [(1, 1, Stop, t0 + secs(8), LeaseLapsed)]
        );
        assert_eq!(core.admit(1, t0 + secs(8)), Err(AdmitError::NotReady));
    }

    #[test]
    fn p3_6_not_registered_admits_nothing_and_refuses_pushes() {
        let t0 = Instant::now();
        let mut core = AdmissionCore::default();
        assert_eq!(core.admit(0, t0), Err(AdmitError::NotReady));
        assert_eq!(core.admit_key(b"k", t0), Err(AdmitError::NotReady));
        assert_eq!(
            core.apply_push(&push(1, &[(0, 1)]), t0).unwrap_err(),
            PushError::NotRegistered
        );
        assert!(core.renewal().is_none());
    }

    /// A reason displays as the name the admission log writes for it (§9), so what an
    /// embedder prints from an event matches the log line.
    #[test]
    fn a_reason_displays_as_its_admission_log_name() {
        let names = [
            (Assigned, "assigned"),
            (Resumed, "resumed"),
            (Unassigned, "unassigned"),
            (Revoked, "revoked"),
            (LeaseLapsed, "lease_lapsed"),
            (UnknownExecutor, "unknown_executor"),
            (Shutdown, "shutdown"),
        ];
        for (reason, name) in names {
            assert_eq!(reason.to_string(), name);
            assert_eq!(reason.as_str(), name);
            assert_eq!(serde_json::to_value(reason).unwrap(), name);
        }
    }

    #[test]
    fn admit_key_maps_keys_with_the_api_hash() {
        let t0 = Instant::now();
        let count = NonZeroU32::new(SHARD_COUNT).unwrap();
        let shard = shard_for_key(b"order-17", count);
        let core = registered(t0, 10_000, 1, &[(shard, 4)]);
        assert_eq!(
            core.admit_key(b"order-17", t0),
            Ok(Permit { shard, epoch: 4 })
        );
    }

    #[test]
    fn unknown_executor_stops_everything_and_forgets_the_registration() {
        let t0 = Instant::now();
        let mut core = registered(t0, 10_000, 9, &[(1, 1)]);
        let events = core.forget_executor(t0 + secs(2));
        assert_eq!(
            summary(&events),
            [(1, 1, Stop, t0 + secs(2), UnknownExecutor)]
        );
        assert_eq!(core.executor_id(), None);
        assert_eq!(core.admit(1, t0 + secs(2)), Err(AdmitError::NotReady));
        assert!(core.assignment().held().is_empty());
        assert_eq!(
            core.assignment().revision(),
            9,
            "the revision order survives"
        );
        // A new registration is accepted under its new id.
        let other = Grant {
            executor_id: "ex-20".into(),
            ..grant(10_000, 20, &[(2, 3)])
        };
        core.apply_grant(t0 + secs(3), &other, t0 + secs(3))
            .unwrap();
        assert_eq!(
            core.admit(2, t0 + secs(3)),
            Ok(Permit { shard: 2, epoch: 3 })
        );
    }

    #[test]
    fn a_grant_for_another_executor_is_refused_whole() {
        let t0 = Instant::now();
        let mut core = registered(t0, 10_000, 1, &[(1, 1)]);
        let foreign = Grant {
            executor_id: "ex-99".into(),
            ..grant(60_000, 50, &[])
        };
        assert!(core.apply_grant(t0, &foreign, t0).is_err());
        assert_eq!(core.lease().expiry(), Some(t0 + secs(10)));
        assert!(core.assignment().holds(1, 1));
    }

    #[test]
    fn p3_7_stop_admission_is_for_good() {
        let t0 = Instant::now();
        let mut core = registered(t0, 10_000, 1, &[(1, 1)]);
        assert!(!core.is_stopping());
        assert_eq!(
            summary(&core.stop_admission(t0 + secs(1))),
            [(1, 1, Stop, t0 + secs(1), Shutdown)]
        );
        assert!(core.is_stopping());
        let applied = core
            .apply_grant(t0 + secs(2), &grant(10_000, 2, &[(1, 1)]), t0 + secs(2))
            .unwrap();
        assert!(applied.events.is_empty());
        assert_eq!(core.admit(1, t0 + secs(2)), Err(AdmitError::NotReady));
        // A revoke while stopping is still answered released: nothing is admitted.
        assert_eq!(
            core.apply_revoke(&revoke(3, &[1]), t0 + secs(3))
                .unwrap()
                .reply
                .released,
            vec![1]
        );
    }

    #[test]
    fn malformed_grant_set_still_moves_the_lease() {
        let t0 = Instant::now();
        let mut core = registered(t0, 10_000, 1, &[(1, 1)]);
        let applied = core
            .apply_grant(t0 + secs(5), &grant(10_000, 2, &[(99, 1)]), t0 + secs(5))
            .unwrap();
        assert!(applied.set.is_err());
        assert_eq!(applied.lease_expiry, t0 + secs(15));
        assert!(core.assignment().holds(1, 1));
    }
}
