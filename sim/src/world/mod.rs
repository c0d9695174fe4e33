//! The simulated cluster: one event queue on one simulated clock, managers with a Raft log each
//! (a shared committed prefix, the leader's uncommitted tail, snapshots as a round trip of the
//! real codec), the leader's loop and delivery shell, and executor processes, all driving the
//! real cores:
//!
//! - the state machine, [`LeaseState::apply`], on every replica;
//! - the leader's term ([`TermSteps`]: the time rules, the order of a step's writes, what each
//!   write's fate does, when the next step is due);
//! - the delivery rounds ([`DeliveryPlanner`], [`DeliveryRound`]: what a round sends, how many at
//!   once, what each answer does) and what a commit asks of the leader ([`CommitSignal`]);
//! - per executor the admission core ([`AdmissionCore`]: lease anchoring, the delivery order,
//!   the stale-grant rule) and the lease loop's calls with their schedule ([`LeaseCalls`]);
//! - the leader's placement soft state per term (held by [`TermSteps`]: the load tracker its
//!   renewals feed, the budget and cooldown ledger its committed plans charge) and the planner
//!   it plans with.
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
    check_shard_loads, AssignmentPush, Grant, Labels, RegisterRequest, RenewRequest, RevokePush,
    RevokeReply, ShardLoad, DEFAULT_CAPACITY, ZONE_LABEL,
};
use leasehold_executor::admission::{AdmissionCore, AppliedMark, ForeignGrant, GrantApplied};
use leasehold_executor::assignment::RevokeOutcome;
use leasehold_executor::lease::{CallOutcome, LeaseClock, NextCall};
use leasehold_executor::lease_calls::{
    CallKind as LeaseCallKind, LeaseCall, LeaseCalls, LeaseHolder,
};
use leasehold_manager::handles::signals::CommitSignal;
use leasehold_manager::leader::core::delivery_plan::{
    Delivery, DeliveryPlanner, PushRecord, ROUND_INTERVAL_MS,
};
use leasehold_manager::leader::core::delivery_round::{AfterDelivery, Delivered, DeliveryRound};
use leasehold_manager::leader::core::placement::PlacementSettings;
use leasehold_manager::leader::core::term::{
    owed_pushes, take_office, NextStep, TermSteps, Written,
};
use leasehold_manager::leader::core::{Deferral, StepWrite};
use leasehold_manager::lease::load_summary::LoadSummary;
use leasehold_manager::lease::schema::{LEASE_RESERVATION_SCHEMA, NEWEST_SCHEMA};
use leasehold_manager::lease::{
    plan_placement, Command, LeaseState, Loads, Move, MoveReason, Outcome, PlacementInputs, Plan,
    RefusalReason, RegisterResult, Registration, RenewResult, Renewal, ShardId,
};
use leasehold_manager::renewals::core::confirmation::{LeadershipConfirmation, Round};
use leasehold_manager::renewals::core::memory::MemoryLeases;
use leasehold_manager::renewals::from_memory::MAX_RESERVATIONS_PER_ENTRY;
use leasehold_raft_store::StateMachine;
use rand::{Rng, SeedableRng};
use rand_chacha::ChaCha8Rng;
use tokio::time::Instant;

use self::letters::*;
use self::processes::*;
use crate::checks::{Checker, ProcessView, Violation};
use crate::loads::{LoadModel, Report};
use crate::scenario::{
    Fault, Lie, Scenario, MANAGERS, MAX_CLOCK_OFFSET_MS, MAX_RATE_ERROR_PPM, MAX_SHARD_LOAD,
    MAX_WALL_CLOCK_OFFSET_MS, MIN_TRANSIT_US,
};

mod control;
mod coverage;
mod delivery;
mod executor;
mod faults;
mod handlers;
mod leader;
mod letters;
mod network;
mod processes;
mod raft;

pub use coverage::Coverage;
pub use letters::{Letter, LetterKind, Timer};
pub use processes::{Life, Process};

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
/// openraft's leader lease with the shipped Raft timing (`election_timeout_max`, 1 s): a leader
/// no quorum acknowledged for this long leads nothing and fails what it holds (P8.4).
const RAFT_LEASE_US: u64 = 1_000_000;

pub type Slot = usize;

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
    /// Per manager, the log index and the leader its replica was last found equal to the
    /// leader's at ([`World::follower_apply`]): both apply the same log, so at the same index
    /// against the same leader the comparison would say the same again.
    compared: Vec<Option<(usize, usize)>>,
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
    /// The namespace of the shard (P18.1).
    pub namespace: String,
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
        let (manager_rate_ppm, manager_offset_ms) = match driver {
            Driver::Seed => managers_clocks(&mut rng, scenario.seed),
            // A script times its steps to the millisecond on the leaders' clocks.
            Driver::Script { .. } => (vec![0; MANAGERS], vec![0; MANAGERS]),
        };
        let chaos = matches!(driver, Driver::Seed);
        let slots = scenario.slots;
        let load = LoadModel::new(&scenario);
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
            compared: vec![None; MANAGERS],
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
        world.set_up_cluster();
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

    /// The cluster as an operator leaves it before any executor starts: initialised (as
    /// `leaseholdctl init` does), at this build's cluster version when the run needs it, and
    /// with its namespaces created, all committed.
    fn set_up_cluster(&mut self) {
        self.take_office(0, self.manager_offset_ms[0]);
        let init = Command::Init {
            now_ms: self.leader_now_ms().unwrap_or(0),
            shard_count: self.scenario.shards,
            lease_duration_ms: self.scenario.lease_ms,
        };
        self.propose(init, ReplyTo::Nobody);
        if self.chaos || !self.scenario.namespaces.is_empty() {
            // Every manager runs this build, so the leader raised the cluster version to its
            // schema (P14.3) before any executor registered: registrations may state a capacity
            // (P15.1) and a namespace (P18.1). A script's cluster keeps the version `Init`
            // leaves, as they were written, unless it has namespaces.
            let raise = Command::SetClusterVersion {
                now_ms: self.leader_now_ms().unwrap_or(0),
                cluster_version: NEWEST_SCHEMA,
            };
            self.propose(raise, ReplyTo::Nobody);
        }
        // An operator creates the namespaces beside `default` (P18.1) before their executors
        // start, as `leaseholdctl namespace create` does.
        for namespace in self.scenario.namespaces.clone() {
            self.create_namespace(
                &namespace.name,
                namespace.shards,
                namespace.lease_ms,
                namespace.replicas,
            );
        }
        self.coverage.namespace_runs = u64::from(self.has_namespaces());
        self.coverage.replicated_runs = u64::from(
            self.scenario
                .namespaces
                .iter()
                .any(|namespace| namespace.replicas > 1),
        );
        // Committed before any fault can touch it: the operator's `init` succeeded.
        self.commit(1);
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
            let executor_side = next.event.may_change_admission();
            self.handle(next.event);
            if executor_side {
                self.check_after_event()?;
            } else {
                self.checker.pending_violation(self.now_us)?;
            }
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

    fn handle(&mut self, event: Event) {
        if let Event::Commit { term }
        | Event::LeaderStep { term }
        | Event::LeaderTick { term, .. }
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
            Event::LeaderTick { term, tick } => self.leader_tick(term, tick),
            Event::ConfirmationAck {
                term,
                follower,
                round,
            } => self.confirmation_acknowledged(term, follower, round),
            Event::ToDeposed {
                term,
                slot,
                request,
            } => self.deposed_receives(term, slot, request),
            Event::DeliveryRound { term } => self.delivery_round(term),
            Event::DeliveryTimeout { term, delivery } => self.delivered(term, delivery, None, None),
            Event::DeposedRound { term } => self.deposed_round(term),
            Event::FollowerApply => self.follower_apply(),
            Event::Elected { manager, offset_ms } => self.elected(manager, offset_ms),
            Event::StallOver { term } => self.stall_over(term),
            Event::Resume { slot, process } => self.resume(slot, process),
            Event::StopDeadline { slot, process } => self.stop_deadline(slot, process),
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
            Event::HotSetShift => self.hot_set_shift(),
            Event::Fault(fault) => self.fault(fault),
            Event::EndChaos => self.end_chaos(),
        }
    }

    /// The leader's tick `tick` of `term`: a step, unless a newer tick or term replaced it.
    fn leader_tick(&mut self, term: u64, tick: u64) {
        if self
            .leader
            .as_ref()
            .is_some_and(|l| l.term == term && l.tick == tick)
        {
            self.leader_step(term);
        }
    }

    /// `manager` won an election: it takes office unless a leader already holds it, its clock
    /// `offset_ms` off or, unless the fault named one, its own offset and a random drift.
    fn elected(&mut self, manager: usize, offset_ms: Option<i64>) {
        if self.leader.is_some() {
            return;
        }
        let offset = offset_ms.unwrap_or_else(|| {
            self.manager_offset_ms[manager]
                + self
                    .rng
                    .random_range(-MAX_CLOCK_OFFSET_MS..=MAX_CLOCK_OFFSET_MS)
        });
        self.take_office(manager, offset);
    }

    /// The stall of `term`'s leader ends: its pending writes commit, and the loop's timers fire
    /// late, all at once, as after a real stall.
    fn stall_over(&mut self, term: u64) {
        let Some(leader) = self.leader.as_mut().filter(|l| l.term == term) else {
            return;
        };
        leader.stalled_until_us = None;
        let pending = !leader.tail.is_empty() && !leader.commit_scheduled;
        if pending {
            leader.commit_scheduled = true;
        }
        let at = self.now_us + self.scenario.commit_latency_us;
        if pending {
            self.schedule(at, Event::Commit { term });
        }
        self.schedule(self.now_us, Event::LeaderStep { term });
        self.schedule(self.now_us, Event::DeliveryRound { term });
    }

    /// A paused process runs again.
    fn resume(&mut self, slot: Slot, process: u64) {
        if let Some(p) = self.process_mut(slot, process) {
            if matches!(p.life, Life::Paused { .. }) {
                p.life = Life::Running;
                self.note(|| format!("slot {slot}: resumes"));
            }
        }
    }

    /// A stopping process's grace is over: it deregisters unless a call is on the way, and
    /// exits either way.
    fn stop_deadline(&mut self, slot: Slot, process: u64) {
        if let Some(p) = self.process_mut(slot, process) {
            if p.life == Life::Stopping {
                if p.call.is_none() {
                    self.deregister(slot, process);
                }
                if let Some(p) = self.process_mut(slot, process) {
                    p.life = Life::Dead;
                }
            }
        }
    }

    /// The hot set of shards moves, while the chaos lasts.
    fn hot_set_shift(&mut self) {
        if self.chaos {
            self.coverage.hot_set_shifts += 1;
            self.load.shift();
            self.note(|| "the hot set shifts".to_owned());
        }
    }

    fn check_after_event(&mut self) -> Result<(), Violation> {
        let views = process_views(&self.processes, self.base, self.now_us);
        self.checker.after_event(&views, self.now_us)
    }

    /// Whether the run has namespaces beside `default` (P18.1).
    pub fn has_namespaces(&self) -> bool {
        !self.scenario.namespaces.is_empty()
    }

    // ---- what a script drives ----------------------------------------------------------------

    /// Checks the invariants now, as after every event.
    pub fn check(&mut self) -> Result<(), Violation> {
        self.check_after_event()
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
                namespace: &process.namespace,
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

/// The renewal a simulated executor's request makes, as the renewal handler reads its claims;
/// what the simulated executors claim always passes the wire's checks.
fn renewal_of(executor_id: String, request: &RenewRequest, shards: u32) -> Renewal {
    match request.checked_claims(shards) {
        Ok(claims) => Renewal::from_claims(executor_id, &claims, request.revision),
        Err(error) => panic!("a simulated executor claimed shards the wire refuses: {error}"),
    }
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
            namespace,
            moves,
        } => format!(
            "Rebalance@{now_ms} {namespace} planned_at {planned_at} {:?}",
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

/// A seeded run's managers' clock rates (from the world's stream) and wall-clock offsets (from
/// a stream of their own, so the rest of a seed's draws are as they were).
fn managers_clocks(rng: &mut ChaCha8Rng, seed: u64) -> (Vec<i64>, Vec<i64>) {
    let rates = (0..MANAGERS)
        .map(|_| rng.random_range(-MAX_RATE_ERROR_PPM..=MAX_RATE_ERROR_PPM))
        .collect();
    let mut clocks = ChaCha8Rng::seed_from_u64(seed);
    clocks.set_stream(2);
    let offsets = (0..MANAGERS)
        .map(|_| {
            if clocks.random_bool(0.5) {
                0
            } else {
                clocks.random_range(-MAX_WALL_CLOCK_OFFSET_MS..=MAX_WALL_CLOCK_OFFSET_MS)
            }
        })
        .collect();
    (rates, offsets)
}
