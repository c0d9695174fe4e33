//! Placement by load (P15.2–P15.4): every live executor's utilisation (load ÷ capacity) within
//! the tolerance band around the cluster's mean when that is possible, with bounded churn.
//!
//! A plan has three parts, in this order, each on what the previous one left:
//! 1. **Placement** of every shard without a live holder (unowned, its owner draining or lapsed,
//!    its handoff's target gone), heaviest first: to its ready secondary ready longest when it
//!    fits there (P19.3), else to the executor with the fewest shards per unit of capacity among
//!    those it fits (its utilisation stays inside the band), else where it fits best (the lowest
//!    utilisation after). A releasing shard whose target left goes back
//!    to its owner when it fits there (the handoff is cancelled: no new epoch). Not limited.
//! 2. **Joiners**: an executor below the band that also holds less than `1 − tolerance` of its
//!    share by count has just joined (or was emptied): it takes the moves that remove the most
//!    imbalance, from executors above the mean, until it reaches the band or its share by count.
//!    Not limited, so a joiner does not wait for the budget (P5.4).
//! 3. **Balance**: while some executor is outside the band and the budget allows (P15.3), the
//!    move between an executor above the mean and one below it, one of them outside the band,
//!    that removes the most of what lies outside the *inner* band (half as wide): a move aims
//!    well inside the band, so noise in the reports does not carry an executor straight back
//!    out, and two executors inside the inner band never trade. Before those, a hot shard
//!    (P15.4) that alone takes its holder above the band moves to an executor of larger
//!    capacity that can carry it alone inside the band. Nothing moves for balance when every
//!    executor is inside the band. Nobody is given more than four times its share by count this
//!    way, so an executor that reports no load for what it holds cannot be handed the whole
//!    fleet.
//!
//! Imbalance is `Σ capacity × (utilisation − mean)²`. Moving load `l` from `a` to `b` removes
//! `2l(u_a − u_b) − l²(1/c_a + 1/c_b)` of it: largest for `l = (u_a − u_b) ÷ (1/c_a + 1/c_b)`,
//! and none for a shard twice that or heavier. A move must also shrink the larger of the pair's
//! two distances from the mean, so a hot shard (P15.4) alone on an executor is never moved back
//! and forth: moving it would only carry the excess across. Every
//! move a plan makes removes imbalance, so with steady loads successive plans settle; shards
//! moved for balance recently are left alone ([`PlacementInputs::cooling`]), so noisy loads
//! cannot move a shard back and forth either.
//!
//! No move for balance or for a joiner leaves its giver a joiner (below the band and short of
//! its share by count). A joiner is filled outside the budget, so a giver made one would take a
//! shard back outside the budget too: an executor that claims a huge load for what it is given
//! would trade a shard with an honest one at every plan, and one that claims nothing would
//! empty honest executors it then gives nothing back (it is below the mean, so never a giver).

use std::cmp::Ordering;
use std::collections::{BTreeMap, BTreeSet};

use super::super::{Move, ShardId, Space};
use super::{capacity_of, count, reason_for, why_it_moves, MoveReason, PlacementInputs};

/// How many of the most and least utilised executors each balance move considers as giver and
/// receiver. The best move almost always involves the extremes; a few more find one when the
/// extremes have no shard of a useful size.
const CANDIDATES_PER_SIDE: usize = 8;

/// No executor is given shards for balance (or as a joiner) beyond this many times its share by
/// count. Shards cost their holder something whatever their load, and an executor that reports
/// zero for everything it holds (a bug, or a lie) would otherwise look idle forever and be given
/// the whole fleet's shards, a few a minute.
const COUNT_CEILING_OF_SHARE: f64 = 4.0;

/// A shard carrying less than this fraction of the smallest executor's fair share is not worth
/// a handoff for balance: moving it stops its work for a revoke round trip and removes almost
/// nothing. It is low because light shards are sometimes all an executor can give: one holding a
/// hot shard and a heavy one beside many light ones reaches the band only by shedding light ones
/// (under a Zipf load most shards are light: at s = 0.8 over 1 024 shards, 590 carry under 1 %
/// of a fair share among 20 units of capacity, none under 0.1 %).
const MIN_BALANCE_LOAD_OF_FAIR_SHARE: f64 = 0.001;

/// A load or utilisation as an ordered key (every value here is finite).
#[derive(Debug, Clone, Copy, PartialEq)]
struct Ordered(f64);

impl Eq for Ordered {}

impl PartialOrd for Ordered {
    fn partial_cmp(&self, other: &Self) -> Option<Ordering> {
        Some(self.cmp(other))
    }
}

impl Ord for Ordered {
    fn cmp(&self, other: &Self) -> Ordering {
        self.0.total_cmp(&other.0)
    }
}

/// One live executor as placement sees it.
#[derive(Debug)]
struct Member<'a> {
    id: &'a str,
    capacity: f64,
    /// Load it will carry once the handoffs under way complete: delivered shards and shards
    /// releasing to it.
    load: f64,
    /// Shards it will hold once the handoffs under way complete.
    count: usize,
    /// Delivered shards that may be moved (not cooling, not moved in this plan), by load.
    movable: BTreeSet<(Ordered, ShardId)>,
}

impl Member<'_> {
    fn utilisation(&self) -> f64 {
        self.load / self.capacity
    }
}

/// A shard that must be placed, and why.
#[derive(Debug)]
struct Homeless {
    shard: ShardId,
    load: f64,
    /// Its live owner, when it is releasing to a target that is gone: placing it back there
    /// cancels the handoff.
    owner: Option<usize>,
    /// The member holding its ready secondary ready longest (P19.3): it goes there when it fits,
    /// so it lands warm.
    warm: Option<usize>,
    reason: MoveReason,
}

/// The fleet being planned: members, the mean and the band.
#[derive(Debug)]
struct Fleet<'a> {
    members: Vec<Member<'a>>,
    /// Members by utilisation, ascending.
    by_utilisation: BTreeSet<(Ordered, usize)>,
    /// Members by shards per unit of capacity, ascending.
    by_density: BTreeSet<(Ordered, usize)>,
    mean: f64,
    /// The band (P15.2): an executor outside it sets balance moves going.
    low: f64,
    high: f64,
    /// The inner band, half as wide: balance moves aim inside it, so an executor brought back
    /// from outside the band does not sit at its edge, where noise in the reports would carry
    /// it out again.
    inner_low: f64,
    inner_high: f64,
    /// Shards distributable over the members, for their shares by count.
    distributable: usize,
    total_capacity: f64,
    /// Loads below this are not moved for balance.
    min_balance_load: f64,
    moves: Vec<(Move, MoveReason)>,
}

/// The moves of a plan by load, ascending by shard; at most `max_moves` are made for joiners
/// and balance (placement of shards without a live holder is never left out: the caller caps
/// the plan, cheapest first).
pub(super) fn plan_moves(
    state: Space<'_>,
    now_ms: u64,
    inputs: &PlacementInputs,
    loads: &[f64],
    max_moves: usize,
) -> Vec<(Move, MoveReason)> {
    let load_of = |shard: ShardId| -> f64 {
        usize::try_from(shard)
            .ok()
            .and_then(|index| loads.get(index))
            .copied()
            .filter(|load| load.is_finite() && *load > 0.0)
            .unwrap_or(0.0)
    };
    let Some((mut fleet, homeless)) = survey(state, now_ms, inputs, &load_of) else {
        return count_fallback(state, now_ms);
    };
    if fleet.mean <= 0.0 {
        return count_fallback(state, now_ms);
    }
    fleet.place(homeless);
    fleet.fill_joiners(max_moves);
    fleet.balance(inputs.balance_moves_allowed, max_moves);
    let mut moves = fleet.moves;
    moves.sort_by_key(|(step, _)| step.shard);
    moves
}

/// With nothing to balance (no load anywhere), counts are what placement can go by.
fn count_fallback(state: Space<'_>, now_ms: u64) -> Vec<(Move, MoveReason)> {
    count::candidate_moves(state, now_ms)
        .into_iter()
        .map(|step| {
            let reason = reason_for(state, now_ms, step.shard, step.to);
            (step.to_move(), reason)
        })
        .collect()
}

/// Reads the state into the fleet and the shards without a live holder; `None` when no
/// executor takes shards.
fn survey<'a>(
    state: Space<'a>,
    now_ms: u64,
    inputs: &PlacementInputs,
    load_of: &dyn Fn(ShardId) -> f64,
) -> Option<(Fleet<'a>, Vec<Homeless>)> {
    let mut members: Vec<Member<'a>> = state
        .executors()
        .filter(|executor| state.takes_shards(executor, now_ms))
        .map(|executor| Member {
            id: executor.id.as_str(),
            // Capacities are at most `MAX_CAPACITY`, exact in an f64.
            capacity: capacity_of(executor) as f64,
            load: 0.0,
            count: 0,
            movable: BTreeSet::new(),
        })
        .collect();
    if members.is_empty() {
        return None;
    }
    let LoadScan {
        mut homeless,
        distributable,
        pool_load,
    } = scan_loads(state, now_ms, inputs, load_of, &mut members);
    let fleet = Fleet::of(members, distributable, pool_load, inputs.tolerance);
    // Heaviest first, so the shards that are hardest to fit find room.
    homeless.sort_by(|a, b| {
        Ordered(b.load)
            .cmp(&Ordered(a.load))
            .then(a.shard.cmp(&b.shard))
    });
    Some((fleet, homeless))
}

/// The shard table by load: the shards without a holder, how many shards the plan distributes
/// and the load of those without a holder.
struct LoadScan {
    homeless: Vec<Homeless>,
    distributable: usize,
    pool_load: f64,
}

/// One pass over the shard table: each member's load, count and movable shards (its own, not
/// releasing, not cooling down, P15.4), and the shards that must find a holder. A shard
/// releasing counts at its target; a lapsed owner keeps its shards until it is reaped (P3.8).
fn scan_loads(
    state: Space<'_>,
    now_ms: u64,
    inputs: &PlacementInputs,
    load_of: &dyn Fn(ShardId) -> f64,
    members: &mut [Member<'_>],
) -> LoadScan {
    let indexes: BTreeMap<&str, usize> = members
        .iter()
        .enumerate()
        .map(|(index, member)| (member.id, index))
        .collect();
    let index_of = |id: &str| indexes.get(id).copied();
    let mut homeless = Vec::new();
    let mut distributable = 0usize;
    let mut pool_load = 0.0;
    for shard in state.shards() {
        let load = load_of(shard.id);
        let owner = shard.owner.as_deref();
        let owner_member = owner.and_then(index_of);
        let target_member = shard
            .handoff
            .as_ref()
            .and_then(|handoff| handoff.to.as_deref())
            .and_then(index_of);
        let holder = match (owner_member, &shard.handoff) {
            (Some(owner), None) => Some(owner),
            (_, Some(_)) => target_member,
            (None, None) => None,
        };
        if let Some(holder) = holder {
            let member = &mut members[holder];
            member.load += load;
            member.count += 1;
            if owner_member == Some(holder)
                && shard.handoff.is_none()
                && !inputs.cooling.contains(&shard.id)
            {
                member.movable.insert((Ordered(load), shard.id));
            }
            distributable += 1;
            continue;
        }
        let lapsed_owner = owner
            .and_then(|id| state.executor(id))
            .is_some_and(|executor| executor.lease_lapsed(now_ms));
        if lapsed_owner && shard.handoff.is_none() {
            // A lapsed owner keeps its shards until it is reaped (P3.8).
            continue;
        }
        let reason = match owner_member {
            Some(_) => MoveReason::Departure,
            None => why_it_moves(state, now_ms, shard.id),
        };
        let warm = shard
            .ready_longest_first()
            .into_iter()
            .find_map(|secondary| index_of(&secondary.executor));
        homeless.push(Homeless {
            shard: shard.id,
            load,
            owner: owner_member,
            warm,
            reason,
        });
        distributable += 1;
        pool_load += load;
    }
    LoadScan {
        homeless,
        distributable,
        pool_load,
    }
}

impl<'a> Fleet<'a> {
    /// The fleet of `members` with their loads: the mean utilisation and the bands around it
    /// (P15.3), each member indexed by utilisation and density.
    fn of(members: Vec<Member<'a>>, distributable: usize, pool_load: f64, tolerance: f64) -> Self {
        let total_capacity: f64 = members.iter().map(|m| m.capacity).sum();
        let total_load = members.iter().map(|m| m.load).sum::<f64>() + pool_load;
        let mean = total_load / total_capacity;
        let tolerance = tolerance.clamp(0.0, 1.0);
        let smallest_capacity = members
            .iter()
            .map(|m| m.capacity)
            .fold(f64::INFINITY, f64::min);
        let mut fleet = Fleet {
            by_utilisation: BTreeSet::new(),
            by_density: BTreeSet::new(),
            mean,
            low: mean * (1.0 - tolerance),
            high: mean * (1.0 + tolerance),
            inner_low: mean * (1.0 - tolerance / 2.0),
            inner_high: mean * (1.0 + tolerance / 2.0),
            distributable,
            total_capacity,
            min_balance_load: mean * smallest_capacity * MIN_BALANCE_LOAD_OF_FAIR_SHARE,
            moves: Vec::new(),
            members,
        };
        for index in 0..fleet.members.len() {
            fleet.index(index);
        }
        fleet
    }

    fn density(&self, index: usize) -> f64 {
        let member = &self.members[index];
        member.count as f64 / member.capacity
    }

    fn index(&mut self, index: usize) {
        let utilisation = self.members[index].utilisation();
        self.by_utilisation.insert((Ordered(utilisation), index));
        self.by_density
            .insert((Ordered(self.density(index)), index));
    }

    fn unindex(&mut self, index: usize) {
        let utilisation = self.members[index].utilisation();
        self.by_utilisation.remove(&(Ordered(utilisation), index));
        self.by_density
            .remove(&(Ordered(self.density(index)), index));
    }

    /// Whether `load` fits on `index` without taking it above the band.
    fn fits(&self, index: usize, load: f64) -> bool {
        let member = &self.members[index];
        (member.load + load) / member.capacity <= self.high
    }

    /// Adds a shard to a member's holdings.
    fn receive(&mut self, index: usize, load: f64) {
        self.unindex(index);
        let member = &mut self.members[index];
        member.load += load;
        member.count += 1;
        self.index(index);
    }

    fn place(&mut self, homeless: Vec<Homeless>) {
        for shard in homeless {
            let to = match shard.owner.filter(|&owner| self.fits(owner, shard.load)) {
                Some(owner) => {
                    self.moves.push((
                        Move {
                            shard: shard.shard,
                            to: self.members[owner].id.to_owned(),
                        },
                        MoveReason::Cancel,
                    ));
                    self.receive(owner, shard.load);
                    continue;
                }
                None => match shard.warm.filter(|&warm| self.fits(warm, shard.load)) {
                    Some(warm) => warm,
                    None => self.best_fit(shard.load),
                },
            };
            self.moves.push((
                Move {
                    shard: shard.shard,
                    to: self.members[to].id.to_owned(),
                },
                shard.reason,
            ));
            self.receive(to, shard.load);
        }
    }

    /// Where a shard of `load` goes: the member with the fewest shards per unit of capacity
    /// among those it fits, else the one it leaves least utilised.
    fn best_fit(&self, load: f64) -> usize {
        if let Some(&(_, index)) = self
            .by_density
            .iter()
            .find(|(_, index)| self.fits(*index, load))
        {
            return index;
        }
        let mut best = 0;
        let mut best_after = f64::INFINITY;
        for (index, member) in self.members.iter().enumerate() {
            let after = (member.load + load) / member.capacity;
            if after < best_after {
                best = index;
                best_after = after;
            }
        }
        best
    }

    /// A member's share of the distributable shards by count.
    fn count_share(&self, index: usize) -> f64 {
        self.distributable as f64 * self.members[index].capacity / self.total_capacity
    }

    fn is_joiner(&self, index: usize, tolerance_of_share: f64) -> bool {
        let member = &self.members[index];
        member.utilisation() < self.low
            && (member.count as f64) < tolerance_of_share * self.count_share(index)
    }

    /// Whether giving up a shard of `load` would leave `giver` a joiner.
    fn leaves_a_joiner(&self, giver: usize, load: f64) -> bool {
        let member = &self.members[giver];
        // `low / mean` is `1 − tolerance`, as for the joiners themselves.
        (member.load - load) / member.capacity < self.low
            && (member.count.saturating_sub(1) as f64)
                < self.low / self.mean * self.count_share(giver)
    }

    fn fill_joiners(&mut self, max_moves: usize) {
        // `low / mean` is `1 − tolerance`.
        let share_fraction = self.low / self.mean;
        let joiners: Vec<usize> = (0..self.members.len())
            .filter(|&index| self.is_joiner(index, share_fraction))
            .collect();
        for joiner in joiners {
            while self.moves.len() < max_moves && self.is_joiner(joiner, share_fraction) {
                let givers: Vec<usize> = self.givers().filter(|&index| index != joiner).collect();
                let best = givers
                    .into_iter()
                    .filter_map(|giver| self.best_shard(giver, joiner, Objective::Imbalance))
                    .max_by(|a, b| Ordered(a.gain).cmp(&Ordered(b.gain)));
                match best {
                    Some(candidate) => self.apply(candidate, MoveReason::Join),
                    None => break,
                }
            }
        }
    }

    fn balance(&mut self, mut allowed: usize, max_moves: usize) {
        while allowed > 0 && self.moves.len() < max_moves {
            let Some(candidate) = self.best_hot_move().or_else(|| self.best_balance_move()) else {
                return;
            };
            self.apply(candidate, MoveReason::Balance);
            allowed -= 1;
        }
    }

    /// P15.4: a shard that alone takes its holder above the band, while an executor of larger
    /// capacity could carry it alone inside the band, goes to the larger executor it leaves the
    /// least utilised. No single balance move does this when the holder is only a little above
    /// the band: moving the shard would take the receiver further from the mean than the giver
    /// was, so the holder would shed everything else and stay above the band with the shard
    /// alone, while the lower bound allows the band. The balance moves after it even the pair
    /// out (the receiver gives lighter shards, the giver takes some). A shard moves this way
    /// only to a larger capacity, where it fits alone, so never back and forth, and only from
    /// an executor that holds something else.
    fn best_hot_move(&self) -> Option<Candidate> {
        self.by_utilisation
            .iter()
            .rev()
            .take_while(|(utilisation, _)| utilisation.0 > self.high)
            .find_map(|&(_, giver)| {
                let a = &self.members[giver];
                let &(Ordered(load), shard) = a.movable.iter().next_back()?;
                // A hot shard alone on its executor stays (P15.4): moving it would leave its
                // holder empty, a joiner to fill, and an executor that claims nothing for what
                // it holds would draw every honest executor's only shard that way.
                if load <= self.high * a.capacity || a.count < 2 {
                    return None;
                }
                let after = |index: usize| {
                    let member = &self.members[index];
                    (member.load + load) / member.capacity
                };
                let receiver = (0..self.members.len())
                    .filter(|&index| {
                        let member = &self.members[index];
                        index != giver
                            && member.capacity > a.capacity
                            && load <= self.high * member.capacity
                            && (member.count + 1) as f64
                                <= COUNT_CEILING_OF_SHARE * self.count_share(index)
                    })
                    .min_by(|&x, &y| Ordered(after(x)).cmp(&Ordered(after(y))).then(x.cmp(&y)))?;
                Some(Candidate {
                    giver,
                    receiver,
                    shard,
                    load,
                    gain: 0.0,
                })
            })
    }

    /// The members a move may take a shard from: above the mean, the most utilised first, at
    /// most [`CANDIDATES_PER_SIDE`] of them.
    fn givers(&self) -> impl Iterator<Item = usize> + '_ {
        self.by_utilisation
            .iter()
            .rev()
            .take_while(|(utilisation, _)| utilisation.0 > self.mean)
            .take(CANDIDATES_PER_SIDE)
            .map(|&(_, index)| index)
    }

    /// The move that removes the most imbalance while some member is outside the band.
    fn best_balance_move(&self) -> Option<Candidate> {
        let givers: Vec<usize> = self.givers().collect();
        let receivers: Vec<usize> = self
            .by_utilisation
            .iter()
            .take_while(|(utilisation, _)| utilisation.0 < self.mean)
            .take(CANDIDATES_PER_SIDE)
            .map(|&(_, index)| index)
            .collect();
        let mut best: Option<Candidate> = None;
        for &giver in &givers {
            for &receiver in &receivers {
                let out_of_band = self.members[giver].utilisation() > self.high
                    || self.members[receiver].utilisation() < self.low;
                if !out_of_band {
                    continue;
                }
                if let Some(candidate) = self.best_shard(giver, receiver, Objective::OutsideBand) {
                    if best
                        .as_ref()
                        .is_none_or(|current| candidate.gain > current.gain)
                    {
                        best = Some(candidate);
                    }
                }
            }
        }
        best
    }

    /// How far `utilisation` lies outside the inner band.
    fn outside_inner_band(&self, utilisation: f64) -> f64 {
        (utilisation - self.inner_high)
            .max(self.inner_low - utilisation)
            .max(0.0)
    }

    /// The movable shard of `giver` whose move to `receiver` best serves `objective`; `None` if
    /// no move serves it. Every move must also remove imbalance and bring the pair closer to the
    /// mean: the larger of their two distances from it shrinks, so no move overshoots into a
    /// worse imbalance than it cured (and a hot shard alone on its executor, which would only
    /// carry the excess across, never moves); and the giver must not be left a joiner.
    fn best_shard(&self, giver: usize, receiver: usize, objective: Objective) -> Option<Candidate> {
        let (a, b) = (&self.members[giver], &self.members[receiver]);
        let (u_a, u_b) = (a.utilisation(), b.utilisation());
        if u_a <= u_b || (b.count + 1) as f64 > COUNT_CEILING_OF_SHARE * self.count_share(receiver)
        {
            return None;
        }
        let inverse_capacities = 1.0 / a.capacity + 1.0 / b.capacity;
        // The load that removes the most imbalance; anything under twice it removes some.
        let ideal = (u_a - u_b) / inverse_capacities;
        let (above_mean, below_mean) = (u_a - self.mean, u_b - self.mean);
        let distance = above_mean.abs().max(below_mean.abs());
        let limit = (2.0 * ideal)
            .min((above_mean + distance) * a.capacity)
            .min((distance - below_mean) * b.capacity);
        if limit <= self.min_balance_load {
            return None;
        }
        // Loads worth trying: the ideal, and for the band the loads that bring the giver or the
        // receiver just inside the inner band; for each, the movable shards nearest below and
        // above it.
        let mut targets = vec![ideal.min(limit)];
        if objective == Objective::OutsideBand {
            targets.push((u_a - self.inner_high) * a.capacity);
            targets.push((self.inner_low - u_b) * b.capacity);
        }
        self.shards_near(giver, targets, limit)
            .into_iter()
            .filter(|(load, _)| load.0 >= self.min_balance_load && load.0 < limit)
            .filter(|(load, _)| !self.leaves_a_joiner(giver, load.0))
            .filter_map(|(load, shard)| {
                let load = load.0;
                let imbalance_removed = 2.0 * load * (u_a - u_b) - load * load * inverse_capacities;
                if imbalance_removed <= 0.0 {
                    return None;
                }
                let score = match objective {
                    Objective::Imbalance => imbalance_removed,
                    Objective::OutsideBand => {
                        let removed =
                            self.band_distance_removed((u_a, a.capacity), (u_b, b.capacity), load);
                        if removed <= 0.0 {
                            return None;
                        }
                        removed
                    }
                };
                Some(Candidate {
                    giver,
                    receiver,
                    shard,
                    load,
                    gain: score,
                })
            })
            .max_by(|x, y| {
                Ordered(x.gain)
                    .cmp(&Ordered(y.gain))
                    .then(y.shard.cmp(&x.shard))
            })
    }

    /// The movable shards of `giver` whose loads lie nearest below and nearest above each
    /// positive target load (capped at `limit`), none at or over `limit` above it.
    fn shards_near(
        &self,
        giver: usize,
        targets: Vec<f64>,
        limit: f64,
    ) -> BTreeSet<(Ordered, ShardId)> {
        let movable = &self.members[giver].movable;
        let mut tried: BTreeSet<(Ordered, ShardId)> = BTreeSet::new();
        for target in targets.into_iter().filter(|target| *target > 0.0) {
            let target = target.min(limit);
            tried.extend(
                movable
                    .range(..=(Ordered(target), ShardId::MAX))
                    .next_back()
                    .copied(),
            );
            tried.extend(
                movable
                    .range((Ordered(target), 0)..)
                    .find(|(load, _)| load.0 < limit)
                    .copied(),
            );
        }
        tried
    }

    /// How much of the squared distance outside the inner band, weighted by capacity, moving
    /// `load` from a giver at `(utilisation, capacity)` to a receiver at theirs removes.
    fn band_distance_removed(&self, giver: (f64, f64), receiver: (f64, f64), load: f64) -> f64 {
        let ((u_a, capacity_a), (u_b, capacity_b)) = (giver, receiver);
        let before_a = self.outside_inner_band(u_a);
        let after_a = self.outside_inner_band(u_a - load / capacity_a);
        let before_b = self.outside_inner_band(u_b);
        let after_b = self.outside_inner_band(u_b + load / capacity_b);
        capacity_a * (before_a * before_a - after_a * after_a)
            + capacity_b * (before_b * before_b - after_b * after_b)
    }

    fn apply(&mut self, candidate: Candidate, reason: MoveReason) {
        let Candidate {
            giver,
            receiver,
            shard,
            load,
            ..
        } = candidate;
        self.unindex(giver);
        let member = &mut self.members[giver];
        member.movable.remove(&(Ordered(load), shard));
        member.load = (member.load - load).max(0.0);
        member.count = member.count.saturating_sub(1);
        self.index(giver);
        self.receive(receiver, load);
        self.moves.push((
            Move {
                shard,
                to: self.members[receiver].id.to_owned(),
            },
            reason,
        ));
    }
}

/// What a move is chosen for.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum Objective {
    /// The most imbalance removed (`Σ capacity × (utilisation − mean)²`): filling a joiner.
    Imbalance,
    /// The most removed of what lies outside the inner band (`Σ capacity × distance outside
    /// it²`): balance. Executors inside it never trade, so noise in the reports moves nothing.
    OutsideBand,
}

/// One possible move between two members.
#[derive(Debug, Clone, Copy)]
struct Candidate {
    giver: usize,
    receiver: usize,
    shard: ShardId,
    load: f64,
    /// What the move removes of what its [`Objective`] measures.
    gain: f64,
}
