//! Constrained placement: during a rollout (P17.3) and in maintenance mode (P17.4) only the
//! shards that must move do.
//!
//! **A rollout**: while the executors that take shards run more than one application version,
//! shards move only to executors of the newest.
//!
//! A rolling deploy replaces executors one at a time. Spreading to each newcomer as it joins,
//! or balancing onto an executor of the old version, moves a shard again when that executor is
//! replaced in turn: a shard would change hands once per deploy step instead of once per deploy.
//! So while the versions are mixed:
//! - a shard whose owner serves it and takes shards stays where it is: no balance moves and no
//!   spreading to joiners (they wait until the versions agree, when the usual planner runs);
//! - a shard that must move (never owned, its owner left or drains, its handoff's target is gone)
//!   goes to an executor of the newest version: its ready secondary ready longest when it has one
//!   there (P19.3), else the one holding fewest shards for its capacity (ties by id), or stays
//!   with the target its handoff names when that is one;
//! - a handoff under way to an executor that is not of the newest version is cancelled when its
//!   owner still takes shards (nothing changes hands), and retargeted otherwise;
//! - a lapsed owner keeps its shards until it is reaped (P3.8), as always.
//!
//! Versions are compared by [`compare_stated_app_versions`] (an executor that stated none is
//! older than any that did), so a fleet that states no versions never has a rollout.
//!
//! **Maintenance mode** (P17.4) freezes placement for balance, joiners and drains: the same rules
//! with every executor that takes shards a receiver, and a draining owner keeping what it holds
//! (a shard already releasing from it goes on to a live holder). Shards nobody holds are still
//! placed, so a lease that lapses during maintenance does not leave its shards unserved.

use std::cmp::{Ordering, Reverse};
use std::collections::{BinaryHeap, HashMap};

use leasehold_api::wire::{compare_stated_app_versions, rollout_version};

use super::super::{Executor, Move, ShardId, Space};
use super::{capacity_of, cheapest_moves, why_it_moves, MoveReason};

/// The newest application version among the executors that take shards at `now_ms`, when they
/// run more than one (a rollout is under way); `None` otherwise.
pub fn rollout_target(state: Space<'_>, now_ms: u64) -> Option<&str> {
    rollout_version(
        state
            .executors()
            .filter(|executor| state.takes_shards(executor, now_ms))
            .map(|executor| executor.app_version.as_deref()),
    )
}

/// An executor of the newest version: what it holds once the handoffs under way complete, and
/// its weight.
#[derive(Debug)]
struct Receiver<'a> {
    id: &'a str,
    capacity: u64,
    holding: u64,
}

/// A shard owner as the plan sees it.
#[derive(Debug)]
struct Owner<'a> {
    executor: &'a Executor,
    takes: bool,
    /// Its place among the receivers, when it is one.
    position: Option<usize>,
}

/// A receiver's place in the queue of who gets the next shard: fewest shards for its capacity,
/// then lowest id (its position in id order).
#[derive(Debug, PartialEq, Eq)]
pub(super) struct Fill {
    pub(super) holding: u64,
    pub(super) capacity: u64,
    pub(super) position: usize,
}

impl Ord for Fill {
    fn cmp(&self, other: &Self) -> Ordering {
        // holding ÷ capacity compared exactly, by cross-multiplying.
        let this = u128::from(self.holding) * u128::from(other.capacity);
        let that = u128::from(other.holding) * u128::from(self.capacity);
        this.cmp(&that)
            .then_with(|| self.position.cmp(&other.position))
    }
}

impl PartialOrd for Fill {
    fn partial_cmp(&self, other: &Self) -> Option<Ordering> {
        Some(self.cmp(other))
    }
}

/// What constrains a plan.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(in crate::lease) struct Constraints<'a> {
    /// During a rollout, the newest version: only its executors receive shards.
    pub rollout_to: Option<&'a str>,
    /// Maintenance mode: draining owners keep their shards.
    pub maintenance: bool,
}

impl Constraints<'_> {
    fn receives(&self, state: Space<'_>, executor: &Executor, now_ms: u64) -> bool {
        state.takes_shards(executor, now_ms)
            && self.rollout_to.is_none_or(|newest| {
                executor.app_version.as_deref().is_some_and(|version| {
                    compare_stated_app_versions(Some(version), Some(newest)).is_eq()
                })
            })
    }
}

/// The moves of a plan under `constraints`, at most `max_moves`, the cheapest first, ascending by
/// shard, each with why.
pub(in crate::lease) fn plan_moves(
    state: Space<'_>,
    now_ms: u64,
    constraints: Constraints<'_>,
    max_moves: usize,
) -> Vec<(Move, MoveReason)> {
    let mut receivers: Vec<Receiver<'_>> = state
        .executors()
        .filter(|executor| constraints.receives(state, executor, now_ms))
        .map(|executor| Receiver {
            id: executor.id.as_str(),
            capacity: capacity_of(executor),
            holding: 0,
        })
        .collect();
    if receivers.is_empty() {
        return Vec::new();
    }
    let positions: HashMap<&str, usize> = receivers
        .iter()
        .enumerate()
        .map(|(position, receiver)| (receiver.id, position))
        .collect();
    let Scan {
        mut moves,
        homeless,
    } = scan(state, now_ms, constraints, &positions, &mut receivers);
    place_least_full(state, now_ms, &receivers, &positions, homeless, &mut moves);
    cheapest_moves(state, moves, max_moves, |(step, _)| {
        (step.shard, step.to.as_str())
    })
}

/// The shard table classified: the moves it needs whatever else happens (handoffs cancelled),
/// and the shards that must find a receiver.
struct Scan {
    moves: Vec<(Move, MoveReason)>,
    homeless: Vec<ShardId>,
}

/// The namespace's executors by id, each with whether it takes shards and its place among the
/// receivers: each owner looked up once, not once per shard it holds.
fn owners_of<'a>(
    state: Space<'a>,
    now_ms: u64,
    positions: &HashMap<&str, usize>,
) -> HashMap<&'a str, Owner<'a>> {
    state
        .executors()
        .map(|executor| {
            let id = executor.id.as_str();
            let owner = Owner {
                executor,
                takes: state.takes_shards(executor, now_ms),
                position: positions.get(id).copied(),
            };
            (id, owner)
        })
        .collect()
}

/// One pass over the shard table: what each receiver holds already (shards it serves or that
/// are on their way to it), the handoffs to cancel, and the shards without a holder.
fn scan(
    state: Space<'_>,
    now_ms: u64,
    constraints: Constraints<'_>,
    positions: &HashMap<&str, usize>,
    receivers: &mut [Receiver<'_>],
) -> Scan {
    let owners = owners_of(state, now_ms, positions);
    let mut moves: Vec<(Move, MoveReason)> = Vec::new();
    let mut homeless: Vec<ShardId> = Vec::new();
    for shard in state.shards() {
        let target = shard
            .handoff
            .as_ref()
            .and_then(|handoff| handoff.to.as_deref())
            .and_then(|target| positions.get(target).copied());
        let known = shard.owner.as_deref().and_then(|owner| owners.get(owner));
        let owner = known.map(|known| known.executor);
        let owner_takes = known.is_some_and(|known| known.takes);
        let owner_position = known.and_then(|known| known.position);
        match (owner, &shard.handoff, target) {
            // On its way to an executor of the newest version: it stays on that course.
            (_, Some(_), Some(target)) => {
                if let Some(receiver) = receivers.get_mut(target) {
                    receiver.holding += 1;
                }
            }
            // Served by a live owner: it stays.
            (Some(_), None, _) if owner_takes => {
                if let Some(receiver) = owner_position.and_then(|at| receivers.get_mut(at)) {
                    receiver.holding += 1;
                }
            }
            // Releasing to an executor not of the newest version (or to none) from an owner that
            // still takes shards: the handoff is cancelled, nothing changes hands.
            (Some(owner), Some(_), None) if owner_takes => {
                if let Some(receiver) = owner_position.and_then(|at| receivers.get_mut(at)) {
                    receiver.holding += 1;
                }
                moves.push((
                    Move {
                        shard: shard.id,
                        to: owner.id.clone(),
                    },
                    MoveReason::Cancel,
                ));
            }
            // Never owned, or its owner left: placed.
            (None, _, _) => homeless.push(shard.id),
            (Some(owner), handoff, _) => {
                // A draining (or passed over, P18.4) owner hands its shards on (but for
                // maintenance), and a releasing one goes on to a live holder; a lapsed owner
                // keeps the rest until it is reaped (P3.8).
                if (state.hands_on(owner, now_ms) && !constraints.maintenance) || handoff.is_some()
                {
                    homeless.push(shard.id);
                }
            }
        }
    }
    Scan { moves, homeless }
}

/// Each homeless shard, in id order, to its ready secondary ready longest among the receivers
/// (P19.3: it lands warm), else to the receiver holding the fewest for its capacity (ties to the
/// lowest id), counting the shards given before it.
fn place_least_full(
    state: Space<'_>,
    now_ms: u64,
    receivers: &[Receiver<'_>],
    positions: &HashMap<&str, usize>,
    homeless: Vec<ShardId>,
    moves: &mut Vec<(Move, MoveReason)>,
) {
    let mut holding: Vec<u64> = receivers.iter().map(|receiver| receiver.holding).collect();
    let fill_of = |holding: &[u64], position: usize| Fill {
        holding: holding.get(position).copied().unwrap_or(0),
        capacity: receivers
            .get(position)
            .map_or(1, |receiver| receiver.capacity),
        position,
    };
    // Entries go stale when a shard goes to a warm receiver; a stale one is pushed again with
    // what its receiver holds now before it is used.
    let mut queue: BinaryHeap<Reverse<Fill>> = (0..receivers.len())
        .map(|position| Reverse(fill_of(&holding, position)))
        .collect();
    let replicated = state.namespace().replication.replicas > 1;
    for shard in homeless {
        let warm = state.shard(shard).filter(|_| replicated).and_then(|entry| {
            entry
                .ready_longest_first()
                .into_iter()
                .find_map(|secondary| positions.get(secondary.executor.as_str()).copied())
        });
        let position = match warm {
            Some(position) => position,
            None => loop {
                let Some(Reverse(fill)) = queue.pop() else {
                    return;
                };
                let current = fill_of(&holding, fill.position);
                if current == fill {
                    break fill.position;
                }
                queue.push(Reverse(current));
            },
        };
        let Some(receiver) = receivers.get(position) else {
            return;
        };
        moves.push((
            Move {
                shard,
                to: receiver.id.to_owned(),
            },
            why_it_moves(state, now_ms, shard),
        ));
        if let Some(held) = holding.get_mut(position) {
            *held += 1;
        }
        queue.push(Reverse(fill_of(&holding, position)));
    }
}
