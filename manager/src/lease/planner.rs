//! The rebalance planner (P5.4): an even spread reached with the fewest moves.
//!
//! Pure and deterministic: the same state and `now_ms` give the same plan on any node, with ties
//! broken by executor id and shard number. The plan is proposed as a [`Command::Rebalance`]
//! conditional on the revision it was read at (P2.4, P5.1).
//!
//! How shards are counted:
//! - A shard's *prospective holder* is its owner, or, while it is releasing, its handoff target:
//!   shards releasing TO an executor count towards its load, shards releasing FROM it do not.
//! - Only live executors (lease not lapsed at `now_ms`) take part. A lapsed but not yet reaped
//!   executor receives nothing and keeps what it owns until the reap (P3.8), so its shards are
//!   left out of the count; a shard releasing to it goes back in the pool to be retargeted.
//! - The distributable shards (all but those a lapsed owner keeps) are split so every live
//!   executor gets `floor(S/E)` or `ceil(S/E)`. The `ceil` slots go to the executors holding
//!   most now (ties by id), which is what minimises moves: each executor keeps up to its quota
//!   (delivered shards first, so a move rather retargets a pending handoff than revokes a shard
//!   being served), and only the excess, unowned, targetless shards move.
//! - A releasing shard placed back with its own old owner cancels the handoff: no revoke, no new
//!   epoch. Otherwise pool shards fill the deficits in executor-id order, ascending shards.
//!
//! - A draining executor takes no part either: it is given nothing, a shard releasing to it goes
//!   back in the pool, and its delivered shards are distributable (they leave through the normal
//!   handoff, P5.2). Unlike a lapsed one, it is alive and still serving until each revoke lands.
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

/// What one live executor holds prospectively.
#[derive(Debug, Default)]
struct Holdings {
    /// Owned, not releasing: being served now.
    delivered: Vec<ShardId>,
    /// Releasing to it from another owner.
    incoming: Vec<ShardId>,
}

impl Holdings {
    fn load(&self) -> usize {
        self.delivered.len().saturating_add(self.incoming.len())
    }
}

/// The moves of the plan, ascending by shard.
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
    // shard enters the pool at most once (from the scan, or as its live holder's excess).
    let mut pool: Vec<ShardId> = Vec::new();
    for shard in state.shards() {
        match (&shard.owner, &shard.handoff) {
            (None, _) => pool.push(shard.id),
            (Some(owner), None) => {
                if let Some(holdings) = live.get_mut(owner.as_str()) {
                    holdings.delivered.push(shard.id);
                } else if state
                    .executor(owner)
                    .is_some_and(|executor| executor.draining && !executor.lease_lapsed(now_ms))
                {
                    // A live draining owner hands its shards on.
                    pool.push(shard.id);
                }
                // A lapsed owner keeps its shards until it is reaped: not distributable.
            }
            (Some(_), Some(handoff)) => {
                match handoff
                    .to
                    .as_deref()
                    .and_then(|target| live.get_mut(target))
                {
                    Some(holdings) => holdings.incoming.push(shard.id),
                    None => pool.push(shard.id),
                }
            }
        }
    }

    let distributable = live
        .values()
        .map(Holdings::load)
        .fold(pool.len(), usize::saturating_add);
    let executor_count = live.len();
    let base_quota = distributable / executor_count;
    let ceil_slots = distributable % executor_count;
    let mut by_load: Vec<(&str, usize)> = live
        .iter()
        .map(|(&executor_id, holdings)| (executor_id, holdings.load()))
        .collect();
    by_load.sort_by(|a, b| b.1.cmp(&a.1).then_with(|| a.0.cmp(b.0)));
    let quotas: BTreeMap<&str, usize> = by_load
        .iter()
        .enumerate()
        .map(|(rank, &(executor_id, _))| (executor_id, base_quota + usize::from(rank < ceil_slots)))
        .collect();

    let mut deficits: BTreeMap<&str, usize> = BTreeMap::new();
    for (&executor_id, holdings) in &live {
        let quota = quotas.get(executor_id).copied().unwrap_or(base_quota);
        let keep_order = holdings.delivered.iter().chain(holdings.incoming.iter());
        pool.extend(keep_order.skip(quota).copied());
        deficits.insert(executor_id, quota.saturating_sub(holdings.load()));
    }
    pool.sort_unstable();

    let mut moves = Vec::with_capacity(pool.len());
    let mut unplaced = Vec::with_capacity(pool.len());
    for shard in pool {
        let old_owner_with_room = state.shard(shard).and_then(|entry| {
            entry.handoff.as_ref()?;
            let owner = entry.owner.as_deref()?;
            deficits.get(owner).filter(|deficit| **deficit > 0)?;
            Some(owner)
        });
        match old_owner_with_room {
            Some(owner) => {
                if let Some(deficit) = deficits.get_mut(owner) {
                    *deficit -= 1;
                }
                moves.push(Move {
                    shard,
                    to: owner.to_owned(),
                });
            }
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
