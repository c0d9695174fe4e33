//! Placement of secondaries (P19.2, P19.4): each shard of a namespace with R replicas keeps
//! R − 1 secondaries, on executors other than its primary's and each other's, and in zones other
//! than theirs while the zones allow, proposed as a conditional [`Command::PlaceSecondaries`].
//!
//! Pure and deterministic like the rest of the planner. Per shard, at most one change a plan,
//! in this order of need:
//! - a **lost** secondary (its executor left) is placed elsewhere once the namespace's restore
//!   delay has passed, or at once if fewer than `min_active` replicas of the shard are live;
//!   until then it waits for an executor of its name (P19.4);
//! - a shard with **fewer** secondaries than R − 1 gets one on the executor with the least
//!   weighted load (a primary counts 1, a secondary the namespace's `secondary_weight`, both
//!   over capacity), preferring a zone the shard has no replica in;
//! - a shard with **more** (R lowered, or an executor back after its replica was placed again)
//!   drops one: a lost one first, then one not ready, then the newest;
//! - then, within the churn budget, a secondary moves **for balance** from the most to the least
//!   loaded executor while that narrows the gap by more than a secondary's weight.
//!
//! A shard in a handoff is left alone until it completes (its target may be one of its
//! secondaries, P19.3), and so is a shard without a holder: its primary is placed first.
//! Secondaries on a draining executor stay: a drain before a restart gives them back to the
//! executor that returns under the same name (P19.4), and a drain for good loses them when the
//! executor leaves.

use std::collections::{BTreeMap, BTreeSet};

use leasehold_api::wire::zone_of;

use super::{capacity_of, moves_waiting_for_warmth, MoveReason, PlacementInputs, Plan};
use crate::lease::{Command, Executor, Move, SecondaryChange, Shard, ShardId, Space};

/// Most secondaries a shard has (P19.1).
const MOST_SECONDARIES: usize = leasehold_api::wire::MAX_REPLICAS as usize - 1;

/// How many secondaries each executor holds of each other executor's primaries, by
/// (primary's holder, secondary's holder): spread evenly, an executor's primaries find room on
/// their secondaries' executors when it drains or fails, so they move warm (P19.3).
type Pairs<'a> = BTreeMap<(&'a str, &'a str), u32>;

/// One executor that takes replicas, as this plan counts it.
struct Taker<'a> {
    executor: &'a Executor,
    zone: Option<&'a str>,
    /// Primaries ×1000 plus secondaries × the weight in thousandths.
    load_permille: u64,
    capacity: u64,
}

impl Taker<'_> {
    /// Whether it is less loaded for its capacity than `other` (ties by id).
    fn lighter_than(&self, other: &Taker<'_>) -> bool {
        let mine = u128::from(self.load_permille) * u128::from(other.capacity);
        let theirs = u128::from(other.load_permille) * u128::from(self.capacity);
        (mine, &self.executor.id) < (theirs, &other.executor.id)
    }
}

/// The plan for `space`'s secondaries at `now_ms`, moving at most `balance_moves_allowed` for
/// balance and changing at most `max_changes` shards; `None` when nothing is to change (always
/// for a namespace of one replica without secondaries left over).
#[must_use = "a plan does nothing until it is proposed"]
pub fn plan_secondaries(
    space: Space<'_>,
    now_ms: u64,
    inputs: &PlacementInputs,
    balance_moves_allowed: usize,
    max_changes: usize,
) -> Option<Plan> {
    let warm_ups = moves_waiting_for_warmth(space, now_ms, inputs);
    plan_secondaries_warming(space, now_ms, &warm_ups, balance_moves_allowed, max_changes)
}

/// [`plan_secondaries`] given the primaries' moves waiting for a secondary on their target
/// (`warm_ups`, P19.3), as the step's rebalance left them
/// ([`plan_placement_and_warm_ups`](super::plan_placement_and_warm_ups)), so
/// a step places each namespace's primaries once.
#[must_use = "a plan does nothing until it is proposed"]
pub fn plan_secondaries_warming(
    space: Space<'_>,
    now_ms: u64,
    warm_ups: &[Move],
    balance_moves_allowed: usize,
    max_changes: usize,
) -> Option<Plan> {
    let config = space.config()?;
    let settings = space.namespace().replication;
    let wanted = settings.secondaries();
    if wanted == 0
        && space
            .shards()
            .iter()
            .all(|shard| shard.secondaries.is_empty())
    {
        return None;
    }
    // The primaries' moves waiting for a secondary on their target (P19.3), by shard.
    let warm_ups: BTreeMap<ShardId, &str> = warm_ups
        .iter()
        .map(|step| (step.shard, step.to.as_str()))
        .collect();
    let weight_permille = u64::from(settings.secondary_weight.permille());
    let mut takers = takers(space, now_ms, weight_permille);
    let mut pairs = pairs(space);
    let restore_delay_ms = settings.restore_delay_ms(config.lease_duration_ms);
    let min_active = usize::try_from(settings.min_active).unwrap_or(usize::MAX);
    let mut changes: Vec<(SecondaryChange, MoveReason)> = Vec::new();
    for shard in space.shards() {
        if changes.len() >= max_changes {
            break;
        }
        if shard.handoff.is_some() || shard.owner.is_none() {
            continue;
        }
        let warm_up = warm_ups.get(&shard.id);
        // A secondary placed ahead of a primary's move may be one more than the shard keeps
        // until the move is made (and its old primary, a secondary then, dropped as the
        // surplus): it is not dropped. Nor is another added beside it: a target that already
        // held one of the shard's own secondaries (an executor back under its name, P19.4)
        // swaps roles with the primary and the shard keeps its count.
        let warming = warm_up.is_some_and(|target| shard.secondary_on(target).is_some());
        let need = match Need::of(
            space,
            shard,
            now_ms,
            wanted + usize::from(warming),
            restore_delay_ms,
            min_active,
        ) {
            Need::Nothing => match warm_up.filter(|_| !warming) {
                Some(target) => Need::Warm((*target).to_owned()),
                None => Need::Nothing,
            },
            Need::Add if warming && shard.secondaries.len() >= wanted => Need::Nothing,
            need => need,
        };
        let reason = need.reason();
        let change = match need {
            Need::Nothing => None,
            Need::Replace(lost) => {
                place(&mut takers, &mut pairs, shard, weight_permille).map(|add| SecondaryChange {
                    shard: shard.id,
                    add: Some(add),
                    drop: Some(lost),
                })
            }
            Need::Add => {
                place(&mut takers, &mut pairs, shard, weight_permille).map(|add| SecondaryChange {
                    shard: shard.id,
                    add: Some(add),
                    drop: None,
                })
            }
            Need::Drop(dropped) => {
                unload(&mut takers, &dropped, weight_permille);
                Some(SecondaryChange {
                    shard: shard.id,
                    add: None,
                    drop: Some(dropped),
                })
            }
            Need::Warm(target) => {
                // One more secondary while there is room for it, else in place of the least
                // useful one.
                let full = shard.secondaries.len() >= MOST_SECONDARIES;
                let drop = full.then(|| surplus(shard).to_owned());
                if let Some(dropped) = &drop {
                    unload(&mut takers, dropped, weight_permille);
                }
                count_on(&mut takers, &mut pairs, shard, &target, weight_permille);
                Some(SecondaryChange {
                    shard: shard.id,
                    add: Some(target),
                    drop,
                })
            }
        };
        if let Some(change) = change {
            changes.push((change, reason));
        }
    }
    let budget = balance_moves_allowed.min(max_changes.saturating_sub(changes.len()));
    let mut changed: BTreeSet<ShardId> = changes.iter().map(|(change, _)| change.shard).collect();
    let warming = Warming {
        now_ms,
        restore_delay_ms,
    };
    let declustered = decluster(
        space,
        &mut takers,
        &mut pairs,
        &mut changed,
        (weight_permille, warming),
        budget,
    );
    let budget = budget.saturating_sub(declustered.len());
    for change in declustered.into_iter().chain(balance(
        space,
        &mut takers,
        &changed,
        (weight_permille, warming),
        budget,
    )) {
        changes.push((change, MoveReason::Balance));
    }
    if changes.is_empty() {
        return None;
    }
    changes.sort_by_key(|(change, _)| change.shard);
    let (changes, reasons) = changes.into_iter().unzip();
    Some(Plan {
        command: Command::PlaceSecondaries {
            now_ms,
            planned_at: space.revision(),
            namespace: space.name().to_owned(),
            changes,
        },
        reasons,
    })
}

/// Which secondaries are still warming up: placed (or taken back, P19.4) within the restore
/// delay and not ready yet. Balance leaves them where they are: moving one would throw away the
/// copy under way, or the one a restarted executor kept on its disk.
#[derive(Debug, Clone, Copy)]
struct Warming {
    now_ms: u64,
    restore_delay_ms: u64,
}

impl Warming {
    fn holds(self, secondary: &crate::lease::Secondary) -> bool {
        secondary.ready_since_ms.is_none()
            && self.now_ms < secondary.placed_at_ms.saturating_add(self.restore_delay_ms)
    }
}

/// What one shard's secondaries need now.
enum Need {
    Nothing,
    /// This lost one placed elsewhere.
    Replace(String),
    Add,
    /// This one dropped.
    Drop(String),
    /// One placed on this executor, where a move of the primary waits for it (P19.3).
    Warm(String),
}

impl Need {
    fn of(
        space: Space<'_>,
        shard: &Shard,
        now_ms: u64,
        wanted: usize,
        restore_delay_ms: u64,
        min_active: usize,
    ) -> Self {
        let held = shard.secondaries.len();
        if held > wanted {
            return Need::Drop(surplus(shard).to_owned());
        }
        let live_executor = |id: &str| {
            space
                .executor(id)
                .is_some_and(|executor| !executor.lease_lapsed(now_ms))
        };
        let live_replicas = usize::from(shard.owner.as_deref().is_some_and(live_executor))
            + shard
                .live_secondaries()
                .filter(|secondary| live_executor(&secondary.executor))
                .count();
        let overdue = shard.secondaries.iter().find(|secondary| {
            secondary.lost.as_ref().is_some_and(|lost| {
                live_replicas < min_active
                    || now_ms > lost.since_ms.saturating_add(restore_delay_ms)
            })
        });
        match overdue {
            Some(lost) => Need::Replace(lost.executor.clone()),
            None if held < wanted => Need::Add,
            None => Need::Nothing,
        }
    }

    fn reason(&self) -> MoveReason {
        match self {
            Need::Replace(_) => MoveReason::Departure,
            Need::Warm(_) => MoveReason::Join,
            Need::Nothing | Need::Add | Need::Drop(_) => MoveReason::Replica,
        }
    }
}

/// The secondary a shard with too many drops: a lost one, else one not ready, else the newest.
fn surplus(shard: &Shard) -> &str {
    shard
        .secondaries
        .iter()
        .enumerate()
        .max_by_key(|(order, secondary)| {
            (
                secondary.lost.is_some(),
                secondary.ready_since_ms.is_none(),
                *order,
            )
        })
        .map_or("", |(_, secondary)| secondary.executor.as_str())
}

/// The executors of `space` that take replicas at `now_ms`, by id, with what they hold.
fn takers<'a>(space: Space<'a>, now_ms: u64, weight_permille: u64) -> BTreeMap<&'a str, Taker<'a>> {
    let mut takers: BTreeMap<&str, Taker<'_>> = space
        .executors()
        .filter(|executor| space.takes_shards(executor, now_ms))
        .map(|executor| {
            let secondaries = space.namespace().secondaries_of(&executor.id).count() as u64;
            (
                executor.id.as_str(),
                Taker {
                    executor,
                    zone: zone_of(&executor.labels),
                    load_permille: secondaries * weight_permille,
                    capacity: capacity_of(executor),
                },
            )
        })
        .collect();
    for shard in space.shards() {
        let holder = match &shard.handoff {
            Some(handoff) => handoff.to.as_deref(),
            None => shard.owner.as_deref(),
        };
        if let Some(taker) = holder.and_then(|holder| takers.get_mut(holder)) {
            taker.load_permille += 1000;
        }
    }
    takers
}

/// Each executor's secondaries of each other executor's primaries ([`Pairs`]).
fn pairs<'a>(space: Space<'a>) -> Pairs<'a> {
    let mut pairs = Pairs::new();
    for shard in space.shards() {
        let Some(owner) = shard.owner.as_deref() else {
            continue;
        };
        for secondary in shard.live_secondaries() {
            *pairs
                .entry((owner, secondary.executor.as_str()))
                .or_default() += 1;
        }
    }
    pairs
}

/// Chooses where a new secondary of `shard` goes and counts it there: an executor holding no
/// replica of it, in a zone without one if any such takes replicas, then the one holding the
/// fewest secondaries of the primary's holder ([`Pairs`]), then the least loaded for its
/// capacity. `None` when every executor that takes replicas holds one.
fn place<'a>(
    takers: &mut BTreeMap<&'a str, Taker<'a>>,
    pairs: &mut Pairs<'a>,
    shard: &'a Shard,
    weight_permille: u64,
) -> Option<String> {
    let holders: BTreeSet<&str> = shard
        .owner
        .as_deref()
        .into_iter()
        .chain(shard.secondaries.iter().map(|s| s.executor.as_str()))
        .collect();
    let zones: BTreeSet<Option<&str>> = holders
        .iter()
        .filter_map(|holder| takers.get(holder).map(|taker| taker.zone))
        .collect();
    let owner = shard.owner.as_deref().unwrap_or_default();
    let paired = |taker: &Taker<'_>| {
        pairs
            .get(&(owner, taker.executor.id.as_str()))
            .copied()
            .unwrap_or(0)
    };
    let mut best: Option<(&Taker<'_>, bool, u32)> = None;
    for taker in takers.values() {
        if holders.contains(taker.executor.id.as_str()) {
            continue;
        }
        let new_zone = !zones.contains(&taker.zone);
        let pair = paired(taker);
        let better = match best {
            None => true,
            Some((current, current_new_zone, current_pair)) => {
                (new_zone, std::cmp::Reverse(pair))
                    > (current_new_zone, std::cmp::Reverse(current_pair))
                    || ((new_zone, pair) == (current_new_zone, current_pair)
                        && taker.lighter_than(current))
            }
        };
        if better {
            best = Some((taker, new_zone, pair));
        }
    }
    let (chosen, _, _) = best?;
    let chosen: &'a str = takers.get_key_value(chosen.executor.id.as_str())?.0;
    if let Some(taker) = takers.get_mut(chosen) {
        taker.load_permille += weight_permille;
    }
    if !owner.is_empty() {
        *pairs.entry((owner, chosen)).or_default() += 1;
    }
    Some(chosen.to_owned())
}

/// Counts a secondary of `shard` placed on `executor_id` where the plan chose it.
fn count_on<'a>(
    takers: &mut BTreeMap<&'a str, Taker<'a>>,
    pairs: &mut Pairs<'a>,
    shard: &'a Shard,
    executor_id: &str,
    weight_permille: u64,
) {
    let Some(id) = takers.get_key_value(executor_id).map(|(&id, _)| id) else {
        return;
    };
    if let Some(taker) = takers.get_mut(id) {
        taker.load_permille += weight_permille;
    }
    if let Some(owner) = shard.owner.as_deref() {
        *pairs.entry((owner, id)).or_default() += 1;
    }
}

/// Takes a dropped secondary off its executor's count.
fn unload(takers: &mut BTreeMap<&str, Taker<'_>>, executor_id: &str, weight_permille: u64) {
    if let Some(taker) = takers.get_mut(executor_id) {
        taker.load_permille = taker.load_permille.saturating_sub(weight_permille);
    }
}

/// Up to `budget` moves of a secondary from the most to the least loaded executor (for their
/// capacities), each while it narrows their gap by more than a secondary's weight, never of a
/// shard changed already in this plan, never onto an executor holding a replica of the shard
/// nor out of the only zone the shard's replicas would otherwise lack. A secondary not ready
/// moves before a ready one, which would have to be copied again.
fn balance(
    space: Space<'_>,
    takers: &mut BTreeMap<&str, Taker<'_>>,
    changed: &BTreeSet<ShardId>,
    (weight_permille, warming): (u64, Warming),
    budget: usize,
) -> Vec<SecondaryChange> {
    let mut moves = Vec::new();
    let mut moved: BTreeSet<ShardId> = changed.clone();
    while moves.len() < budget && weight_permille > 0 {
        let (Some(heaviest), Some(lightest)) = (heaviest(takers), lightest(takers)) else {
            break;
        };
        if heaviest == lightest || !narrows(takers, heaviest, lightest, weight_permille) {
            break;
        }
        let Some(shard) = movable(space, takers, heaviest, lightest, &moved, warming) else {
            break;
        };
        moved.insert(shard);
        let (from, to) = (heaviest.to_owned(), lightest.to_owned());
        unload(takers, &from, weight_permille);
        if let Some(taker) = takers.get_mut(to.as_str()) {
            taker.load_permille += weight_permille;
        }
        moves.push(SecondaryChange {
            shard,
            add: Some(to),
            drop: Some(from),
        });
    }
    moves
}

/// Up to `budget` moves that spread each executor's primaries' secondaries evenly over the
/// others (P19.3): while one executor holds at least two more secondaries of some executor's
/// primaries than another that takes replicas, one of them moves from the first to the second
/// (a shard not changed yet in this plan, whose replicas the second holds none of, whose zones
/// it leaves no fewer). Then a drain or a failure of any executor finds its primaries' ready
/// secondaries where the even split has room for them.
fn decluster<'a>(
    space: Space<'a>,
    takers: &mut BTreeMap<&'a str, Taker<'a>>,
    pairs: &mut Pairs<'a>,
    changed: &mut BTreeSet<ShardId>,
    (weight_permille, warming): (u64, Warming),
    budget: usize,
) -> Vec<SecondaryChange> {
    let mut moves = Vec::new();
    'moves: while moves.len() < budget {
        let holders: Vec<&'a str> = takers.keys().copied().collect();
        for &owner in &holders {
            let count = |to: &str| pairs.get(&(owner, to)).copied().unwrap_or(0);
            let others = holders.iter().copied().filter(|&to| to != owner);
            let Some(most) = others
                .clone()
                .max_by_key(|&to| (count(to), std::cmp::Reverse(to)))
            else {
                continue;
            };
            let Some(fewest) = others.min_by_key(|&to| (count(to), to)) else {
                continue;
            };
            if count(most) < count(fewest) + 2 {
                continue;
            }
            let Some(shard) =
                owned_secondary_on(space, takers, (owner, most, fewest), changed, warming)
            else {
                continue;
            };
            changed.insert(shard);
            if let Some(count) = pairs.get_mut(&(owner, most)) {
                *count = count.saturating_sub(1);
            }
            *pairs.entry((owner, fewest)).or_default() += 1;
            unload(takers, most, weight_permille);
            if let Some(taker) = takers.get_mut(fewest) {
                taker.load_permille += weight_permille;
            }
            moves.push(SecondaryChange {
                shard,
                add: Some(fewest.to_owned()),
                drop: Some(most.to_owned()),
            });
            continue 'moves;
        }
        break;
    }
    moves
}

/// A shard primary on `owner` whose secondary on `from` may move to `to` (as [`movable`] judges
/// it), the lowest.
fn owned_secondary_on(
    space: Space<'_>,
    takers: &BTreeMap<&str, Taker<'_>>,
    (owner, from, to): (&str, &str, &str),
    moved: &BTreeSet<ShardId>,
    warming: Warming,
) -> Option<ShardId> {
    let mut excluded = moved.clone();
    // Shards of other owners are not what this move is for.
    for shard in space.namespace().secondaries_of(from) {
        let of_owner = space
            .shard(shard)
            .is_some_and(|entry| entry.owner.as_deref() == Some(owner));
        if !of_owner {
            excluded.insert(shard);
        }
    }
    movable(space, takers, from, to, &excluded, warming)
}

fn heaviest<'a>(takers: &BTreeMap<&'a str, Taker<'_>>) -> Option<&'a str> {
    let mut heaviest: Option<(&str, &Taker<'_>)> = None;
    for (&id, taker) in takers {
        if heaviest.is_none_or(|(_, current)| current.lighter_than(taker)) {
            heaviest = Some((id, taker));
        }
    }
    heaviest.map(|(id, _)| id)
}

fn lightest<'a>(takers: &BTreeMap<&'a str, Taker<'_>>) -> Option<&'a str> {
    let mut lightest: Option<(&str, &Taker<'_>)> = None;
    for (&id, taker) in takers {
        if lightest.is_none_or(|(_, current)| taker.lighter_than(current)) {
            lightest = Some((id, taker));
        }
    }
    lightest.map(|(id, _)| id)
}

/// Whether moving one secondary from `from` to `to` leaves them closer than it found them: the
/// receiver stays below where the giver was, by utilisation.
fn narrows(takers: &BTreeMap<&str, Taker<'_>>, from: &str, to: &str, weight_permille: u64) -> bool {
    let (Some(giver), Some(receiver)) = (takers.get(from), takers.get(to)) else {
        return false;
    };
    let giver_after = u128::from(giver.load_permille.saturating_sub(weight_permille))
        * u128::from(receiver.capacity);
    let receiver_after =
        u128::from(receiver.load_permille + weight_permille) * u128::from(giver.capacity);
    receiver_after <= giver_after
}

/// A secondary on `from` that may move to `to`: of a shard not moved yet in this plan, whose
/// replicas `to` holds none of, that leaves its zones no fewer; not ready before ready, then the
/// lowest shard.
fn movable(
    space: Space<'_>,
    takers: &BTreeMap<&str, Taker<'_>>,
    from: &str,
    to: &str,
    moved: &BTreeSet<ShardId>,
    warming: Warming,
) -> Option<ShardId> {
    let zone_of_holder = |id: &str| takers.get(id).map(|taker| taker.zone);
    let to_zone = zone_of_holder(to)?;
    let from_zone = zone_of_holder(from)?;
    space
        .namespace()
        .secondaries_of(from)
        .filter(|shard| !moved.contains(shard))
        .filter_map(|id| space.shard(id))
        .filter(|shard| shard.handoff.is_none())
        .filter(|shard| {
            shard
                .secondary_on(from)
                .is_some_and(|secondary| !warming.holds(secondary))
        })
        .filter(|shard| {
            let holders: Vec<&str> = shard
                .owner
                .as_deref()
                .into_iter()
                .chain(shard.secondaries.iter().map(|s| s.executor.as_str()))
                .collect();
            if holders.contains(&to) {
                return false;
            }
            let others: BTreeSet<Option<&str>> = holders
                .iter()
                .filter(|holder| **holder != from)
                .filter_map(|holder| zone_of_holder(holder))
                .collect();
            let zones_before = others.len() + usize::from(!others.contains(&from_zone));
            let zones_after = others.len() + usize::from(!others.contains(&to_zone));
            zones_after >= zones_before
        })
        .min_by_key(|shard| {
            let ready = shard
                .secondary_on(from)
                .is_some_and(|secondary| secondary.ready_since_ms.is_some());
            (ready, shard.id)
        })
        .map(|shard| shard.id)
}
