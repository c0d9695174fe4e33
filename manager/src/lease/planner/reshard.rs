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

use std::cmp::Reverse;
use std::collections::{BinaryHeap, HashSet};

use super::super::state::together;
use super::super::{Executor, Move, Shard, Space};
use super::constrained::Fill;
use super::{capacity_of, MoveReason};

/// Where a shard is going: its handoff's target while it is releasing, else its owner.
fn destination(shard: &Shard) -> Option<&str> {
    match &shard.handoff {
        Some(handoff) => handoff.to.as_deref(),
        None => shard.owner.as_deref(),
    }
}

/// The moves that bring each pair of the merge under way together, at most `max_moves`, in
/// shard order; empty when no merge is under way or no executor takes shards. A plan costs a
/// pass over the pairs, and a pair needing a new executor a step of a queue of them by fill.
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
    let takes: HashSet<&str> = takers.iter().map(|executor| executor.id.as_str()).collect();
    // Who gets a pair that has nowhere to go: fewest shards for its capacity, a pair adding two.
    let mut least_full: BinaryHeap<Reverse<Fill>> = takers
        .iter()
        .enumerate()
        .map(|(position, executor)| {
            Reverse(Fill {
                holding: executor.owned_shards.len() as u64,
                capacity: capacity_of(executor),
                position,
            })
        })
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
        let settled = together(low, high)
            && low
                .owner
                .as_deref()
                .is_none_or(|owner| takes.contains(owner));
        let unowned = low.owner.is_none() && high.owner.is_none();
        if settled && !unowned {
            continue;
        }
        let pinned = [low.id, high.id]
            .into_iter()
            .filter_map(|shard| state.pin(shard))
            .find(|pin| takes.contains(pin));
        let target = pinned
            .or_else(|| destination(low).filter(|to| takes.contains(to)))
            .or_else(|| destination(high).filter(|to| takes.contains(to)))
            .or_else(|| {
                let Reverse(fill) = least_full.pop()?;
                let executor = takers.get(fill.position)?;
                least_full.push(Reverse(Fill {
                    holding: fill.holding + 2,
                    ..fill
                }));
                Some(executor.id.as_str())
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
