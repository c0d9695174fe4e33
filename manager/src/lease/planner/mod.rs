//! The placement planner (P5.4, P15.1–P15.4): which shard goes to which executor, proposed as a
//! conditional [`Command::Rebalance`] (P2.4, P5.1) and carried out through the P5.2 handoff.
//!
//! Pure and deterministic: the same state, inputs and `now_ms` give the same plan, with ties
//! broken by executor id and shard number. What it knows beyond the replicated state comes in as
//! [`PlacementInputs`]: the leader's smoothed loads (soft state, P15.1), the churn budget left
//! (P15.3) and the shards recently moved for balance.
//!
//! Two ways to spread, chosen by what the leader knows of the loads ([`Loads`]):
//! - **By count** ([`count`]): shard counts in proportion to capacity, reached with the fewest
//!   shards changing hands (P15.2's second half; P5.4 when all capacities are equal). Used when
//!   some live executor reports no loads, or every reported load is zero. Every move it makes
//!   answers a change of membership or capacity (a join), so none is limited by the budget.
//! - **By load** ([`load`]): load ÷ capacity within the tolerance band around the mean when that
//!   is possible (P15.2), moving at most the budget for balance (P15.3), hot shards placed where
//!   they fit best and never moved back and forth (P15.4). Shards without a live holder and
//!   executors that just joined are served at once, outside the budget.
//!
//! While the executors that take shards run more than one application version (a rollout,
//! P17.3), neither is used: only the shards that must move do, onto the newest version
//! ([`constrained`]; maintenance mode goes the same way, P17.4), so a rolling deploy moves each
//! shard once.
//!
//! While a new leader has not heard from every live executor it knows nothing of their loads
//! ([`Loads::Learning`]): it places shards that have no live holder and fills executors that
//! hold nothing, and moves nothing else, so a leader change never reshuffles a balanced fleet.
//!
//! One plan is one log entry, replicated to every follower inside one AppendEntries, so a plan
//! carries at most [`MAX_MOVES_PER_PLAN`] moves whatever the shard count: at a million shards an
//! uncapped plan is megabytes and outlasts the replication timeout (docs/BENCHMARKS.md, B5). A
//! capped plan takes the cheapest moves first (cancelled handoffs, then unowned grants, then
//! retargeted handoffs, then revokes), and the leader plans again as soon as it commits.

mod constrained;
pub(super) mod count;
mod load;
pub mod load_summary;
mod replicas;
mod reshard;

pub use constrained::rollout_target;
use constrained::Constraints;
pub use replicas::{plan_secondaries, plan_secondaries_warming};

use std::collections::{BTreeMap, BTreeSet, HashSet};

use leasehold_api::wire::{ReshardKind, DEFAULT_NAMESPACE};

use super::{Command, Executor, LeaseState, Move, Shard, ShardId, Space};

#[cfg(test)]
pub(in crate::lease) use count::plan_moves;
use count::Candidate;

/// Most moves in one [`Command::Rebalance`]: about 120 KB of log entry (a move is a shard number
/// and an `ex-{index}` id), which a follower receives, decodes and syncs well inside one
/// heartbeat interval.
pub const MAX_MOVES_PER_PLAN: usize = 8_192;

/// Default of `--balance-tolerance` (P15.2): every executor's load ÷ capacity within 10 % of the
/// cluster's mean.
pub const DEFAULT_BALANCE_TOLERANCE: f64 = 0.10;

/// What the leader knows of the loads when it plans (P15.1).
#[derive(Debug, Clone, PartialEq)]
pub enum Loads {
    /// Some live executor reports no loads, or all reported loads are zero: spread counts in
    /// proportion to capacity (P15.2).
    Counts,
    /// This leader has not yet heard from every live executor since it took office, so it
    /// cannot tell a balanced fleet from an unbalanced one: place only what has no live holder
    /// and fill executors that hold nothing.
    Learning,
    /// Every live executor reports, and some load is positive: the smoothed load of every shard,
    /// index = shard number (a shard nobody reported has load 0). Every value is finite and
    /// non-negative.
    Reported(Vec<f64>),
}

/// Everything placement needs besides the replicated state.
#[derive(Debug, Clone, PartialEq)]
pub struct PlacementInputs {
    pub loads: Loads,
    /// `--balance-tolerance`: the band around the mean utilisation inside which nothing moves
    /// for balance, as a fraction (0.10 = 10 %).
    pub tolerance: f64,
    /// Moves for balance the churn budget still allows now (P15.3).
    pub balance_moves_allowed: usize,
    /// Shards moved for balance recently: not moved for balance again until they cool down
    /// (P15.4), so no shard goes back and forth while loads are noisy.
    pub cooling: BTreeSet<ShardId>,
}

impl PlacementInputs {
    /// Placement by count alone (P5.4, capacity-weighted): no loads, no budget needed.
    pub fn by_count() -> Self {
        Self {
            loads: Loads::Counts,
            tolerance: DEFAULT_BALANCE_TOLERANCE,
            balance_moves_allowed: 0,
            cooling: BTreeSet::new(),
        }
    }
}

/// Why a shard moves, as the leader counts it (`leasehold_shard_moves_total{reason}`).
#[derive(Debug, Clone, Copy, PartialEq, Eq, PartialOrd, Ord, Hash)]
pub enum MoveReason {
    /// Load balance between live executors (P15.2), the only reason the budget limits (P15.3).
    Balance,
    /// Its owner's lease lapsed; it goes on to a live holder (P5.2).
    Expiry,
    /// Its owner is draining.
    Drain,
    /// An executor joined (or holds less than its share by count): spread to it (P5.4), or a
    /// shard never owned is placed for the first time.
    Join,
    /// It has no owner because its last owner left (deregistered or reaped: the leader tells
    /// which), or the handoff it was in lost its target.
    Departure,
    /// A handoff cancelled: the shard stays with its owner. Nothing changes hands.
    Cancel,
    /// An operator pinned it to its new holder (P17.4).
    Pin,
    /// A secondary placed or dropped to keep its shard's replica count (P19.1, P19.2).
    Replica,
    /// Brought beside the shard it merges with, in a merge under way (P20.2).
    Reshard,
}

impl MoveReason {
    /// Its name on the wire and in logs (`GET /v1/plan`, P17.4).
    pub fn as_str(self) -> &'static str {
        match self {
            MoveReason::Balance => "balance",
            MoveReason::Expiry => "expiry",
            MoveReason::Drain => "drain",
            MoveReason::Join => "join",
            MoveReason::Departure => "departure",
            MoveReason::Cancel => "cancel",
            MoveReason::Pin => "pin",
            MoveReason::Replica => "replica",
            MoveReason::Reshard => "reshard",
        }
    }
}

/// A plan and why each of its moves is made.
#[derive(Debug, Clone, PartialEq)]
pub struct Plan {
    /// The [`Command::Rebalance`] to propose.
    pub command: Command,
    /// One reason per move of the command, in the same order.
    pub reasons: Vec<MoveReason>,
}

impl Plan {
    /// The shards this plan moves for balance, which the churn budget is charged for.
    pub fn balance_shards(&self) -> Vec<ShardId> {
        let shards: Vec<ShardId> = match &self.command {
            Command::Rebalance { moves, .. } => moves.iter().map(|step| step.shard).collect(),
            Command::PlaceSecondaries { changes, .. } => {
                changes.iter().map(|change| change.shard).collect()
            }
            _ => Vec::new(),
        };
        shards
            .into_iter()
            .zip(&self.reasons)
            .filter(|(_, reason)| **reason == MoveReason::Balance)
            .map(|(shard, _)| shard)
            .collect()
    }

    /// How many moves were made for each reason.
    pub fn counts_by_reason(&self) -> BTreeMap<MoveReason, usize> {
        let mut counts = BTreeMap::new();
        for reason in &self.reasons {
            *counts.entry(*reason).or_insert(0) += 1;
        }
        counts
    }
}

/// An executor's placement weight (P15.1): a positive capacity, 1 by default.
pub fn capacity_of(executor: &Executor) -> u64 {
    u64::from(executor.capacity.max(1))
}

/// Whether an executor takes part in placement at `now_ms`: its lease is live and it is not
/// draining. A lapsed one keeps what it owns until it is reaped (P3.8); a draining one hands
/// its shards on (P5.2) and receives nothing.
pub fn takes_shards(executor: &Executor, now_ms: u64) -> bool {
    !executor.lease_lapsed(now_ms) && !executor.draining
}

/// Plans `default` by count at `now_ms` with at most [`MAX_MOVES_PER_PLAN`] moves, or `None`
/// when nothing needs to move (or there is no live executor, or the cluster is not
/// initialised).
#[must_use = "a plan does nothing until it is proposed"]
pub fn plan_rebalance(state: &LeaseState, now_ms: u64) -> Option<Command> {
    plan_rebalance_at_most(state, now_ms, MAX_MOVES_PER_PLAN)
}

/// [`plan_rebalance`] with the cap as a parameter, so tests and the simulator can make many
/// capped steps of a small state.
pub fn plan_rebalance_at_most(
    state: &LeaseState,
    now_ms: u64,
    max_moves: usize,
) -> Option<Command> {
    let space = state.space(DEFAULT_NAMESPACE)?;
    plan_placement(space, now_ms, &PlacementInputs::by_count(), max_moves).map(|plan| plan.command)
}

/// Plans one namespace (`state`, P18.1) at `now_ms` with what the leader knows (`inputs`), at
/// most `max_moves` moves, or `None` when nothing needs to move. A capped plan leaves moves for
/// the next one. The plan moves the namespace's shards to its own executors only (P18.2).
#[must_use = "a plan does nothing until it is proposed"]
pub fn plan_placement(
    state: Space<'_>,
    now_ms: u64,
    inputs: &PlacementInputs,
    max_moves: usize,
) -> Option<Plan> {
    plan_placement_and_warm_ups(state, now_ms, inputs, max_moves).0
}

/// [`plan_placement`] and the moves it left waiting for a ready secondary on their target
/// (P19.3), which the plan of secondaries places first ([`plan_secondaries_warming`]).
pub fn plan_placement_and_warm_ups(
    state: Space<'_>,
    now_ms: u64,
    inputs: &PlacementInputs,
    max_moves: usize,
) -> (Option<Plan>, Vec<Move>) {
    if state.config().is_none() {
        return (None, Vec::new());
    }
    let state = state.placing_at(now_ms);
    if state.namespace().replication.replicas <= 1 {
        let moves = placement_moves(state, now_ms, inputs, max_moves);
        return (plan_of(state, now_ms, moves), Vec::new());
    }
    // Every move the namespace needs, so each waiting one gets its warm copy at once rather than
    // `max_moves` a step; the plan makes the first `max_moves` of those that need not wait.
    let (mut moves, waiting) = warm_first(
        state,
        now_ms,
        placement_moves(state, now_ms, inputs, MAX_MOVES_PER_PLAN),
    );
    moves.truncate(max_moves);
    (plan_of(state, now_ms, moves), waiting)
}

/// The moves of `state`'s plan that wait for their target to be warm (P19.3): in a namespace
/// with replicas, a move for a joiner or for balance of a shard its owner serves waits until
/// the target holds a ready secondary of the shard, and the plan of secondaries places one
/// there first. `state` as [`Space::placing_at`] gives it.
pub(in crate::lease) fn moves_waiting_for_warmth(
    state: Space<'_>,
    now_ms: u64,
    inputs: &PlacementInputs,
) -> Vec<Move> {
    if state.config().is_none() {
        return Vec::new();
    }
    let moves = placement_moves(state, now_ms, inputs, MAX_MOVES_PER_PLAN);
    warm_first(state, now_ms, moves).1
}

/// `moves` split into those made now and those that wait until their target holds a ready
/// secondary of the shard (P19.3): in a namespace with replicas, a move for a joiner or for
/// balance of a shard a live owner serves, to an executor holding no ready secondary of it,
/// unless a secondary placed there for it has not said it is ready within the restore delay
/// (a service that never says so still gets its share, cold). A move for a joiner or for
/// balance to an executor that a waiting move takes a shard from waits too: the planner gave it
/// that shard counting on the other leaving, so made alone it would leave the executor more
/// than the plan meant, past its count ceiling (P15.2). What must move (shards without a live
/// holder, drains, cancels) moves now.
pub(in crate::lease) fn warm_first(
    state: Space<'_>,
    now_ms: u64,
    moves: Vec<(Move, MoveReason)>,
) -> (Vec<(Move, MoveReason)>, Vec<Move>) {
    let namespace = state.namespace();
    if namespace.replication.replicas <= 1 {
        return (moves, Vec::new());
    }
    let delay_ms = state.config().map_or(0, |config| {
        namespace
            .replication
            .restore_delay_ms(config.lease_duration_ms)
    });
    let mut now = Vec::with_capacity(moves.len());
    let mut waiting = Vec::new();
    for (step, reason) in moves {
        let cold = state.shard(step.shard).is_some_and(|entry| {
            let served = entry.owner.is_some() && entry.handoff.is_none();
            let warmth = entry.secondary_on(&step.to).filter(|s| s.lost.is_none());
            let ready = warmth.is_some_and(|s| s.ready_since_ms.is_some());
            let given_up =
                warmth.is_some_and(|s| now_ms >= s.placed_at_ms.saturating_add(delay_ms));
            served && !ready && !given_up
        });
        if cold && matches!(reason, MoveReason::Join | MoveReason::Balance) {
            waiting.push(step);
        } else {
            now.push((step, reason));
        }
    }
    if !waiting.is_empty() {
        let giving: BTreeSet<&str> = waiting
            .iter()
            .filter_map(|step| state.shard(step.shard)?.owner.as_deref())
            .collect();
        now.retain(|(step, reason)| {
            !(matches!(reason, MoveReason::Join | MoveReason::Balance)
                && giving.contains(step.to.as_str()))
        });
    }
    (now, waiting)
}

/// Every move of `state`'s plan, warm or not, pins honoured, at most `max_moves`.
fn placement_moves(
    state: Space<'_>,
    now_ms: u64,
    inputs: &PlacementInputs,
    max_moves: usize,
) -> Vec<(Move, MoveReason)> {
    // A rollout and maintenance mode decide alone whatever the leader knows of the loads: only
    // shards that must move do, onto the newest version during a rollout (P17.3), and drains
    // wait in maintenance (P17.4). A reshard under way decides alone too (P20.2): a merge's
    // moves bring pairs together and nothing else moves, and a split waits for the handoffs in
    // flight as maintenance does, starting none.
    let reshard = state.namespace().reshard.map(|pending| pending.kind);
    if reshard == Some(ReshardKind::Merge) {
        return reshard::merge_moves(state, now_ms, max_moves);
    }
    let splitting = reshard == Some(ReshardKind::Split);
    let rollout_to = rollout_target(state, now_ms);
    if rollout_to.is_some() || state.maintenance() || splitting {
        let constraints = Constraints {
            rollout_to,
            maintenance: state.maintenance() || splitting,
        };
        let moves = constrained::plan_moves(state, now_ms, constraints, max_moves);
        return honour_pins(state, now_ms, moves, max_moves);
    }
    // By count, every shard of the table may need a move (a million at a fleet's first start):
    // the plan's `max_moves` are chosen first and only they are classified, so a plan costs a
    // pass over the moves, not several lookups and a sort for each.
    let moves: Vec<(Move, MoveReason)> = match &inputs.loads {
        Loads::Counts => {
            let moves = count::cheapest_candidate_moves(state, now_ms, max_moves);
            classify(state, now_ms, moves)
        }
        Loads::Learning => {
            // Only what has no live holder moves, and joiners that hold nothing are served: a
            // shard never owned is placed (a first placement counts as a join), but a live
            // owner's shard goes only to a newcomer.
            // Cheapest test first: the moves are ascending, so the shard table is read in order.
            let newcomers = executors_holding_nothing(state);
            let mut shards = state.shards().focus();
            let moves: Vec<Candidate<'_>> = count::candidate_moves(state, now_ms)
                .into_iter()
                .filter(|step| {
                    let unowned = usize::try_from(step.shard)
                        .ok()
                        .and_then(|shard| shards.get(shard))
                        .is_some_and(|shard| shard.owner.is_none());
                    unowned
                        || newcomers.contains(step.to)
                        || reason_for(state, now_ms, step.shard, step.to) != MoveReason::Join
                })
                .collect();
            classify(
                state,
                now_ms,
                cheapest_moves(state, moves, max_moves, |step| (step.shard, step.to)),
            )
        }
        Loads::Reported(loads) => cheapest_moves(
            state,
            load::plan_moves(state, now_ms, inputs, loads, max_moves),
            max_moves,
            |(step, _)| (step.shard, step.to.as_str()),
        ),
    };
    honour_pins(state, now_ms, moves, max_moves)
}

/// `moves` with the operators' pins honoured (P17.4): a shard pinned to an executor that takes
/// shards goes nowhere else, and goes there if it is not there or on its way already; a pin to an
/// executor that takes no shards (lapsed, draining) is ignored until it does again. At most
/// `max_moves`, the cheapest first, ascending by shard.
fn honour_pins(
    state: Space<'_>,
    now_ms: u64,
    mut moves: Vec<(Move, MoveReason)>,
    max_moves: usize,
) -> Vec<(Move, MoveReason)> {
    let pins: BTreeMap<ShardId, &str> = state
        .pins()
        .filter(|(_, executor)| {
            state
                .executor(executor)
                .is_some_and(|executor| takes_shards(executor, now_ms))
        })
        .collect();
    if pins.is_empty() {
        return moves;
    }
    moves.retain(|(step, _)| pins.get(&step.shard).is_none_or(|pin| step.to == *pin));
    let planned: BTreeSet<ShardId> = moves.iter().map(|(step, _)| step.shard).collect();
    for (&shard, &pin) in &pins {
        let Some(entry) = state.shard(shard) else {
            continue;
        };
        let releasing_to = entry
            .handoff
            .as_ref()
            .and_then(|handoff| handoff.to.as_deref());
        let owned_by_pin = entry.owner.as_deref() == Some(pin);
        let in_place = (owned_by_pin && entry.handoff.is_none()) || releasing_to == Some(pin);
        if in_place || planned.contains(&shard) {
            continue;
        }
        let reason = if owned_by_pin {
            MoveReason::Cancel
        } else {
            MoveReason::Pin
        };
        moves.push((
            Move {
                shard,
                to: pin.to_owned(),
            },
            reason,
        ));
    }
    cheapest_moves(state, moves, max_moves, |(step, _)| {
        (step.shard, step.to.as_str())
    })
}

/// The [`Command::Rebalance`] making `moves`, or `None` when there are none.
fn plan_of(state: Space<'_>, now_ms: u64, moves: Vec<(Move, MoveReason)>) -> Option<Plan> {
    if moves.is_empty() {
        return None;
    }
    let (moves, reasons) = moves.into_iter().unzip();
    Some(Plan {
        command: Command::Rebalance {
            now_ms,
            planned_at: state.revision(),
            namespace: state.name().to_owned(),
            moves,
        },
        reasons,
    })
}

/// Executors that own nothing and have nothing coming: those that just joined.
fn executors_holding_nothing(state: Space<'_>) -> HashSet<&str> {
    let mut newcomers: HashSet<&str> = state
        .executors()
        .filter(|executor| executor.owned_shards.is_empty())
        .map(|executor| executor.id.as_str())
        .collect();
    for (_, handoff) in state.releasing() {
        if let Some(target) = handoff.to.as_deref() {
            newcomers.remove(target);
        }
    }
    newcomers
}

/// The moves a plan by count makes, each with why, from the state of its shard.
fn classify(state: Space<'_>, now_ms: u64, moves: Vec<Candidate<'_>>) -> Vec<(Move, MoveReason)> {
    moves
        .into_iter()
        .map(|step| {
            let reason = reason_for(state, now_ms, step.shard, step.to);
            (step.to_move(), reason)
        })
        .collect()
}

/// Why `shard` goes to `to`, when it is not for load balance: a cancelled handoff when `to` is
/// its owner, else why it is moving at all ([`why_it_moves`]).
pub(super) fn reason_for(state: Space<'_>, now_ms: u64, shard: ShardId, to: &str) -> MoveReason {
    let owned_by_receiver = state
        .shard(shard)
        .and_then(|entry| entry.owner.as_deref())
        .is_some_and(|owner| owner == to);
    if owned_by_receiver {
        MoveReason::Cancel
    } else {
        why_it_moves(state, now_ms, shard)
    }
}

/// Why `shard` must move when it is not for balance: it was never owned (a first placement
/// counts as a join), its owner left or its handoff's target did, its owner lapsed or is
/// draining; a shard of a live owner moves to spread counts to a joiner.
pub(super) fn why_it_moves(state: Space<'_>, now_ms: u64, shard: ShardId) -> MoveReason {
    let Some(entry) = state.shard(shard) else {
        return MoveReason::Join;
    };
    let Some(owner) = entry.owner.as_deref() else {
        return if entry.epoch == 0 {
            MoveReason::Join
        } else {
            MoveReason::Departure
        };
    };
    match state.executor(owner) {
        Some(executor) if executor.lease_lapsed(now_ms) => MoveReason::Expiry,
        // Draining, or passed over for a preferred executor (P18.4): it hands its shards on.
        Some(executor) if state.hands_on(executor, now_ms) => MoveReason::Drain,
        Some(_) => {
            let target_gone = entry.handoff.as_ref().is_some_and(|handoff| {
                handoff
                    .to
                    .as_deref()
                    .and_then(|target| state.executor(target))
                    .is_none_or(|target| !state.takes_shards(target, now_ms))
            });
            if target_gone {
                MoveReason::Departure
            } else {
                MoveReason::Join
            }
        }
        None => MoveReason::Departure,
    }
}

/// What a move costs the shard's availability, cheapest first (the order of the variants is
/// the order of the costs).
#[derive(Debug, Clone, Copy, PartialEq, Eq, PartialOrd, Ord)]
enum MoveCost {
    /// A releasing shard placed back with its old owner: no revoke, no new epoch, nothing stops.
    CancelHandoff,
    /// An unowned shard: served as soon as the grant lands.
    GrantUnowned,
    /// A releasing shard given another target: its revoke is already under way.
    Retarget,
    /// A delivered shard: its owner stops serving it until the handoff completes (P5.2).
    Revoke,
}

fn move_cost(entry: Option<&Shard>, to: &str) -> MoveCost {
    match entry {
        Some(entry) => match (&entry.owner, &entry.handoff) {
            (None, _) => MoveCost::GrantUnowned,
            (Some(owner), Some(_)) if owner == to => MoveCost::CancelHandoff,
            (Some(_), Some(_)) => MoveCost::Retarget,
            (Some(_), None) => MoveCost::Revoke,
        },
        // The planners only name shards of the state.
        None => MoveCost::Revoke,
    }
}

/// The `max_moves` cheapest moves of a plan (ties by shard), ascending by shard: a selection,
/// linear in the moves, and one lookup of each move's shard, in shard order where the planner
/// gave them so (sequential reads of the shard table are cheap).
pub(in crate::lease) fn cheapest_moves<T>(
    state: Space<'_>,
    mut moves: Vec<T>,
    max_moves: usize,
    step: impl Fn(&T) -> (ShardId, &str),
) -> Vec<T> {
    if moves.len() > max_moves {
        let Some(last) = max_moves.checked_sub(1) else {
            return Vec::new();
        };
        let mut shards = state.shards().focus();
        let mut ranked: Vec<(MoveCost, ShardId, usize)> = moves
            .iter()
            .enumerate()
            .map(|(index, item)| {
                let (shard, to) = step(item);
                let entry = usize::try_from(shard)
                    .ok()
                    .and_then(|shard| shards.get(shard));
                (move_cost(entry, to), shard, index)
            })
            .collect();
        ranked.select_nth_unstable(last);
        let mut chosen = vec![false; moves.len()];
        for &(_, _, index) in &ranked[..max_moves] {
            chosen[index] = true;
        }
        let mut position = 0;
        moves.retain(|_| {
            let keep = chosen[position];
            position += 1;
            keep
        });
    }
    moves.sort_by_key(|item| step(item).0);
    moves
}
