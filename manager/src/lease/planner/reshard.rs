//! Placement while a merge is under way (P20.2): each pair of shards that will become one is
//! brought to one executor with ordinary handoffs, under the plan's cap, before the leader's
//! entry joins them. Nothing else moves meanwhile: a balance move could part a pair again, and
//! the balance that the merged layout needs is planned once it exists.
//!
//! A pair goes to, in order: the executor either shard is pinned to (a merge of shards pinned
//! apart is refused, P20.2); where the lower shard is, or is going, if that executor takes
//! shards; where the higher one is, or is going, likewise; otherwise the executor holding fewest
//! shards for its capacity. A pair on an executor that no longer takes shards (draining, or
//! passed over for a preferred label) moves whole to another; a lapsed owner's shards wait until
//! it is reaped (P3.8), as in every plan.

use std::collections::BTreeMap;

use super::super::{Executor, Move, Shard, Space};
use super::{capacity_of, MoveReason};

/// Where a shard is going: its handoff's target while it is releasing, else its owner.
fn destination(shard: &Shard) -> Option<&str> {
    match &shard.handoff {
        Some(handoff) => handoff.to.as_deref(),
        None => shard.owner.as_deref(),
    }
}

/// The moves that bring each pair of the merge under way together, at most `max_moves`, in
/// shard order; empty when no merge is under way or no executor takes shards.
pub(super) fn merge_moves(
    state: Space<'_>,
    now_ms: u64,
    max_moves: usize,
) -> Vec<(Move, MoveReason)> {
    let takers: Vec<&Executor> = state
        .executors()
        .filter(|executor| state.takes_shards(executor, now_ms))
        .collect();
    if takers.is_empty() {
        return Vec::new();
    }
    let takes = |id: &str| takers.iter().any(|executor| executor.id == id);
    // Shards each taker will hold, for the fewest-shards choice; a pair placed there adds two.
    let mut holding: BTreeMap<&str, u64> = takers
        .iter()
        .map(|executor| (executor.id.as_str(), executor.owned_shards.len() as u64))
        .collect();
    let mut moves = Vec::new();
    for (low, high) in state.namespace().merge_pairs() {
        if moves.len() >= max_moves {
            break;
        }
        let lapsed_owner = [low, high].iter().any(|shard| {
            shard.owner.as_deref().is_some_and(|owner| {
                state
                    .executor(owner)
                    .is_none_or(|executor| executor.lease_lapsed(now_ms))
            })
        });
        if lapsed_owner {
            continue;
        }
        let settled =
            super::super::state::together(low, high) && low.owner.as_deref().is_none_or(takes);
        let unowned = low.owner.is_none() && high.owner.is_none();
        if settled && !unowned {
            continue;
        }
        let pinned = [low.id, high.id]
            .into_iter()
            .filter_map(|shard| state.pin(shard))
            .find(|pin| takes(pin));
        let target = pinned
            .or_else(|| destination(low).filter(|to| takes(to)))
            .or_else(|| destination(high).filter(|to| takes(to)))
            .or_else(|| {
                takers
                    .iter()
                    .min_by(|a, b| {
                        let fill = |executor: &Executor| {
                            u128::from(holding.get(executor.id.as_str()).copied().unwrap_or(0))
                        };
                        // holding ÷ capacity compared exactly, by cross-multiplying.
                        (fill(a) * u128::from(capacity_of(b)))
                            .cmp(&(fill(b) * u128::from(capacity_of(a))))
                            .then_with(|| a.id.cmp(&b.id))
                    })
                    .map(|executor| executor.id.as_str())
            });
        let Some(target) = target else {
            continue;
        };
        for shard in [low, high] {
            let in_place = shard.owner.as_deref() == Some(target) && shard.handoff.is_none();
            let on_its_way = shard
                .handoff
                .as_ref()
                .is_some_and(|handoff| handoff.to.as_deref() == Some(target));
            if in_place || on_its_way || moves.len() >= max_moves {
                continue;
            }
            if shard.owner.as_deref() != Some(target) {
                *holding.entry(target).or_default() += 1;
            }
            moves.push((
                Move {
                    shard: shard.id,
                    to: target.to_owned(),
                },
                MoveReason::Reshard,
            ));
        }
    }
    moves.sort_by_key(|(step, _)| step.shard);
    moves
}
