//! The simulated cluster: one event queue on one simulated clock, managers with a Raft log each
//! (a shared committed prefix, the leader's uncommitted tail, snapshots as a round trip of the
//! real codec), the leader's loop and delivery shell, and executor processes, all driving the
//! real cores:
//!
//! - the state machine, [`LeaseState::apply`], on every replica;
//! - the leader's time rules and the order of a step's writes ([`LeaderCore`], [`StepWrites`]);
//! - the delivery decisions ([`DeliveryPlanner`], [`acknowledgement`]) and what a commit asks of
//!   the leader ([`CommitSignal`]);
//! - per executor the admission core ([`AdmissionCore`]: lease anchoring, the delivery order,
//!   the stale-grant rule) and the renewal schedule with its backoff ([`LeaseSchedule`]);
//! - the leader's placement soft state per term ([`TermPlacement`]: the load tracker its
//!   renewals feed, the budget and cooldown ledger its committed plans charge) and the planner
//!   it plans with ([`StepWrites::with_placement`]).
//!
//! What is simulated rather than run: the network (loss, duplication, heavy-tailed delay and so
//! reordering, partitions), the processes (kill, pause, restart, graceful stop), Raft itself
//! (commit order is the log order; an election moves office to another replica, which first
//! applies the whole committed log) and clocks (per-manager wall-clock offsets of up to hours,
//! a step between terms, per-process rate error; a leader's clock takes office as production's
//! does, raised to what the state holds, P6.4). Checks run after every event; see
//! [`crate::checks`].
//!
//! A seed drives the world: every loop runs on its own timers and a random network carries the
//! messages. A script ([`crate::script`]) drives the same world instead: the loops' timers fire
//! when it says, and its network holds every message until it delivers or drops it.

use std::cmp::Reverse;
use std::collections::{BTreeMap, BTreeSet, BinaryHeap};
use std::fmt::Write as _;
use std::time::Duration;

use leasehold_api::wire::{
    check_shard_loads, AssignmentPush, Grant, RegisterRequest, RenewRequest, RevokePush,
    RevokeReply, ShardLoad, DEFAULT_CAPACITY,
};
use leasehold_executor::admission::AdmissionCore;
use leasehold_executor::assignment::RevokeOutcome;
use leasehold_executor::lease::{CallOutcome, LeaseSchedule, NextCall};
use leasehold_manager::leader::core::{
    tick_ms, took_office_ms, Deferral, LeaderCore, StepWrite, StepWrites,
};
use leasehold_manager::leader::delivery_plan::{
    acknowledgement, Delivery, DeliveryPlanner, ROUND_INTERVAL_MS,
};
use leasehold_manager::leader::placement::{PlacementSettings, TermPlacement};
use leasehold_manager::lease::schema::NEWEST_SCHEMA;
use leasehold_manager::lease::{
    plan_placement, Command, LeaseState, Loads, MoveReason, Outcome, PlacementInputs, Plan,
    RefusalReason, RenewResult, Renewal, ShardId,
};
use leasehold_manager::load_summary::LoadSummary;
use leasehold_manager::signals::CommitSignal;
use leasehold_raft_store::StateMachine;
use rand::{Rng, SeedableRng};
use rand_chacha::ChaCha8Rng;
use tokio::time::Instant;

use crate::checks::{Checker, ProcessView, Violation};
use crate::loads::{LoadModel, Report};
use crate::scenario::{
    Fault, Lie, Scenario, MANAGERS, MAX_CLOCK_OFFSET_MS, MAX_RATE_ERROR_PPM, MAX_SHARD_LOAD,
    MAX_WALL_CLOCK_OFFSET_MS, MIN_TRANSIT_US,
};

/// A delivery unanswered after this long failed (the shell's `DELIVERY_TIMEOUT`).
const DELIVERY_TIMEOUT_US: u64 = 2_000_000;
/// A register or renew call unanswered after this long failed (`GRANT_CALL_PATIENCE`).
const CALL_PATIENCE_US: u64 = leasehold_executor::GRANT_CALL_PATIENCE.as_micros() as u64;
/// A graceful stop gives up deregistering after this long and exits (P3.7).
const STOP_GRACE_US: u64 = 2_000_000;
/// What every leader clock reads at the start, give or take its offset: far enough from zero
/// that no offset clamps it (a wall clock is never near its epoch).
const LEADER_CLOCK_START_MS: i64 = 100 * MAX_WALL_CLOCK_OFFSET_MS;
/// A run's whole budget of events; healthy runs use a few tens of thousands (the busiest
/// seeds of 10 000 stay under 200 000).
const MAX_EVENTS_PER_RUN: u64 = 2_000_000;
/// Followers apply the committed log this often.
const FOLLOWER_APPLY_US: u64 = 250_000;

pub type Slot = usize;

/// What a manager receives from an executor.
#[derive(Debug, Clone)]
enum Request {
    Register {
        call: u64,
        request: RegisterRequest,
    },
    Renew {
        call: u64,
        executor_id: String,
        request: RenewRequest,
    },
    Deregister {
        call: u64,
        executor_id: String,
    },
    PushReply {
        delivery: u64,
        ok: bool,
    },
    RevokeReply {
        delivery: u64,
        reply: Option<RevokeReply>,
    },
}

impl Request {
    fn kind(&self) -> LetterKind {
        match self {
            Request::Register { .. } | Request::Renew { .. } | Request::Deregister { .. } => {
                LetterKind::Call
            }
            Request::PushReply { .. } | Request::RevokeReply { .. } => LetterKind::Ack,
        }
    }
}

/// What an executor receives from a manager.
#[derive(Debug, Clone)]
enum Message {
    Granted { call: u64, grant: Grant },
    UnknownExecutor { call: u64 },
    CallFailed { call: u64 },
    Deregistered { call: u64 },
    Push { delivery: u64, push: AssignmentPush },
    Revoke { delivery: u64, revoke: RevokePush },
}

impl Message {
    fn kind(&self) -> LetterKind {
        match self {
            Message::Push { .. } => LetterKind::Push,
            Message::Revoke { .. } => LetterKind::Revoke,
            Message::Granted { .. }
            | Message::UnknownExecutor { .. }
            | Message::CallFailed { .. }
            | Message::Deregistered { .. } => LetterKind::Reply,
        }
    }
}

/// What a message in a script's network is, as a script names it.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum LetterKind {
    /// Manager to executor: a full-set push (P4.3).
    Push,
    /// Manager to executor: a revoke (P5.2).
    Revoke,
    /// Manager to executor: the answer to a register, renew or deregister call.
    Reply,
    /// Executor to managers: a register, renew or deregister call.
    Call,
    /// Executor to managers: the answer to a push or a revoke (a revoke's is its
    /// acknowledgement, P5.2).
    Ack,
}

/// A message a script's network holds until the script delivers or drops it.
#[derive(Debug, Clone)]
pub struct Letter {
    pub id: u64,
    /// The executor slot it comes from or goes to.
    pub slot: Slot,
    pub kind: LetterKind,
    arrival: Event,
}

impl std::fmt::Display for Letter {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        let (kind, direction) = match self.kind {
            LetterKind::Push => ("push", "to"),
            LetterKind::Revoke => ("revoke", "to"),
            LetterKind::Reply => ("reply", "to"),
            LetterKind::Call => ("call", "from"),
            LetterKind::Ack => ("answer", "from"),
        };
        write!(f, "{kind} {direction} slot {}", self.slot)
    }
}

/// Who decides when things happen.
#[derive(Debug)]
enum Driver {
    /// The seed: every loop runs on its own timers and a random network carries the messages.
    Seed,
    /// A script ([`crate::script`]): the loops' timers wait for the script to fire them, the
    /// network holds every message until the script delivers or drops it, and the leader's
    /// proposals commit at once unless the script holds them (Raft replication stalled).
    Script {
        mailbox: Vec<Letter>,
        next_letter: u64,
        commits_held: bool,
    },
}

/// One of the loops' own timers, which a script fires.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Timer {
    /// The leader loop's tick (P3.8): a step of its core and the step's writes.
    LeaderStep,
    /// The lease loop of the executor in the slot: its next call, a renewal, or a registration
    /// (same incarnation, P7.2) when none stands.
    ExecutorCall(Slot),
}

#[derive(Debug, Clone)]
enum Event {
    /// The executor's lease loop wakes for its next call.
    Call {
        slot: Slot,
        process: u64,
    },
    CallTimeout {
        slot: Slot,
        process: u64,
        call: u64,
    },
    /// A message reaches the managers (whoever leads when it arrives).
    ToManagers {
        slot: Slot,
        process: u64,
        request: Request,
    },
    ToExecutor {
        slot: Slot,
        message: Message,
    },
    Commit {
        term: u64,
    },
    LeaderStep {
        term: u64,
    },
    DeliveryRound {
        term: u64,
    },
    DeliveryTimeout {
        term: u64,
        delivery: u64,
    },
    /// The deposed leader of `term` sends another round from its stale state.
    DeposedRound {
        term: u64,
    },
    FollowerApply,
    Elected {
        manager: usize,
        /// The new leader's clock offset; drawn when `None`.
        offset_ms: Option<i64>,
    },
    StallOver {
        term: u64,
    },
    Resume {
        slot: Slot,
        process: u64,
    },
    StopDeadline {
        slot: Slot,
        process: u64,
    },
    PartitionHealed {
        slot: Slot,
        to_managers: bool,
        from_managers: bool,
    },
    /// The true loads are re-permuted over the shards.
    HotSetShift,
    Fault(Fault),
    EndChaos,
}

#[derive(Debug)]
struct Scheduled {
    at_us: u64,
    seq: u64,
    event: Event,
}

impl PartialEq for Scheduled {
    fn eq(&self, other: &Self) -> bool {
        (self.at_us, self.seq) == (other.at_us, other.seq)
    }
}
impl Eq for Scheduled {}
impl PartialOrd for Scheduled {
    fn partial_cmp(&self, other: &Self) -> Option<std::cmp::Ordering> {
        Some(self.cmp(other))
    }
}
impl Ord for Scheduled {
    fn cmp(&self, other: &Self) -> std::cmp::Ordering {
        (self.at_us, self.seq).cmp(&(other.at_us, other.seq))
    }
}

#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Life {
    Running,
    Paused {
        until_us: u64,
    },
    /// A graceful stop is under way (admission already off).
    Stopping,
    Dead,
}

#[derive(Debug, Clone, Copy)]
enum CallKind {
    Register,
    Renew,
    Deregister,
}

#[derive(Debug, Clone, Copy)]
struct Call {
    id: u64,
    kind: CallKind,
    sent_at: Instant,
}

/// One executor process: the real admission core and schedule, and what the shell keeps.
#[derive(Debug)]
pub struct Process {
    pub id: u64,
    pub core: AdmissionCore,
    schedule: LeaseSchedule,
    pub life: Life,
    incarnation: String,
    incarnations: u64,
    call: Option<Call>,
    rate_ppm: i64,
    /// A register was sent under the current incarnation (P7.2): a stop deregisters it.
    register_sent: bool,
    /// The capacity it states when it registers (P15.1).
    capacity: u32,
}

impl Process {
    pub fn admits(&self) -> bool {
        self.life != Life::Dead
    }
}

/// A proposal waiting in the leader's uncommitted tail, and whom its outcome answers.
#[derive(Debug, Clone)]
enum ReplyTo {
    Nobody,
    Register { slot: Slot, call: u64 },
    Renew(Vec<Renewer>),
    Deregister { slot: Slot, call: u64 },
    StepWrite,
}

/// One renewal of a batch: whom its outcome answers and what it said of loads.
#[derive(Debug, Clone)]
struct Renewer {
    slot: Slot,
    call: u64,
    loads: Report,
}

#[derive(Debug, Clone)]
struct Proposal {
    command: Command,
    reply_to: ReplyTo,
}

#[derive(Debug)]
struct Inflight {
    kind: InflightKind,
}

#[derive(Debug)]
enum InflightKind {
    Push {
        executor_id: String,
    },
    Revoke {
        executor_id: String,
        requested: Vec<u32>,
        revision: u64,
    },
}

/// The leader of one term: its clock, its loop's core, its delivery shell.
#[derive(Debug)]
struct Leader {
    term: u64,
    manager: usize,
    /// Leader clock = true clock × (1 + rate) + offset (P2.3: the wall clock read on taking office,
    /// then monotonic time).
    offset_ms: i64,
    rate_ppm: i64,
    core: LeaderCore,
    writes: Option<StepWrites>,
    step_again: bool,
    planner: DeliveryPlanner,
    pending_pushes: BTreeSet<String>,
    last_renewal_applied_ms: Option<u64>,
    tail: Vec<Proposal>,
    commit_scheduled: bool,
    round_waiting: Vec<Delivery>,
    round_in_flight: BTreeMap<u64, Inflight>,
    round_again: bool,
    round_scheduled: bool,
    stalled_until_us: Option<u64>,
    /// This term's placement soft state (P15.1, P15.3, P15.4): a new term starts a new one.
    placement: TermPlacement,
    /// What the step under way places by (`StepWrites` holds it; the checks need the loads).
    step_loads: Loads,
}

/// A deposed leader that has not noticed yet: it pushes from its frozen state.
#[derive(Debug)]
struct Deposed {
    term: u64,
    state: LeaseState,
    planner: DeliveryPlanner,
    offset_ms: i64,
    rate_ppm: i64,
    until_us: u64,
}

/// Counts of what a run reached, summed over seeds by the caller: a simulator that silently
/// stopped reaching a situation shows up as a zero.
#[derive(Debug, Default, Clone, Copy, PartialEq, Eq)]
pub struct Coverage {
    pub commits: u64,
    /// Shards a plan marked releasing from a live owner (P5.2).
    pub handoffs_started: u64,
    /// Releasing shards a plan gave back to their owner (P5.4).
    pub handoffs_cancelled: u64,
    pub handoffs_completed_by_release: u64,
    pub handoffs_completed_by_claims: u64,
    pub handoffs_completed_by_expiry: u64,
    /// Shards an acknowledgement named whose handoff was no longer current (P5.2).
    pub acknowledgements_ignored: u64,
    /// Renewals whose claims differed from the recorded set (P4.2).
    pub claims_mismatches: u64,
    /// Plans refused because the assignment changed since they were read (P2.4).
    pub stale_plans_refused: u64,
    pub executors_reaped: u64,
    /// Reap candidates that had renewed by the time the reap applied (P2.4).
    pub reap_candidates_skipped: u64,
    /// Registrations answered as already registered (P4.4, P7.2).
    pub registrations_retried: u64,
    /// Executors an operator marked draining (a change, not a repeat).
    pub drains_started: u64,
    pub reaps_deferred_by_guard: u64,
    /// Steps of a leader in its first lease in office that found overdue executors and reaped
    /// none (P6.1).
    pub reaps_deferred_by_new_leader: u64,
    /// ... of which one of those overdue executors' processes still admitted a shard: the
    /// grace was all that stood between the leader's clock and an I1 violation.
    pub deferred_reaps_of_admitting_executors: u64,
    /// Steps of a leader in its first lease in office that found a handoff due on its clock and
    /// completed none (P6.1).
    pub expired_handoffs_deferred_by_new_leader: u64,
    pub leader_changes: u64,
    pub snapshot_restarts: u64,
    pub stale_grants: u64,
    pub pushes_refused: u64,
    /// Revokes an executor answered as ignored: a newer set gave back every shard (P5.2).
    pub stale_revokes_ignored: u64,
    /// Revokes a newer set overtook that still released shards it had taken away (P4.1).
    pub overtaken_revokes_released: u64,
    pub i4_probes: u64,
    pub join_probes: u64,
    /// Shards moved for balance in committed plans (P15.2, P15.3).
    pub balance_moves: u64,
    /// Shards moved to a joiner in committed plans made on reported loads (P5.4 under load).
    pub joins_under_load: u64,
    /// Leader steps that planned on reported loads with a hot shard among them (P15.4).
    pub hot_shard_steps: u64,
    /// Steps of a leader after a leader change that placed while still learning the loads
    /// (P15.1).
    pub learning_after_leader_change: u64,
    /// Renewals the leader recorded from a lying executor.
    pub lying_reports: u64,
    /// Executors restarted with another capacity (P15.1).
    pub capacity_restarts: u64,
    /// Shifts of the hot set.
    pub hot_set_shifts: u64,
    /// Runs of the leader on steady reported loads after convergence (`run::load_phase`).
    pub load_phases: u64,
    /// ... of which the lower bound allowed the band, and the band was checked at the end.
    pub band_checks: u64,
    /// ... of which a liar was lying, and the starvation and count checks ran.
    pub liar_checks: u64,
}

impl Coverage {
    fn counts(&self) -> [(&'static str, u64); 35] {
        [
            ("commits", self.commits),
            ("handoffs_started", self.handoffs_started),
            ("handoffs_cancelled", self.handoffs_cancelled),
            (
                "handoffs_completed_by_release",
                self.handoffs_completed_by_release,
            ),
            (
                "handoffs_completed_by_claims",
                self.handoffs_completed_by_claims,
            ),
            (
                "handoffs_completed_by_expiry",
                self.handoffs_completed_by_expiry,
            ),
            ("acknowledgements_ignored", self.acknowledgements_ignored),
            ("claims_mismatches", self.claims_mismatches),
            ("stale_plans_refused", self.stale_plans_refused),
            ("executors_reaped", self.executors_reaped),
            ("reap_candidates_skipped", self.reap_candidates_skipped),
            ("registrations_retried", self.registrations_retried),
            ("drains_started", self.drains_started),
            ("reaps_deferred_by_guard", self.reaps_deferred_by_guard),
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
            ("leader_changes", self.leader_changes),
            ("snapshot_restarts", self.snapshot_restarts),
            ("stale_grants", self.stale_grants),
            ("pushes_refused", self.pushes_refused),
            ("stale_revokes_ignored", self.stale_revokes_ignored),
            (
                "overtaken_revokes_released",
                self.overtaken_revokes_released,
            ),
            ("i4_probes", self.i4_probes),
            ("join_probes", self.join_probes),
            ("balance_moves", self.balance_moves),
            ("joins_under_load", self.joins_under_load),
            ("hot_shard_steps", self.hot_shard_steps),
            (
                "learning_after_leader_change",
                self.learning_after_leader_change,
            ),
            ("lying_reports", self.lying_reports),
            ("capacity_restarts", self.capacity_restarts),
            ("hot_set_shifts", self.hot_set_shifts),
            ("load_phases", self.load_phases),
            ("band_checks", self.band_checks),
            ("liar_checks", self.liar_checks),
        ]
    }

    pub fn add(&mut self, other: &Coverage) {
        self.commits += other.commits;
        self.handoffs_started += other.handoffs_started;
        self.handoffs_cancelled += other.handoffs_cancelled;
        self.handoffs_completed_by_release += other.handoffs_completed_by_release;
        self.handoffs_completed_by_claims += other.handoffs_completed_by_claims;
        self.handoffs_completed_by_expiry += other.handoffs_completed_by_expiry;
        self.acknowledgements_ignored += other.acknowledgements_ignored;
        self.claims_mismatches += other.claims_mismatches;
        self.stale_plans_refused += other.stale_plans_refused;
        self.executors_reaped += other.executors_reaped;
        self.reap_candidates_skipped += other.reap_candidates_skipped;
        self.registrations_retried += other.registrations_retried;
        self.drains_started += other.drains_started;
        self.reaps_deferred_by_guard += other.reaps_deferred_by_guard;
        self.reaps_deferred_by_new_leader += other.reaps_deferred_by_new_leader;
        self.deferred_reaps_of_admitting_executors += other.deferred_reaps_of_admitting_executors;
        self.expired_handoffs_deferred_by_new_leader +=
            other.expired_handoffs_deferred_by_new_leader;
        self.leader_changes += other.leader_changes;
        self.snapshot_restarts += other.snapshot_restarts;
        self.stale_grants += other.stale_grants;
        self.pushes_refused += other.pushes_refused;
        self.stale_revokes_ignored += other.stale_revokes_ignored;
        self.overtaken_revokes_released += other.overtaken_revokes_released;
        self.i4_probes += other.i4_probes;
        self.join_probes += other.join_probes;
        self.balance_moves += other.balance_moves;
        self.joins_under_load += other.joins_under_load;
        self.hot_shard_steps += other.hot_shard_steps;
        self.learning_after_leader_change += other.learning_after_leader_change;
        self.lying_reports += other.lying_reports;
        self.capacity_restarts += other.capacity_restarts;
        self.hot_set_shifts += other.hot_set_shifts;
        self.load_phases += other.load_phases;
        self.band_checks += other.band_checks;
        self.liar_checks += other.liar_checks;
    }

    pub fn unreached(&self) -> Vec<&'static str> {
        self.counts()
            .into_iter()
            .filter(|(_, n)| *n == 0)
            .map(|(name, _)| name)
            .collect()
    }

    /// Counts what P6.1's grace held back in a leader's step at `now_ms` on `state`: overdue
    /// executors not reaped (and whether a process of one still admits a shard), due handoffs
    /// not completed.
    fn count_new_leader_deferral(
        &mut self,
        state: &LeaseState,
        now_ms: u64,
        processes: &[Option<ProcessView<'_>>],
    ) {
        let overdue = state.overdue_executors(now_ms);
        if !overdue.is_empty() {
            self.reaps_deferred_by_new_leader += 1;
            let admitting = processes.iter().flatten().any(|view| {
                view.core
                    .executor_id()
                    .is_some_and(|id| overdue.iter().any(|o| o == id))
                    && view
                        .core
                        .assignment()
                        .held()
                        .iter()
                        .any(|held| view.core.admit(held.shard, view.now).is_ok())
            });
            self.deferred_reaps_of_admitting_executors += u64::from(admitting);
        }
        self.expired_handoffs_deferred_by_new_leader += u64::from(state.handoffs_due(now_ms));
    }

    /// Counts what one committed outcome did.
    fn record(&mut self, command: &Command, outcome: &Outcome) {
        let len = |shards: &[u32]| shards.len() as u64;
        match outcome {
            Outcome::Rebalanced {
                releasing,
                cancelled,
                ..
            } => {
                self.handoffs_started += len(releasing);
                self.handoffs_cancelled += len(cancelled);
            }
            Outcome::Released {
                completed, ignored, ..
            } => {
                self.handoffs_completed_by_release += u64::from(!completed.is_empty());
                self.acknowledgements_ignored += len(ignored);
            }
            Outcome::Renewed { results, .. } => {
                for result in results {
                    if let RenewResult::Renewed {
                        claims_mismatch,
                        acknowledged,
                        ..
                    } = result
                    {
                        self.claims_mismatches += u64::from(*claims_mismatch);
                        self.handoffs_completed_by_claims += u64::from(!acknowledged.is_empty());
                    }
                }
            }
            Outcome::Refused {
                reason: RefusalReason::StalePlan { .. },
            } => self.stale_plans_refused += 1,
            Outcome::Reaped {
                reaped, skipped, ..
            } => {
                self.executors_reaped += reaped.len() as u64;
                self.reap_candidates_skipped += skipped.len() as u64;
            }
            Outcome::Registered {
                already_registered: true,
                ..
            } => self.registrations_retried += 1,
            Outcome::DrainingSet {
                draining: true,
                changed: true,
                ..
            } => self.drains_started += 1,
            _ => {}
        }
        if matches!(command, Command::CompleteHandoffs { .. }) {
            self.handoffs_completed_by_expiry += 1;
        }
    }
}

/// The simulated cluster.
#[derive(Debug)]
pub struct World {
    pub scenario: Scenario,
    rng: ChaCha8Rng,
    queue: BinaryHeap<Reverse<Scheduled>>,
    seq: u64,
    /// Events handled so far.
    pub events: u64,
    pub now_us: u64,
    base: Instant,
    /// The committed log (Raft's guarantee: every replica's log agrees on this prefix).
    log: Vec<Command>,
    replicas: Vec<LeaseState>,
    applied: Vec<usize>,
    manager_rate_ppm: Vec<i64>,
    /// Each manager's wall clock minus the true one: what its leader clock starts from on
    /// taking office, give or take a step ([`MAX_CLOCK_OFFSET_MS`]).
    manager_offset_ms: Vec<i64>,
    leader: Option<Leader>,
    deposed: Vec<Deposed>,
    next_term: u64,
    pub processes: Vec<Option<Process>>,
    next_process: u64,
    next_call: u64,
    next_delivery: u64,
    /// Active partitions per slot: (to managers, from managers) counters.
    cut_to_managers: Vec<u32>,
    cut_from_managers: Vec<u32>,
    pub chaos: bool,
    pub checker: Checker,
    pub coverage: Coverage,
    trace: Option<Vec<String>>,
    driver: Driver,
    /// What the shards really carry and how each slot reports it.
    pub load: LoadModel,
    /// Every balance move a leader committed, oldest first.
    pub balance_moves: Vec<BalanceMove>,
}

/// A shard moved for balance by a committed plan.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct BalanceMove {
    pub term: u64,
    /// When it was committed (true µs).
    pub at_us: u64,
    pub shard: ShardId,
    pub from: String,
    pub to: String,
}

impl World {
    /// A world the seed drives: its faults, its network and every loop's own timers.
    pub fn new(scenario: Scenario, trace: bool) -> Self {
        Self::build(scenario, Driver::Seed, trace)
    }

    /// A world a script drives ([`crate::script`]): no faults, every clock at the true rate, the
    /// loops' timers and the network under the script's control until [`World::go_live`].
    pub fn scripted(scenario: Scenario, trace: bool) -> Self {
        let driver = Driver::Script {
            mailbox: Vec::new(),
            next_letter: 1,
            commits_held: false,
        };
        Self::build(scenario, driver, trace)
    }

    fn build(scenario: Scenario, driver: Driver, trace: bool) -> Self {
        let mut rng = ChaCha8Rng::seed_from_u64(scenario.seed);
        rng.set_stream(1);
        // A script times its steps to the millisecond on the leaders' clocks.
        let manager_rate_ppm = match driver {
            Driver::Seed => (0..MANAGERS)
                .map(|_| rng.random_range(-MAX_RATE_ERROR_PPM..=MAX_RATE_ERROR_PPM))
                .collect(),
            Driver::Script { .. } => vec![0; MANAGERS],
        };
        // Drawn from a stream of their own, so the rest of a seed's draws are as they were.
        let manager_offset_ms = match driver {
            Driver::Seed => {
                let mut clocks = ChaCha8Rng::seed_from_u64(scenario.seed);
                clocks.set_stream(2);
                (0..MANAGERS)
                    .map(|_| {
                        if clocks.random_bool(0.5) {
                            0
                        } else {
                            clocks
                                .random_range(-MAX_WALL_CLOCK_OFFSET_MS..=MAX_WALL_CLOCK_OFFSET_MS)
                        }
                    })
                    .collect()
            }
            Driver::Script { .. } => vec![0; MANAGERS],
        };
        let chaos = matches!(driver, Driver::Seed);
        let slots = scenario.slots;
        let load = LoadModel::new(&scenario.load, scenario.seed);
        let mut world = Self {
            checker: Checker::new(&scenario),
            scenario,
            rng,
            queue: BinaryHeap::new(),
            seq: 0,
            events: 0,
            now_us: 0,
            base: Instant::now(),
            log: Vec::new(),
            replicas: vec![LeaseState::default(); MANAGERS],
            applied: vec![0; MANAGERS],
            manager_rate_ppm,
            manager_offset_ms,
            leader: None,
            deposed: Vec::new(),
            next_term: 1,
            processes: (0..slots).map(|_| None).collect(),
            next_process: 1,
            next_call: 1,
            next_delivery: 1,
            cut_to_managers: vec![0; slots],
            cut_from_managers: vec![0; slots],
            chaos,
            coverage: Coverage::default(),
            trace: trace.then(Vec::new),
            driver,
            load,
            balance_moves: Vec::new(),
        };
        // The cluster is initialised before anything else, as `leaseholdctl init` does.
        world.take_office(0, world.manager_offset_ms[0]);
        let init = Command::Init {
            now_ms: world.leader_now_ms().unwrap_or(0),
            shard_count: world.scenario.shards,
            lease_duration_ms: world.scenario.lease_ms,
        };
        world.propose(init, ReplyTo::Nobody);
        if chaos {
            // Every manager runs this build, so the leader raised the cluster version to its
            // schema (P14.3) before any executor registered: registrations may state a capacity
            // (P15.1). A script's cluster keeps the version `Init` leaves, as they were written.
            let raise = Command::SetClusterVersion {
                now_ms: world.leader_now_ms().unwrap_or(0),
                cluster_version: NEWEST_SCHEMA,
            };
            world.propose(raise, ReplyTo::Nobody);
        }
        // Committed before any fault can touch it: the operator's `init` succeeded.
        world.commit(1);
        for slot in 0..slots {
            world.start_process(slot);
        }
        for (at_ms, fault) in world.scenario.faults.clone() {
            world.schedule(at_ms * 1_000, Event::Fault(fault));
        }
        for at_ms in world.scenario.load.shifts.clone() {
            world.schedule(at_ms * 1_000, Event::HotSetShift);
        }
        if chaos {
            world.schedule(world.scenario.chaos_ms * 1_000, Event::EndChaos);
        }
        world.schedule_timer(FOLLOWER_APPLY_US, Event::FollowerApply);
        world
    }

    pub fn trace_lines(&self) -> &[String] {
        self.trace.as_deref().unwrap_or_default()
    }

    pub fn note(&mut self, line: impl FnOnce() -> String) {
        if let Some(trace) = &mut self.trace {
            let at = self.now_us;
            let line = line();
            trace.push(format!("{:>9.3} ms  {line}", at as f64 / 1_000.0));
        }
    }

    fn schedule(&mut self, at_us: u64, event: Event) {
        self.seq += 1;
        self.queue.push(Reverse(Scheduled {
            at_us: at_us.max(self.now_us),
            seq: self.seq,
            event,
        }));
    }

    /// Schedules one of the loops' own timers: the leader's tick, the delivery round's interval,
    /// an executor's next call, the followers' apply. Under a script they wait for the script
    /// to fire them ([`World::fire`]); what a loop does at once in reaction to an event (a step
    /// after a commit that changed the membership, a round after a commit that owes pushes) is
    /// scheduled as any event is.
    fn schedule_timer(&mut self, at_us: u64, event: Event) {
        if matches!(self.driver, Driver::Seed) {
            self.schedule(at_us, event);
        }
    }

    /// Runs events until `until_us`; stops at the first violation.
    pub fn run_until(&mut self, until_us: u64) -> Result<(), Violation> {
        while let Some(Reverse(next)) = self.queue.peek() {
            if next.at_us > until_us {
                break;
            }
            let Some(Reverse(next)) = self.queue.pop() else {
                break;
            };
            self.now_us = next.at_us;
            self.events += 1;
            if self.events > MAX_EVENTS_PER_RUN {
                return Err(Violation {
                    invariant: "liveness",
                    detail: format!(
                        "more than {MAX_EVENTS_PER_RUN} events: the cluster is busy without end \
                         (a plan that never settles, a retry without backoff)"
                    ),
                    at_us: self.now_us,
                });
            }
            self.handle(next.event);
            self.check_after_event()?;
        }
        self.now_us = self.now_us.max(until_us);
        Ok(())
    }

    // ---- clocks ----------------------------------------------------------------------------

    fn local_instant(&self, rate_ppm: i64) -> Instant {
        instant_at(self.base, self.now_us, rate_ppm)
    }

    /// The true instant at which a process whose clock runs at `rate_ppm` reads `instant`.
    fn true_us_of(&self, instant: Instant, rate_ppm: i64) -> u64 {
        let local_us = instant.saturating_duration_since(self.base).as_micros() as u64;
        // Inverse of `scaled`, rounded up so a timer never fires early.
        let denominator = 1_000_000 + rate_ppm;
        (u128::from(local_us) * 1_000_000).div_ceil(denominator.max(1) as u128) as u64
    }

    pub fn process_now(&self, slot: Slot) -> Option<Instant> {
        self.processes[slot]
            .as_ref()
            .map(|p| self.local_instant(p.rate_ppm))
    }

    fn leader_clock_ms(&self, offset_ms: i64, rate_ppm: i64) -> u64 {
        clock_ms(self.now_us, offset_ms, rate_ppm)
    }

    pub fn leader_now_ms(&self) -> Option<u64> {
        self.leader
            .as_ref()
            .map(|l| self.leader_clock_ms(l.offset_ms, l.rate_ppm))
    }

    // ---- the network -----------------------------------------------------------------------

    fn transit_us(&mut self) -> u64 {
        let typical = self.scenario.typical_delay_us;
        // The heavy tail (up to 30× typical, as long as a short lease) is a fault: a healed
        // network's transit stays within the typical delay.
        let extra = if typical == 0 {
            0
        } else if self.chaos && self.rng.random_ratio(1, 20) {
            self.rng.random_range(0..=typical * 30)
        } else {
            self.rng.random_range(0..=typical)
        };
        MIN_TRANSIT_US + extra
    }

    /// How many copies of a message the network delivers (0: lost).
    fn copies(&mut self) -> usize {
        if !self.chaos {
            return 1;
        }
        if self.rng.random_ratio(self.scenario.drop_per_mille, 1_000) {
            return 0;
        }
        if self
            .rng
            .random_ratio(self.scenario.duplicate_per_mille, 1_000)
        {
            return 2;
        }
        1
    }

    fn send_to_managers(&mut self, slot: Slot, process: u64, request: Request) {
        let cut = self.cut_to_managers[slot] > 0;
        let kind = request.kind();
        self.send(cut, slot, kind, || Event::ToManagers {
            slot,
            process,
            request: request.clone(),
        });
    }

    fn send_to_executor(&mut self, slot: Slot, message: Message) {
        let cut = self.cut_from_managers[slot] > 0;
        let kind = message.kind();
        self.send(cut, slot, kind, || Event::ToExecutor {
            slot,
            message: message.clone(),
        });
    }

    /// One message over a link that is `cut` or not: lost, delivered once or twice, each copy
    /// after its own transit; under a script, held in its mailbox.
    fn send(&mut self, cut: bool, slot: Slot, kind: LetterKind, arrival: impl Fn() -> Event) {
        if cut {
            return;
        }
        if let Driver::Script {
            mailbox,
            next_letter,
            ..
        } = &mut self.driver
        {
            mailbox.push(Letter {
                id: *next_letter,
                slot,
                kind,
                arrival: arrival(),
            });
            *next_letter += 1;
            return;
        }
        for _ in 0..self.copies() {
            let at = self.now_us + self.transit_us();
            self.schedule(at, arrival());
        }
    }

    /// The slot an executor address names (`http://sN:1`, the same across restarts).
    fn slot_of(address: &str) -> Option<Slot> {
        address
            .strip_prefix("http://s")?
            .split(':')
            .next()?
            .parse()
            .ok()
    }

    // ---- Raft ------------------------------------------------------------------------------

    fn take_office(&mut self, manager: usize, offset_ms: i64) {
        // Raft: a new leader holds the whole committed log and applies it before it leads.
        self.catch_up(manager);
        let term = self.next_term;
        self.next_term += 1;
        let rate_ppm = self.manager_rate_ppm[manager];
        // P6.4: the clock takes office at its wall clock raised to what the state holds, and runs
        // on from there, as production's `take_office` anchors it.
        let wall_ms = self.leader_clock_ms(offset_ms, rate_ppm);
        let took_office_ms = took_office_ms(wall_ms, &self.replicas[manager]);
        let raised_ms = took_office_ms - wall_ms;
        let offset_ms = offset_ms + raised_ms as i64;
        let mut leader = Leader {
            term,
            manager,
            offset_ms,
            rate_ppm,
            core: LeaderCore::new(took_office_ms, self.scenario.guard),
            writes: None,
            step_again: false,
            planner: DeliveryPlanner::default(),
            pending_pushes: BTreeSet::new(),
            last_renewal_applied_ms: None,
            tail: Vec::new(),
            commit_scheduled: false,
            round_waiting: Vec::new(),
            round_in_flight: BTreeMap::new(),
            round_again: false,
            round_scheduled: false,
            stalled_until_us: None,
            // P15.1: a new leader knows no loads; it relearns them from the renewals.
            placement: TermPlacement::new(self.placement_settings()),
            step_loads: Loads::Counts,
        };
        self.checker.new_term();
        // P6.2: push each executor its full set once.
        leader.pending_pushes = self.replicas[manager]
            .executors()
            .map(|e| e.id.clone())
            .collect();
        self.leader = Some(leader);
        self.note(|| format!("term {term}: manager {manager} leads, clock offset {offset_ms} ms (raised {raised_ms} ms above its wall clock), took office at {took_office_ms}"));
        self.schedule(self.now_us, Event::LeaderStep { term });
        self.schedule(self.now_us, Event::DeliveryRound { term });
    }

    fn catch_up(&mut self, manager: usize) {
        while self.applied[manager] < self.log.len() {
            let index = self.applied[manager];
            let command = self.log[index].clone();
            let _ = self.replicas[manager].apply(index as u64 + 1, &command);
            self.applied[manager] += 1;
        }
    }

    fn propose(&mut self, command: Command, reply_to: ReplyTo) {
        let commits_held = self.commits_held();
        let Some(leader) = &mut self.leader else {
            return;
        };
        // Group commit: renewals arriving while a batch waits join the pending `Renew` entry.
        if let (Command::Renew { renewals, .. }, ReplyTo::Renew(replies)) = (&command, &reply_to) {
            if let Some(Proposal {
                command: Command::Renew {
                    renewals: batch, ..
                },
                reply_to: ReplyTo::Renew(batch_replies),
            }) = leader.tail.last_mut()
            {
                batch.extend(renewals.iter().cloned());
                batch_replies.extend(replies.iter().cloned());
                return;
            }
        }
        leader.tail.push(Proposal { command, reply_to });
        if !leader.commit_scheduled && leader.stalled_until_us.is_none() && !commits_held {
            leader.commit_scheduled = true;
            let term = leader.term;
            let at = self.now_us + self.scenario.commit_latency_us;
            self.schedule(at, Event::Commit { term });
        }
    }

    fn commit(&mut self, term: u64) {
        let Some(leader) = &mut self.leader else {
            return;
        };
        if leader.term != term {
            return;
        }
        leader.commit_scheduled = false;
        let tail = std::mem::take(&mut leader.tail);
        let manager = leader.manager;
        for proposal in tail {
            self.commit_one(manager, proposal);
        }
    }

    /// Appends `command` to the committed log, applies it on `manager`'s replica and checks the
    /// commit; returns the outcome.
    fn append_and_apply(&mut self, manager: usize, command: &Command) -> Outcome {
        self.catch_up(manager);
        self.log.push(command.clone());
        let index = self.log.len() as u64;
        let before = self.replicas[manager].clone();
        let outcome = self.replicas[manager].apply(index, command);
        self.applied[manager] += 1;
        self.coverage.commits += 1;
        self.observe_commit(&before, manager, command, &outcome);
        outcome
    }

    /// Commits one proposal of the leader's tail: applies it, signals the leader as production
    /// does, and answers whoever asked.
    fn commit_one(&mut self, manager: usize, proposal: Proposal) {
        // Who each shard of a plan leaves, for the record of balance moves.
        let leaving: Vec<Option<String>> = match &proposal.command {
            Command::Rebalance { moves, .. } => {
                self.catch_up(manager);
                moves
                    .iter()
                    .map(|step| {
                        self.replicas[manager]
                            .shard(step.shard)
                            .and_then(|shard| shard.owner.clone())
                    })
                    .collect()
            }
            _ => Vec::new(),
        };
        let outcome = self.append_and_apply(manager, &proposal.command);
        let index = self.log.len() as u64;
        let now_ms = proposal.command.now_ms();
        self.note(|| {
            format!(
                "commit #{index}: {} -> {}",
                describe_command(&proposal.command),
                describe_outcome(&outcome)
            )
        });
        let signal = CommitSignal::of(&outcome);
        if let Some(leader) = self.leader.as_mut().filter(|l| l.manager == manager) {
            let term = leader.term;
            if signal.renewal_applied {
                leader.last_renewal_applied_ms =
                    Some(leader.last_renewal_applied_ms.unwrap_or(0).max(now_ms));
            }
            leader.pending_pushes.extend(signal.pushes.iter().cloned());
            if signal.replan {
                self.schedule(self.now_us, Event::LeaderStep { term });
            }
            if signal.deliver {
                self.schedule(self.now_us, Event::DeliveryRound { term });
            }
            self.placement_after_commit(manager, &proposal, &outcome, leaving);
        }
        self.answer(manager, proposal.reply_to, &outcome);
    }

    /// What the leader's placement soft state takes from one of its commits, as the leader loop
    /// does: every renewal applied feeds the load tracker what it reported and the set it holds
    /// after the renewal (P15.1); a committed plan of its step charges the budget and starts the
    /// cooldown of its balance moves (P15.3, P15.4).
    fn placement_after_commit(
        &mut self,
        manager: usize,
        proposal: &Proposal,
        outcome: &Outcome,
        leaving: Vec<Option<String>>,
    ) {
        let now_us = self.now_us;
        let Some(leader) = self.leader.as_mut().filter(|l| l.manager == manager) else {
            return;
        };
        let now_ms = clock_ms(now_us, leader.offset_ms, leader.rate_ppm);
        let state = &self.replicas[manager];
        match (&proposal.command, &proposal.reply_to, outcome) {
            (
                Command::Renew { renewals, .. },
                ReplyTo::Renew(renewers),
                Outcome::Renewed { results, .. },
            ) => {
                let shard_count = state.config().map_or(0, |c| c.shard_count);
                let liar = self.load.liar().and_then(|(slot, _)| {
                    self.processes[slot]
                        .as_ref()
                        .and_then(|p| p.core.executor_id().map(str::to_owned))
                });
                for ((renewal, renewer), result) in renewals.iter().zip(renewers).zip(results) {
                    if !matches!(result, RenewResult::Renewed { .. }) {
                        continue;
                    }
                    let held: Vec<ShardId> = state
                        .delivered_set(&renewal.executor_id)
                        .into_iter()
                        .map(|(shard, _)| shard)
                        .collect();
                    let loads = renewer.loads.as_deref();
                    leader.placement.tracker.record(
                        &renewal.executor_id,
                        shard_count,
                        &held,
                        loads,
                        MAX_SHARD_LOAD,
                    );
                    self.checker.after_record(
                        &renewal.executor_id,
                        &held,
                        loads,
                        &leader.placement.tracker,
                        MAX_SHARD_LOAD,
                        now_us,
                    );
                    if loads.is_some() && liar.as_deref() == Some(renewal.executor_id.as_str()) {
                        self.coverage.lying_reports += 1;
                    }
                }
            }
            (Command::Rebalance { moves, .. }, ReplyTo::StepWrite, Outcome::Rebalanced { .. }) => {
                let Some(plan) = leader.writes.as_ref().and_then(|w| w.plan()) else {
                    return;
                };
                leader.placement.committed(now_ms, plan);
                let balance = plan.balance_shards();
                let by_load = matches!(leader.step_loads, Loads::Reported(_));
                for ((step, reason), from) in moves.iter().zip(&plan.reasons).zip(leaving) {
                    match reason {
                        MoveReason::Balance => {
                            self.coverage.balance_moves += 1;
                            self.balance_moves.push(BalanceMove {
                                term: leader.term,
                                at_us: now_us,
                                shard: step.shard,
                                from: from.unwrap_or_default(),
                                to: step.to.clone(),
                            });
                        }
                        MoveReason::Join if by_load => self.coverage.joins_under_load += 1,
                        _ => {}
                    }
                }
                if !balance.is_empty() {
                    let budget = self.scenario.load.budget_per_minute(self.scenario.shards);
                    self.checker
                        .after_balance_commit(now_ms, &balance, budget, now_us);
                }
            }
            _ => {}
        }
    }

    /// How the leader is configured to place (`--balance-tolerance`, `--max-balance-moves`).
    fn placement_settings(&self) -> PlacementSettings {
        PlacementSettings {
            by_load: true,
            tolerance: self.scenario.load.tolerance,
            max_balance_moves_per_minute: self.scenario.load.max_balance_moves_per_minute,
        }
    }

    fn observe_commit(
        &mut self,
        before: &LeaseState,
        manager: usize,
        command: &Command,
        outcome: &Outcome,
    ) {
        let after = &self.replicas[manager];
        self.coverage.record(command, outcome);
        let views = process_views(&self.processes, self.base, self.now_us);
        self.checker
            .after_commit(before, after, command, outcome, &views, self.now_us);
    }

    /// Sends the outcome of a committed proposal to whoever asked.
    fn answer(&mut self, manager: usize, reply_to: ReplyTo, outcome: &Outcome) {
        match reply_to {
            ReplyTo::Nobody => {}
            ReplyTo::StepWrite => self.continue_step(manager, outcome),
            ReplyTo::Register { slot, call, .. } => {
                let message = match outcome {
                    Outcome::Registered { grant, .. } => Message::Granted {
                        call,
                        grant: grant.clone().into(),
                    },
                    _ => Message::CallFailed { call },
                };
                self.send_to_executor(slot, message);
            }
            ReplyTo::Renew(replies) => {
                let results = match outcome {
                    Outcome::Renewed { results, .. } => results.clone(),
                    _ => Vec::new(),
                };
                for (index, Renewer { slot, call, .. }) in replies.into_iter().enumerate() {
                    let message = match results.get(index) {
                        Some(RenewResult::Renewed { grant, .. }) => Message::Granted {
                            call,
                            grant: grant.clone().into(),
                        },
                        Some(RenewResult::UnknownExecutor { .. }) => {
                            Message::UnknownExecutor { call }
                        }
                        None => Message::CallFailed { call },
                    };
                    self.send_to_executor(slot, message);
                }
            }
            ReplyTo::Deregister { slot, call, .. } => {
                let message = match outcome {
                    Outcome::Deregistered { .. } | Outcome::NotFound => {
                        Message::Deregistered { call }
                    }
                    _ => Message::CallFailed { call },
                };
                self.send_to_executor(slot, message);
            }
        }
    }

    fn lose_office(&mut self, keep_tail: bool, deposed_pushes_ms: u64) {
        let Some(mut leader) = self.leader.take() else {
            return;
        };
        self.coverage.leader_changes += 1;
        let term = leader.term;
        let tail = std::mem::take(&mut leader.tail);
        self.note(|| {
            format!(
                "term {term} ends: {} uncommitted entries {}",
                tail.len(),
                if keep_tail { "kept" } else { "lost" }
            )
        });
        if keep_tail {
            // The next leader commits them; their answers are lost with the old connections.
            for proposal in tail {
                self.append_and_apply(leader.manager, &proposal.command);
            }
        }
        if deposed_pushes_ms > 0 {
            self.deposed.push(Deposed {
                term,
                state: self.replicas[leader.manager].clone(),
                planner: std::mem::take(&mut leader.planner),
                offset_ms: leader.offset_ms,
                rate_ppm: leader.rate_ppm,
                until_us: self.now_us + deposed_pushes_ms * 1_000,
            });
            self.schedule(self.now_us, Event::DeposedRound { term });
        }
    }

    // ---- the leader loop -------------------------------------------------------------------

    fn leader_step(&mut self, term: u64) {
        let now_ms = match self.leader.as_ref() {
            Some(l) if l.term == term && l.stalled_until_us.is_none() => {
                self.leader_clock_ms(l.offset_ms, l.rate_ppm)
            }
            _ => return,
        };
        let Some(leader) = self.leader.as_mut() else {
            return;
        };
        if leader.writes.is_some() {
            // A step is waiting for its write to commit; step again when it is over.
            leader.step_again = true;
            return;
        }
        let manager = leader.manager;
        let state = &self.replicas[manager];
        let decision = leader
            .core
            .step(now_ms, state, leader.last_renewal_applied_ms);
        match decision.deferral {
            Some(Deferral::MassExpiryGuard { .. }) => self.coverage.reaps_deferred_by_guard += 1,
            Some(Deferral::NewLeader { .. }) => {
                let views = process_views(&self.processes, self.base, self.now_us);
                self.coverage
                    .count_new_leader_deferral(state, now_ms, &views);
            }
            None => {}
        }
        // What this step places by: the loads this term's renewals reported, the budget left,
        // the shards cooling (P15.1-P15.4), as the leader loop reads them at each step.
        let inputs = leader.placement.inputs(state, now_ms);
        match &inputs.loads {
            Loads::Learning if leader.term > 1 => self.coverage.learning_after_leader_change += 1,
            Loads::Reported(loads) if !LoadSummary::of(state, now_ms, loads).hot.is_empty() => {
                self.coverage.hot_shard_steps += 1;
            }
            _ => {}
        }
        leader.step_loads = inputs.loads.clone();
        leader.writes = Some(StepWrites::with_placement(
            decision,
            self.scenario.plan_cap,
            inputs,
        ));
        self.next_step_write(manager);
    }

    /// Proposes the step's next write, or ends the step and schedules the next tick.
    fn next_step_write(&mut self, manager: usize) {
        let now_us = self.now_us;
        let Some(leader) = self.leader.as_mut().filter(|l| l.manager == manager) else {
            return;
        };
        let now_ms = clock_ms(now_us, leader.offset_ms, leader.rate_ppm);
        let term = leader.term;
        let next = leader
            .writes
            .as_mut()
            .and_then(|w| w.next_command(&self.replicas[manager], now_ms));
        match next {
            Some((write, command)) => {
                if write == StepWrite::Rebalance
                    && leader
                        .writes
                        .as_ref()
                        .is_some_and(|w| w.plan_was_capped(&command))
                {
                    leader.step_again = true;
                }
                if let Some(plan) = leader
                    .writes
                    .as_ref()
                    .and_then(|w| w.plan())
                    .filter(|_| write == StepWrite::Rebalance)
                {
                    if let Some(trace) = &mut self.trace {
                        let by = match &leader.step_loads {
                            Loads::Counts => "count".to_owned(),
                            Loads::Learning => "learning".to_owned(),
                            Loads::Reported(loads) => format!("load {loads:.1?}"),
                        };
                        trace.push(format!(
                            "{:>9.3} ms  plan by {by}: {:?}",
                            now_us as f64 / 1_000.0,
                            plan.counts_by_reason()
                        ));
                    }
                    self.checker.after_plan(
                        &self.replicas[manager],
                        now_ms,
                        plan,
                        &leader.step_loads,
                        self.scenario.load.tolerance,
                        now_us,
                    );
                }
                self.propose(command, ReplyTo::StepWrite);
            }
            None => {
                leader.writes = None;
                let lease_ms = self.replicas[manager]
                    .config()
                    .map_or(1_000, |c| c.lease_duration_ms);
                if std::mem::take(&mut leader.step_again) {
                    self.schedule(self.now_us, Event::LeaderStep { term });
                } else {
                    let at = self.now_us + tick_ms(lease_ms) * 1_000;
                    self.schedule_timer(at, Event::LeaderStep { term });
                }
            }
        }
    }

    fn continue_step(&mut self, manager: usize, outcome: &Outcome) {
        if let Outcome::Refused {
            reason: RefusalReason::StalePlan { .. },
        } = outcome
        {
            if let Some(leader) = self.leader.as_mut() {
                leader.step_again = true;
            }
        }
        self.next_step_write(manager);
    }

    // ---- deliveries ------------------------------------------------------------------------

    fn delivery_round(&mut self, term: u64) {
        let now_us = self.now_us;
        let Some(leader) = active(&mut self.leader, term) else {
            return;
        };
        leader.round_scheduled = false;
        if !leader.round_in_flight.is_empty() || !leader.round_waiting.is_empty() {
            leader.round_again = true;
            return;
        }
        let manager = leader.manager;
        let now_ms = clock_ms(now_us, leader.offset_ms, leader.rate_ppm);
        let queued = std::mem::take(&mut leader.pending_pushes);
        let round = leader
            .planner
            .plan_round(&self.replicas[manager], queued, now_ms);
        leader.pending_pushes.extend(round.deferred_pushes);
        leader.round_waiting = round.deliveries;
        leader.round_waiting.reverse();
        self.fill_round(term);
    }

    /// Sends waiting deliveries up to the in-flight bound; when the round is done, schedules
    /// the next one.
    fn fill_round(&mut self, term: u64) {
        let cap = self.scenario.max_deliveries_in_flight;
        loop {
            let Some(leader) = active(&mut self.leader, term) else {
                return;
            };
            if leader.round_in_flight.len() >= cap {
                return;
            }
            let Some(delivery) = leader.round_waiting.pop() else {
                break;
            };
            self.send_delivery(term, delivery);
        }
        let now_us = self.now_us;
        let Some(leader) = active(&mut self.leader, term) else {
            return;
        };
        if leader.round_in_flight.is_empty() && !leader.round_scheduled {
            leader.round_scheduled = true;
            if std::mem::take(&mut leader.round_again) {
                self.schedule(now_us, Event::DeliveryRound { term });
            } else {
                let at = now_us + ROUND_INTERVAL_MS * 1_000;
                self.schedule_timer(at, Event::DeliveryRound { term });
            }
        }
    }

    fn send_delivery(&mut self, term: u64, delivery: Delivery) {
        let id = self.next_delivery;
        self.next_delivery += 1;
        let (address, kind, message) = match delivery {
            Delivery::Push {
                executor_id,
                address,
                body,
            } => (
                address,
                InflightKind::Push { executor_id },
                Message::Push {
                    delivery: id,
                    push: body,
                },
            ),
            Delivery::Revoke {
                executor_id,
                address,
                body,
            } => (
                address,
                InflightKind::Revoke {
                    executor_id,
                    requested: body.shards.clone(),
                    revision: body.revision,
                },
                Message::Revoke {
                    delivery: id,
                    revoke: body,
                },
            ),
        };
        let Some(slot) = Self::slot_of(&address) else {
            return;
        };
        if let Some(leader) = self.leader.as_mut().filter(|l| l.term == term) {
            leader.round_in_flight.insert(id, Inflight { kind });
        }
        self.send_to_executor(slot, message);
        self.schedule(
            self.now_us + DELIVERY_TIMEOUT_US,
            Event::DeliveryTimeout { term, delivery: id },
        );
    }

    /// A delivery's answer (or its timeout, `None` for both fields).
    fn delivered(
        &mut self,
        term: u64,
        delivery: u64,
        push_ok: Option<bool>,
        revoke: Option<Option<RevokeReply>>,
    ) {
        let now_us = self.now_us;
        let Some(leader) = active(&mut self.leader, term) else {
            return;
        };
        let Some(inflight) = leader.round_in_flight.remove(&delivery) else {
            return;
        };
        let now_ms = clock_ms(now_us, leader.offset_ms, leader.rate_ppm);
        match inflight.kind {
            InflightKind::Push { executor_id } => {
                let ok = push_ok.unwrap_or(false);
                if let leasehold_manager::leader::delivery_plan::PushRecord::Failed { .. } =
                    leader.planner.push_outcome(&executor_id, ok, now_ms)
                {
                    leader.pending_pushes.insert(executor_id);
                }
            }
            InflightKind::Revoke {
                executor_id,
                requested,
                revision,
            } => {
                if let Some(Some(reply)) = revoke {
                    if let Some(command) =
                        acknowledgement(&executor_id, &requested, revision, &reply, now_ms)
                    {
                        self.propose(command, ReplyTo::Nobody);
                    }
                }
            }
        }
        self.fill_round(term);
    }

    fn deposed_round(&mut self, term: u64) {
        let now_us = self.now_us;
        let Some(position) = self.deposed.iter().position(|d| d.term == term) else {
            return;
        };
        if self.deposed[position].until_us <= now_us {
            self.deposed.remove(position);
            return;
        }
        let (offset_ms, rate_ppm) = (
            self.deposed[position].offset_ms,
            self.deposed[position].rate_ppm,
        );
        let now_ms = self.leader_clock_ms(offset_ms, rate_ppm);
        let deposed = &mut self.deposed[position];
        let everyone: Vec<String> = deposed.state.executors().map(|e| e.id.clone()).collect();
        let round = deposed.planner.plan_round(&deposed.state, everyone, now_ms);
        for delivery in round.deliveries {
            // Its answers go nowhere: the deposed leader can no longer commit anything.
            let id = self.next_delivery;
            self.next_delivery += 1;
            let (address, message) = match delivery {
                Delivery::Push { address, body, .. } => (
                    address,
                    Message::Push {
                        delivery: id,
                        push: body,
                    },
                ),
                Delivery::Revoke { address, body, .. } => (
                    address,
                    Message::Revoke {
                        delivery: id,
                        revoke: body,
                    },
                ),
            };
            if let Some(slot) = Self::slot_of(&address) {
                self.send_to_executor(slot, message);
            }
        }
        self.schedule_timer(
            now_us + ROUND_INTERVAL_MS * 1_000,
            Event::DeposedRound { term },
        );
    }

    // ---- manager request handling ---------------------------------------------------------

    fn manager_receives(&mut self, slot: Slot, process: u64, request: Request) {
        let Some(leader) = &self.leader else {
            // No leader: requests fail (503 no_leader); deliveries' answers are lost.
            if let Some(call) = request_call(&request) {
                self.send_to_executor(slot, Message::CallFailed { call });
            }
            return;
        };
        if let Some(until) = leader.stalled_until_us {
            // A stalled leader reads the request when it resumes (it sits in the socket).
            self.schedule(
                until,
                Event::ToManagers {
                    slot,
                    process,
                    request,
                },
            );
            return;
        }
        let term = leader.term;
        let now_ms = self.leader_clock_ms(leader.offset_ms, leader.rate_ppm);
        match request {
            Request::Register { call, request } => {
                // As the registration handler: no capacity stated is the default one.
                let capacity = request.capacity.unwrap_or(DEFAULT_CAPACITY);
                let command = Command::Register {
                    now_ms,
                    incarnation: request.incarnation,
                    address: request.address,
                    name: request.name,
                    credential_sha256: None,
                    capacity,
                };
                self.propose(command, ReplyTo::Register { slot, call });
            }
            Request::Renew {
                call,
                executor_id,
                request,
            } => {
                // The renewal handler refuses loads it cannot take (I6) before anything is
                // proposed; what the simulated executors report always passes.
                if let Some(reported) = &request.loads {
                    if let Err(error) = check_shard_loads(reported, self.scenario.shards) {
                        panic!("a simulated executor reported loads the wire refuses: {error}");
                    }
                }
                let loads: Report = request.loads.as_ref().map(|reported| {
                    reported
                        .iter()
                        .map(|report| (report.shard, report.load))
                        .collect()
                });
                let claims = match request.checked_claims(self.scenario.shards) {
                    Ok(claims) => claims,
                    Err(error) => {
                        panic!("a simulated executor claimed shards the wire refuses: {error}")
                    }
                };
                let command = Command::Renew {
                    now_ms,
                    renewals: vec![Renewal::from_claims(executor_id, &claims, request.revision)],
                };
                self.propose(command, ReplyTo::Renew(vec![Renewer { slot, call, loads }]));
            }
            Request::Deregister { call, executor_id } => {
                let command = Command::Deregister {
                    now_ms,
                    executor_id,
                };
                self.propose(command, ReplyTo::Deregister { slot, call });
            }
            Request::PushReply { delivery, ok } => self.delivered(term, delivery, Some(ok), None),
            Request::RevokeReply { delivery, reply } => {
                self.delivered(term, delivery, None, Some(reply))
            }
        }
    }

    // ---- executors -------------------------------------------------------------------------

    fn start_process(&mut self, slot: Slot) {
        let id = self.next_process;
        self.next_process += 1;
        let rate_ppm = self.scenario.executor_rate_ppm[slot];
        let capacity = self.load.capacity(slot);
        self.processes[slot] = Some(Process {
            id,
            core: AdmissionCore::default(),
            schedule: LeaseSchedule::default(),
            life: Life::Running,
            incarnation: format!("s{slot}-p{id}-i1"),
            incarnations: 1,
            call: None,
            rate_ppm,
            register_sent: false,
            capacity,
        });
        self.note(|| format!("slot {slot}: process {id} starts"));
        self.schedule_timer(self.now_us, Event::Call { slot, process: id });
    }

    fn process_mut(&mut self, slot: Slot, process: u64) -> Option<&mut Process> {
        self.processes[slot].as_mut().filter(|p| p.id == process)
    }

    /// The lease loop's next call: register when not registered, else renew.
    fn call(&mut self, slot: Slot, process: u64) {
        let Some(now) = self.process_now(slot) else {
            return;
        };
        let call_id = self.next_call;
        let address = format!("http://s{slot}:1");
        let Some(p) = self.process_mut(slot, process) else {
            return;
        };
        if let Life::Paused { until_us } = p.life {
            self.schedule_timer(until_us, Event::Call { slot, process });
            return;
        }
        if p.life != Life::Running || p.call.is_some() {
            return;
        }
        let request = match p.core.renewal() {
            Some((executor_id, request)) => {
                p.call = Some(Call {
                    id: call_id,
                    kind: CallKind::Renew,
                    sent_at: now,
                });
                Request::Renew {
                    call: call_id,
                    executor_id,
                    request,
                }
            }
            None => {
                p.register_sent = true;
                p.call = Some(Call {
                    id: call_id,
                    kind: CallKind::Register,
                    sent_at: now,
                });
                Request::Register {
                    call: call_id,
                    request: RegisterRequest {
                        incarnation: p.incarnation.clone(),
                        address,
                        name: None,
                        credential: None,
                        capacity: Some(p.capacity),
                    },
                }
            }
        };
        let mut request = request;
        if let Request::Renew { request, .. } = &mut request {
            let claims: Vec<ShardId> = request.claims.iter().map(|claim| claim.shard).collect();
            request.loads = self.load.report(slot, &claims).map(|reported| {
                reported
                    .into_iter()
                    .map(|(shard, load)| ShardLoad { shard, load })
                    .collect()
            });
        }
        self.next_call += 1;
        self.send_to_managers(slot, process, request);
        self.schedule(
            self.now_us + CALL_PATIENCE_US,
            Event::CallTimeout {
                slot,
                process,
                call: call_id,
            },
        );
    }

    /// Applies the schedule's verdict on the call that just ended.
    fn after_call(&mut self, slot: Slot, process: u64, outcome: CallOutcome) {
        let Some(now) = self.process_now(slot) else {
            return;
        };
        let Some(p) = self.process_mut(slot, process) else {
            return;
        };
        let next = p.schedule.after(outcome, p.core.lease(), now);
        let rate = p.rate_ppm;
        match next {
            NextCall::CallAt(at) => {
                let at_us = self.true_us_of(at, rate);
                self.schedule_timer(at_us, Event::Call { slot, process });
            }
            NextCall::Reregister => {
                p.incarnations += 1;
                p.incarnation = format!("s{slot}-p{process}-i{}", p.incarnations);
                p.register_sent = false;
                self.schedule_timer(self.now_us, Event::Call { slot, process });
            }
            NextCall::GiveUp(reason) => {
                p.life = Life::Dead;
                self.note(|| format!("slot {slot}: gives up: {reason}"));
            }
        }
    }

    fn executor_receives(&mut self, slot: Slot, message: Message) {
        let Some(now) = self.process_now(slot) else {
            return;
        };
        let now_us = self.now_us;
        let Some(p) = self.processes[slot].as_mut() else {
            // Connection refused: deliveries fail by timeout, calls were the dead process's.
            return;
        };
        let process = p.id;
        match p.life {
            Life::Dead => return,
            Life::Paused { until_us } => {
                // Read from the socket once the process runs again.
                self.schedule(until_us.max(now_us), Event::ToExecutor { slot, message });
                return;
            }
            Life::Running | Life::Stopping => {}
        }
        match message {
            Message::Granted { call, grant } => {
                let Some(current) = p.call.filter(|c| c.id == call) else {
                    return;
                };
                p.call = None;
                if matches!(current.kind, CallKind::Deregister) {
                    return;
                }
                if grant.revision < p.core.assignment().revision() {
                    self.coverage.stale_grants += 1;
                }
                let outcome = match p.core.apply_grant(current.sent_at, &grant, now) {
                    Ok(_) => CallOutcome::Granted,
                    Err(_) => CallOutcome::ForeignGrant,
                };
                if p.life == Life::Stopping {
                    return;
                }
                self.after_call(slot, process, outcome);
            }
            Message::UnknownExecutor { call } => {
                if p.call.filter(|c| c.id == call).is_none() {
                    return;
                }
                p.call = None;
                p.core.forget_executor(now);
                if p.life == Life::Stopping {
                    return;
                }
                self.after_call(slot, process, CallOutcome::UnknownExecutor);
            }
            Message::CallFailed { call } => {
                let Some(current) = p.call.filter(|c| c.id == call) else {
                    return;
                };
                p.call = None;
                if matches!(current.kind, CallKind::Deregister) {
                    self.schedule(now_us + 100_000, Event::StopDeadline { slot, process });
                    return;
                }
                if p.life == Life::Stopping {
                    return;
                }
                self.after_call(slot, process, CallOutcome::Failed);
            }
            Message::Deregistered { call } => {
                if p.call.filter(|c| c.id == call).is_some() {
                    p.life = Life::Dead;
                    self.note(|| format!("slot {slot}: deregistered and exits (P3.7)"));
                }
            }
            Message::Push { delivery, push } => {
                let ok = p.core.apply_push(&push, now).is_ok();
                if !ok {
                    self.coverage.pushes_refused += 1;
                }
                self.send_to_managers(slot, process, Request::PushReply { delivery, ok });
            }
            Message::Revoke { delivery, revoke } => {
                // Whether a newer set overtook it, as the executor's own delivery order decides.
                let overtaken = matches!(
                    p.core
                        .assignment()
                        .clone()
                        .apply_revoke(revoke.revision, &revoke.shards),
                    Ok(RevokeOutcome::Overtaken { .. })
                );
                let reply = p
                    .core
                    .apply_revoke(&revoke, now)
                    .ok()
                    .map(|applied| applied.reply);
                if let Some(reply) = &reply {
                    self.coverage.stale_revokes_ignored += u64::from(reply.ignored);
                    self.coverage.overtaken_revokes_released +=
                        u64::from(overtaken && !reply.released.is_empty());
                }
                self.send_to_managers(slot, process, Request::RevokeReply { delivery, reply });
            }
        }
    }

    fn call_timeout(&mut self, slot: Slot, process: u64, call: u64) {
        let Some(p) = self.process_mut(slot, process) else {
            return;
        };
        if p.call.is_none_or(|c| c.id != call) {
            return;
        }
        if let Life::Paused { until_us } = p.life {
            // The timer fires when the process runs again.
            self.schedule(
                until_us,
                Event::CallTimeout {
                    slot,
                    process,
                    call,
                },
            );
            return;
        }
        let kind = p.call.map(|c| c.kind);
        p.call = None;
        match (kind, p.life) {
            (Some(CallKind::Deregister), _) => self.deregister(slot, process),
            (_, Life::Stopping) => self.deregister(slot, process),
            _ => self.after_call(slot, process, CallOutcome::Failed),
        }
    }

    /// A graceful stop's deregister call (P3.7), retried until the grace ends.
    fn deregister(&mut self, slot: Slot, process: u64) {
        let call_id = self.next_call;
        let Some(now) = self.process_now(slot) else {
            return;
        };
        let Some(p) = self.process_mut(slot, process) else {
            return;
        };
        if p.life != Life::Stopping || p.call.is_some() {
            return;
        }
        let Some(executor_id) = p.core.executor_id().map(str::to_owned) else {
            // Never registered (or forgotten): nothing to deregister. A register whose reply was
            // lost is left to lapse; the production shell registers again to find it (P7.2).
            p.life = Life::Dead;
            return;
        };
        p.call = Some(Call {
            id: call_id,
            kind: CallKind::Deregister,
            sent_at: now,
        });
        self.next_call += 1;
        self.send_to_managers(
            slot,
            process,
            Request::Deregister {
                call: call_id,
                executor_id,
            },
        );
        self.schedule(
            self.now_us + CALL_PATIENCE_US,
            Event::CallTimeout {
                slot,
                process,
                call: call_id,
            },
        );
    }

    // ---- faults ----------------------------------------------------------------------------

    fn fault(&mut self, fault: Fault) {
        if !self.chaos {
            return;
        }
        self.note(|| format!("fault: {fault:?}"));
        match fault {
            Fault::Kill { slot } => {
                if let Some(p) = self.processes[slot].as_mut() {
                    p.life = Life::Dead;
                }
            }
            Fault::Restart { slot } => self.restart(slot),
            Fault::Pause { slot, for_ms } => self.pause(slot, for_ms),
            Fault::GracefulStop { slot } => self.stop_gracefully(slot),
            Fault::Partition {
                slot,
                to_managers,
                from_managers,
                for_ms,
            } => {
                if to_managers {
                    self.cut_to_managers[slot] += 1;
                }
                if from_managers {
                    self.cut_from_managers[slot] += 1;
                }
                self.schedule(
                    self.now_us + for_ms * 1_000,
                    Event::PartitionHealed {
                        slot,
                        to_managers,
                        from_managers,
                    },
                );
            }
            Fault::LeaderChange {
                keep_tail,
                deposed_pushes_ms,
                election_ms,
            } => self.change_leader(keep_tail, deposed_pushes_ms, election_ms, None),
            Fault::LeaderStall { for_ms } => self.stall_leader(for_ms),
            Fault::ManagerRestart => {
                let leader = self.leader.as_ref().map(|l| l.manager);
                let Some(manager) = (0..MANAGERS).find(|m| Some(*m) != leader) else {
                    return;
                };
                self.restart_from_snapshot(manager);
            }
            Fault::SetLease { lease_ms } => self.set_lease(lease_ms),
            Fault::Drain { slot, draining } => self.set_draining(slot, draining),
            Fault::Lie { slot, lie } => self.load.start_lying(slot, lie),
            Fault::RestartWithCapacity { slot, capacity } => {
                self.coverage.capacity_restarts += 1;
                self.load.set_capacity(slot, capacity);
                self.restart(slot);
            }
        }
    }

    /// A replica restarts from its snapshot: the state goes through the real codec and must
    /// come back equal, then the replica catches up from the log.
    fn restart_from_snapshot(&mut self, manager: usize) {
        self.coverage.snapshot_restarts += 1;
        let state = &self.replicas[manager];
        let restored = state
            .encode_state()
            .and_then(|(schema, payload)| LeaseState::decode_state(schema, &payload));
        match restored {
            Ok(restored) if restored == *state => self.replicas[manager] = restored,
            Ok(_) => self
                .checker
                .fail("a snapshot round trip changed the state".to_owned()),
            Err(error) => self
                .checker
                .fail(format!("snapshot round trip failed: {error}")),
        }
    }

    fn follower_apply(&mut self) {
        let leader = self.leader.as_ref().map(|l| l.manager);
        for manager in 0..MANAGERS {
            if Some(manager) == leader {
                continue;
            }
            self.catch_up(manager);
            if let Some(leader) = leader {
                if self.applied[manager] == self.applied[leader]
                    && self.replicas[manager] != self.replicas[leader]
                {
                    self.checker.fail(format!(
                        "replica {manager} differs from the leader's at log index {} (P2.2)",
                        self.applied[manager]
                    ));
                }
            }
        }
        self.schedule_timer(self.now_us + FOLLOWER_APPLY_US, Event::FollowerApply);
    }

    /// The instant a stalled leader of `term` runs again, if it is stalled: its timers and its
    /// commits wait until then.
    fn stalled_term_until(&self, term: u64) -> Option<u64> {
        self.leader
            .as_ref()
            .filter(|l| l.term == term)
            .and_then(|l| l.stalled_until_us)
    }

    fn handle(&mut self, event: Event) {
        if let Event::Commit { term }
        | Event::LeaderStep { term }
        | Event::DeliveryRound { term }
        | Event::DeliveryTimeout { term, .. } = &event
        {
            if let Some(until) = self.stalled_term_until(*term) {
                self.schedule(until, event);
                return;
            }
        }
        match event {
            Event::Call { slot, process } => self.call(slot, process),
            Event::CallTimeout {
                slot,
                process,
                call,
            } => self.call_timeout(slot, process, call),
            Event::ToManagers {
                slot,
                process,
                request,
            } => self.manager_receives(slot, process, request),
            Event::ToExecutor { slot, message } => self.executor_receives(slot, message),
            Event::Commit { term } => self.commit(term),
            Event::LeaderStep { term } => self.leader_step(term),
            Event::DeliveryRound { term } => self.delivery_round(term),
            Event::DeliveryTimeout { term, delivery } => self.delivered(term, delivery, None, None),
            Event::DeposedRound { term } => self.deposed_round(term),
            Event::FollowerApply => self.follower_apply(),
            Event::Elected { manager, offset_ms } => {
                if self.leader.is_none() {
                    let offset = offset_ms.unwrap_or_else(|| {
                        self.manager_offset_ms[manager]
                            + self
                                .rng
                                .random_range(-MAX_CLOCK_OFFSET_MS..=MAX_CLOCK_OFFSET_MS)
                    });
                    self.take_office(manager, offset);
                }
            }
            Event::StallOver { term } => {
                if let Some(leader) = self.leader.as_mut().filter(|l| l.term == term) {
                    leader.stalled_until_us = None;
                    let pending = !leader.tail.is_empty() && !leader.commit_scheduled;
                    if pending {
                        leader.commit_scheduled = true;
                    }
                    let at = self.now_us + self.scenario.commit_latency_us;
                    if pending {
                        self.schedule(at, Event::Commit { term });
                    }
                    // The loop's timers fire late, all at once, as after a real stall.
                    self.schedule(self.now_us, Event::LeaderStep { term });
                    self.schedule(self.now_us, Event::DeliveryRound { term });
                }
            }
            Event::Resume { slot, process } => {
                if let Some(p) = self.process_mut(slot, process) {
                    if matches!(p.life, Life::Paused { .. }) {
                        p.life = Life::Running;
                        self.note(|| format!("slot {slot}: resumes"));
                    }
                }
            }
            Event::StopDeadline { slot, process } => {
                if let Some(p) = self.process_mut(slot, process) {
                    if p.life == Life::Stopping {
                        if p.call.is_none() {
                            self.deregister(slot, process);
                        }
                        // The grace is over either way: the process exits.
                        if let Some(p) = self.process_mut(slot, process) {
                            p.life = Life::Dead;
                        }
                    }
                }
            }
            Event::PartitionHealed {
                slot,
                to_managers,
                from_managers,
            } => {
                if to_managers {
                    self.cut_to_managers[slot] = self.cut_to_managers[slot].saturating_sub(1);
                }
                if from_managers {
                    self.cut_from_managers[slot] = self.cut_from_managers[slot].saturating_sub(1);
                }
            }
            Event::HotSetShift => {
                if self.chaos {
                    self.coverage.hot_set_shifts += 1;
                    self.load.shift();
                    self.note(|| "the hot set shifts".to_owned());
                }
            }
            Event::Fault(fault) => self.fault(fault),
            Event::EndChaos => self.end_chaos(),
        }
    }

    /// The network heals, every slot gets a running process, and a leader is in office.
    fn end_chaos(&mut self) {
        self.chaos = false;
        self.note(|| "chaos ends: the network heals".to_owned());
        self.cut_to_managers.iter_mut().for_each(|c| *c = 0);
        self.cut_from_managers.iter_mut().for_each(|c| *c = 0);
        for slot in 0..self.scenario.slots {
            let alive = self.processes[slot]
                .as_ref()
                .is_some_and(|p| p.life != Life::Dead && p.life != Life::Stopping);
            if !alive {
                self.start_process(slot);
            }
        }
        if self.leader.is_none()
            && !self
                .queue
                .iter()
                .any(|s| matches!(s.0.event, Event::Elected { .. }))
        {
            self.take_office(0, 0);
        }
        self.undrain_all();
    }

    /// The operator undoes every drain (after the chaos, so the end state is comparable);
    /// repeated until it sticks, as an operator would.
    pub fn undrain_all(&mut self) {
        let Some(now_ms) = self.leader_now_ms() else {
            return;
        };
        let drained: Vec<String> = self.leader_state().map_or_else(Vec::new, |s| {
            s.executors()
                .filter(|e| e.draining)
                .map(|e| e.id.clone())
                .collect()
        });
        for executor_id in drained {
            self.propose(
                Command::SetDraining {
                    now_ms,
                    executor_id,
                    draining: false,
                },
                ReplyTo::Nobody,
            );
        }
    }

    pub fn leader_state(&self) -> Option<&LeaseState> {
        self.leader.as_ref().map(|l| &self.replicas[l.manager])
    }

    /// The term of the leader in office.
    pub fn leader_term(&self) -> Option<u64> {
        self.leader.as_ref().map(|l| l.term)
    }

    /// What the leader would place by if it stepped now (its term's loads, budget and cooling).
    pub fn leader_inputs(&self) -> Option<PlacementInputs> {
        let leader = self.leader.as_ref()?;
        let now_ms = self.leader_now_ms()?;
        Some(
            leader
                .placement
                .inputs(&self.replicas[leader.manager], now_ms),
        )
    }

    /// The whole plan the leader would make if it stepped now, uncapped, if anything is to move.
    pub fn leader_plan(&self) -> Option<Plan> {
        let inputs = self.leader_inputs()?;
        let now_ms = self.leader_now_ms()?;
        plan_placement(self.leader_state()?, now_ms, &inputs, usize::MAX)
    }

    /// The liar's slot and the executor its process registered as, once the lie started.
    pub fn liar(&self) -> Option<(Slot, String, Lie)> {
        let (slot, lie) = self.load.liar()?;
        Some((slot, self.executor_id_of(slot)?, lie))
    }

    /// Executors stop reporting loads, so the leader places by count (P15.2): the probes that
    /// count moves against P5.4 run so. With `off` false, they report again.
    pub fn turn_loads_off(&mut self, off: bool) {
        self.note(|| format!("loads {}", if off { "off" } else { "on again" }));
        self.load.set_off(off);
    }

    /// The current leader's clock offset (P2.3), if a leader is in office.
    pub fn leader_offset_ms(&self) -> Option<i64> {
        self.leader.as_ref().map(|l| l.offset_ms)
    }

    /// Whether the leader has proposals not yet committed or a step under way.
    pub fn leader_is_busy(&self) -> bool {
        self.leader
            .as_ref()
            .is_some_and(|l| !l.tail.is_empty() || l.writes.is_some())
    }

    pub fn leader_is_stalled(&self) -> bool {
        self.leader
            .as_ref()
            .is_some_and(|l| l.stalled_until_us.is_some())
    }

    fn check_after_event(&mut self) -> Result<(), Violation> {
        let views = process_views(&self.processes, self.base, self.now_us);
        self.checker.after_event(&views, self.now_us)
    }

    // ---- what a script drives ----------------------------------------------------------------

    /// Checks the invariants now, as after every event.
    pub fn check(&mut self) -> Result<(), Violation> {
        self.check_after_event()
    }

    /// When the next queued event is due, if any is.
    pub fn next_event_at(&self) -> Option<u64> {
        self.queue.peek().map(|next| next.0.at_us)
    }

    /// The messages a script's network holds, oldest first (none under a seed).
    pub fn letters(&self) -> &[Letter] {
        match &self.driver {
            Driver::Script { mailbox, .. } => mailbox,
            Driver::Seed => &[],
        }
    }

    /// Takes a held message out of the network: to deliver it, or to lose it.
    fn take_letter(&mut self, id: u64) -> Option<Letter> {
        let Driver::Script { mailbox, .. } = &mut self.driver else {
            return None;
        };
        let position = mailbox.iter().position(|letter| letter.id == id)?;
        Some(mailbox.remove(position))
    }

    /// The held message arrives now (handled by the next [`World::run_until`]).
    pub fn deliver_letter(&mut self, id: u64) {
        if let Some(letter) = self.take_letter(id) {
            self.note(|| format!("{letter} arrives"));
            self.schedule(self.now_us, letter.arrival);
        }
    }

    /// The held message is lost; its sender finds out by its own timeout.
    pub fn drop_letter(&mut self, id: u64) {
        if let Some(letter) = self.take_letter(id) {
            self.note(|| format!("{letter} is lost"));
        }
    }

    /// Whether a script holds the leader's proposals uncommitted.
    pub fn commits_held(&self) -> bool {
        matches!(
            self.driver,
            Driver::Script {
                commits_held: true,
                ..
            }
        )
    }

    /// Holds the leader's proposals uncommitted in its tail (Raft replication stalls; reads
    /// still see the applied state), or commits the tail now and every proposal at once again.
    pub fn hold_commits(&mut self, held: bool) {
        if let Driver::Script { commits_held, .. } = &mut self.driver {
            *commits_held = held;
        }
        if held {
            return;
        }
        let now_us = self.now_us;
        if let Some(leader) = self
            .leader
            .as_mut()
            .filter(|l| !l.tail.is_empty() && !l.commit_scheduled)
        {
            leader.commit_scheduled = true;
            let term = leader.term;
            self.schedule(now_us, Event::Commit { term });
        }
    }

    /// Fires one of the loops' timers now.
    pub fn fire(&mut self, timer: Timer) {
        match timer {
            Timer::LeaderStep => {
                if let Some(term) = self.leader.as_ref().map(|l| l.term) {
                    self.schedule(self.now_us, Event::LeaderStep { term });
                }
            }
            Timer::ExecutorCall(slot) => {
                if let Some(process) = self.processes[slot].as_ref().map(|p| p.id) {
                    self.schedule(self.now_us, Event::Call { slot, process });
                }
            }
        }
    }

    /// The script is over and the seed's rules take over: the network delivers what it held,
    /// every loop runs on its own timers again, and nothing is lost or delayed past the typical
    /// transit (no chaos).
    pub fn go_live(&mut self) {
        let Driver::Script { mailbox, .. } = std::mem::replace(&mut self.driver, Driver::Seed)
        else {
            return;
        };
        self.note(|| format!("the script ends: {} held messages arrive", mailbox.len()));
        for letter in mailbox {
            self.schedule(self.now_us, letter.arrival);
        }
        self.schedule(self.now_us, Event::FollowerApply);
        self.hold_commits(false);
        if let Some(term) = self.leader.as_ref().map(|l| l.term) {
            self.schedule(self.now_us, Event::LeaderStep { term });
            self.schedule(self.now_us, Event::DeliveryRound { term });
        }
        for slot in 0..self.processes.len() {
            if let Some(process) = self.processes[slot].as_ref().filter(|p| p.admits()) {
                let process = process.id;
                self.schedule(self.now_us, Event::Call { slot, process });
            }
        }
    }

    /// SIGSTOP for `for_ms`, then it carries on; only a running process pauses.
    pub fn pause(&mut self, slot: Slot, for_ms: u64) {
        let until_us = self.now_us + for_ms * 1_000;
        if let Some(p) = self.processes[slot]
            .as_mut()
            .filter(|p| p.life == Life::Running)
        {
            p.life = Life::Paused { until_us };
            let process = p.id;
            self.note(|| format!("slot {slot}: paused for {for_ms} ms"));
            self.schedule(until_us, Event::Resume { slot, process });
        }
    }

    /// SIGTERM: stop admitting, deregister within the grace, exit (P3.7).
    pub fn stop_gracefully(&mut self, slot: Slot) {
        let Some(now) = self.process_now(slot) else {
            return;
        };
        if let Some(p) = self.processes[slot]
            .as_mut()
            .filter(|p| p.life == Life::Running)
        {
            p.core.stop_admission(now);
            p.life = Life::Stopping;
            let process = p.id;
            let in_call = p.call.is_some();
            self.schedule(
                self.now_us + STOP_GRACE_US,
                Event::StopDeadline { slot, process },
            );
            if !in_call {
                self.deregister(slot, process);
            }
        }
    }

    /// The leader loses office and another replica takes it after `election_ms`, its wall clock
    /// `offset_ms` from the true one (its own offset and a step when `None`).
    pub fn change_leader(
        &mut self,
        keep_tail: bool,
        deposed_pushes_ms: u64,
        election_ms: u64,
        offset_ms: Option<i64>,
    ) {
        let Some(old) = self.leader.as_ref().map(|l| l.manager) else {
            return;
        };
        self.lose_office(keep_tail, deposed_pushes_ms);
        let next = (old + 1 + self.rng.random_range(0..MANAGERS - 1)) % MANAGERS;
        self.schedule(
            self.now_us + election_ms * 1_000,
            Event::Elected {
                manager: next,
                offset_ms,
            },
        );
    }

    /// An operator sets the lease duration (P3.4).
    pub fn set_lease(&mut self, lease_ms: u64) {
        if let Some(now_ms) = self.leader_now_ms() {
            self.propose(
                Command::SetLeaseDuration {
                    now_ms,
                    lease_duration_ms: lease_ms,
                },
                ReplyTo::Nobody,
            );
        }
    }

    /// An operator drains (or undrains) the executor in `slot`.
    pub fn set_draining(&mut self, slot: Slot, draining: bool) {
        let executor_id = self.executor_id_of(slot);
        if let (Some(now_ms), Some(executor_id)) = (self.leader_now_ms(), executor_id) {
            self.propose(
                Command::SetDraining {
                    now_ms,
                    executor_id,
                    draining,
                },
                ReplyTo::Nobody,
            );
        }
    }

    pub fn executor_id_of(&self, slot: Slot) -> Option<String> {
        self.processes[slot]
            .as_ref()
            .and_then(|p| p.core.executor_id().map(str::to_owned))
    }

    /// A new process with a new incarnation at the slot's address; the old one is killed.
    pub fn restart(&mut self, slot: Slot) {
        if let Some(p) = self.processes[slot].as_mut() {
            p.life = Life::Dead;
        }
        self.start_process(slot);
    }

    /// The leader process stalls for `for_ms` while the followers still hear from it: nothing
    /// it would do happens until then (P6.3).
    pub fn stall_leader(&mut self, for_ms: u64) {
        let until = self.now_us + for_ms * 1_000;
        if let Some(leader) = self
            .leader
            .as_mut()
            .filter(|l| l.stalled_until_us.is_none())
        {
            leader.stalled_until_us = Some(until);
            let term = leader.term;
            self.note(|| format!("term {term}: the leader stalls for {for_ms} ms"));
            self.schedule(until, Event::StallOver { term });
        }
    }

    /// Kills the process in `slot` at once (the I4 probe).
    pub fn kill(&mut self, slot: Slot) {
        self.note(|| format!("probe: kill slot {slot}"));
        if let Some(p) = self.processes[slot].as_mut() {
            p.life = Life::Dead;
        }
    }

    /// Adds a slot with a fresh process: a new executor joins (the join probes, a script's spawn).
    pub fn add_slot(&mut self) -> Slot {
        let slot = self.processes.len();
        self.processes.push(None);
        self.cut_to_managers.push(0);
        self.cut_from_managers.push(0);
        self.scenario.executor_rate_ppm.push(0);
        self.load.add_slot();
        self.start_process(slot);
        slot
    }

    pub fn dump(&self) -> String {
        let mut out = String::new();
        if let Some(state) = self.leader_state() {
            for e in state.executors() {
                let _ = writeln!(
                    out,
                    "  {} {} expiry {} owns {:?}{}",
                    e.id,
                    e.incarnation,
                    e.lease_expiry_ms,
                    e.owned_shards,
                    if e.draining { " draining" } else { "" }
                );
            }
            for s in state.shards() {
                if s.handoff.is_some() || s.owner.is_none() {
                    let _ = writeln!(
                        out,
                        "  shard {} owner {:?} epoch {} handoff {:?}",
                        s.id, s.owner, s.epoch, s.handoff
                    );
                }
            }
        }
        for (slot, p) in self.processes.iter().enumerate() {
            if let Some(p) = p {
                let now = self.local_instant(p.rate_ppm);
                let _ = writeln!(
                    out,
                    "  slot {slot}: process {} {:?} {:?} held {:?}",
                    p.id,
                    p.life,
                    p.core.executor_id(),
                    p.core
                        .view(now)
                        .shards
                        .iter()
                        .map(|s| s.shard)
                        .collect::<Vec<_>>()
                );
            }
        }
        out
    }
}

/// What a process whose clock runs at `rate_ppm` reads at true instant `now_us`.
fn instant_at(base: Instant, now_us: u64, rate_ppm: i64) -> Instant {
    base + Duration::from_micros(scaled(now_us, rate_ppm))
}

/// The checks' view of every slot: the live processes' admission cores, each at its own clock.
fn process_views(
    processes: &[Option<Process>],
    base: Instant,
    now_us: u64,
) -> Vec<Option<ProcessView<'_>>> {
    processes
        .iter()
        .map(|process| {
            let process = process.as_ref().filter(|p| p.admits())?;
            Some(ProcessView {
                core: &process.core,
                now: instant_at(base, now_us, process.rate_ppm),
            })
        })
        .collect()
}

/// The leader of `term` if it is still in office and running.
fn active(leader: &mut Option<Leader>, term: u64) -> Option<&mut Leader> {
    leader
        .as_mut()
        .filter(|l| l.term == term && l.stalled_until_us.is_none())
}

/// A leader clock's reading at true instant `now_us`: its offset plus true time at its rate.
fn clock_ms(now_us: u64, offset_ms: i64, rate_ppm: i64) -> u64 {
    let local_ms = (scaled(now_us, rate_ppm) / 1_000) as i64;
    (LEADER_CLOCK_START_MS + local_ms + offset_ms).max(0) as u64
}

/// `us` on a clock whose rate is off by `rate_ppm`.
fn scaled(us: u64, rate_ppm: i64) -> u64 {
    let us = us as i128;
    (us + us * rate_ppm as i128 / 1_000_000).max(0) as u64
}

fn request_call(request: &Request) -> Option<u64> {
    match request {
        Request::Register { call, .. }
        | Request::Renew { call, .. }
        | Request::Deregister { call, .. } => Some(*call),
        Request::PushReply { .. } | Request::RevokeReply { .. } => None,
    }
}

fn describe_command(command: &Command) -> String {
    match command {
        Command::Renew { now_ms, renewals } => format!(
            "Renew@{now_ms} {:?}",
            renewals
                .iter()
                .map(|r| (&r.executor_id, r.revision, r.claims.len()))
                .collect::<Vec<_>>()
        ),
        Command::Rebalance {
            now_ms,
            planned_at,
            moves,
        } => format!(
            "Rebalance@{now_ms} planned_at {planned_at} {:?}",
            moves.iter().map(|m| (m.shard, &m.to)).collect::<Vec<_>>()
        ),
        other => format!("{other:?}"),
    }
}

fn describe_outcome(outcome: &Outcome) -> String {
    let text = format!("{outcome:?}");
    if text.len() > 240 {
        format!(
            "{}…",
            &text[..text.char_indices().nth(240).map_or(text.len(), |(i, _)| i)]
        )
    } else {
        text
    }
}
