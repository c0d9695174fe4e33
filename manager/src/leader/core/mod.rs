//! The leader's decisions about time, as a pure core: which overdue executors to reap now, whether
//! expiry-based handoffs may complete, and the mass-expiry guard. No clock is read here: the shell
//! passes the leader clock's `now_ms` (P2.3) into every step, so the rules are table-tested with
//! explicit times.
//!
//! - P3.8: the shell steps at least every tick (a third of the lease); a lapsed lease is reaped at
//!   the first step after its expiry.
//! - P6.1: a new leader reaps nothing, and completes no handoff on expiry, until one full lease
//!   (the longest lease any executor may hold) has passed on its own clock since it took office:
//!   the expiries it reads were stamped by an earlier leader's clock.
//! - P6.4: a new leader's clock takes office no lower than [`office_floor_ms`], so no expiry or
//!   handoff bound an earlier leader stored (on a clock that may have run ahead) reaches past
//!   `took_office + longest lease` on the new one: a dead executor's shards move within the
//!   grace plus a lease and a tick, whatever the offsets between the managers' wall clocks.
//! - P6.3: reaping is deferred while the leader cannot rule out that the silence is its own stall:
//!   a step that came late by more than a tick, or no renewal applied from any executor in the
//!   window where live executors must have renewed, while it tracks two or more executors. An
//!   episode lasts until no executor is overdue, or renewals have been applied again for two
//!   ticks (the silence of those still overdue is then theirs, not this leader's), or the grace
//!   runs out; in the last two cases the overdue are reaped. One executor dying while others
//!   renew is reaped after one lease, not the grace.
//! - P6.7: a lease is judged by the later of the expiry the log recorded and the copies this term
//!   told from memory ([`judged_lapsed`]); a reservation (P6.6) does not hold it. When a
//!   reservation still would, the reap is a `ReapLapsed` carrying the judged expiries.

pub mod config;
pub mod delivery_plan;
pub mod delivery_round;
pub mod placement;
pub mod prepare;
pub mod term;

use std::collections::{BTreeMap, BTreeSet, VecDeque};

pub use crate::lease::ToldFromMemory;
use crate::lease::{
    lapsed, plan_placement_and_warm_ups, plan_secondaries_warming, Command, ExecutorId,
    LapsedLease, LeaseState, Loads, Move, PlacementInputs, Plan, Space, MAX_MOVES_PER_PLAN,
};

/// The executors whose lease this leader judges lapsed at `now_ms` (P6.7), ascending, with their
/// judged expiries: the later of the expiry the log recorded and the copies this term told from
/// memory. A reservation (P6.6) does not hold an executor here: only copies told count, and a
/// leader judges only after its grace since taking office (P6.1), by when every copy an earlier
/// term told has ended. Without reservations (below cluster version 12) these are exactly the
/// executors `LeaseState::overdue_executors` lists.
pub fn judged_lapsed(
    state: &LeaseState,
    told_from_memory: &ToldFromMemory,
    now_ms: u64,
) -> Vec<LapsedLease> {
    state
        .executors()
        .filter_map(|executor| {
            let judged_expiry_ms =
                executor.judged_expiry_ms(told_from_memory.get(&executor.id).copied());
            lapsed(judged_expiry_ms, now_ms).then(|| LapsedLease {
                executor_id: executor.id.clone(),
                judged_expiry_ms,
            })
        })
        .collect()
}

/// The mass-expiry guard's settings (`--mass-expiry-guard`, `--mass-expiry-grace`).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct GuardConfig {
    pub enabled: bool,
    pub grace_ms: u64,
}

impl Default for GuardConfig {
    fn default() -> Self {
        Self {
            enabled: true,
            grace_ms: 60_000,
        }
    }
}

/// Why reaping is held back this step.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Deferral {
    /// P6.1: this leader has not been in office for a full lease yet.
    NewLeader { remaining_ms: u64 },
    /// P6.3: an episode is running; `reason` says what started it.
    MassExpiryGuard {
        reason: GuardReason,
        episode_age_ms: u64,
    },
}

#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum GuardReason {
    /// This step came `late_by_ms` after the previous one plus a tick: the leader itself stalled.
    LateStep { late_by_ms: u64 },
    /// No renewal applied since `window_start_ms`, although live executors renew every tick.
    NoRenewals { window_start_ms: u64 },
}

/// Something worth logging or counting that happened in a step.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum GuardEvent {
    /// An episode began: warn (P6.3).
    EpisodeStarted { reason: GuardReason, overdue: usize },
    /// The grace ran out; the overdue are reaped now: error (P6.3).
    GraceExhausted { overdue: usize, grace_ms: u64 },
    /// Renewals have been applied again for two ticks since `renewing_since_ms` while these
    /// stayed overdue: their silence is their own, and they are reaped now (P6.3).
    RenewalsResumed {
        overdue: usize,
        renewing_since_ms: u64,
    },
    /// Every overdue executor renewed (or was removed): the episode is over.
    EpisodeEnded,
}

/// What the shell does in this step.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct StepDecision {
    /// Executors to reap, as its own write before anything else (P3.8).
    pub reap: Vec<ExecutorId>,
    /// The judged expiry of each executor in `reap` (P6.7).
    pub judged_expiry_ms: BTreeMap<ExecutorId, u64>,
    /// Whether handoffs whose old grant expired may be completed (not before P6.1's grace).
    pub complete_expired_handoffs: bool,
    pub deferral: Option<Deferral>,
    pub events: Vec<GuardEvent>,
}

#[derive(Debug, Clone, Copy, PartialEq, Eq)]
struct Episode {
    started_ms: u64,
    reason: GuardReason,
    /// The first renewal a step of the episode saw applied after it started.
    renewing_since_ms: Option<u64>,
}

/// The decisions of one leader for one term.
#[derive(Debug, Clone)]
pub struct LeaderCore {
    took_office_ms: u64,
    guard: GuardConfig,
    last_step_ms: Option<u64>,
    episode: Option<Episode>,
}

/// The leader tick: a third of the lease (P3.8, §11).
pub fn tick_ms(lease_duration_ms: u64) -> u64 {
    (lease_duration_ms / 3).max(1)
}

/// The longest lease any executor may still hold from an earlier leader: the configured
/// duration, or longer if any grant ever told more (a lease shortened since, P3.4; a grant
/// told by a leader whose clock was behind). The state keeps that figure never decreasing,
/// because this leader's own renewals overwrite each executor's "last told".
pub fn longest_lease_ms(state: &LeaseState) -> u64 {
    let configured = state.config().map_or(0, |c| c.lease_duration_ms);
    configured.max(state.longest_lease_told_ms())
}

/// P6.4: the lowest reading a new leader's clock may take office at, given `state` with every
/// entry of earlier terms applied. Every lease an earlier leader told was anchored by its
/// executor at a send instant before this leader took office and runs at most the longest lease
/// ([`longest_lease_ms`]), so it has ended by `took_office + longest` in real time. Each stored
/// expiry and handoff bound is `stamp + told` on the clock of the leader that stamped it; a
/// clock taking office at or above `latest deadline - longest` therefore sees every one of them
/// end within its P6.1 grace, even one stamped by a leader whose wall clock ran hours ahead.
/// Zero when nothing is stored.
pub fn office_floor_ms(state: &LeaseState) -> u64 {
    state
        .latest_deadline_ms()
        .map_or(0, |latest| latest.saturating_sub(longest_lease_ms(state)))
}

/// The reading a leader's clock takes office at (P2.3, P6.4): its wall clock, raised to
/// [`office_floor_ms`] when that is higher. Raising it only makes stored deadlines look sooner,
/// which P6.1's grace already allows for: it is a full lease of this leader's monotonic time.
pub fn took_office_ms(wall_ms: u64, state: &LeaseState) -> u64 {
    wall_ms.max(office_floor_ms(state))
}

impl LeaderCore {
    pub fn new(took_office_ms: u64, guard: GuardConfig) -> Self {
        Self {
            took_office_ms,
            guard,
            last_step_ms: None,
            episode: None,
        }
    }

    /// One step at `now_ms`, with nothing told from memory (see [`Self::step_judging`]).
    pub fn step(
        &mut self,
        now_ms: u64,
        state: &LeaseState,
        last_renewal_applied_ms: Option<u64>,
    ) -> StepDecision {
        self.step_judging(
            now_ms,
            state,
            last_renewal_applied_ms,
            &ToldFromMemory::new(),
        )
    }

    /// One step at `now_ms`. `last_renewal_applied_ms` is when this leader last applied or
    /// answered a renewal from any executor (None: none since it took office);
    /// `told_from_memory` what this term told from memory, read together with `now_ms` (P6.7).
    pub fn step_judging(
        &mut self,
        now_ms: u64,
        state: &LeaseState,
        last_renewal_applied_ms: Option<u64>,
        told_from_memory: &ToldFromMemory,
    ) -> StepDecision {
        let Some(lease_ms) = state.shortest_lease_duration_ms() else {
            self.last_step_ms = Some(now_ms);
            return StepDecision::default();
        };
        let tick = tick_ms(lease_ms);
        let late_by_ms = self
            .last_step_ms
            .map(|last| now_ms.saturating_sub(last).saturating_sub(tick))
            .filter(|late| *late > tick);
        self.last_step_ms = Some(now_ms);

        let mut decision = StepDecision::default();
        let office_grace_end = self.took_office_ms.saturating_add(longest_lease_ms(state));
        if now_ms < office_grace_end {
            decision.deferral = Some(Deferral::NewLeader {
                remaining_ms: office_grace_end - now_ms,
            });
            return decision;
        }
        decision.complete_expired_handoffs = true;
        self.judge_lapsed_leases(
            now_ms,
            state,
            late_by_ms,
            last_renewal_applied_ms,
            told_from_memory,
            &mut decision,
        );
        decision
    }

    /// Whose leases lapsed by the leader's judgment (P6.7), and whether they are reaped now or
    /// wait for the mass-expiry guard's episode to end (P6.3).
    fn judge_lapsed_leases(
        &mut self,
        now_ms: u64,
        state: &LeaseState,
        late_by_ms: Option<u64>,
        last_renewal_applied_ms: Option<u64>,
        told_from_memory: &ToldFromMemory,
        decision: &mut StepDecision,
    ) {
        let judged = judged_lapsed(state, told_from_memory, now_ms);
        let newest_overdue_ms = judged.iter().map(|lease| lease.judged_expiry_ms).max();
        let overdue: Vec<ExecutorId> = judged
            .iter()
            .map(|lease| lease.executor_id.clone())
            .collect();
        decision.judged_expiry_ms = judged
            .into_iter()
            .map(|lease| (lease.executor_id, lease.judged_expiry_ms))
            .collect();
        if overdue.is_empty() {
            if self.episode.take().is_some() {
                decision.events.push(GuardEvent::EpisodeEnded);
            }
            return;
        }
        if !self.guard.enabled {
            decision.reap = overdue;
            return;
        }
        if let Some(episode) = self.episode {
            self.go_on_with_episode(
                episode,
                now_ms,
                state,
                overdue,
                last_renewal_applied_ms,
                decision,
            );
            return;
        }

        let reason = match late_by_ms {
            Some(late_by_ms) => Some(GuardReason::LateStep { late_by_ms }),
            None => self.no_renewals(
                now_ms,
                state,
                &overdue,
                newest_overdue_ms,
                last_renewal_applied_ms,
            ),
        };
        match reason {
            Some(reason) => self.start_episode(reason, now_ms, overdue.len(), decision),
            None => decision.reap = overdue,
        }
    }

    /// The guard's trigger fired (P6.3): the reap waits, from this step, for the episode's end.
    fn start_episode(
        &mut self,
        reason: GuardReason,
        now_ms: u64,
        overdue: usize,
        decision: &mut StepDecision,
    ) {
        self.episode = Some(Episode {
            started_ms: now_ms,
            reason,
            renewing_since_ms: None,
        });
        decision
            .events
            .push(GuardEvent::EpisodeStarted { reason, overdue });
        decision.deferral = Some(Deferral::MassExpiryGuard {
            reason,
            episode_age_ms: 0,
        });
    }

    /// A step inside a guard episode (P6.3): the overdue are reaped once the episode has lasted
    /// its grace, or once renewals have come in again for two ticks; until then the reap waits.
    fn go_on_with_episode(
        &mut self,
        mut episode: Episode,
        now_ms: u64,
        state: &LeaseState,
        overdue: Vec<ExecutorId>,
        last_renewal_applied_ms: Option<u64>,
        decision: &mut StepDecision,
    ) {
        let age = now_ms.saturating_sub(episode.started_ms);
        let renewed_since_start =
            last_renewal_applied_ms.filter(|&at| at >= episode.started_ms && at <= now_ms);
        if episode.renewing_since_ms.is_none() {
            episode.renewing_since_ms = renewed_since_start;
        }
        let renewing_tick = renewing_tick_ms(state, &overdue);
        let renewals_resumed = match (episode.renewing_since_ms, renewed_since_start) {
            (Some(since), Some(latest)) => renewing_tick.is_some_and(|tick| {
                now_ms >= since.saturating_add(2 * tick)
                    && latest >= now_ms.saturating_sub(2 * tick)
            }),
            _ => false,
        };
        if age >= self.guard.grace_ms {
            decision.events.push(GuardEvent::GraceExhausted {
                overdue: overdue.len(),
                grace_ms: self.guard.grace_ms,
            });
            self.episode = None;
            decision.reap = overdue;
        } else if let (true, Some(renewing_since_ms)) =
            (renewals_resumed, episode.renewing_since_ms)
        {
            decision.events.push(GuardEvent::RenewalsResumed {
                overdue: overdue.len(),
                renewing_since_ms,
            });
            self.episode = None;
            decision.reap = overdue;
        } else {
            self.episode = Some(episode);
            decision.deferral = Some(Deferral::MassExpiryGuard {
                reason: episode.reason,
                episode_age_ms: age,
            });
        }
    }

    /// P6.3's second trigger. Live executors renew every third of their own lease (their
    /// namespace's, P18.1), so with two or more executors tracked, some renewal must have been
    /// applied in the two ticks, of the longest lease among those not overdue, before the newest
    /// overdue expiry; if none was, the silence may be this leader's own. (Which of those still
    /// renew is not known, dying ones' leases not having run out yet: ticks of a shorter lease
    /// than a live executor's would find a window its renewals can miss, and one executor dying
    /// in a short-lease namespace would wait for the grace instead of its lease.)
    fn no_renewals(
        &self,
        now_ms: u64,
        state: &LeaseState,
        overdue: &[ExecutorId],
        newest_overdue_ms: Option<u64>,
        last_renewal_applied_ms: Option<u64>,
    ) -> Option<GuardReason> {
        if state.executors().count() < 2 {
            return None;
        }
        let newest_overdue_ms = newest_overdue_ms?;
        let tick = renewing_tick_ms(state, overdue)?;
        let window_start_ms = newest_overdue_ms
            .saturating_sub(2 * tick)
            .max(self.took_office_ms);
        let renewed_in_window =
            last_renewal_applied_ms.is_some_and(|at| at >= window_start_ms && at <= now_ms);
        (!renewed_in_window).then_some(GuardReason::NoRenewals { window_start_ms })
    }
}

/// The tick of the longest lease among the executors not `overdue` (their namespaces', P18.1),
/// or of the shortest lease when every executor is overdue: every live executor renews at least
/// this often (P3.5). `None` before any lease is configured.
fn renewing_tick_ms(state: &LeaseState, overdue: &[ExecutorId]) -> Option<u64> {
    let overdue: BTreeSet<&str> = overdue.iter().map(String::as_str).collect();
    state
        .executors()
        .filter(|executor| !overdue.contains(executor.id.as_str()))
        .filter_map(|executor| state.space(&executor.namespace))
        .filter_map(|space| space.config())
        .map(|config| config.lease_duration_ms)
        .max()
        .or_else(|| state.shortest_lease_duration_ms())
        .map(tick_ms)
}

/// One of a step's writes, in the order a step makes them (P3.8): reaping is its own write
/// ahead of anything else, then handoffs whose old grant expired complete, then the rebalance
/// is planned on the state those left.
#[derive(Debug, Clone, Copy, PartialEq, Eq, PartialOrd, Ord)]
pub enum StepWrite {
    Reap,
    CompleteHandoffs,
    /// Each namespace's reshard under way carried out, once it is ready (P20.2): before the
    /// rebalance, so the plans are made in the new layout.
    Reshard,
    Rebalance,
    /// Each namespace's secondaries placed on the state its rebalance left (P19.2).
    PlaceSecondaries,
}

/// A step's writes as a pure sequence: the shell (and the simulator) asks for the next command
/// with the state the previous one left and the clock's reading at that moment, commits it and
/// asks again, so the order is fixed here rather than in each caller. A write that was not
/// committed ends the step; the next step starts over from the state as it then is.
///
/// A step's rebalance plans every namespace (P18.1), one `Rebalance` each, under one cap on the
/// step's moves shared fairly: each namespace may take the moves left divided by the namespaces
/// left (rounded up), so one that needs fewer leaves the rest to those after it, and the order
/// starts at a namespace chosen by the state's revision, so none is always first or last. A
/// storm of joiners in one namespace then takes at most its share of a step, and every other
/// namespace is planned in the same step.
#[derive(Debug, Clone)]
pub struct StepWrites {
    decision: StepDecision,
    next: Option<StepWrite>,
    /// Each namespace's placement inputs, fixed when the step began; a namespace without any is
    /// placed by count (`by_count`).
    placement: BTreeMap<String, PlacementInputs>,
    by_count: PlacementInputs,
    plan: Option<Plan>,
    /// The namespaces this step's rebalance has still to plan, in order; `None` until it begins.
    to_plan: Option<VecDeque<String>>,
    /// The namespaces whose secondaries this step has still to place, in order; `None` until
    /// the placement begins.
    secondaries_to_plan: Option<VecDeque<String>>,
    /// Moves for balance this step's rebalance made, by namespace: what is left of each
    /// namespace's budget goes to its secondaries (P15.3, P19.2).
    balance_moves_made: BTreeMap<String, usize>,
    /// The moves each namespace's rebalance left waiting for a ready secondary on their target
    /// (P19.3), by namespace: its plan of secondaries places those first.
    warm_ups: BTreeMap<String, Vec<Move>>,
    /// How many more moves this step's plans may make, over every namespace.
    moves_left: usize,
    /// Whether a rebalance of this step was cut at its share: primaries still to move are
    /// placed first, in the step that follows at once, and this step places no secondaries
    /// (P19.2: a shard without a live owner waits on no warm copy, I4).
    primaries_capped: bool,
    /// The cap the last plan was made under (its namespace's share).
    last_plan_cap: usize,
    /// The namespaces whose reshard this step proposed: each at most once a step, so one
    /// refused does not come back within it.
    reshards_proposed: BTreeSet<String>,
}

impl StepWrites {
    /// A step that places by count (no loads known).
    pub fn new(decision: StepDecision) -> Self {
        Self::with_placement(decision, MAX_MOVES_PER_PLAN, BTreeMap::new())
    }

    /// A step that places by count, with at most `max_moves` moves in its plan.
    pub fn with_plan_cap(decision: StepDecision, max_moves: usize) -> Self {
        Self::with_placement(decision, max_moves, BTreeMap::new())
    }

    /// A step whose plans move at most `max_moves` shards (production: [`MAX_MOVES_PER_PLAN`])
    /// and place each namespace with its `placement`: the loads, budget and cooling shards the
    /// leader knows of it now (a namespace absent from it is placed by count).
    pub fn with_placement(
        decision: StepDecision,
        max_moves: usize,
        placement: BTreeMap<String, PlacementInputs>,
    ) -> Self {
        Self {
            decision,
            next: Some(StepWrite::Reap),
            placement,
            by_count: PlacementInputs::by_count(),
            plan: None,
            to_plan: None,
            secondaries_to_plan: None,
            balance_moves_made: BTreeMap::new(),
            warm_ups: BTreeMap::new(),
            moves_left: max_moves,
            primaries_capped: false,
            last_plan_cap: max_moves,
            reshards_proposed: BTreeSet::new(),
        }
    }

    /// Whether `plan` was cut at the cap it was made under (its namespace's share of the step's
    /// moves), so the rest is planned at once rather than a tick later.
    pub fn plan_was_capped(&self, plan: &Command) -> bool {
        match plan {
            Command::Rebalance { moves, .. } => moves.len() >= self.last_plan_cap,
            Command::PlaceSecondaries { changes, .. } => changes.len() >= self.last_plan_cap,
            _ => false,
        }
    }

    /// The plan behind the last [`StepWrite::Rebalance`] this step returned: why each move is
    /// made, so the shell can charge the budget and count moves once it is committed.
    pub fn plan(&self) -> Option<&Plan> {
        self.plan.as_ref()
    }

    /// What the step decided about time (deferrals and guard events, for logs and metrics).
    pub fn decision(&self) -> &StepDecision {
        &self.decision
    }

    /// What this step places `namespace` by: the loads, budget and cooling shards known when it
    /// began, or, once it carried out a reshard of the namespace, none of them (P20.2).
    pub fn placement_inputs(&self, namespace: &str) -> &PlacementInputs {
        self.placement.get(namespace).unwrap_or(&self.by_count)
    }

    /// What this step places each namespace by, by namespace.
    pub fn placements(&self) -> &BTreeMap<String, PlacementInputs> {
        &self.placement
    }

    /// The next write this step makes on `state` at `now_ms`, skipping those with nothing to
    /// do; `None` when the step is over.
    pub fn next_command(
        &mut self,
        state: &LeaseState,
        now_ms: u64,
    ) -> Option<(StepWrite, Command)> {
        while let Some(write) = self.next {
            self.next = match write {
                StepWrite::Reap => Some(StepWrite::CompleteHandoffs),
                StepWrite::CompleteHandoffs => Some(StepWrite::Reshard),
                StepWrite::Reshard => Some(StepWrite::Rebalance),
                StepWrite::Rebalance => Some(StepWrite::PlaceSecondaries),
                StepWrite::PlaceSecondaries => None,
            };
            let command = match write {
                StepWrite::Reap if !self.decision.reap.is_empty() => {
                    Some(self.reap_command(state, now_ms))
                }
                StepWrite::CompleteHandoffs
                    if self.decision.complete_expired_handoffs && state.handoffs_due(now_ms) =>
                {
                    Some(Command::CompleteHandoffs { now_ms })
                }
                StepWrite::Reshard => self.next_reshard(state, now_ms),
                StepWrite::Rebalance => self.next_plan(state, now_ms),
                StepWrite::PlaceSecondaries if !self.primaries_capped => {
                    self.next_secondaries_plan(state, now_ms)
                }
                _ => None,
            };
            if let Some(command) = command {
                return Some((write, command));
            }
        }
        None
    }

    /// The next namespace's reshard to carry out (P20.2): one under way whose namespace waits
    /// on nothing more, not yet proposed this step; `None` once there is none. The reshard
    /// write comes again after it, for the next namespace.
    fn next_reshard(&mut self, state: &LeaseState, now_ms: u64) -> Option<Command> {
        let (name, _) = state.namespaces().find(|(name, namespace)| {
            namespace.reshard.is_some()
                && namespace.reshard_waiting_on() == 0
                && !self.reshards_proposed.contains(*name)
        })?;
        self.reshards_proposed.insert(name.to_owned());
        self.next = Some(StepWrite::Reshard);
        // This step's inputs of the namespace were read in the layout before the reshard: its
        // loads and cooling shards are numbered in it and its budget is its count's (P15.3). Until
        // the next step reads them in the new layout it is placed as while learning (only what
        // must move moves), with no move for balance; by count, its primaries as before.
        if let Some(inputs) = self.placement.get_mut(name) {
            if inputs.loads != Loads::Counts {
                inputs.loads = Loads::Learning;
            }
            inputs.balance_moves_allowed = 0;
            inputs.cooling.clear();
        }
        Some(Command::Reshard {
            now_ms,
            namespace: name.to_owned(),
        })
    }

    /// The next namespace's plan in this step's rebalance, skipping namespaces with nothing to
    /// move; `None` once every namespace was planned or the step's moves are spent. Each
    /// namespace is placed by what the leader knows of its own loads (§15, P18.1).
    fn next_plan(&mut self, state: &LeaseState, now_ms: u64) -> Option<Command> {
        let to_plan = self.to_plan.take().unwrap_or_else(|| {
            let mut names: VecDeque<String> = state
                .namespaces()
                .map(|(name, _)| name.to_owned())
                .collect();
            if !names.is_empty() {
                let first = (state.revision() % names.len() as u64) as usize;
                names.rotate_left(first);
            }
            names
        });
        let (to_plan, command) = self.next_in_turn(
            StepWrite::Rebalance,
            to_plan,
            state,
            |writes, name, space, share| {
                let inputs = writes.placement_inputs(name);
                let (plan, warm_ups) = plan_placement_and_warm_ups(space, now_ms, inputs, share);
                if !warm_ups.is_empty() {
                    writes.warm_ups.insert(name.to_owned(), warm_ups);
                }
                let plan = plan?;
                writes.primaries_capped |= plan.reasons.len() >= share;
                *writes
                    .balance_moves_made
                    .entry(name.to_owned())
                    .or_default() += plan.balance_shards().len();
                Some(plan)
            },
        );
        self.to_plan = Some(to_plan);
        command
    }

    /// The next namespace's secondaries plan (P19.2), on the state the rebalance left, skipping
    /// namespaces with nothing to change; `None` once every namespace was planned or the step's
    /// moves are spent. Each takes what its rebalance left of its balance budget, and a share
    /// of the step's moves as a rebalance does.
    fn next_secondaries_plan(&mut self, state: &LeaseState, now_ms: u64) -> Option<Command> {
        let to_plan = self.secondaries_to_plan.take().unwrap_or_else(|| {
            state
                .namespaces()
                .filter(|(_, namespace)| {
                    namespace.replication.replicas > 1
                        || namespace
                            .shards()
                            .iter()
                            .any(|shard| !shard.secondaries.is_empty())
                })
                .map(|(name, _)| name.to_owned())
                .collect()
        });
        let (to_plan, command) = self.next_in_turn(
            StepWrite::PlaceSecondaries,
            to_plan,
            state,
            |writes, name, space, share| {
                let inputs = writes.placement_inputs(name);
                let made = writes.balance_moves_made.get(name).copied().unwrap_or(0);
                let budget = inputs.balance_moves_allowed.saturating_sub(made);
                let warm_ups = writes.warm_ups.get(name).map_or(&[][..], Vec::as_slice);
                plan_secondaries_warming(space.placing_at(now_ms), now_ms, warm_ups, budget, share)
            },
        );
        self.secondaries_to_plan = Some(to_plan);
        command
    }

    /// The next plan `plan_one` makes for the namespaces of `to_plan` in turn, each given a fair
    /// share of the step's moves left (those left divided by the namespaces left, rounded up),
    /// skipping those with nothing to plan; `None` once every one was planned or the moves are
    /// spent. Returns what is left of `to_plan`; `write` comes next while any is.
    fn next_in_turn(
        &mut self,
        write: StepWrite,
        mut to_plan: VecDeque<String>,
        state: &LeaseState,
        mut plan_one: impl FnMut(&mut Self, &str, Space<'_>, usize) -> Option<Plan>,
    ) -> (VecDeque<String>, Option<Command>) {
        while self.moves_left > 0 {
            let Some(name) = to_plan.pop_front() else {
                break;
            };
            let Some(space) = state.space(&name) else {
                continue;
            };
            let share = self.moves_left.div_ceil(to_plan.len() + 1);
            let Some(plan) = plan_one(self, &name, space, share) else {
                continue;
            };
            // One reason per move or change of the plan.
            self.moves_left = self.moves_left.saturating_sub(plan.reasons.len());
            self.last_plan_cap = share;
            if !to_plan.is_empty() {
                self.next = Some(write);
            }
            let command = plan.command.clone();
            self.plan = Some(plan);
            return (to_plan, Some(command));
        }
        (to_plan, None)
    }

    /// The reap this step writes: a plain `Reap` when every lease judged lapsed has lapsed in the
    /// state too, otherwise a `ReapLapsed` with the judged expiries, which a reservation does not
    /// hold back (P6.7; only at cluster version 12, the only one with reservations).
    fn reap_command(&self, state: &LeaseState, now_ms: u64) -> Command {
        let held_by_a_reservation = self.decision.reap.iter().any(|id| {
            state
                .executor(id)
                .is_some_and(|executor| !executor.lease_lapsed(now_ms))
        });
        if !held_by_a_reservation {
            return Command::Reap {
                now_ms,
                executor_ids: self.decision.reap.clone(),
            };
        }
        Command::ReapLapsed {
            now_ms,
            leases: self
                .decision
                .reap
                .iter()
                .filter_map(|id| {
                    let judged_expiry_ms = *self.decision.judged_expiry_ms.get(id)?;
                    Some(LapsedLease {
                        executor_id: id.clone(),
                        judged_expiry_ms,
                    })
                })
                .collect(),
        }
    }

    /// Ends the step early: a write was not committed (the leader may be deposed).
    pub fn abandon(&mut self) {
        self.next = None;
    }
}
