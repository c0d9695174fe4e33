//! The invariants, checked after every event and every commit (PROTOCOL §12).
//!
//! - I1 from the executors' own admission decisions: at no instant do two live processes'
//!   admission cores admit one shard, each judged on its own clock at the current true instant.
//!   Admission only starts at an event (a grant, a push), so checking after every event sees
//!   every overlap.
//! - I1 at its source: at the commit that takes a shard from an owner (handoff completed by
//!   release, claims or expiry; a reap; a deregistration), that owner's process no longer admits
//!   it, however the leader's clock is skewed.
//! - I2: every admitted (shard, epoch) was minted for that process's executor; a new holder of a
//!   shard always has a larger epoch; no epoch is minted for two executors.
//! - The state's own consistency check after every commit.
//! - Placement (PROTOCOL §15), on every plan and commit of a leader's term: the churn budget
//!   (P15.3) and the cooldown (P15.4) over the balance moves it committed; on a plan made on a
//!   steady state (every shard delivered to an executor that takes shards) with reported loads,
//!   no balance move while every executor is inside the band (P15.3) and nobody given shards
//!   beyond four times its share by count; and after every renewal the leader records, its
//!   estimate of each shard within what the shard's current holder said of it (P15.1: a lie
//!   is forgotten once the shard leaves the liar).

use std::collections::BTreeMap;

use leasehold_manager::leader::placement::{LoadTracker, BALANCE_COOLDOWN_MS};
use leasehold_manager::lease::{
    capacity_of, Command, LeaseState, Loads, MoveReason, Outcome, Plan, ShardId,
};
use tokio::time::Instant;

use crate::scenario::Scenario;
use leasehold_executor::admission::AdmissionCore;

/// A broken invariant.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Violation {
    pub invariant: &'static str,
    pub detail: String,
    pub at_us: u64,
}

impl std::fmt::Display for Violation {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        write!(
            f,
            "{} at {:.3} ms: {}",
            self.invariant,
            self.at_us as f64 / 1_000.0,
            self.detail
        )
    }
}

/// What the checks read of one live executor process: its admission core and the instant its
/// own clock reads now. A slot without a live process has none.
#[derive(Debug, Clone, Copy)]
pub struct ProcessView<'a> {
    pub core: &'a AdmissionCore,
    pub now: Instant,
}

/// P15.3's budget is per minute.
pub const MINUTE_MS: u64 = 60_000;

/// Nobody is given shards for balance (or as a joiner) beyond this many times its share by count
/// (the load planner's rule, `planner/load.rs`), so a liar claiming zero cannot take the fleet.
pub const COUNT_CEILING_OF_SHARE: f64 = 4.0;

#[derive(Debug, Default)]
pub struct Checker {
    /// Who each (shard, epoch) was minted for (I2).
    minted: BTreeMap<(ShardId, u64), String>,
    /// The first violation found inside a commit or a fault, reported after the event.
    pending: Option<Violation>,
    /// The current leader term's placement history.
    placement: TermHistory,
    /// Scratch for [`Checker::after_event`]: the slot and epoch admitting each shard.
    admitted_by: Vec<Option<(usize, u64)>>,
}

/// What one leader term did for placement, for the checks that span its plans.
#[derive(Debug, Default)]
struct TermHistory {
    /// Balance moves committed this term: (leader ms, shard), oldest first.
    balance: Vec<(u64, ShardId)>,
    /// Per shard: the executor that last reported it and the range of what that executor said
    /// of it since it began reporting it.
    heard: BTreeMap<ShardId, Heard>,
}

#[derive(Debug)]
struct Heard {
    executor_id: String,
    low: f64,
    high: f64,
}

impl Checker {
    pub fn new(_scenario: &Scenario) -> Self {
        Self::default()
    }

    fn report(&mut self, invariant: &'static str, detail: String, at_us: u64) {
        if self.pending.is_none() {
            self.pending = Some(Violation {
                invariant,
                detail,
                at_us,
            });
        }
    }

    /// A check of the simulator's own (replica agreement, snapshot round trip) failed.
    pub fn fail(&mut self, detail: String) {
        self.report("replicas", detail, 0);
    }

    /// A new leader took office: its placement soft state starts empty (P15.1), and so does what
    /// the term checks count.
    pub fn new_term(&mut self) {
        self.placement = TermHistory::default();
    }

    /// The leader recorded a renewal of `executor_id` holding `held` that said `loads` (`None`:
    /// it does not report). Its estimate of every shard it holds must lie within what this
    /// executor said of it since it began reporting it (P15.1: a new holder starts the shard
    /// afresh, so what an earlier holder said, a lie included, is forgotten). A held shard
    /// missing from the report was said to carry nothing.
    pub fn after_record(
        &mut self,
        executor_id: &str,
        held: &[ShardId],
        loads: Option<&[(ShardId, f64)]>,
        tracker: &LoadTracker,
        max_shard_load: f64,
        now_us: u64,
    ) {
        let Some(loads) = loads else {
            return;
        };
        let said: BTreeMap<ShardId, f64> = loads.iter().copied().collect();
        for &shard in held {
            let value = said
                .get(&shard)
                .copied()
                .filter(|load| !load.is_nan())
                .unwrap_or(0.0)
                .clamp(0.0, max_shard_load);
            let heard = self
                .placement
                .heard
                .entry(shard)
                .and_modify(|heard| {
                    if heard.executor_id == executor_id {
                        heard.low = heard.low.min(value);
                        heard.high = heard.high.max(value);
                    } else {
                        *heard = Heard {
                            executor_id: executor_id.to_owned(),
                            low: value,
                            high: value,
                        };
                    }
                })
                .or_insert_with(|| Heard {
                    executor_id: executor_id.to_owned(),
                    low: value,
                    high: value,
                });
            let Some(estimate) = tracker.shard_load(shard) else {
                continue;
            };
            // A smoothed value is a mean of what was said, so it lies in their range; the
            // tracker rounds a negligible load down to zero.
            let slack = 1e-9 * heard.high.max(1.0);
            if estimate < heard.low - slack || estimate > heard.high + slack {
                let detail = format!(
                    "the leader estimates shard {shard} at {estimate}, but its holder {executor_id} \
                     only ever said {} to {} of it",
                    heard.low, heard.high
                );
                self.report("P15.1", detail, now_us);
            }
        }
    }

    /// A leader made `plan` on `state` at `now_ms` knowing `loads`, with `tolerance` as its band.
    /// On a steady state with reported loads: no balance move while every executor is inside
    /// the band (P15.3), and nobody given shards for balance or as a joiner beyond
    /// [`COUNT_CEILING_OF_SHARE`] times its share by count.
    pub fn after_plan(
        &mut self,
        state: &LeaseState,
        now_ms: u64,
        plan: &Plan,
        loads: &Loads,
        tolerance: f64,
        now_us: u64,
    ) {
        let Loads::Reported(loads) = loads else {
            return;
        };
        if !steady(state, now_ms) {
            return;
        }
        let load_of = |shard: ShardId| loads.get(shard as usize).copied().unwrap_or(0.0);
        let Some((utilisations, mean)) = utilisations(state, now_ms, load_of) else {
            return;
        };
        let balance = plan.balance_shards();
        // The planner's band and this one may round differently at the very edge.
        let slack = 1e-9 * mean;
        let outside: Vec<(&String, &f64)> = utilisations
            .iter()
            .filter(|(_, u)| {
                **u > mean * (1.0 + tolerance) + slack || **u < mean * (1.0 - tolerance) - slack
            })
            .collect();
        if !balance.is_empty() && outside.is_empty() {
            let detail = format!(
                "a plan moves {balance:?} for balance while every executor is inside the band \
                 ({:.0} % around the mean {mean:.3}): {utilisations:?}",
                tolerance * 100.0
            );
            self.report("P15.3", detail, now_us);
            return;
        }
        let Command::Rebalance { moves, .. } = &plan.command else {
            return;
        };
        let mut counts: BTreeMap<&str, usize> = state
            .executors()
            .map(|executor| (executor.id.as_str(), executor.owned_shards.len()))
            .collect();
        for step in moves {
            if let Some(owner) = state.shard(step.shard).and_then(|s| s.owner.as_deref()) {
                if let Some(count) = counts.get_mut(owner) {
                    *count = count.saturating_sub(1);
                }
            }
            *counts.entry(step.to.as_str()).or_insert(0) += 1;
        }
        let total_capacity: u64 = utilisations
            .keys()
            .filter_map(|id| state.executor(id))
            .map(capacity_of)
            .sum();
        let shards = state.shards().len() as f64;
        for (step, reason) in moves.iter().zip(&plan.reasons) {
            if !matches!(reason, MoveReason::Balance | MoveReason::Join) {
                continue;
            }
            let Some(receiver) = state.executor(&step.to) else {
                continue;
            };
            let share = shards * capacity_of(receiver) as f64 / total_capacity.max(1) as f64;
            let count = counts.get(step.to.as_str()).copied().unwrap_or(0);
            if count as f64 > COUNT_CEILING_OF_SHARE * share + 1e-9 {
                let detail = format!(
                    "a plan gives {} shard {} ({reason:?}) and so {count} shards, more than \
                     {COUNT_CEILING_OF_SHARE} times its share of {share:.2}",
                    step.to, step.shard
                );
                self.report("count ceiling", detail, now_us);
                return;
            }
        }
    }

    /// The leader committed, at `at_ms` on its clock, a plan whose balance moves are `shards`:
    /// no more than `budget` balance moves in any minute of its term (P15.3), and no shard moved
    /// for balance again within the cooldown (P15.4).
    pub fn after_balance_commit(
        &mut self,
        at_ms: u64,
        shards: &[ShardId],
        budget: usize,
        now_us: u64,
    ) {
        for &shard in shards {
            if let Some(&(earlier_ms, _)) = self
                .placement
                .balance
                .iter()
                .rev()
                .find(|(_, moved)| *moved == shard)
            {
                if at_ms - earlier_ms < BALANCE_COOLDOWN_MS {
                    let detail = format!(
                        "shard {shard} moved for balance at {earlier_ms} and again at {at_ms} \
                         (leader ms), within the {BALANCE_COOLDOWN_MS} ms cooldown"
                    );
                    self.report("P15.4", detail, now_us);
                }
            }
            self.placement.balance.push((at_ms, shard));
        }
        let window_start = at_ms.saturating_sub(MINUTE_MS);
        let in_window = self
            .placement
            .balance
            .iter()
            .filter(|(moved_ms, _)| *moved_ms > window_start)
            .count();
        if in_window > budget {
            let detail = format!(
                "{in_window} balance moves in the minute to {at_ms} (leader ms), budget {budget}"
            );
            self.report("P15.3", detail, now_us);
        }
    }

    pub fn after_event(
        &mut self,
        processes: &[Option<ProcessView<'_>>],
        now_us: u64,
    ) -> Result<(), Violation> {
        if let Some(mut violation) = self.pending.take() {
            if violation.at_us == 0 {
                violation.at_us = now_us;
            }
            return Err(violation);
        }
        // Who admits each shard (slot, epoch), by shard: reused from event to event, since this
        // runs after every one.
        let admitted_by = &mut self.admitted_by;
        admitted_by.iter_mut().for_each(|entry| *entry = None);
        for (slot, process) in processes.iter().enumerate() {
            let Some(ProcessView { core, now }) = *process else {
                continue;
            };
            let Some(executor_id) = core.executor_id() else {
                continue;
            };
            for held in core.assignment().held() {
                let Ok(permit) = core.admit(held.shard, now) else {
                    continue;
                };
                match self.minted.get(&(permit.shard, permit.epoch)) {
                    Some(owner) if owner == executor_id => {}
                    minted_for => {
                        return Err(Violation {
                            invariant: "I2",
                            detail: format!(
                                "slot {slot} ({executor_id}) admits shard {} at epoch {}, minted for {minted_for:?}",
                                permit.shard, permit.epoch
                            ),
                            at_us: now_us,
                        })
                    }
                }
                let index = permit.shard as usize;
                if admitted_by.len() <= index {
                    admitted_by.resize(index + 1, None);
                }
                if let Some((other_slot, other_epoch)) =
                    admitted_by[index].replace((slot, permit.epoch))
                {
                    let other_id = processes[other_slot]
                        .and_then(|view| view.core.executor_id())
                        .unwrap_or_default();
                    return Err(Violation {
                        invariant: "I1",
                        detail: format!(
                            "shard {} admitted by slot {other_slot} ({other_id}, epoch {other_epoch}) and slot {slot} ({executor_id}, epoch {})",
                            permit.shard, permit.epoch
                        ),
                        at_us: now_us,
                    });
                }
            }
        }
        Ok(())
    }

    #[allow(clippy::too_many_arguments)]
    pub fn after_commit(
        &mut self,
        before: &LeaseState,
        after: &LeaseState,
        command: &Command,
        _outcome: &Outcome,
        processes: &[Option<ProcessView<'_>>],
        now_us: u64,
    ) {
        let violations = after.consistency_violations();
        if !violations.is_empty() {
            self.report(
                "state consistency",
                format!("after {command:?}: {violations:?}"),
                now_us,
            );
        }
        for shard in after.shards() {
            let old = before.shard(shard.id);
            let old_owner = old.and_then(|s| s.owner.clone());
            let old_epoch = old.map_or(0, |s| s.epoch);
            if shard.epoch < old_epoch {
                self.report(
                    "I2",
                    format!(
                        "shard {} epoch went back from {old_epoch} to {}",
                        shard.id, shard.epoch
                    ),
                    now_us,
                );
            }
            if let Some(owner) = &shard.owner {
                if old_owner.as_ref() != Some(owner) && shard.epoch <= old_epoch {
                    self.report(
                        "I2",
                        format!(
                            "shard {} went to {owner} without a new epoch ({old_epoch} -> {})",
                            shard.id, shard.epoch
                        ),
                        now_us,
                    );
                }
                let minted = self
                    .minted
                    .entry((shard.id, shard.epoch))
                    .or_insert_with(|| owner.clone());
                if minted != owner {
                    let first = minted.clone();
                    self.report(
                        "I2",
                        format!(
                            "shard {} epoch {} minted for {first} and for {owner}",
                            shard.id, shard.epoch
                        ),
                        now_us,
                    );
                }
            }
            // I1 at its source: the old owner no longer admits a shard taken from it.
            if let Some(old_owner) = old_owner.filter(|o| shard.owner.as_ref() != Some(o)) {
                if let Some(slot) = admitting_slot(processes, &old_owner, shard.id) {
                    self.report(
                        "I1",
                        format!(
                            "{command_kind} took shard {} from {old_owner} while its process (slot {slot}) still admits it",
                            shard.id,
                            command_kind = command_kind(command)
                        ),
                        now_us,
                    );
                }
            }
        }
    }
}

fn admitting_slot(
    processes: &[Option<ProcessView<'_>>],
    executor_id: &str,
    shard: ShardId,
) -> Option<usize> {
    processes.iter().enumerate().find_map(|(slot, process)| {
        let ProcessView { core, now } = (*process)?;
        (core.executor_id() == Some(executor_id) && core.admit(shard, now).is_ok()).then_some(slot)
    })
}

fn command_kind(command: &Command) -> &'static str {
    match command {
        Command::Init { .. } => "Init",
        Command::SetLeaseDuration { .. } => "SetLeaseDuration",
        Command::Register { .. } => "Register",
        Command::RegisterMany { .. } => "RegisterMany",
        Command::Renew { .. } => "Renew (claims)",
        Command::Deregister { .. } => "Deregister",
        Command::Reap { .. } => "Reap",
        Command::ReserveLeases { .. } => "ReserveLeases",
        Command::ReapLapsed { .. } => "ReapLapsed",
        Command::Rebalance { .. } => "Rebalance",
        Command::Release { .. } => "Release",
        Command::CompleteHandoffs { .. } => "CompleteHandoffs (expiry)",
        Command::SetDraining { .. } => "SetDraining",
        Command::SetClusterVersion { .. } => "SetClusterVersion",
        Command::Operator { .. } => "Operator",
    }
}

/// Whether every shard is delivered (owned, no handoff) to an executor that takes shards at
/// `now_ms` (lease live, not draining): nothing is on its way anywhere.
pub fn steady(state: &LeaseState, now_ms: u64) -> bool {
    state.shards().iter().all(|shard| {
        shard.handoff.is_none()
            && shard
                .owner
                .as_deref()
                .and_then(|owner| state.executor(owner))
                .is_some_and(|owner| !owner.lease_lapsed(now_ms) && !owner.draining)
    })
}

/// The utilisation (load ÷ capacity, P15.2) of every executor that takes shards at `now_ms`, on
/// `load_of`, counting what it holds once the handoffs under way complete; and the mean, all
/// load over all their capacity. `None` without such an executor.
pub fn utilisations(
    state: &LeaseState,
    now_ms: u64,
    load_of: impl Fn(ShardId) -> f64,
) -> Option<(BTreeMap<String, f64>, f64)> {
    let mut loads: BTreeMap<&str, f64> = state
        .executors()
        .filter(|executor| !executor.lease_lapsed(now_ms) && !executor.draining)
        .map(|executor| (executor.id.as_str(), 0.0))
        .collect();
    if loads.is_empty() {
        return None;
    }
    let mut total = 0.0;
    for shard in state.shards() {
        let load = load_of(shard.id);
        total += load;
        let holder = match &shard.handoff {
            Some(handoff) => handoff.to.as_deref(),
            None => shard.owner.as_deref(),
        };
        if let Some(sum) = holder.and_then(|holder| loads.get_mut(holder)) {
            *sum += load;
        }
    }
    let mut total_capacity = 0.0;
    let utilisations = loads
        .into_iter()
        .filter_map(|(id, load)| {
            let capacity = capacity_of(state.executor(id)?) as f64;
            total_capacity += capacity;
            Some((id.to_owned(), load / capacity))
        })
        .collect();
    Some((utilisations, total / total_capacity))
}
