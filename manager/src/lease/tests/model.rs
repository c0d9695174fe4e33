//! A property test of whole fleets: the state machine driven by a leader loop and by model
//! executors that behave as the protocol allows, through lost, delayed and reordered deliveries,
//! late (held up or retried) acknowledgements, crashes, graceful stops, retried registrations, duplicated (replayed)
//! commands, stale plans and reaps, lease duration changes, and leader changes to a leader whose
//! clock is skewed against the old one's.
//!
//! The model executor (one process, one incarnation):
//! - anchors a grant at the instant its request was sent: copy expiry = `sent_at + lease_ttl_ms`
//!   (P3.2); only grants move it, and every grant moves it (P3.3); pushes carry no lease;
//! - keeps its set in the executor library's own `AssignmentState`: a delivered set applies only
//!   if its revision is at least the last one applied (P4.1); a revoke applies unless a newer set
//!   overtook it, and is acknowledged for the shards it no longer admits (P5.2); a stale grant
//!   drops the shards already taken at its revision;
//! - admits a shard at an instant iff it is running, its copy is strictly after that instant and
//!   the shard is in its last applied set (P3.6);
//! - claims its applied set and last applied revision when renewing (P4.2).
//!
//! Time: one true clock runs at one rate for everybody (the docs assume rate error far below the
//! lease, P5.2). Executors keep their lease copies on it (their own monotonic clock, P3.2). The
//! leader stamps commands with its own clock (P2.3): the true clock plus an offset fixed for its
//! term, the error of the wall clock it read when it took office. A leader change draws a new
//! offset: the new clock reads up to 2 s ahead of or behind the old one (and no leader's clock is
//! more than 2 s off the true one). A request is applied at the instant it is sent, which makes an
//! executor's copy as long as it can ever be: the worst case for exclusivity.
//!
//! The leader's decisions about time go through the real [`LeaderCore`] of each term, as the
//! leader loop's do: whom to reap, whether handoffs may complete on expiry (P6.1's new-leader
//! grace, P6.3's mass-expiry guard, each term drawing its guard settings). `last_renewal_applied_ms`
//! is tracked from the renewals committed in the term, as the leader's signals track it. Only the
//! current term's commands are replayed: Raft applies an old leader's entries before any of the
//! new leader's, so a stale stamp from another clock never lands after the new leader's writes.
//!
//! After every step: no two processes admit one shard at the current instant (I1); every admitted
//! (shard, epoch) was minted for that process's executor (I2); per shard, epochs never decrease,
//! a new holder always has a larger epoch and no epoch is ever given to two executors (I2); the
//! shard table and the executors' sets agree. At every commit that reaps an executor, no grant
//! its process holds or has in flight is still running; at every commit that completes a handoff
//! on the old grant's expiry, the old owner no longer admits the shard (I1 at its source: no
//! leader, however its clock is skewed, takes a shard from a grant that is still running). When
//! the fleet is stable (every executor live, no handoff pending, nothing to plan) shards are
//! spread within one. At the end the fleet is run healthy for a while and must converge: all
//! shards owned, spread within one, every running process admitting exactly its recorded set.

use std::cell::RefCell;
use std::collections::{BTreeMap, BTreeSet};

use proptest::prelude::*;
use proptest::test_runner::TestRunner;

use super::super::{
    plan_rebalance, Command, Effects, Epoch, ExecutorId, Grant, LeaseState, Outcome, RefusalReason,
    RenewResult, Renewal, ShardId,
};
use super::register_command;
use crate::leader::core::{tick_ms, Deferral, GuardConfig, LeaderCore, StepDecision};
use leasehold_api::wire::{RevokeReply, ShardEpoch};
use leasehold_executor::assignment::{AssignmentState, RevokeOutcome};

/// Lease durations the leader may be (re)configured with; the first is the initial one.
const LEASE_CHOICES_MS: [u64; 3] = [1_000, 300, 1_500];
/// Most processes ever started in one case.
const MAX_PROCESSES: usize = 6;
/// Healthy rounds (a third of a lease each) run at the end, at least; enough for any zombie or
/// crashed executor to lapse and be reaped, and for every handoff to complete, unless a new
/// leader's grace (P6.1) or a mass-expiry episode (P6.3) holds them back: then the rounds go on
/// until the fleet converged or `SETTLE_LIMIT_MS` passed.
const SETTLE_ROUNDS: usize = 30;
/// Bound on the settle phase in true time: the longest lease ever told (1.5 s, plus up to 4 s of
/// skew between two leaders' clocks), a new leader's grace of as long, the longest mass-expiry
/// grace and a few leases to finish the handoffs.
const SETTLE_LIMIT_MS: u64 = 20_000;
/// The true clock starts here. The first leader's clock reads the true one and it took office at
/// 0, well before the cluster was initialised, so P6.1 holds nothing back in the first term.
const START_MS: u64 = 10_000;
/// No leader's clock is further than this from the true clock, and a new leader's clock differs
/// from the old one's by at most this much (far below the production lease, §11).
const MAX_SKEW_MS: i64 = 2_000;
/// Longest mass-expiry grace drawn (P6.3).
const MAX_GRACE_MS: u64 = 3_000;

/// How often the interesting situations were reached, summed over all cases: the test fails if
/// any stays at zero, so a model that silently stopped exercising a guard cannot pass.
#[derive(Debug, Default, Clone, Copy, PartialEq, Eq)]
struct Coverage {
    handoffs_started: usize,
    acknowledged_by_release: usize,
    acknowledged_by_claims: usize,
    completed_by_expiry: usize,
    handoffs_cancelled: usize,
    acknowledgements_ignored: usize,
    stale_plans_refused: usize,
    reap_candidates_skipped: usize,
    executors_reaped: usize,
    registrations_retried: usize,
    claims_mismatches: usize,
    stale_revokes_ignored: usize,
    overtaken_revokes_released: usize,
    shards_admitted: usize,
    leader_changes: usize,
    /// A step of a new leader (after a change) found overdue executors and reaped none (P6.1).
    reaps_deferred_by_new_leader: usize,
    /// ... and one of those overdue executors' processes was still admitting under an old grant:
    /// the grace was all that stood between the skewed clock and an I1 violation.
    deferred_reaps_of_admitting_executors: usize,
    /// A step of a new leader found a handoff due on its clock and completed none (P6.1).
    expired_handoffs_deferred_by_new_leader: usize,
    reaps_deferred_by_mass_expiry_guard: usize,
    /// Executors marked draining (a change, not a repeat).
    drains_started: usize,
}

impl Coverage {
    fn add(&mut self, other: &Coverage) {
        self.handoffs_started += other.handoffs_started;
        self.acknowledged_by_release += other.acknowledged_by_release;
        self.acknowledged_by_claims += other.acknowledged_by_claims;
        self.completed_by_expiry += other.completed_by_expiry;
        self.handoffs_cancelled += other.handoffs_cancelled;
        self.acknowledgements_ignored += other.acknowledgements_ignored;
        self.stale_plans_refused += other.stale_plans_refused;
        self.reap_candidates_skipped += other.reap_candidates_skipped;
        self.executors_reaped += other.executors_reaped;
        self.registrations_retried += other.registrations_retried;
        self.claims_mismatches += other.claims_mismatches;
        self.stale_revokes_ignored += other.stale_revokes_ignored;
        self.overtaken_revokes_released += other.overtaken_revokes_released;
        self.shards_admitted += other.shards_admitted;
        self.leader_changes += other.leader_changes;
        self.reaps_deferred_by_new_leader += other.reaps_deferred_by_new_leader;
        self.deferred_reaps_of_admitting_executors += other.deferred_reaps_of_admitting_executors;
        self.expired_handoffs_deferred_by_new_leader +=
            other.expired_handoffs_deferred_by_new_leader;
        self.reaps_deferred_by_mass_expiry_guard += other.reaps_deferred_by_mass_expiry_guard;
        self.drains_started += other.drains_started;
    }

    fn unreached(&self) -> Vec<&'static str> {
        [
            ("handoffs_started", self.handoffs_started),
            ("acknowledged_by_release", self.acknowledged_by_release),
            ("acknowledged_by_claims", self.acknowledged_by_claims),
            ("completed_by_expiry", self.completed_by_expiry),
            ("handoffs_cancelled", self.handoffs_cancelled),
            ("acknowledgements_ignored", self.acknowledgements_ignored),
            ("stale_plans_refused", self.stale_plans_refused),
            ("reap_candidates_skipped", self.reap_candidates_skipped),
            ("executors_reaped", self.executors_reaped),
            ("registrations_retried", self.registrations_retried),
            ("drains_started", self.drains_started),
            ("claims_mismatches", self.claims_mismatches),
            ("stale_revokes_ignored", self.stale_revokes_ignored),
            (
                "overtaken_revokes_released",
                self.overtaken_revokes_released,
            ),
            ("shards_admitted", self.shards_admitted),
            ("leader_changes", self.leader_changes),
            (
                "reaps_deferred_by_new_leader",
                self.reaps_deferred_by_new_leader,
            ),
            (
                "deferred_reaps_of_admitting_executors",
                self.deferred_reaps_of_admitting_executors,
            ),
            (
                "expired_handoffs_deferred_by_new_leader",
                self.expired_handoffs_deferred_by_new_leader,
            ),
            (
                "reaps_deferred_by_mass_expiry_guard",
                self.reaps_deferred_by_mass_expiry_guard,
            ),
        ]
        .into_iter()
        .filter(|(_, count)| *count == 0)
        .map(|(name, _)| name)
        .collect()
    }

    fn record(&mut self, outcome: &Outcome) {
        match outcome {
            Outcome::Rebalanced {
                releasing,
                cancelled,
                ..
            } => {
                self.handoffs_started += releasing.len();
                self.handoffs_cancelled += cancelled.len();
            }
            Outcome::Released {
                completed, ignored, ..
            } => {
                self.acknowledged_by_release += completed.len();
                self.acknowledgements_ignored += ignored.len();
            }
            Outcome::Renewed { results, .. } => {
                for result in results {
                    if let RenewResult::Renewed {
                        claims_mismatch,
                        acknowledged,
                        ..
                    } = result
                    {
                        self.acknowledged_by_claims += acknowledged.len();
                        self.claims_mismatches += usize::from(*claims_mismatch);
                    }
                }
            }
            Outcome::DrainingSet {
                draining: true,
                changed: true,
                ..
            } => self.drains_started += 1,
            Outcome::HandoffsCompleted { completed, .. } => {
                self.completed_by_expiry += completed.len();
            }
            Outcome::Refused {
                reason: RefusalReason::StalePlan { .. },
            } => self.stale_plans_refused += 1,
            Outcome::Reaped {
                reaped, skipped, ..
            } => {
                self.executors_reaped += reaped.len();
                self.reap_candidates_skipped += skipped.len();
            }
            Outcome::Registered {
                already_registered: true,
                ..
            } => self.registrations_retried += 1,
            _ => {}
        }
    }
}

/// What happens to a reply.
#[derive(Debug, Clone, Copy)]
enum Fate {
    Delivered,
    Lost,
    Delayed,
}

#[derive(Debug, Clone)]
enum Step {
    /// Time passes.
    Advance {
        ms: u64,
    },
    /// A new process starts and registers; `deaf` processes never receive pushes (P5.3).
    Spawn {
        reply: Fate,
        deaf: bool,
    },
    /// A process retries its registration (same incarnation).
    RetryRegister {
        who: usize,
        reply: Fate,
    },
    /// Processes renew, group-committed in one entry.
    Renew {
        who: Vec<usize>,
        reply: Fate,
    },
    /// A process receives one message from its inbox (any, so deliveries reorder).
    Deliver {
        who: usize,
        which: usize,
        ack_delayed: bool,
    },
    /// A message is lost.
    Drop {
        who: usize,
        which: usize,
    },
    /// Graceful stop: stop admitting, then deregister (P3.7).
    Deregister {
        who: usize,
    },
    /// The process dies silently.
    Crash {
        who: usize,
    },
    /// The leader tick (P3.8): a step of its core, then reap what it says, plan, complete due
    /// handoffs if it allows.
    Tick,
    /// The leader steps its core and reads a plan now, to propose the reap and the plan later
    /// (stale).
    Stash,
    ApplyStashedReap,
    ApplyStashedPlan,
    /// A command from the past is committed again (a duplicated proposal, P2.4).
    Replay {
        which: usize,
    },
    /// An acknowledgement arrives late: one held up in flight, or a retry of one already
    /// applied (P5.2).
    LateRelease {
        which: usize,
    },
    SetLeaseDuration {
        choice: usize,
    },
    /// An operator drains a process's executor (or cancels the drain): its shards leave through
    /// the normal handoff and it gets no new ones.
    Drain {
        who: usize,
        draining: bool,
    },
    /// Another manager becomes leader (P2.3, P6.1, P6.2). Its clock reads `skew_ms` ahead of the
    /// old leader's (behind if negative; clamped so it stays within 2 s of the true clock), it
    /// steps a fresh core with its own guard settings, pushes every executor its set and every
    /// unfinished handoff's revoke again, and takes its first step at once, as the leader loop
    /// does. The old leader's stashed proposals are committed first (they reached the new
    /// leader's log) or lost.
    LeaderChange {
        skew_ms: i64,
        guard: GuardConfig,
        tail_committed: bool,
    },
}

#[derive(Debug, Clone)]
enum Message {
    Assign {
        revision: u64,
        shards: Vec<(ShardId, Epoch)>,
    },
    Revoke {
        revision: u64,
        shards: Vec<ShardId>,
    },
    Reply {
        sent_at_ms: u64,
        grant: Grant,
    },
}

#[derive(Debug)]
struct Process {
    incarnation: String,
    executor_id: Option<ExecutorId>,
    /// Ids this process learnt are gone (a 404); replies for them are discarded.
    retired_ids: BTreeSet<ExecutorId>,
    running: bool,
    deaf: bool,
    lease_expiry_ms: Option<u64>,
    shard_count: u32,
    /// The executor crate's own delivery rules: revision order (P4.1), revoke answers (P5.2),
    /// stale grants.
    assignment: AssignmentState,
    inbox: Vec<Message>,
}

/// What a revoke did to a model process: the executor library's answer.
struct RevokeAnswer {
    reply: RevokeReply,
    overtaken: bool,
}

fn shard_epochs(shards: &[(ShardId, Epoch)]) -> Vec<ShardEpoch> {
    shards
        .iter()
        .map(|&(shard, epoch)| ShardEpoch { shard, epoch })
        .collect()
}

impl Process {
    fn new(incarnation: String, deaf: bool, shard_count: u32) -> Self {
        Self {
            incarnation,
            executor_id: None,
            retired_ids: BTreeSet::new(),
            running: true,
            deaf,
            lease_expiry_ms: None,
            shard_count,
            assignment: AssignmentState::default(),
            inbox: Vec::new(),
        }
    }

    /// The applied set.
    fn applied(&self) -> BTreeMap<ShardId, Epoch> {
        self.assignment
            .held()
            .into_iter()
            .map(|s| (s.shard, s.epoch))
            .collect()
    }

    fn admits(&self, shard: ShardId, now_ms: u64) -> Option<Epoch> {
        let lease_valid = self.lease_expiry_ms.is_some_and(|expiry| expiry > now_ms);
        if self.running && lease_valid {
            self.assignment.epoch_of(shard)
        } else {
            None
        }
    }

    /// P4.1: a set older than the last applied delivery is ignored.
    fn apply_set(&mut self, revision: u64, shards: &[(ShardId, Epoch)]) {
        let applied = self
            .assignment
            .apply_set(revision, self.shard_count, &shard_epochs(shards));
        assert!(
            applied.is_ok(),
            "the leader delivered a malformed set: {applied:?}"
        );
    }

    /// P3.2, P3.3: every grant moves the lease clock, anchored at the send instant.
    fn receive_reply(&mut self, sent_at_ms: u64, grant: &Grant) {
        if self.retired_ids.contains(&grant.executor_id) {
            return;
        }
        if self
            .executor_id
            .as_ref()
            .is_some_and(|id| *id != grant.executor_id)
        {
            return;
        }
        self.executor_id = Some(grant.executor_id.clone());
        if grant.revision < self.assignment.revision() {
            // The executor's rule for a stale grant: its lease does not cover shards already
            // taken from this executor at the grant's revision (gained no later, not in its set).
            self.assignment
                .drop_taken_by(grant.revision, &shard_epochs(&grant.shards));
        }
        self.lease_expiry_ms = Some(sent_at_ms.saturating_add(grant.lease_ttl_ms));
        self.apply_set(grant.revision, &grant.shards);
    }

    /// P4.1, P5.2, as the executor library answers a revoke: applied, the shards stop being
    /// admitted and are released; overtaken by a newer set, the shards that set took away are
    /// released and the ones it gave back are not.
    fn receive_revoke(&mut self, revision: u64, shards: &[ShardId]) -> RevokeAnswer {
        match self.assignment.apply_revoke(revision, shards) {
            Ok(outcome) => RevokeAnswer {
                reply: outcome.reply(revision),
                overtaken: matches!(outcome, RevokeOutcome::Overtaken { .. }),
            },
            Err(error) => panic!("the leader sent a malformed revoke: {error}"),
        }
    }

    /// When the last grant for its executor that it holds, or that is in flight to it, runs out.
    fn grants_run_until(&self) -> Option<u64> {
        let in_flight = self.inbox.iter().filter_map(|message| match message {
            Message::Reply { sent_at_ms, grant }
                if self.executor_id.as_ref() == Some(&grant.executor_id) =>
            {
                Some(sent_at_ms.saturating_add(grant.lease_ttl_ms))
            }
            _ => None,
        });
        self.lease_expiry_ms.into_iter().chain(in_flight).max()
    }

    fn renewal(&self) -> Option<Renewal> {
        let executor_id = self.executor_id.clone()?;
        self.running.then(|| Renewal {
            executor_id,
            claims: self
                .assignment
                .held()
                .into_iter()
                .map(|s| (s.shard, s.epoch))
                .collect(),
            revision: self.assignment.revision(),
        })
    }
}

/// The current leader's term.
#[derive(Debug)]
struct Term {
    /// 0 for the first leader, then one more per leader change.
    number: u64,
    /// This leader's clock minus the true clock: its wall clock's error when it took office
    /// (P2.3: wall time at the start of the term plus monotonic time since).
    offset_ms: i64,
    core: LeaderCore,
    /// When this leader last committed a renewal, on its clock (the leader's signals, P6.3).
    last_renewal_applied_ms: Option<u64>,
    /// Where this term's commands start in `World::history`.
    first_command: usize,
}

#[derive(Debug)]
struct World {
    state: LeaseState,
    next_index: u64,
    /// The true clock: executors' lease copies and admission (I1) are on it.
    true_ms: u64,
    leader: Term,
    processes: Vec<Process>,
    history: Vec<Command>,
    holder_of_epoch: BTreeMap<(ShardId, Epoch), ExecutorId>,
    last_holder: BTreeMap<ShardId, (ExecutorId, Epoch)>,
    stashed_reap: Option<Command>,
    stashed_plan: Option<Command>,
    /// Acknowledgements sent but held up in flight.
    delayed_acks: Vec<Command>,
    coverage: Coverage,
}

impl World {
    fn shard_count(&self) -> u32 {
        self.state.config().map_or(0, |config| config.shard_count)
    }

    fn new(shard_count: u32, guard: GuardConfig) -> Self {
        let mut world = Self {
            state: LeaseState::default(),
            next_index: 1,
            true_ms: START_MS,
            leader: Term {
                number: 0,
                offset_ms: 0,
                core: LeaderCore::new(0, guard),
                last_renewal_applied_ms: None,
                first_command: 0,
            },
            processes: Vec::new(),
            history: Vec::new(),
            holder_of_epoch: BTreeMap::new(),
            last_holder: BTreeMap::new(),
            stashed_reap: None,
            stashed_plan: None,
            delayed_acks: Vec::new(),
            coverage: Coverage::default(),
        };
        let outcome = world.apply(Command::Init {
            now_ms: world.now_ms(),
            shard_count,
            lease_duration_ms: LEASE_CHOICES_MS[0],
        });
        assert!(matches!(outcome, Outcome::Initialised { .. }));
        world
    }

    fn lease_duration_ms(&self) -> u64 {
        self.state
            .config()
            .map_or(1, |config| config.lease_duration_ms)
    }

    /// The leader's clock: what it stamps into commands (P2.2, P2.3) and steps its core with.
    fn now_ms(&self) -> u64 {
        self.true_ms
            .checked_add_signed(self.leader.offset_ms)
            .expect("the true clock starts far enough from zero")
    }

    /// Commits a command, checks the state invariants, I2 and I1 at its source, fans out its
    /// pushes, and notes a committed renewal for the leader's core (P6.3).
    fn apply(&mut self, command: Command) -> Outcome {
        let index = self.next_index;
        self.next_index += 1;
        let releasing_from: BTreeMap<ShardId, ExecutorId> = self
            .state
            .shards()
            .iter()
            .filter(|shard| shard.handoff.is_some())
            .filter_map(|shard| shard.owner.clone().map(|owner| (shard.id, owner)))
            .collect();
        let outcome = self.state.apply(index, &command);
        assert_eq!(
            self.state.consistency_violations(),
            Vec::<String>::new(),
            "after {command:?}"
        );
        let stamped_ms = command.now_ms();
        self.history.push(command);
        self.coverage.record(&outcome);
        self.check_epochs();
        match &outcome {
            Outcome::Reaped { reaped, .. } => {
                for executor_id in reaped {
                    self.check_reaped(executor_id);
                }
            }
            Outcome::HandoffsCompleted { completed, .. } => {
                for shard in completed {
                    if let Some(old_owner) = releasing_from.get(shard) {
                        self.check_handed_on(old_owner, *shard);
                    }
                }
            }
            Outcome::Renewed { results, .. }
                if results
                    .iter()
                    .any(|result| matches!(result, RenewResult::Renewed { .. })) =>
            {
                let last = &mut self.leader.last_renewal_applied_ms;
                *last = Some(last.map_or(stamped_ms, |at| at.max(stamped_ms)));
            }
            _ => {}
        }
        if let Some(effects) = outcome.effects() {
            self.fan_out(effects);
        }
        outcome
    }

    /// I1 at its source, for a reap: every grant the executor holds or has in flight to it has
    /// run out on the true clock, whichever leader's clock stamped the reap, so its process (if
    /// it runs at all) can no longer admit anything, now or after a late delivery, when its
    /// shards move on.
    fn check_reaped(&self, executor_id: &ExecutorId) {
        for process in &self.processes {
            if !process.running || process.executor_id.as_ref() != Some(executor_id) {
                continue;
            }
            let grants_run_until = process.grants_run_until();
            assert!(
                grants_run_until.is_none_or(|until| until <= self.true_ms),
                "I1: {executor_id} reaped at leader clock {} (term {}, clock {:+} ms off) while \
                 it may admit under a grant until {grants_run_until:?}, true clock {}",
                self.now_ms(),
                self.leader.number,
                self.leader.offset_ms,
                self.true_ms
            );
        }
    }

    /// I1 at its source, for a handoff completed on the old grant's expiry: the old owner no
    /// longer admits the shard when it moves on.
    fn check_handed_on(&self, old_owner: &ExecutorId, shard: ShardId) {
        for process in &self.processes {
            if process.executor_id.as_ref() != Some(old_owner) {
                continue;
            }
            assert!(
                process.admits(shard, self.true_ms).is_none(),
                "I1: shard {shard} handed on from {old_owner} on expiry at leader clock {} \
                 (term {}, clock {:+} ms off) while {old_owner} admits it until {:?}, true clock {}",
                self.now_ms(),
                self.leader.number,
                self.leader.offset_ms,
                process.lease_expiry_ms,
                self.true_ms
            );
        }
    }

    /// The leader's pushes after a commit (P5.1): revokes as committed, assignments of the
    /// full set read now (P4.1, P4.3). A push reaches the process behind the executor's address.
    fn fan_out(&mut self, effects: &Effects) {
        for revoke in &effects.revokes {
            let message = Message::Revoke {
                revision: revoke.revision,
                shards: revoke.shards.clone(),
            };
            self.push(&revoke.executor_id, message);
        }
        for executor_id in &effects.assignments {
            if let Some(grant) = self.state.grant_for(executor_id, self.now_ms()) {
                let message = Message::Assign {
                    revision: grant.revision,
                    shards: grant.shards,
                };
                self.push(executor_id, message);
            }
        }
    }

    fn push(&mut self, executor_id: &str, message: Message) {
        let Some(incarnation) = self
            .state
            .executor(executor_id)
            .map(|e| e.incarnation.clone())
        else {
            return;
        };
        if let Some(process) = self
            .processes
            .iter_mut()
            .find(|p| p.incarnation == incarnation && p.running && !p.deaf)
        {
            process.inbox.push(message);
        }
    }

    /// I2 on the replicated state, after every commit.
    fn check_epochs(&mut self) {
        for shard in self.state.shards() {
            if let Some((_, last_epoch)) = self.last_holder.get(&shard.id) {
                assert!(
                    shard.epoch >= *last_epoch,
                    "shard {} epoch went back",
                    shard.id
                );
            }
            let Some(owner) = &shard.owner else {
                continue;
            };
            let minted_for = self
                .holder_of_epoch
                .entry((shard.id, shard.epoch))
                .or_insert_with(|| owner.clone());
            assert_eq!(
                minted_for, owner,
                "shard {} epoch {} given to two executors",
                shard.id, shard.epoch
            );
            if let Some((last_owner, last_epoch)) = self.last_holder.get(&shard.id) {
                if last_owner != owner {
                    assert!(
                        shard.epoch > *last_epoch,
                        "shard {} passed from {last_owner} to {owner} without a new epoch",
                        shard.id
                    );
                }
            }
            self.last_holder
                .insert(shard.id, (owner.clone(), shard.epoch));
        }
    }

    /// I1 and the executor side of I2, at the current instant.
    fn check_admission(&mut self) {
        for shard in self.state.shards() {
            let admitting: Vec<(&Process, Epoch)> = self
                .processes
                .iter()
                .filter_map(|p| p.admits(shard.id, self.true_ms).map(|epoch| (p, epoch)))
                .collect();
            assert!(
                admitting.len() <= 1,
                "I1: shard {} admitted by {:?} at {}",
                shard.id,
                admitting
                    .iter()
                    .map(|(p, epoch)| (&p.incarnation, &p.executor_id, epoch))
                    .collect::<Vec<_>>(),
                self.true_ms
            );
            self.coverage.shards_admitted += admitting.len();
            for (process, epoch) in admitting {
                assert_eq!(
                    self.holder_of_epoch.get(&(shard.id, epoch)),
                    process.executor_id.as_ref(),
                    "I2: {} admits shard {} at an epoch minted for someone else",
                    process.incarnation,
                    shard.id
                );
            }
        }
    }

    fn pick(&self, who: usize) -> Option<usize> {
        (!self.processes.is_empty()).then(|| who % self.processes.len())
    }

    fn deliver_reply(&mut self, process: usize, sent_at_ms: u64, grant: Grant, fate: Fate) {
        let Some(target) = self.processes.get_mut(process) else {
            return;
        };
        match fate {
            Fate::Delivered => target.receive_reply(sent_at_ms, &grant),
            Fate::Lost => {}
            Fate::Delayed => target.inbox.push(Message::Reply { sent_at_ms, grant }),
        }
    }

    fn register(&mut self, process: usize, fate: Fate) {
        let Some(target) = self.processes.get(process).filter(|p| p.running) else {
            return;
        };
        let command = register_command(self.now_ms(), &target.incarnation);
        let sent_at_ms = self.true_ms;
        if let Outcome::Registered { grant, .. } = self.apply(command) {
            self.deliver_reply(process, sent_at_ms, grant, fate);
        }
    }

    fn renew(&mut self, processes: &[usize], fate: Fate) {
        let mut renewing: Vec<(usize, Renewal)> = Vec::new();
        for &process in processes {
            if renewing.iter().any(|(p, _)| *p == process) {
                continue;
            }
            if let Some(renewal) = self.processes.get(process).and_then(Process::renewal) {
                renewing.push((process, renewal));
            }
        }
        if renewing.is_empty() {
            return;
        }
        let sent_at_ms = self.true_ms;
        let outcome = self.apply(Command::Renew {
            now_ms: self.now_ms(),
            renewals: renewing
                .iter()
                .map(|(_, renewal)| renewal.clone())
                .collect(),
        });
        let Outcome::Renewed { results, .. } = outcome else {
            panic!("renew refused: {outcome:?}");
        };
        for ((process, _), result) in renewing.into_iter().zip(results) {
            match result {
                RenewResult::Renewed { grant, .. } => {
                    self.deliver_reply(process, sent_at_ms, grant, fate);
                }
                RenewResult::UnknownExecutor { executor_id } => {
                    if matches!(fate, Fate::Delivered) {
                        if let Some(target) = self.processes.get_mut(process) {
                            target.retired_ids.insert(executor_id);
                            target.executor_id = None;
                        }
                    }
                }
            }
        }
    }

    fn deliver(&mut self, process: usize, which: usize, ack_delayed: bool) {
        let Some(target) = self.processes.get_mut(process) else {
            return;
        };
        if target.inbox.is_empty() {
            return;
        }
        let message = target.inbox.remove(which % target.inbox.len());
        if !target.running {
            return;
        }
        match message {
            Message::Assign { revision, shards } => target.apply_set(revision, &shards),
            Message::Reply { sent_at_ms, grant } => target.receive_reply(sent_at_ms, &grant),
            Message::Revoke { revision, shards } => {
                let answer = target.receive_revoke(revision, &shards);
                self.coverage.stale_revokes_ignored += usize::from(answer.reply.ignored);
                self.coverage.overtaken_revokes_released +=
                    usize::from(answer.overtaken && !answer.reply.released.is_empty());
                let released = (!answer.reply.ignored && !answer.reply.released.is_empty())
                    .then_some(answer.reply.released);
                if let (Some(released), Some(executor_id)) = (released, target.executor_id.clone())
                {
                    let ack = Command::Release {
                        now_ms: self.now_ms(),
                        executor_id,
                        shards: released,
                        revoke_revision: revision,
                    };
                    if ack_delayed {
                        self.delayed_acks.push(ack);
                    } else {
                        self.apply(ack);
                    }
                }
            }
        }
    }

    /// One step of the leader's core at its clock, counting what it held back.
    fn leader_step(&mut self) -> StepDecision {
        let now_ms = self.now_ms();
        let decision =
            self.leader
                .core
                .step(now_ms, &self.state, self.leader.last_renewal_applied_ms);
        match decision.deferral {
            Some(Deferral::NewLeader { .. }) if self.leader.number > 0 => {
                let overdue = self.state.overdue_executors(now_ms);
                if !overdue.is_empty() {
                    self.coverage.reaps_deferred_by_new_leader += 1;
                    let admitting = self.processes.iter().any(|process| {
                        process
                            .executor_id
                            .as_ref()
                            .is_some_and(|id| overdue.contains(id))
                            && process
                                .applied()
                                .keys()
                                .any(|shard| process.admits(*shard, self.true_ms).is_some())
                    });
                    self.coverage.deferred_reaps_of_admitting_executors += usize::from(admitting);
                }
                self.coverage.expired_handoffs_deferred_by_new_leader +=
                    usize::from(self.state.handoffs_due(now_ms));
            }
            Some(Deferral::MassExpiryGuard { .. }) => {
                self.coverage.reaps_deferred_by_mass_expiry_guard += 1;
            }
            _ => {}
        }
        decision
    }

    /// The leader tick (P3.8): a step of the core, then reap what it says, plan, and complete
    /// due handoffs if it allows (P6.1). A reap the core asks for and a plan read and proposed at
    /// once must be accepted.
    fn tick(&mut self) {
        let decision = self.leader_step();
        let now_ms = self.now_ms();
        if !decision.reap.is_empty() {
            let outcome = self.apply(Command::Reap {
                now_ms,
                executor_ids: decision.reap.clone(),
            });
            assert!(
                matches!(&outcome, Outcome::Reaped { reaped, .. } if *reaped == decision.reap),
                "{outcome:?}"
            );
        }
        if let Some(plan) = plan_rebalance(&self.state, now_ms) {
            let outcome = self.apply(plan);
            assert!(
                outcome.refusal().is_none(),
                "fresh plan refused: {outcome:?}"
            );
        }
        // Proposed whenever anything is releasing and the core allows it, relying on the
        // apply-time re-check (P2.4), which must agree with `handoffs_due`.
        if decision.complete_expired_handoffs && self.state.releasing_count() > 0 {
            let due = self.state.handoffs_due(now_ms);
            let outcome = self.apply(Command::CompleteHandoffs { now_ms });
            assert!(
                matches!(&outcome, Outcome::HandoffsCompleted { completed, .. } if completed.is_empty() != due),
                "handoffs_due said {due}: {outcome:?}"
            );
        }
        if self.stable() {
            self.check_even_spread();
        }
    }

    /// A new leader takes office (P2.3, P6.1, P6.2); see [`Step::LeaderChange`].
    fn change_leader(&mut self, skew_ms: i64, guard: GuardConfig, tail_committed: bool) {
        let tail = [self.stashed_reap.take(), self.stashed_plan.take()];
        if tail_committed {
            for command in tail.into_iter().flatten() {
                self.apply(command);
            }
        }
        let offset_ms = self
            .leader
            .offset_ms
            .saturating_add(skew_ms)
            .clamp(-MAX_SKEW_MS, MAX_SKEW_MS);
        let took_office_ms = self
            .true_ms
            .checked_add_signed(offset_ms)
            .expect("the true clock starts far enough from zero");
        self.leader = Term {
            number: self.leader.number + 1,
            offset_ms,
            core: LeaderCore::new(took_office_ms, guard),
            last_renewal_applied_ms: None,
            first_command: self.history.len(),
        };
        self.coverage.leader_changes += 1;
        // P6.2: every executor its full set, every unfinished handoff's revoke again.
        let revokes: Vec<(ExecutorId, Message)> = self
            .state
            .shards()
            .iter()
            .filter_map(|shard| {
                let handoff = shard.handoff.as_ref()?;
                let message = Message::Revoke {
                    revision: handoff.revoke_revision,
                    shards: vec![shard.id],
                };
                Some((shard.owner.clone()?, message))
            })
            .collect();
        for (executor_id, message) in revokes {
            self.push(&executor_id, message);
        }
        let assignments = self.state.executors().map(|e| e.id.clone()).collect();
        self.fan_out(&Effects {
            revokes: Vec::new(),
            assignments,
        });
        // The leader loop steps at once when a term starts.
        self.tick();
    }

    /// Every executor live, no handoff pending, nothing to plan.
    fn stable(&self) -> bool {
        self.state.executors().next().is_some()
            && self
                .state
                .executors()
                .all(|executor| !executor.lease_lapsed(self.now_ms()))
            && self.state.releasing_count() == 0
            && plan_rebalance(&self.state, self.now_ms()).is_none()
    }

    /// P5.4: all shards owned, owners that are not draining within one shard of each other, and
    /// draining executors holding nothing (when anyone else can take their shards).
    fn check_even_spread(&self) {
        let (draining, takers): (Vec<_>, Vec<_>) = self
            .state
            .executors()
            .partition(|executor| executor.draining);
        if takers.is_empty() {
            return;
        }
        for executor in draining {
            assert!(
                executor.owned_shards.is_empty(),
                "draining {} still owns {:?} when stable",
                executor.id,
                executor.owned_shards
            );
        }
        let counts: Vec<usize> = takers
            .iter()
            .map(|executor| executor.owned_shards.len())
            .collect();
        let max = counts.iter().max().copied().unwrap_or(0);
        let min = counts.iter().min().copied().unwrap_or(0);
        assert!(max - min <= 1, "uneven when stable: {counts:?}");
        assert!(
            self.state
                .shards()
                .iter()
                .all(|shard| shard.owner.is_some()),
            "unowned shard when stable"
        );
    }

    fn step(&mut self, step: &Step) {
        match step {
            Step::Advance { ms } => self.true_ms = self.true_ms.saturating_add(*ms),
            Step::Spawn { reply, deaf } => {
                if self.processes.len() < MAX_PROCESSES {
                    let incarnation = format!("inc-{}", self.processes.len());
                    self.processes
                        .push(Process::new(incarnation, *deaf, self.shard_count()));
                    self.register(self.processes.len() - 1, *reply);
                }
            }
            Step::RetryRegister { who, reply } => {
                if let Some(process) = self.pick(*who) {
                    self.register(process, *reply);
                }
            }
            Step::Renew { who, reply } => {
                let processes: Vec<usize> = who.iter().filter_map(|w| self.pick(*w)).collect();
                self.renew(&processes, *reply);
            }
            Step::Deliver {
                who,
                which,
                ack_delayed,
            } => {
                if let Some(process) = self.pick(*who) {
                    self.deliver(process, *which, *ack_delayed);
                }
            }
            Step::Drop { who, which } => {
                if let Some(process) = self.pick(*who).and_then(|p| self.processes.get_mut(p)) {
                    if !process.inbox.is_empty() {
                        let index = which % process.inbox.len();
                        process.inbox.remove(index);
                    }
                }
            }
            Step::Deregister { who } => {
                let Some(process) = self.pick(*who).and_then(|p| self.processes.get_mut(p)) else {
                    return;
                };
                if !process.running {
                    return;
                }
                process.running = false;
                if let Some(executor_id) = process.executor_id.clone() {
                    let outcome = self.apply(Command::Deregister {
                        now_ms: self.now_ms(),
                        executor_id,
                    });
                    assert!(
                        matches!(outcome, Outcome::Deregistered { .. }),
                        "{outcome:?}"
                    );
                }
            }
            Step::Crash { who } => {
                if let Some(process) = self.pick(*who).and_then(|p| self.processes.get_mut(p)) {
                    process.running = false;
                }
            }
            Step::Drain { who, draining } => {
                let Some(executor_id) = self
                    .pick(*who)
                    .and_then(|p| self.processes.get(p))
                    .and_then(|process| process.executor_id.clone())
                else {
                    return;
                };
                let outcome = self.apply(Command::SetDraining {
                    now_ms: self.now_ms(),
                    executor_id,
                    draining: *draining,
                });
                assert!(
                    matches!(outcome, Outcome::DrainingSet { .. } | Outcome::NotFound),
                    "{outcome:?}"
                );
            }
            Step::Tick => self.tick(),
            Step::Stash => {
                let decision = self.leader_step();
                let now_ms = self.now_ms();
                self.stashed_reap = (!decision.reap.is_empty()).then_some(Command::Reap {
                    now_ms,
                    executor_ids: decision.reap,
                });
                self.stashed_plan = plan_rebalance(&self.state, now_ms);
            }
            Step::ApplyStashedReap => {
                if let Some(command) = self.stashed_reap.take() {
                    self.apply(command);
                }
            }
            Step::ApplyStashedPlan => {
                if let Some(command) = self.stashed_plan.take() {
                    self.apply(command);
                }
            }
            Step::Replay { which } => {
                let term = &self.history[self.leader.first_command..];
                if !term.is_empty() {
                    let command = term[which % term.len()].clone();
                    self.apply(command);
                }
            }
            Step::LateRelease { which } => {
                let applied = self
                    .history
                    .iter()
                    .filter(|command| matches!(command, Command::Release { .. }));
                let candidates: Vec<Command> =
                    self.delayed_acks.iter().chain(applied).cloned().collect();
                if !candidates.is_empty() {
                    // Whichever leader receives it stamps it (the stamp plays no part in it).
                    let mut command = candidates[which % candidates.len()].clone();
                    if let Command::Release { now_ms, .. } = &mut command {
                        *now_ms = self.now_ms();
                    }
                    self.apply(command);
                }
            }
            Step::SetLeaseDuration { choice } => {
                let lease_duration_ms = LEASE_CHOICES_MS[choice % LEASE_CHOICES_MS.len()];
                self.apply(Command::SetLeaseDuration {
                    now_ms: self.now_ms(),
                    lease_duration_ms,
                });
            }
            Step::LeaderChange {
                skew_ms,
                guard,
                tail_committed,
            } => self.change_leader(*skew_ms, *guard, *tail_committed),
        }
    }

    /// Every inbox delivered in order, acknowledgements delivered, until nothing is in flight.
    fn drain_inboxes(&mut self) {
        for _ in 0..16 {
            let busy: Vec<usize> = (0..self.processes.len())
                .filter(|&p| !self.processes[p].inbox.is_empty())
                .collect();
            if busy.is_empty() {
                return;
            }
            for process in busy {
                while !self.processes[process].inbox.is_empty() {
                    self.deliver(process, 0, false);
                    self.check_admission();
                }
            }
        }
    }

    /// The running processes' executors: every one registered, and nobody else.
    fn running_executors(&self) -> BTreeSet<&ExecutorId> {
        self.processes
            .iter()
            .filter(|p| p.running)
            .filter_map(|p| p.executor_id.as_ref())
            .collect()
    }

    /// Nothing pending: no handoff, nothing to plan, exactly the running processes registered.
    fn converged(&self) -> bool {
        let present: BTreeSet<&ExecutorId> = self.state.executors().map(|e| &e.id).collect();
        self.state.releasing_count() == 0
            && plan_rebalance(&self.state, self.now_ms()).is_none()
            && present == self.running_executors()
    }

    /// A healthy stretch: every running process renews (or registers) each third of a lease and
    /// receives everything; the leader ticks. Then the fleet must have converged.
    fn settle(&mut self) {
        let started_ms = self.true_ms;
        for round in 0.. {
            let limit_reached = self.true_ms - started_ms >= SETTLE_LIMIT_MS;
            if round >= SETTLE_ROUNDS && (limit_reached || self.converged()) {
                break;
            }
            self.true_ms = self
                .true_ms
                .saturating_add(tick_ms(self.lease_duration_ms()));
            self.check_admission();
            for process in 0..self.processes.len() {
                if !self.processes[process].running {
                    continue;
                }
                if self.processes[process].executor_id.is_some() {
                    self.renew(&[process], Fate::Delivered);
                } else {
                    self.register(process, Fate::Delivered);
                }
                self.check_admission();
            }
            self.drain_inboxes();
            self.tick();
            self.check_admission();
        }
        assert_eq!(self.state.releasing_count(), 0, "handoffs still pending");
        assert!(
            plan_rebalance(&self.state, self.now_ms()).is_none(),
            "not balanced"
        );
        let running = self.running_executors();
        let present: BTreeSet<&ExecutorId> = self.state.executors().map(|e| &e.id).collect();
        assert_eq!(
            present, running,
            "executors without a running process survived"
        );
        if !running.is_empty() {
            self.check_even_spread();
        }
        // One more in-sync round: every running process admits exactly its recorded set.
        let all: Vec<usize> = (0..self.processes.len()).collect();
        self.renew(&all, Fate::Delivered);
        self.drain_inboxes();
        for process in self.processes.iter().filter(|p| p.running) {
            let Some(executor_id) = &process.executor_id else {
                continue;
            };
            let recorded: BTreeMap<ShardId, Epoch> =
                self.state.delivered_set(executor_id).into_iter().collect();
            assert_eq!(process.applied(), recorded, "{executor_id} out of sync");
            for shard in recorded.keys() {
                assert!(
                    process.admits(*shard, self.true_ms).is_some(),
                    "{executor_id} not admitting shard {shard}"
                );
            }
        }
    }
}

fn fate() -> impl Strategy<Value = Fate> {
    prop_oneof![
        3 => Just(Fate::Delivered),
        1 => Just(Fate::Lost),
        1 => Just(Fate::Delayed),
    ]
}

/// A term's mass-expiry guard settings (P6.3): on or off, and a grace of up to a few leases.
fn guard() -> impl Strategy<Value = GuardConfig> {
    (proptest::bool::ANY, 0u64..=MAX_GRACE_MS)
        .prop_map(|(enabled, grace_ms)| GuardConfig { enabled, grace_ms })
}

fn step() -> impl Strategy<Value = Step> {
    let who = 0usize..MAX_PROCESSES;
    let which = 0usize..8;
    prop_oneof![
        5 => (0u64..=700).prop_map(|ms| Step::Advance { ms }),
        2 => (fate(), proptest::bool::weighted(0.2))
            .prop_map(|(reply, deaf)| Step::Spawn { reply, deaf }),
        1 => (who.clone(), fate()).prop_map(|(who, reply)| Step::RetryRegister { who, reply }),
        5 => (proptest::collection::vec(who.clone(), 1..=3), fate())
            .prop_map(|(who, reply)| Step::Renew { who, reply }),
        6 => (who.clone(), which.clone(), proptest::bool::weighted(0.3))
            .prop_map(|(who, which, ack_delayed)| Step::Deliver { who, which, ack_delayed }),
        1 => (who.clone(), which.clone()).prop_map(|(who, which)| Step::Drop { who, which }),
        1 => who.clone().prop_map(|who| Step::Deregister { who }),
        1 => who.clone().prop_map(|who| Step::Crash { who }),
        4 => Just(Step::Tick),
        1 => Just(Step::Stash),
        1 => Just(Step::ApplyStashedReap),
        1 => Just(Step::ApplyStashedPlan),
        1 => (0usize..256).prop_map(|which| Step::Replay { which }),
        2 => (0usize..256).prop_map(|which| Step::LateRelease { which }),
        2 => (0usize..LEASE_CHOICES_MS.len()).prop_map(|choice| Step::SetLeaseDuration { choice }),
        1 => (who, proptest::bool::weighted(0.6))
            .prop_map(|(who, draining)| Step::Drain { who, draining }),
        1 => (-MAX_SKEW_MS..=MAX_SKEW_MS, guard(), proptest::bool::ANY).prop_map(
            |(skew_ms, guard, tail_committed)| Step::LeaderChange {
                skew_ms,
                guard,
                tail_committed,
            }
        ),
    ]
}

/// Runs one generated case to the end; any violated invariant panics.
fn run_case(
    shard_count: u32,
    guard: GuardConfig,
    initial_processes: usize,
    steps: &[Step],
) -> Coverage {
    let mut world = World::new(shard_count, guard);
    for _ in 0..initial_processes {
        world.step(&Step::Spawn {
            reply: Fate::Delivered,
            deaf: false,
        });
    }
    world.tick();
    world.check_admission();
    for step in steps {
        world.step(step);
        world.check_admission();
    }
    world.settle();
    world.coverage
}

/// I1, I2 and P5.4 under the model, with every guard of P2.4, P3.4, P5.2, P6.1 and P6.3 in play:
/// 256 random fleets of up to 6 processes over up to 10 shards, up to 99 steps each (leader
/// changes with skewed clocks among them), then a settle.
#[test]
fn i1_i2_fleet_model_keeps_exclusivity_and_fencing() {
    let mut runner = TestRunner::new(ProptestConfig {
        cases: 256,
        failure_persistence: None,
        ..ProptestConfig::default()
    });
    let total = RefCell::new(Coverage::default());
    let cases = (
        1u32..=10,
        guard(),
        1usize..=3,
        proptest::collection::vec(step(), 1..100),
    );
    let result = runner.run(&cases, |(shard_count, guard, initial_processes, steps)| {
        let coverage = run_case(shard_count, guard, initial_processes, &steps);
        total.borrow_mut().add(&coverage);
        Ok(())
    });
    match result {
        Ok(()) => {}
        Err(proptest::test_runner::TestError::Fail(reason, case)) => {
            panic!("{reason}\nminimal failing case (shard count, guard, initial processes, steps): {case:#?}")
        }
        Err(failure) => panic!("{failure}"),
    }
    let total = total.into_inner();
    eprintln!("fleet model coverage over 256 cases: {total:?}");
    assert_eq!(total.unreached(), Vec::<&str>::new(), "{total:?}");
}

// ---------------------------------------------------------------------------------------------
// Scripted schedules: each one leads the same model fleet to a moment where a single guard is
// all that stands between two processes admitting one shard. They run with the same checks as
// the random fleets (I1 and I2 after every step, convergence at the end). The mass-expiry guard
// (P6.3) is off in every term, so it holds nothing back that the schedule is about.

/// Plain expiry (P6.3's guard off).
const NO_MASS_EXPIRY_GUARD: GuardConfig = GuardConfig {
    enabled: false,
    grace_ms: 0,
};

fn run_script(shard_count: u32, script: &[Step]) -> World {
    let mut world = World::new(shard_count, NO_MASS_EXPIRY_GUARD);
    for step in script {
        world.step(step);
        world.check_admission();
    }
    world.settle();
    world
}

const SPAWN: Step = Step::Spawn {
    reply: Fate::Delivered,
    deaf: false,
};

fn deliver(who: usize) -> Step {
    Step::Deliver {
        who,
        which: 0,
        ack_delayed: false,
    }
}

fn renew(who: usize, reply: Fate) -> Step {
    Step::Renew {
        who: vec![who],
        reply,
    }
}

/// P5.2 (release wait, handoff expiry bound, apply-time re-check of `CompleteHandoffs`): A
/// admits shard 1 and its revoke has not landed, so B must not be granted it, neither by the
/// rebalance itself nor by an early `CompleteHandoffs`.
#[test]
fn i1_model_revoked_shard_is_not_granted_while_the_old_owner_may_admit() {
    let world = run_script(
        2,
        &[
            SPAWN,      // A registers
            Step::Tick, // A is granted shards 0 and 1
            deliver(0), // A admits both
            SPAWN,      // B registers
            Step::Tick, // shard 1 releasing from A to B; its revoke stays in A's inbox
            deliver(1), // whatever B was pushed lands
        ],
    );
    assert_eq!(world.coverage.handoffs_started, 1);
}

/// P5.2 (claims-revision check): A was granted shards 0 and 1 but the assign push is still in
/// flight when shard 1 is moved to B. A renews claiming nothing, at a revision before the revoke:
/// that must not count as an acknowledgement, or the late assign would make A admit shard 1
/// alongside B.
#[test]
fn i1_model_claims_older_than_the_revoke_do_not_acknowledge_it() {
    let world = run_script(
        2,
        &[
            SPAWN,                // A registers
            Step::Tick,           // A is granted 0 and 1; the assign waits in A's inbox
            SPAWN,                // B registers
            Step::Tick,           // shard 1 releasing from A to B
            renew(0, Fate::Lost), // A claims {} at its registration revision; reply lost
            deliver(1),           // whatever B was pushed lands
            deliver(0),           // A's late assign lands
        ],
    );
    assert!(world.coverage.claims_mismatches >= 1);
}

/// P2.4 (reap re-check): the leader lists A as overdue, A renews before the reap commits; the
/// reap must skip A, or its shards go to B while A, whose renewal was answered, admits them.
#[test]
fn i1_model_stale_reap_of_a_renewed_executor_is_skipped() {
    let world = run_script(
        2,
        &[
            SPAWN,                       // A registers: lease for 1 000
            Step::Tick,                  // A is granted 0 and 1
            deliver(0),                  // A admits both
            Step::Advance { ms: 1_000 }, // A's lease lapses
            Step::Stash,                 // the leader reads "reap A"
            renew(0, Fate::Delivered),   // A renews in time and resumes (P3.6)
            SPAWN,                       // B registers
            Step::ApplyStashedReap,      // the stale reap commits
            Step::Tick,                  // plan
            deliver(1),                  // whatever B was pushed lands
        ],
    );
    assert!(world.coverage.reap_candidates_skipped >= 1);
}

/// P3.4 (renewal `max`): A holds a 1 500 ms deadline; the lease is cut to 300 ms and A renews,
/// but the reply is lost, so A still holds the long deadline. The manager must not bring its
/// own deadline earlier and reap A under it.
#[test]
fn i1_model_shortened_lease_does_not_shorten_a_held_deadline() {
    let world = run_script(
        2,
        &[
            SPAWN,                                // A registers at t
            Step::Tick,                           // A is granted 0 and 1
            deliver(0),                           // A admits both
            Step::SetLeaseDuration { choice: 2 }, // 1 500 ms
            renew(0, Fate::Delivered),            // A holds a deadline at t + 1 500
            Step::SetLeaseDuration { choice: 1 }, // 300 ms
            Step::Advance { ms: 100 },
            renew(0, Fate::Lost), // manager: max(t + 1 500, t + 400); A keeps t + 1 500
            SPAWN,                // B registers at t + 100
            Step::Advance { ms: 300 },
            renew(1, Fate::Delivered), // B stays live
            Step::Tick,                // A must not be overdue at t + 400
            deliver(1),                // whatever B was pushed lands
        ],
    );
    assert_eq!(world.coverage.executors_reaped, 0);
}

/// P5.2 (acknowledgement names its handoff): A's acknowledgement of a first revoke is held up;
/// meanwhile that handoff is cancelled (A gets the shard back and admits it) and a second handoff
/// to C starts. The late acknowledgement must be ignored, or C is granted the shard while A,
/// whose second revoke has not landed, still admits it.
#[test]
fn i1_model_late_ack_for_a_cancelled_handoff_is_ignored() {
    let world = run_script(
        2,
        &[
            SPAWN,      // A registers
            Step::Tick, // A is granted 0 and 1
            deliver(0), // A admits both
            SPAWN,      // B registers
            Step::Tick, // shard 1 releasing from A to B
            Step::Deliver {
                who: 0,
                which: 0,
                ack_delayed: true,
            }, // A drops shard 1; its acknowledgement is held up
            Step::Deregister { who: 1 }, // B leaves: the handoff loses its target
            Step::Tick, // the plan gives shard 1 back to A (cancelled)
            deliver(0), // A admits shard 1 again, same epoch
            SPAWN,      // C registers
            Step::Tick, // shard 1 releasing from A to C, a new revoke
            Step::LateRelease { which: 0 }, // the first acknowledgement finally arrives
            deliver(2), // whatever C was pushed lands
        ],
    );
    assert_eq!(world.coverage.handoffs_cancelled, 1);
    assert_eq!(world.coverage.acknowledgements_ignored, 1);
}

/// A new leader whose clock reads `skew_ms` ahead of the old leader's, with plain expiry.
fn leader_change(skew_ms: i64) -> Step {
    Step::LeaderChange {
        skew_ms,
        guard: NO_MASS_EXPIRY_GUARD,
        tail_committed: false,
    }
}

/// P6.1 (no reaping for a lease after taking office): A's copy of its last grant runs to
/// t + 1 500 on the true clock; the new leader's clock reads 2 s ahead, so on it A looks overdue
/// from the moment it takes office. Reaping A then would hand its shards to B while A admits them.
#[test]
fn i1_model_new_leader_with_a_clock_ahead_does_not_reap_under_an_old_grant() {
    let world = run_script(
        2,
        &[
            SPAWN,      // A registers at t
            Step::Tick, // A is granted shards 0 and 1
            deliver(0), // A admits both
            Step::Advance { ms: 500 },
            renew(0, Fate::Delivered), // A's copy runs to t + 1 500
            leader_change(2_000),      // the new clock reads t + 2 500: A looks overdue
            SPAWN,                     // B registers
            Step::Tick,                // still within the new leader's first lease
            deliver(1),                // whatever B was pushed lands
        ],
    );
    assert!(world.coverage.deferred_reaps_of_admitting_executors >= 1);
    assert_eq!(world.coverage.executors_reaped, 0);
}

/// P6.1 (no handoff completed on expiry for a lease after taking office): shard 1 is releasing
/// from A, bounded by A's grant to t + 1 000, and the revoke has not landed. A renews but the
/// reply is lost, so A still admits shard 1 under that grant. The new leader's clock reads 600 ms
/// ahead: on it the handoff is due at once, though A may admit shard 1 for another 500 ms.
#[test]
fn i1_model_new_leader_with_a_clock_ahead_does_not_hand_on_under_an_old_grant() {
    let world = run_script(
        2,
        &[
            SPAWN,      // A registers at t: lease to t + 1 000
            Step::Tick, // A is granted 0 and 1
            deliver(0), // A admits both
            SPAWN,      // B registers
            Step::Tick, // shard 1 releasing from A to B until t + 1 000; the revoke waits in A's inbox
            Step::Advance { ms: 500 },
            renew(0, Fate::Lost), // A's lease runs to t + 1 500 on the manager; A keeps t + 1 000
            renew(1, Fate::Delivered), // B stays live
            leader_change(600),   // the new clock reads t + 1 100: the handoff looks due
            deliver(1),           // whatever B was pushed lands
        ],
    );
    assert!(world.coverage.expired_handoffs_deferred_by_new_leader >= 1);
}

/// P6.1 with a lease shortened (P3.4): the old leader told A 1 000 ms, to t + 1 000 on the true
/// clock; the lease is cut to 300 ms and a new leader, its clock 600 ms ahead, renews A. The
/// renewal keeps the deadline (`max`) but re-expresses it on the new clock as 400 ms left, and its
/// reply is lost, so A still holds the old grant. The new leader's grace must still cover that
/// grant: the longest lease an executor may hold from the old leader is 1 000 ms, not the 400 ms
/// the state records as told since.
#[test]
fn i1_model_new_leader_grace_covers_an_old_grant_after_a_shortened_lease() {
    let world = run_script(
        2,
        &[
            SPAWN,                                // A registers at t: told 1 000, to t + 1 000
            Step::Tick,                           // A is granted 0 and 1
            deliver(0),                           // A admits both
            Step::SetLeaseDuration { choice: 1 }, // 300 ms from now on
            leader_change(600),                   // the new clock reads t + 600
            renew(0, Fate::Lost), // max(t + 1 000, t + 900): told 400 ms on the new clock; lost
            Step::Advance { ms: 400 }, // the new clock reads t + 1 000, the true one t + 400
            SPAWN,                // B registers
            Step::Tick,           // A admits until t + 1 000 (true): it must not be reaped
            deliver(1),           // whatever B was pushed lands
        ],
    );
    assert_eq!(world.coverage.executors_reaped, 0);
}

/// P6.1 across two leader changes, with a retried registration: the first new leader's clock
/// reads 1 s behind, so the lease A was told by the old leader (to t + 1 000 on the true clock)
/// is, on that clock, 2 000 ms away, and the reply to A's retried registration tells it so: A now
/// holds a grant to t + 2 000. A retry changes nothing in the state, so the state still records
/// 1 000 ms as the lease A was told. The next leader's clock reads 1 s ahead of that one (the true
/// time): one recorded lease after taking office it sees A lapsed, at t + 1 000, while A may admit
/// until t + 2 000. Its grace must cover every grant an earlier leader gave.
#[test]
fn i1_model_new_leader_grace_covers_a_grant_told_by_a_retried_registration() {
    let world = run_script(
        2,
        &[
            SPAWN,                 // A registers at t: told 1 000, to t + 1 000
            Step::Tick,            // A is granted 0 and 1
            deliver(0),            // A admits both
            leader_change(-1_000), // the new clock reads t - 1 000
            Step::RetryRegister {
                who: 0,
                reply: Fate::Delivered,
            }, // told 2 000 ms left: A's copy runs to t + 2 000; recorded told stays 1 000
            leader_change(1_000),  // the next leader's clock reads t
            Step::Advance { ms: 1_000 }, // its clock reads t + 1 000: A's expiry, and one recorded lease in office
            SPAWN,                       // B registers
            Step::Tick,                  // A admits until t + 2 000: it must not be reaped
            deliver(1),                  // whatever B was pushed lands
        ],
    );
    assert_eq!(world.coverage.executors_reaped, 0);
}

/// P5.2 with a stale grant (P3.3, P4.1), one leader, no skew: shard X is releasing from A to B,
/// bounded by A's grant to t + 1 000, and its revoke is still in flight. A renews at t + 500; the
/// reply (its set without X) is held up. Another shard, Y, is then moved from A to C, and that
/// later revoke lands first: A drops Y and raises its applied revision past the reply's. When
/// the reply lands, its set is stale and ignored, but it still moves A's lease clock to
/// t + 1 500, over a held set that still contains X. At t + 1 000 the manager hands X to B on
/// the expiry of A's last grant that included it, while A may admit X until t + 1 500.
#[test]
fn i1_model_stale_grant_does_not_extend_a_shard_whose_revoke_is_pending() {
    let world = run_script(
        3,
        &[
            SPAWN,      // A registers at t: lease to t + 1 000
            Step::Tick, // A is granted 0, 1 and 2
            deliver(0), // A admits all three
            SPAWN,      // B registers
            Step::Tick, // X releasing from A to B until t + 1 000; revoke X waits in A's inbox
            Step::Advance { ms: 500 },
            renew(0, Fate::Delayed), // A's lease to t + 1 500; the reply (without X) waits
            renew(1, Fate::Delivered), // B stays live
            SPAWN,                   // C registers
            Step::Tick,              // Y releasing from A to C; revoke Y waits behind the reply
            Step::Deliver {
                who: 0,
                which: 2,
                ack_delayed: false,
            }, // revoke Y lands first: A drops Y, acknowledges, applied revision past the reply's
            Step::Deliver {
                who: 0,
                which: 1,
                ack_delayed: false,
            }, // the reply lands: set stale, lease clock to t + 1 500; A still holds X
            Step::Advance { ms: 500 },
            Step::Tick, // X handed to B at t + 1 000: A may admit it until t + 1 500
            deliver(1), // B admits X
        ],
    );
    assert!(world.coverage.completed_by_expiry >= 1);
}
