//! The rebalance planner (P5.4): an even spread reached with the fewest moves.
//!
//! Pure and deterministic: the same state and `now_ms` give the same plan on any node, with ties
//! broken by executor id and shard number. The plan is proposed as a [`Command::Rebalance`]
//! conditional on the revision it was read at (P2.4, P5.1).
//!
//! What is minimised is the number of shards that change hands (each a new epoch, I2):
//! - A live executor (lease not lapsed at `now_ms`, not draining) *owns* its delivered shards
//!   and its releasing ones (shards releasing FROM it): it can keep either at no cost, a
//!   releasing one by cancelling the handoff (no revoke, no new epoch).
//! - A lapsed but not yet reaped executor receives nothing and keeps what it owns until the reap
//!   (P3.8), so its shards are left out of the count, except those already releasing from it.
//! - A draining executor receives nothing; its delivered shards leave through the normal
//!   handoff (P5.2). Unlike a lapsed one, it is alive and still serving until each revoke lands.
//! - The distributable shards are split so every live executor gets `floor(S/E)` or
//!   `ceil(S/E)`. The `ceil` slots go to the executors owning most now (ties by id), and each
//!   keeps what it owns up to its quota, delivered shards first: every other distributable
//!   shard must change hands, and no plan can keep more in place.
//! - Shards that must move fill the deficits: a releasing shard stays with the target its
//!   handoff names while that target has room (no entry in the plan); the rest go in
//!   executor-id order, ascending shards (grants of unowned shards, retargets, revokes).
//!
//! A joining executor is under quota, so it gets shards from the very next plan (P5.4): unowned
//! ones at once, others as their owners release them.
//!
//! One plan is one log entry, replicated to every follower inside one AppendEntries, so a plan
//! carries at most [`MAX_MOVES_PER_PLAN`] moves whatever the shard count: at a million shards an
//! uncapped plan is megabytes and outlasts the replication timeout (docs/BENCHMARKS.md, B5). A
//! capped plan takes the cheapest moves first (cancelled handoffs, then unowned grants, then
//! retargeted handoffs, then revokes), and the leader plans again as soon as it commits: every
//! step is a subset of the fewest-moves plan for its state, so the steps together make as many
//! moves as one uncapped plan would and end at the same even spread.

use std::collections::BTreeMap;

use super::{Command, LeaseState, Move, ShardId};

/// Most moves in one [`Command::Rebalance`]: about 120 KB of log entry (a move is a shard number
/// and an `ex-{index}` id), which a follower receives, decodes and syncs well inside one
/// heartbeat interval.
pub const MAX_MOVES_PER_PLAN: usize = 8_192;

/// Plans a rebalance at `now_ms` of at most [`MAX_MOVES_PER_PLAN`] moves, or `None` when the
/// state is already balanced (or there is no live executor, or the cluster is not initialised).
/// The leader plans again after committing one: a capped plan leaves moves for the next.
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
    let moves = cheapest_moves(state, plan_moves(state, now_ms), max_moves);
    if moves.is_empty() {
        return None;
    }
    Some(Command::Rebalance {
        now_ms,
        planned_at: state.revision(),
        moves,
    })
}

/// What a move costs the shard's availability, cheapest first.
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

fn move_cost(state: &LeaseState, step: &Move) -> MoveCost {
    match state.shard(step.shard) {
        Some(entry) => match (&entry.owner, &entry.handoff) {
            (None, _) => MoveCost::GrantUnowned,
            (Some(owner), Some(_)) if *owner == step.to => MoveCost::CancelHandoff,
            (Some(_), Some(_)) => MoveCost::Retarget,
            (Some(_), None) => MoveCost::Revoke,
        },
        // `plan_moves` only names shards of the state.
        None => MoveCost::Revoke,
    }
}

/// The `max_moves` cheapest moves of a plan (ties by shard), ascending by shard.
fn cheapest_moves(state: &LeaseState, mut moves: Vec<Move>, max_moves: usize) -> Vec<Move> {
    if moves.len() <= max_moves {
        return moves;
    }
    moves.sort_by_cached_key(|step| (move_cost(state, step), step.shard));
    moves.truncate(max_moves);
    moves.sort_by_key(|step| step.shard);
    moves
}

/// What one live executor owns: the shards it would keep at no cost.
#[derive(Debug, Default)]
struct Holdings {
    /// Owned, not releasing: being served now.
    delivered: Vec<ShardId>,
    /// Owned and releasing to another executor: kept by cancelling the handoff, which mints no
    /// epoch and stops nothing that is not stopped already.
    releasing: Vec<ShardId>,
    /// Releasing to it from another owner: it gets them when their handoffs complete.
    incoming: usize,
}

impl Holdings {
    fn owned(&self) -> usize {
        self.delivered.len().saturating_add(self.releasing.len())
    }

    /// What it will hold once the handoffs under way complete.
    fn prospective(&self) -> usize {
        self.delivered.len().saturating_add(self.incoming)
    }
}

/// The moves of the plan, ascending by shard.
///
/// The count that is minimised is the shards that change hands (each a new epoch, I2), not the
/// entries of the plan: a live executor keeps what it owns up to its quota, delivered shards
/// first, then its releasing ones (their handoffs cancelled); every other distributable shard
/// goes to a live executor under quota, a releasing one preferably to the target its handoff
/// already names (no new revoke, no entry in the plan).
pub(super) fn plan_moves(state: &LeaseState, now_ms: u64) -> Vec<Move> {
    if state.config().is_none() {
        return Vec::new();
    }
    let mut live: BTreeMap<&str, Holdings> = state
        .executors()
        .filter(|executor| !executor.lease_lapsed(now_ms) && !executor.draining)
        .map(|executor| (executor.id.as_str(), Holdings::default()))
        .collect();
    if live.is_empty() {
        return Vec::new();
    }
    // A vector, sorted once below: at a million shards this is most of a plan's cost, and a
    // shard enters the pool at most once (from the scan, or as its live owner's excess).
    let mut pool: Vec<ShardId> = Vec::new();
    let mut distributable = 0usize;
    for shard in state.shards() {
        if let Some(target) = shard
            .handoff
            .as_ref()
            .and_then(|handoff| handoff.to.as_deref())
            .and_then(|target| live.get_mut(target))
        {
            target.incoming += 1;
        }
        let owner_holdings = shard.owner.as_deref().and_then(|owner| live.get_mut(owner));
        match (owner_holdings, &shard.owner, &shard.handoff) {
            (Some(holdings), _, None) => holdings.delivered.push(shard.id),
            (Some(holdings), _, Some(_)) => holdings.releasing.push(shard.id),
            (None, None, _) => pool.push(shard.id),
            (None, Some(owner), handoff) => {
                let owner_is_live_draining = state
                    .executor(owner)
                    .is_some_and(|executor| executor.draining && !executor.lease_lapsed(now_ms));
                if owner_is_live_draining || handoff.is_some() {
                    // A live draining owner hands its shards on; a shard releasing from a
                    // lapsed owner goes on to a live holder (it completes on the expiry).
                    pool.push(shard.id);
                } else {
                    // A lapsed owner keeps its shards until it is reaped: not distributable.
                    continue;
                }
            }
        }
        distributable += 1;
    }

    let executor_count = live.len();
    let base_quota = distributable / executor_count;
    let ceil_slots = distributable % executor_count;
    // A `ceil` quota keeps one more shard in place only for an executor owning more than the
    // floor: those get the `ceil` slots first. Any other assignment of the rest keeps as many;
    // they go to the executors holding most prospectively, which is how the last plan left
    // them, so planning again moves nothing (ties by id).
    let mut ranked: Vec<(&str, bool, usize)> = live
        .iter()
        .map(|(&executor_id, holdings)| {
            (
                executor_id,
                holdings.owned() > base_quota,
                holdings.prospective(),
            )
        })
        .collect();
    ranked.sort_by(|a, b| {
        b.1.cmp(&a.1)
            .then_with(|| b.2.cmp(&a.2))
            .then_with(|| a.0.cmp(b.0))
    });
    let quotas: BTreeMap<&str, usize> = ranked
        .iter()
        .enumerate()
        .map(|(rank, &(executor_id, ..))| {
            (executor_id, base_quota + usize::from(rank < ceil_slots))
        })
        .collect();

    let mut moves = Vec::with_capacity(pool.len());
    let mut deficits: BTreeMap<&str, usize> = BTreeMap::new();
    for (&executor_id, holdings) in &live {
        let quota = quotas.get(executor_id).copied().unwrap_or(base_quota);
        let kept_delivered = holdings.delivered.len().min(quota);
        pool.extend(holdings.delivered.iter().skip(kept_delivered).copied());
        let room = quota - kept_delivered;
        let cancel_handoff = holdings.releasing.len().min(room);
        for &shard in holdings.releasing.iter().take(cancel_handoff) {
            moves.push(Move {
                shard,
                to: executor_id.to_owned(),
            });
        }
        pool.extend(holdings.releasing.iter().skip(cancel_handoff).copied());
        deficits.insert(executor_id, room - cancel_handoff);
    }
    pool.sort_unstable();

    // A releasing shard stays with the target its handoff names while that target has room:
    // its revoke is already under way and the plan needs no entry for it.
    let mut unplaced = Vec::with_capacity(pool.len());
    for shard in pool {
        let current_target_with_room = state.shard(shard).and_then(|entry| {
            let target = entry.handoff.as_ref()?.to.as_deref()?;
            deficits.get(target).filter(|deficit| **deficit > 0)?;
            Some(target)
        });
        match current_target_with_room.and_then(|target| deficits.get_mut(target)) {
            Some(deficit) => *deficit -= 1,
            None => unplaced.push(shard),
        }
    }
    let mut unplaced = unplaced.into_iter();
    for (&executor_id, deficit) in &mut deficits {
        while *deficit > 0 {
            let Some(shard) = unplaced.next() else {
                break;
            };
            moves.push(Move {
                shard,
                to: executor_id.to_owned(),
            });
            *deficit -= 1;
        }
    }
    moves.sort_by_key(|step| step.shard);
    moves
}
