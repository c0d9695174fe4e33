//! Placement by count (P5.4, P15.2): shard counts in proportion to capacity, reached with the
//! fewest shards changing hands.
//!
//! What is minimised is the number of shards that change hands (each a new epoch, I2):
//! - A live executor (lease not lapsed at `now_ms`, not draining) *owns* its delivered shards
//!   and its releasing ones (shards releasing FROM it): it can keep either at no cost, a
//!   releasing one by cancelling the handoff (no revoke, no new epoch).
//! - A lapsed but not yet reaped executor receives nothing and keeps what it owns until the reap
//!   (P3.8), so its shards are left out of the count, except those already releasing from it.
//! - A draining executor receives nothing; its delivered shards leave through the normal
//!   handoff (P5.2). Unlike a lapsed one, it is alive and still serving until each revoke lands.
//! - The distributable shards are split in proportion to capacity: an executor's share is
//!   `S × capacity ÷ total capacity`, and it gets the floor or the ceiling of it (with equal
//!   capacities, `floor(S/E)` or `ceil(S/E)`: owners differ by at most one). The ceilings go to
//!   the executors owning more than their floor first (ties by what they hold, then id), and
//!   each keeps what it owns up to its quota, delivered shards first: every other distributable
//!   shard must change hands, and no plan can keep more in place.
//! - Shards that must move fill the deficits: a releasing shard stays with the target its
//!   handoff names while that target has room (no entry in the plan); the rest go in
//!   executor-id order, ascending shards (grants of unowned shards, retargets, revokes).
//!
//! A joining executor is under quota, so it gets shards from the very next plan (P5.4): unowned
//! ones at once, others as their owners release them.
//!
//! Zones (P18.3): when the live executors state more than one `zone` label (those stating none
//! count as one zone of their own), the distributable shards are first split between the zones
//! in proportion to each zone's capacity, by the same floor-or-ceiling rule, and each zone's
//! quota then between its executors. So each zone's share is within one shard of its capacity's
//! share, and when a zone is lost only its shards move: the survivors' quotas grow to take them
//! and nothing else changes hands.

use std::cell::Cell;
use std::collections::HashMap;
use std::hash::BuildHasherDefault;

use rustc_hash::FxHasher;

use leasehold_api::wire::zone_of;

use super::super::{Move, Shard, ShardId, Space};
use super::{capacity_of, MoveCost};

/// A move the planner weighs, its receiver borrowed from the state: at a fleet's first start a
/// plan by count weighs a million of them to make at most `MAX_MOVES_PER_PLAN`, and only those
/// it makes need an owned id ([`Candidate::to_move`]).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(in crate::lease) struct Candidate<'a> {
    pub shard: ShardId,
    pub to: &'a str,
}

impl Candidate<'_> {
    pub fn to_move(self) -> Move {
        Move {
            shard: self.shard,
            to: self.to.to_owned(),
        }
    }
}

/// What one live executor owns: the shards it would keep at no cost.
#[derive(Debug)]
struct Holdings<'a> {
    id: &'a str,
    /// Its placement weight (P15.1).
    capacity: u64,
    /// Its `zone` label (P18.3), if it states one.
    zone: Option<&'a str>,
    /// Owned, not releasing: being served now.
    delivered: Vec<ShardId>,
    /// Owned and releasing to another executor, with the target's position if it is live: kept
    /// by cancelling the handoff, which mints no epoch and stops nothing that is not stopped
    /// already.
    releasing: Vec<(ShardId, Option<usize>)>,
    /// Releasing to it from another owner: it gets them when their handoffs complete.
    incoming: usize,
    /// Shards that must find a holder of which it holds a ready secondary (P19.3): among
    /// executors otherwise equal, the ceilings of the split go to those holding most of them
    /// warm, so those shards find room there.
    warm: usize,
}

impl Holdings<'_> {
    fn owned(&self) -> usize {
        self.delivered.len().saturating_add(self.releasing.len())
    }

    /// What it will hold once the handoffs under way complete.
    fn prospective(&self) -> usize {
        self.delivered.len().saturating_add(self.incoming)
    }
}

/// The live executors in id order, and each one's position by id.
struct LiveExecutors<'a> {
    holdings: Vec<Holdings<'a>>,
    positions: Positions<'a>,
}

/// Live executors' positions by id. Every shard's owner is looked up here, so a hash of the id
/// rather than a search comparing ids (the ids are the leader's own, `ex-{index}`, and the plan
/// never depends on the map's order), and the last answer is kept: consecutive shards mostly
/// have one owner, so most lookups are one comparison.
struct Positions<'a> {
    by_id: HashMap<&'a str, usize, BuildHasherDefault<FxHasher>>,
    last: Cell<Option<(&'a str, Option<usize>)>>,
}

impl<'a> Positions<'a> {
    fn get(&self, executor_id: Option<&'a str>) -> Option<usize> {
        let executor_id = executor_id?;
        if let Some((last_id, position)) = self.last.get() {
            if last_id == executor_id {
                return position;
            }
        }
        let position = self.by_id.get(executor_id).copied();
        self.last.set(Some((executor_id, position)));
        position
    }
}

impl<'a> LiveExecutors<'a> {
    fn of(state: Space<'a>, now_ms: u64) -> Self {
        let holdings: Vec<Holdings<'a>> = state
            .executors()
            .filter(|executor| state.takes_shards(executor, now_ms))
            .map(|executor| Holdings {
                id: executor.id.as_str(),
                capacity: capacity_of(executor),
                zone: zone_of(&executor.labels),
                delivered: Vec::new(),
                releasing: Vec::new(),
                incoming: 0,
                warm: 0,
            })
            .collect();
        let by_id = holdings
            .iter()
            .enumerate()
            .map(|(position, holdings)| (holdings.id, position))
            .collect();
        Self {
            holdings,
            positions: Positions {
                by_id,
                last: Cell::new(None),
            },
        }
    }
}

/// Most secondaries a shard has (P19.1).
const MOST_SECONDARIES: usize = leasehold_api::wire::MAX_REPLICAS as usize - 1;

/// A distributable shard that must find a holder (or stay with the target its handoff names).
#[derive(Debug, Clone, Copy)]
struct Homeless {
    shard: ShardId,
    /// What moving it costs, known from the scan: it never goes back to its owner.
    cost: MoveCost,
    /// The live executor its handoff names, if any.
    target: Option<usize>,
}

/// The live executors holding a ready secondary of `shard`, by position, ready longest first
/// (P19.3): a primary that moves goes to the first of them with room, so it lands warm.
fn warm_secondaries(shard: &Shard, positions: &Positions<'_>) -> [Option<usize>; MOST_SECONDARIES] {
    let mut warm = [None; MOST_SECONDARIES];
    if shard.secondaries.is_empty() {
        return warm;
    }
    let ready = shard
        .ready_longest_first()
        .into_iter()
        .filter_map(|secondary| positions.by_id.get(secondary.executor.as_str()).copied());
    for (slot, position) in warm.iter_mut().zip(ready) {
        *slot = Some(position);
    }
    warm
}

/// One move of a plan by count: the receiver by position, and what the move costs.
#[derive(Debug, Clone, Copy)]
struct Planned {
    shard: ShardId,
    to: usize,
    cost: MoveCost,
}

/// A plan by count: its moves ascending by shard, receivers by position in `live`.
struct CountPlan<'a> {
    live: Vec<Holdings<'a>>,
    moves: Vec<Planned>,
}

impl<'a> CountPlan<'a> {
    fn candidate(&self, planned: &Planned) -> Option<Candidate<'a>> {
        let holdings = self.live.get(planned.to)?;
        Some(Candidate {
            shard: planned.shard,
            to: holdings.id,
        })
    }

    fn all(self) -> Vec<Candidate<'a>> {
        self.moves
            .iter()
            .filter_map(|planned| self.candidate(planned))
            .collect()
    }

    /// The `max_moves` cheapest, ascending by shard: a selection on (cost, shard), which is
    /// unique per move, over costs the scan already knew.
    fn cheapest(self, max_moves: usize) -> Vec<Candidate<'a>> {
        if self.moves.len() <= max_moves {
            return self.all();
        }
        let Some(last) = max_moves.checked_sub(1) else {
            return Vec::new();
        };
        let rank = |planned: &Planned| ((planned.cost as u64) << 32) | u64::from(planned.shard);
        let mut ranks: Vec<u64> = self.moves.iter().map(rank).collect();
        let (_, &mut highest_kept, _) = ranks.select_nth_unstable(last);
        self.moves
            .iter()
            .filter(|planned| rank(planned) <= highest_kept)
            .filter_map(|planned| self.candidate(planned))
            .collect()
    }
}

/// The moves of the plan by count, ascending by shard, their receivers borrowed from `state`.
///
/// The count that is minimised is the shards that change hands (each a new epoch, I2), not the
/// entries of the plan: a live executor keeps what it owns up to its quota, delivered shards
/// first, then its releasing ones (their handoffs cancelled); every other distributable shard
/// goes to a live executor under quota, a releasing one preferably to the target its handoff
/// already names (no new revoke, no entry in the plan).
pub(in crate::lease) fn candidate_moves(state: Space<'_>, now_ms: u64) -> Vec<Candidate<'_>> {
    plan(state, now_ms).map_or_else(Vec::new, CountPlan::all)
}

/// The `max_moves` cheapest moves of [`candidate_moves`] (cancelled handoffs, then grants of
/// unowned shards, then retargeted handoffs, then revokes; ties by shard), ascending by shard.
/// The plan is made whole, but only the moves kept are looked at again.
pub(in crate::lease) fn cheapest_candidate_moves(
    state: Space<'_>,
    now_ms: u64,
    max_moves: usize,
) -> Vec<Candidate<'_>> {
    plan(state, now_ms).map_or_else(Vec::new, |plan| plan.cheapest(max_moves))
}

/// [`candidate_moves`] as owned moves.
#[cfg(test)]
pub(in crate::lease) fn plan_moves(state: Space<'_>, now_ms: u64) -> Vec<Move> {
    candidate_moves(state, now_ms)
        .into_iter()
        .map(Candidate::to_move)
        .collect()
}

fn plan(state: Space<'_>, now_ms: u64) -> Option<CountPlan<'_>> {
    state.config()?;
    let LiveExecutors {
        mut holdings,
        positions,
    } = LiveExecutors::of(state, now_ms);
    if holdings.is_empty() {
        return None;
    }
    let Scan {
        mut pool,
        distributable,
    } = scan(state, now_ms, &positions, &mut holdings);
    // Only a namespace with replicas has secondaries to look up.
    let replicated = state.namespace().replication.replicas > 1;
    let warm = |shard: ShardId| match state.shard(shard).filter(|_| replicated) {
        Some(entry) => warm_secondaries(entry, &positions),
        None => [None; MOST_SECONDARIES],
    };
    if replicated {
        for homeless in &pool {
            for position in warm(homeless.shard).into_iter().flatten() {
                if let Some(holder) = holdings.get_mut(position) {
                    holder.warm += 1;
                }
            }
        }
    }
    let quotas = quotas_by_capacity(&holdings, distributable);
    let Kept {
        mut moves,
        mut deficits,
    } = keep_up_to_quota(&mut holdings, &quotas, &mut pool);
    // Stable: the pool is ascending runs (the scan's, then each owner's excess), which a
    // stable sort merges instead of sorting a million entries afresh.
    pool.sort_by_key(|homeless| homeless.shard);
    place_homeless(pool, &mut deficits, &mut moves, &warm);
    moves.sort_by_key(|planned| planned.shard);
    Some(CountPlan {
        live: holdings,
        moves,
    })
}

/// The shard table classified: the shards that must find a holder, and how many shards the plan
/// distributes (every shard but those a lapsed owner keeps until it is reaped).
struct Scan {
    pool: Vec<Homeless>,
    distributable: usize,
}

/// One pass over the shard table (a million at most) classifies every shard into its live
/// owner's holdings or the pool, so nothing after it reads the table again. A shard enters the
/// pool at most once (from here, or later as its live owner's excess).
fn scan<'a>(
    state: Space<'a>,
    now_ms: u64,
    positions: &Positions<'a>,
    holdings: &mut [Holdings<'a>],
) -> Scan {
    let mut pool: Vec<Homeless> = Vec::new();
    let mut distributable = 0usize;
    for shard in state.shards() {
        // Handoffs are few: their targets are looked up without disturbing the owners' memo.
        let target = shard
            .handoff
            .as_ref()
            .and_then(|handoff| handoff.to.as_deref())
            .and_then(|target| positions.by_id.get(target).copied());
        if let Some(target) = target.and_then(|target| holdings.get_mut(target)) {
            target.incoming += 1;
        }
        let owner = positions
            .get(shard.owner.as_deref())
            .and_then(|position| holdings.get_mut(position));
        match (owner, &shard.owner, &shard.handoff) {
            (Some(owner), _, None) => owner.delivered.push(shard.id),
            (Some(owner), _, Some(_)) => owner.releasing.push((shard.id, target)),
            (None, None, _) => pool.push(Homeless {
                shard: shard.id,
                cost: MoveCost::GrantUnowned,
                target,
            }),
            (None, Some(owner), handoff) => {
                let owner_hands_on = state
                    .executor(owner)
                    .is_some_and(|executor| state.hands_on(executor, now_ms));
                if owner_hands_on || handoff.is_some() {
                    // A live draining (or passed over, P18.4) owner hands its shards on; a shard
                    // releasing from a lapsed owner goes on to a live holder (it completes on the
                    // expiry).
                    pool.push(Homeless {
                        shard: shard.id,
                        cost: if handoff.is_some() {
                            MoveCost::Retarget
                        } else {
                            MoveCost::Revoke
                        },
                        target,
                    });
                } else {
                    // A lapsed owner keeps its shards until it is reaped: not distributable.
                    continue;
                }
            }
        }
        distributable += 1;
    }
    Scan {
        pool,
        distributable,
    }
}

/// What each live executor keeps of its own within its quota: the handoffs cancelled to keep
/// releasing shards, and each executor's room left, by position.
struct Kept {
    moves: Vec<Planned>,
    deficits: Vec<usize>,
}

/// Each live executor keeps its delivered shards up to its quota, then cancels handoffs of its
/// releasing shards into the room left; the rest join the pool. An executor with excess has no
/// room, so no shard goes back to its owner.
fn keep_up_to_quota(
    holdings: &mut [Holdings<'_>],
    quotas: &[usize],
    pool: &mut Vec<Homeless>,
) -> Kept {
    let mut moves: Vec<Planned> = Vec::new();
    let mut deficits: Vec<usize> = Vec::with_capacity(holdings.len());
    for (position, (held, &quota)) in holdings.iter_mut().zip(quotas).enumerate() {
        let kept_delivered = held.delivered.len().min(quota);
        pool.extend(
            held.delivered
                .drain(kept_delivered..)
                .map(|shard| Homeless {
                    shard,
                    cost: MoveCost::Revoke,
                    target: None,
                }),
        );
        let room = quota - kept_delivered;
        let cancel_handoff = held.releasing.len().min(room);
        for &(shard, _) in held.releasing.iter().take(cancel_handoff) {
            moves.push(Planned {
                shard,
                to: position,
                cost: MoveCost::CancelHandoff,
            });
        }
        pool.extend(
            held.releasing
                .drain(cancel_handoff..)
                .map(|(shard, target)| Homeless {
                    shard,
                    cost: MoveCost::Retarget,
                    target,
                }),
        );
        deficits.push(room - cancel_handoff);
    }
    Kept { moves, deficits }
}

/// Gives the pool, ascending by shard, to the executors with room. A releasing shard stays with
/// the target its handoff names while that target has room: its revoke is already under way and
/// the plan needs no entry for it. The rest go in id order, each executor taking the next
/// ascending run, so these moves come out ascending and sorting them among the cancelled
/// handoffs is a merge of sorted runs.
fn place_homeless(
    pool: Vec<Homeless>,
    deficits: &mut [usize],
    moves: &mut Vec<Planned>,
    warm: &dyn Fn(ShardId) -> [Option<usize>; MOST_SECONDARIES],
) {
    let mut unplaced = Vec::with_capacity(pool.len());
    let mut cold = Vec::with_capacity(pool.len());
    for homeless in pool {
        let target_with_room = homeless
            .target
            .and_then(|target| deficits.get_mut(target))
            .filter(|deficit| **deficit > 0);
        match target_with_room {
            Some(deficit) => *deficit -= 1,
            None => cold.push(homeless),
        }
    }
    // Then each to its ready secondary ready longest that has room (P19.3); only a namespace
    // with replicas has any.
    for homeless in cold {
        let secondary_with_room = warm(homeless.shard)
            .into_iter()
            .flatten()
            .find(|&position| deficits.get(position).is_some_and(|deficit| *deficit > 0));
        match secondary_with_room {
            Some(position) => {
                deficits[position] -= 1;
                moves.push(Planned {
                    shard: homeless.shard,
                    to: position,
                    cost: homeless.cost,
                });
            }
            None => unplaced.push(homeless),
        }
    }
    let mut unplaced = unplaced.into_iter();
    moves.reserve(unplaced.len());
    for (position, deficit) in deficits.iter_mut().enumerate() {
        while *deficit > 0 {
            let Some(homeless) = unplaced.next() else {
                break;
            };
            moves.push(Planned {
                shard: homeless.shard,
                to: position,
                cost: homeless.cost,
            });
            *deficit -= 1;
        }
    }
}

/// Each live executor's quota of the `distributable` shards, by position: the floor or the
/// ceiling of its share `distributable × capacity ÷ total capacity` (P15.2), summing to
/// `distributable`. With zones (P18.3), each zone's quota first, by the same rule over the
/// zones' capacities, then its executors' quotas of it.
fn quotas_by_capacity(live: &[Holdings<'_>], distributable: usize) -> Vec<usize> {
    let weights: Vec<Weighed> = live
        .iter()
        .map(|holdings| Weighed {
            capacity: u128::from(holdings.capacity),
            owned: holdings.owned(),
            prospective: holdings.prospective(),
            warm: holdings.warm,
        })
        .collect();
    let zones = zones_of(live);
    if zones.len() <= 1 {
        return split_by_capacity(&weights, distributable);
    }
    let members_of = |members: &[usize]| -> Vec<Weighed> {
        members
            .iter()
            .filter_map(|&position| weights.get(position).copied())
            .collect()
    };
    let zone_weights: Vec<Weighed> = zones
        .iter()
        .map(|members| Weighed::sum(&members_of(members)))
        .collect();
    // A zone's ceiling keeps one more shard in place only if splitting one more shard over its
    // members does, so the zones' ceilings go to those that gain most: with each zone's gain
    // independent of the others', that keeps the most of any assignment. Zones tie on that far more
    // often than executors do, so among equals a ceiling goes first to a zone owning more than
    // its floor (releasing shards count as their owner's): what a zone owns does not change while
    // handoffs are under way, so a capped plan that makes only part of a split does not see the
    // tie broken the other way on the next and undo it. Prospective holdings would flip it, so
    // zones tying on both go by what they own too, then by order.
    let zone_ties: Vec<Weighed> = zone_weights
        .iter()
        .map(|weight| Weighed {
            prospective: weight.owned,
            ..*weight
        })
        .collect();
    let kept = |members: &[usize], quota: usize| -> usize {
        let weights = members_of(members);
        split_by_capacity(&weights, quota)
            .iter()
            .zip(&weights)
            .map(|(&quota, weight)| weight.owned.min(quota))
            .sum()
    };
    let zone_quotas = split_preferring(&zone_ties, distributable, |zone, floor| {
        // Signed: one more shard can keep fewer in place, when it lifts members' floors so
        // that the ceilings left no longer reach the members holding more than theirs.
        let gain = zones.get(zone).map_or(0, |members| {
            let at_ceiling =
                i64::try_from(kept(members, floor.saturating_add(1))).unwrap_or(i64::MAX);
            let at_floor = i64::try_from(kept(members, floor)).unwrap_or(i64::MAX);
            at_ceiling.saturating_sub(at_floor)
        });
        let owns_more = zone_weights
            .get(zone)
            .is_some_and(|weight| weight.owned > floor);
        (gain, owns_more)
    });
    let mut quotas = vec![0; live.len()];
    for (members, zone_quota) in zones.iter().zip(zone_quotas) {
        let member_quotas = split_by_capacity(&members_of(members), zone_quota);
        for (&position, quota) in members.iter().zip(member_quotas) {
            if let Some(slot) = quotas.get_mut(position) {
                *slot = quota;
            }
        }
    }
    quotas
}

/// The live executors' positions grouped by zone (P18.3), each group ascending and the groups in
/// the order of their first member; executors stating no zone are one group.
fn zones_of(live: &[Holdings<'_>]) -> Vec<Vec<usize>> {
    let mut group_of: HashMap<Option<&str>, usize, BuildHasherDefault<FxHasher>> =
        HashMap::default();
    let mut groups: Vec<Vec<usize>> = Vec::new();
    for (position, holdings) in live.iter().enumerate() {
        let group = *group_of.entry(holdings.zone).or_insert_with(|| {
            groups.push(Vec::new());
            groups.len() - 1
        });
        if let Some(members) = groups.get_mut(group) {
            members.push(position);
        }
    }
    groups
}

/// What splitting shards by capacity weighs of one executor, or of one zone's executors together.
#[derive(Debug, Clone, Copy, Default)]
struct Weighed {
    capacity: u128,
    /// What it owns: it keeps that many at no cost.
    owned: usize,
    /// What it will hold once the handoffs under way complete.
    prospective: usize,
    /// Shards that must move of which it holds a ready secondary (P19.3).
    warm: usize,
}

impl Weighed {
    /// Several weighed together: a zone of executors.
    fn sum(parts: &[Weighed]) -> Weighed {
        parts.iter().fold(Weighed::default(), |sum, part| Weighed {
            capacity: sum.capacity.saturating_add(part.capacity),
            owned: sum.owned.saturating_add(part.owned),
            prospective: sum.prospective.saturating_add(part.prospective),
            warm: sum.warm.saturating_add(part.warm),
        })
    }
}

/// `total` split in proportion to each one's capacity: the floor or the ceiling of its share
/// `total × capacity ÷ total capacity`, summing to `total`, in the order given.
///
/// Only one whose share is fractional can get its ceiling. The ceilings keep one more shard in
/// place only for one owning more than its floor, so those get them first; any other assignment
/// of the rest keeps as many, and they go to those holding most prospectively, which is how the
/// last plan left them, so planning again moves nothing (ties by order).
fn split_by_capacity(weights: &[Weighed], total: usize) -> Vec<usize> {
    split_preferring(weights, total, |index, floor| {
        let gain = weights
            .get(index)
            .map_or(0, |weight| i64::from(weight.owned > floor));
        (gain, false)
    })
}

/// [`split_by_capacity`] with the ceilings going first by `preference` (given the index and its
/// floor): those a ceiling keeps most shards in place for, then those it marks, then those
/// holding most of the shards to move warm (P19.3), then those holding most prospectively (ties
/// by order).
fn split_preferring(
    weights: &[Weighed],
    total: usize,
    preference: impl Fn(usize, usize) -> (i64, bool),
) -> Vec<usize> {
    let total_capacity: u128 = weights.iter().map(|w| w.capacity).sum();
    let shares = u128::try_from(total).unwrap_or(u128::MAX);
    let mut quotas: Vec<usize> = Vec::with_capacity(weights.len());
    // (index, preference, warm shards, prospective holdings)
    let mut fractional: Vec<(usize, (i64, bool), usize, usize)> = Vec::new();
    for (index, weight) in weights.iter().enumerate() {
        let weighted = shares.saturating_mul(weight.capacity);
        let floor = usize::try_from(weighted / total_capacity.max(1)).unwrap_or(usize::MAX);
        quotas.push(floor);
        if weighted % total_capacity.max(1) != 0 {
            fractional.push((
                index,
                preference(index, floor),
                weight.warm,
                weight.prospective,
            ));
        }
    }
    let ceilings = total.saturating_sub(quotas.iter().sum());
    fractional.sort_by(|a, b| {
        b.1.cmp(&a.1)
            .then_with(|| b.2.cmp(&a.2))
            .then_with(|| b.3.cmp(&a.3))
            .then_with(|| a.0.cmp(&b.0))
    });
    for &(index, ..) in fractional.iter().take(ceilings) {
        if let Some(quota) = quotas.get_mut(index) {
            *quota += 1;
        }
    }
    quotas
}
