//! The spread a settled namespace must show (P5.4, P15.1, P18.3) and the fewest moves a join
//! may cost.

use super::*;

/// An executor that takes shards (P5.4), as placement by count weighs it: its capacity (P15.1)
/// and its zone (P18.3; those stating none are one zone of their own).
#[derive(Debug, Clone, PartialEq, Eq)]
pub(super) struct Owner {
    pub(super) id: String,
    pub(super) capacity: u64,
    pub(super) zone: Option<String>,
}

impl Owner {
    pub(super) fn of(executor: &Executor) -> Self {
        Self {
            id: executor.id.clone(),
            capacity: capacity_of(executor),
            zone: zone_of(&executor.labels).map(str::to_owned),
        }
    }
}

/// The executors of `space` that take shards (not draining), with their capacities and zones:
/// while one carrying the namespace's preferred label does, only those (P18.4).
pub(super) fn owners_of(space: Space<'_>) -> Vec<Owner> {
    let takers: Vec<&Executor> = space.executors().filter(|e| !e.draining).collect();
    let carries = |executor: &Executor, (key, value): &(String, String)| {
        executor.labels.get(key) == Some(value)
    };
    let preferred = space
        .namespace()
        .placement
        .prefer
        .as_ref()
        .filter(|prefer| takers.iter().any(|e| carries(e, prefer)));
    takers
        .into_iter()
        .filter(|e| preferred.is_none_or(|prefer| carries(e, prefer)))
        .map(Owner::of)
        .collect()
}

/// `namespace`'s shards in `state`, ascending (none if it has none).
pub(super) fn shards_of<'a>(
    state: &'a LeaseState,
    namespace: &str,
) -> impl Iterator<Item = &'a leasehold_manager::lease::Shard> + 'a {
    state
        .namespace(namespace)
        .into_iter()
        .flat_map(|ns| ns.shards().iter())
}

/// `owners` grouped by zone; one group when they state at most one zone (P18.3).
pub(super) fn zones_of(owners: &[Owner]) -> Vec<Vec<&Owner>> {
    let mut zones: BTreeMap<Option<&str>, Vec<&Owner>> = BTreeMap::new();
    for owner in owners {
        zones.entry(owner.zone.as_deref()).or_default().push(owner);
    }
    zones.into_values().collect()
}

/// The floor and the ceiling of a share `total × capacity ÷ of_capacity` (P15.2).
pub(super) fn share(total: u64, capacity: u64, of_capacity: u64) -> (u64, u64) {
    let weighted = total * capacity;
    let floor = weighted / of_capacity.max(1);
    (
        floor,
        floor + u64::from(!weighted.is_multiple_of(of_capacity.max(1))),
    )
}

/// Why the holdings (`held` of each owner) of `shards` are off the spread by capacity, if they
/// are: each owner holds the floor or the ceiling of its share (P15.2; with equal capacities
/// `shards ÷ owners` rounded down or up, P5.4). With zones (P18.3) each zone holds the floor or
/// the ceiling of its share of the shards by its capacity, and each owner the floor or the
/// ceiling of its share of what its zone holds.
pub(super) fn off_the_spread(
    shards: u64,
    owners: &[Owner],
    held: impl Fn(&str) -> u64,
) -> Option<String> {
    let total_capacity: u64 = owners.iter().map(|o| o.capacity).sum();
    let zones = zones_of(owners);
    for members in &zones {
        let zone_capacity: u64 = members.iter().map(|o| o.capacity).sum();
        let zone_held: u64 = members.iter().map(|o| held(&o.id)).sum();
        let zone_total = if zones.len() > 1 {
            let (floor, ceiling) = share(shards, zone_capacity, total_capacity);
            if zone_held < floor || zone_held > ceiling {
                return Some(format!(
                    "zone {:?} holds {zone_held} shards, its share by capacity is {floor}..={ceiling}",
                    members.first().and_then(|o| o.zone.as_deref())
                ));
            }
            zone_held
        } else {
            shards
        };
        for owner in members {
            let held = held(&owner.id);
            let (floor, ceiling) = share(zone_total, owner.capacity, zone_capacity);
            if held < floor || held > ceiling {
                return Some(format!(
                    "{} holds {held} shards, its share by capacity is {floor}..={ceiling}",
                    owner.id
                ));
            }
        }
    }
    None
}

/// The most shards placement by count may give `id` of `shards` over `owners`: the ceiling of
/// its share (P15.2); with zones (P18.3) the ceiling of its share of its zone's quota when that
/// quota is at its ceiling.
pub(super) fn count_ceiling(shards: u64, owners: &[Owner], id: &str) -> u64 {
    let total_capacity: u64 = owners.iter().map(|o| o.capacity).sum();
    let zones = zones_of(owners);
    let Some(members) = zones
        .iter()
        .find(|members| members.iter().any(|o| o.id == id))
    else {
        return 0;
    };
    let Some(owner) = members.iter().find(|o| o.id == id) else {
        return 0;
    };
    if zones.len() <= 1 {
        return share(shards, owner.capacity, total_capacity).1;
    }
    let zone_capacity: u64 = members.iter().map(|o| o.capacity).sum();
    let (_, zone_ceiling) = share(shards, zone_capacity, total_capacity);
    share(zone_ceiling, owner.capacity, zone_capacity).1
}

/// The most of `held` (by owner) that a quota of `total` shards split over `members` keeps in
/// place: each keeps what it holds up to its quota, the floor or the ceiling of its share; the
/// ceilings the floors leave over keep one more shard only for a member holding more than its
/// floor.
pub(super) fn most_kept(total: u64, members: &[&Owner], held: &impl Fn(&str) -> u64) -> u64 {
    let capacity: u64 = members.iter().map(|o| o.capacity).sum();
    let shares: Vec<(u64, u64, u64)> = members
        .iter()
        .map(|o| {
            let (floor, ceiling) = share(total, o.capacity, capacity);
            (held(&o.id), floor, ceiling)
        })
        .collect();
    let floors: u64 = shares.iter().map(|(_, floor, _)| floor).sum();
    let ceilings = total.saturating_sub(floors);
    let kept_by_floors: u64 = shares.iter().map(|(held, floor, _)| *held.min(floor)).sum();
    let kept_by_a_ceiling = shares
        .iter()
        .filter(|(held, floor, ceiling)| ceiling > floor && held > floor)
        .count() as u64;
    kept_by_floors + ceilings.min(kept_by_a_ceiling)
}

/// The fewest shards that must move from `before` (every shard owned, none releasing: a settled
/// fleet) to a spread by capacity over `owners` (P15.2, P5.4): every shard not kept in place
/// moves once. Without zones the one split of all the shards; with zones (P18.3) every way of
/// giving each zone the floor or the ceiling of its share is tried (at most 2^[`crate::scenario::MAX_ZONES`]),
/// each zone's quota split over its members as above, and the one keeping most counts.
pub(super) fn fewest_moves(before: &LeaseState, namespace: &str, owners: &[Owner]) -> u64 {
    if owners.is_empty() {
        return 0;
    }
    let shards = shards_of(before, namespace).count() as u64;
    let held = |id: &str| {
        before
            .executor(id)
            .map_or(0, |e| e.owned_shards.len() as u64)
    };
    let zones = zones_of(owners);
    let total_capacity: u64 = owners.iter().map(|o| o.capacity).sum();
    let zone_shares: Vec<(u64, u64)> = zones
        .iter()
        .map(|members| {
            share(
                shards,
                members.iter().map(|o| o.capacity).sum(),
                total_capacity,
            )
        })
        .collect();
    let mut kept = 0;
    for ceilings in 0u32..1 << zones.len() {
        let quotas: Vec<u64> = zone_shares
            .iter()
            .enumerate()
            .map(|(zone, (floor, ceiling))| {
                if ceilings & (1 << zone) != 0 {
                    *ceiling
                } else {
                    *floor
                }
            })
            .collect();
        if quotas.iter().sum::<u64>() != shards {
            continue;
        }
        let kept_here: u64 = zones
            .iter()
            .zip(&quotas)
            .map(|(members, quota)| most_kept(*quota, members, &held))
            .sum();
        kept = kept.max(kept_here);
    }
    shards - kept
}

/// New epochs minted between two states of `namespace`'s shard table: one per shard that
/// changed hands.
pub(super) fn epochs_minted(before: &LeaseState, after: &LeaseState, namespace: &str) -> u64 {
    shards_of(after, namespace)
        .zip(shards_of(before, namespace))
        .map(|(a, b)| a.epoch - b.epoch)
        .sum()
}

/// The executors of `namespace` that own shards at the end, with their capacities and zones.
pub(super) fn owners_at_the_end(world: &World, namespace: &str) -> Vec<Owner> {
    world
        .leader_state()
        .and_then(|state| state.space(namespace))
        .map_or_else(Vec::new, owners_of)
}

/// P5.4 in `namespace`: `what` minted `expected` epochs there, the fewest; and P18.1, it moved
/// nothing of another namespace.
pub(super) fn check_moves(
    world: &mut World,
    before: &LeaseState,
    namespace: &str,
    expected: u64,
    what: &str,
) -> Result<(), Violation> {
    let Some(after) = world.leader_state() else {
        return Ok(());
    };
    let moved = epochs_minted(before, after, namespace);
    if moved != expected {
        return Err(Violation {
            invariant: "P5.4",
            detail: format!(
                "{what} moved {moved} shards{} (new epochs), the fewest that reach a spread by capacity is {expected}",
                of_namespace(namespace)
            ),
            at_us: world.now_us,
        });
    }
    unchanged_elsewhere(world, before, namespace, what)
}
