//! A leader's term as a pure core: the order of a step's writes, what each write's fate does to
//! the term, and when the next step is due. The leader loop's tokio shell and the simulator
//! (`sim/`) both step a [`TermSteps`], so the simulator's seeds exercise production's order of
//! events, not a copy of it.
//!
//! A step (P3.8) asks the mass-expiry guard and the grace of a new leader ([`LeaderCore`]), then
//! makes its writes one at a time ([`StepWrites`]), each committed before the next is planned on
//! the state it left. A plan cut at the cap, or refused as stale (another change to the
//! assignment was committed while it was in flight), is followed by another step at once; so is
//! a step asked for while one was under way. Otherwise the next step is due a tick later.
//! Placement by load (§15) keeps its soft state for the term here: a committed plan's balance
//! moves are charged to the budget and cool (P15.3, P15.4).

use super::placement::{PlacementSettings, TermPlacement};
use super::{
    tick_ms, took_office_ms, GuardConfig, LeaderCore, StepDecision, StepWrite, StepWrites,
};
use crate::lease::{Command, ExecutorId, LeaseState, PlacementInputs, Plan};

/// The reading a leader's clock takes office at, read from the state with every entry of
/// earlier terms applied.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Office {
    /// The wall clock, raised to what the state holds (P2.3, P6.4).
    pub took_office_ms: u64,
    /// How far that is above the wall clock (an earlier leader's clock ran ahead).
    pub raised_ms: u64,
}

/// Takes office at `wall_ms` on `state`.
pub fn take_office(wall_ms: u64, state: &LeaseState) -> Office {
    let took_office_ms = took_office_ms(wall_ms, state);
    Office {
        took_office_ms,
        raised_ms: took_office_ms - wall_ms,
    }
}

/// The executors a leader owes its full set once it starts its term (P6.2): every one in
/// `state`, read when it starts delivering (registrations committed while it took office are
/// among them). Revokes of unfinished handoffs are derived from the state by the delivery
/// rounds.
pub fn owed_pushes(state: &LeaseState) -> Vec<ExecutorId> {
    state.executors().map(|e| e.id.clone()).collect()
}

/// What became of one of a step's writes.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Written {
    /// Committed and applied.
    Applied,
    /// Committed, and refused by the state machine (it changed nothing). `stale_plan`: a plan
    /// refused because the assignment changed after it was planned.
    Refused { stale_plan: bool },
    /// Not committed (the leader may be deposed): the step ends here.
    NotCommitted,
}

/// When the term steps next.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum NextStep {
    /// At once: a plan was capped or stale, or a step was asked for during this one.
    Now,
    /// After `tick_ms` (a third of the lease, P3.8), or sooner when something changes the
    /// membership.
    After { tick_ms: u64 },
}

/// One term of one leader: its time decisions, its placement soft state and the step under way.
#[derive(Debug, Clone)]
pub struct TermSteps {
    core: LeaderCore,
    placement: TermPlacement,
    max_moves_per_plan: usize,
    writes: Option<StepWrites>,
    /// The write proposed and not yet answered.
    proposed: Option<StepWrite>,
    step_again: bool,
    /// A reshard was under way when the last step began (P20.2): the step after waits at most
    /// [`RESHARD_LOOK_MS`], since what it waits on (handoffs completing) wakes no step.
    reshard_under_way: bool,
}

/// While a reshard is under way, the longest wait between steps: a merge's entry is due as soon
/// as the handoffs bringing its pairs together complete, which a tick of a third of the lease
/// (20 s at the default) would delay by up to that much (P20.2).
pub const RESHARD_LOOK_MS: u64 = 500;

impl TermSteps {
    /// A term whose clock took office at `took_office_ms` (P6.1, P6.4); each plan moves at most
    /// `max_moves_per_plan` shards (production: `MAX_MOVES_PER_PLAN`).
    pub fn new(
        took_office_ms: u64,
        guard: GuardConfig,
        placement: PlacementSettings,
        max_moves_per_plan: usize,
    ) -> Self {
        Self {
            core: LeaderCore::new(took_office_ms, guard),
            placement: TermPlacement::new(placement),
            max_moves_per_plan,
            writes: None,
            proposed: None,
            step_again: false,
            reshard_under_way: false,
        }
    }

    /// This term's placement soft state, read by the views and fed the loads reported (P15.1).
    pub fn placement(&self) -> &TermPlacement {
        &self.placement
    }

    pub fn placement_mut(&mut self) -> &mut TermPlacement {
        &mut self.placement
    }

    /// Whether a step is under way (its writes not all answered yet).
    pub fn stepping(&self) -> bool {
        self.writes.is_some()
    }

    /// Begins a step at `now_ms` on `state`: the guard's decision, and the placement inputs of
    /// this moment. `None` when a step is already under way: that one is followed by another
    /// at once. `last_renewal_applied_ms` is when this leader last applied any renewal (P6.3).
    pub fn begin_step(
        &mut self,
        now_ms: u64,
        state: &LeaseState,
        last_renewal_applied_ms: Option<u64>,
        told_from_memory: &super::ToldFromMemory,
    ) -> Option<&StepWrites> {
        if self.writes.is_some() {
            self.step_again = true;
            return None;
        }
        self.reshard_under_way = state
            .namespaces()
            .any(|(_, namespace)| namespace.reshard.is_some());
        let decision =
            self.core
                .step_judging(now_ms, state, last_renewal_applied_ms, told_from_memory);
        // Balance moves whose handoffs completed since the last step are charged for a minute
        // from now, not from their plan (P15.3).
        self.placement.settle(state, now_ms);
        let inputs = self.placement.inputs_by_namespace(state, now_ms);
        self.writes = Some(StepWrites::with_placement(
            decision,
            self.max_moves_per_plan,
            inputs,
        ));
        self.writes.as_ref()
    }

    /// The step's next write on `state` (what the previous write left) at `now_ms`; `None` when
    /// the step is over. The shell commits the command and reports it with [`Self::written`].
    pub fn next_write(&mut self, state: &LeaseState, now_ms: u64) -> Option<(StepWrite, Command)> {
        let writes = self.writes.as_mut()?;
        match writes.next_command(state, now_ms) {
            Some((write, command)) => {
                self.proposed = Some(write);
                Some((write, command))
            }
            None => {
                self.writes = None;
                self.proposed = None;
                None
            }
        }
    }

    /// The fate of the write [`Self::next_write`] returned last, heard at `now_ms`. Returns the
    /// plan when it was a plan and it was applied (for the shell's counts), after charging its
    /// balance moves at `now_ms`: the moves take effect when applied, not when planned, so a
    /// budget charged at the plan's stamp would let the next minute's plan land less than a
    /// minute after them when the commit was slow (P15.3).
    pub fn written(&mut self, written: Written, now_ms: u64) -> Option<&Plan> {
        let write = self.proposed.take()?;
        let writes = self.writes.as_mut()?;
        match (write, written) {
            (_, Written::NotCommitted) => {
                writes.abandon();
                None
            }
            (StepWrite::Rebalance | StepWrite::PlaceSecondaries, Written::Applied) => {
                let plan = writes.plan()?;
                if writes.plan_was_capped(&plan.command) {
                    // The rest is planned on the state this plan left, at once.
                    self.step_again = true;
                }
                // Charged to the plan's namespace's budget and cooldown (P15.3, P18.1).
                self.placement.committed(now_ms, plan);
                Some(plan)
            }
            (StepWrite::Reshard, Written::Applied) => {
                // The step goes on in the new layout as while learning (P20.2); the next, at
                // once, places it by its own inputs, so a split's children spread without
                // waiting for a tick.
                self.step_again = true;
                None
            }
            (
                StepWrite::Rebalance | StepWrite::PlaceSecondaries,
                Written::Refused {
                    stale_plan: true, ..
                },
            ) => {
                // Waiting for the next tick would leave a joiner without shards (and releasing
                // shards without a new owner) for up to a third of a lease. Each refusal follows
                // a committed change, so this repeats only while others make progress.
                self.step_again = true;
                None
            }
            _ => None,
        }
    }

    /// The decision of the step under way (for logs, metrics and the simulator's coverage).
    pub fn decision(&self) -> Option<&StepDecision> {
        self.writes.as_ref().map(StepWrites::decision)
    }

    /// What the step under way places `namespace` by (loads, budget, cooling shards), fixed
    /// when it began, or since a reshard of it this step carried out (P20.2).
    pub fn placement_inputs(&self, namespace: &str) -> Option<&PlacementInputs> {
        self.writes
            .as_ref()
            .map(|writes| writes.placement_inputs(namespace))
    }

    /// What the step under way places each namespace by, by namespace.
    pub fn step_placement_inputs(
        &self,
    ) -> Option<&std::collections::BTreeMap<String, PlacementInputs>> {
        self.writes.as_ref().map(StepWrites::placements)
    }

    /// The plan of the step under way, once it planned one.
    pub fn plan(&self) -> Option<&Plan> {
        self.writes.as_ref().and_then(StepWrites::plan)
    }

    /// When the step after the one that just ended is due, for a lease of `lease_duration_ms`
    /// (`None`: not configured yet, a tick of a second).
    pub fn next_step(&mut self, lease_duration_ms: Option<u64>) -> NextStep {
        if std::mem::take(&mut self.step_again) {
            NextStep::Now
        } else {
            let tick_ms = lease_duration_ms.map_or(1_000, tick_ms);
            NextStep::After {
                tick_ms: if self.reshard_under_way {
                    tick_ms.min(RESHARD_LOOK_MS)
                } else {
                    tick_ms
                },
            }
        }
    }
}
